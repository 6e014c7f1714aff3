// File: locker.h
//
// The locker: one opaque record (the caller encodes it) kept on two drives, one
// slot folder per M.2 drive, so that a drive that fails, is wiped, is missing
// or lies is noticed instead of silently changing what a sled remembers.
// docs/locker-format.md has the bytes, the write sequence and what a crash at
// each point leaves.
//
//   PosixFs fs;
//   SystemRng rng;
//   ONCE_ASSIGN_OR_RETURN(Opened opened,
//                         Locker::Open({.slots = {"/m2a/sush", "/m2b/sush"}, .fs = &fs,
//                                       .rng = &rng}));
//   if (opened.verdict == Verdict::kDiscarded) {
//     Refuse("untrusted: " + opened.reason);      // until an operator resets it:
//     // ONCE_RETURN_IF_ERROR(opened.locker->Reset(fresh_record));
//   } else {
//     Boundary b = opened.record ? Decode(*opened.record) : Boundary::Empty();
//     ...
//     ONCE_RETURN_IF_ERROR(opened.locker->Write(Encode(b)));   // before the job starts
//   }
//
// Open's verdict, from what each slot holds (a slot is valid when its record
// file decodes; "missing" means the folder is there but the record file is
// not):
//
//   drive 0  drive 1  condition                                     verdict     record
//   -------  -------  --------------------------------------------  ----------  ----------
//   valid    valid    equal record bytes                            kAdopted    that record
//   valid    missing                                                kRestored   drive 0's
//   missing  valid                                                  kRestored   drive 1's
//   missing  missing                                                kEmpty      nullopt
//   valid    valid    same nonce, different records and sequences   kTorn       the newest
//   valid    valid    same nonce and sequence, different records    kDiscarded  nullopt
//   valid    valid    different nonces, different records           kDiscarded  nullopt
//   corrupt, unreadable (I/O error) or folder missing, either drive kDiscarded  nullopt
//
//   ("the newest": the record of the higher sequence.)
//
// The claim: after kAdopted, kRestored and kTorn, Open writes the adopted
// record again, under this process's nonce and the next sequence, to both
// drives, the drive being repaired (missing or older) first. From then on both
// drives carry this process's nonce, so any later write of this process that
// tears between the drives leaves a same-nonce pair (kTorn), and a claim that
// tears leaves equal records (kAdopted) or the state before it. If the claim
// fails, the verdict is kDiscarded with the reason. After kEmpty nothing is
// written. Leftover "<record_name>.tmp" files are removed at Open unless the
// verdict is kDiscarded: a discarded locker writes and removes nothing, so the
// drives stay as the operator will find them.
//
// Thread rules: one owner, one thread; a Locker holds an exclusive lock on
// each slot ("<record_name>.lock") for its lifetime, so a second Locker (in
// this or another process) on the same drive is refused at Open.

#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/hex.h"
#include "once/base/result.h"
#include "once/base/rng.h"
#include "once/locker/envelope.h"
#include "once/locker/fs.h"

namespace once::locker {

inline constexpr size_t kSlots = 2;
// Permission bits of every file the locker writes.
inline constexpr uint32_t kRecordFileMode = 0600;

struct LockerOptions {
  std::vector<std::filesystem::path> slots;  // exactly kSlots: one folder per M.2 drive
  Fs* fs = nullptr;                          // must outlive the Locker
  Rng* rng = nullptr;                        // draws the per-process nonce at Open
  std::string record_name = "record";        // a plain file name inside each slot
};

enum class Verdict { kAdopted, kRestored, kEmpty, kTorn, kDiscarded };
std::string_view VerdictName(Verdict verdict);  // "adopted", "restored", ...

enum class DriveState {
  kOk,             // holds a valid record (written or read by this locker)
  kRecordMissing,  // the folder is there, the record file is not
  kCorrupt,        // the record file is there and does not decode
  kIoError,        // the drive answered an error (EIO, a lock it could not take, ...)
  kMissingFolder,  // the slot folder is not there (the drive is missing)
};
std::string_view DriveStateName(DriveState state);  // "ok", "record missing", ...

struct DriveHealth {
  std::filesystem::path path;             // the slot folder
  DriveState state = DriveState::kOk;     // as of Open, then of the latest write to it
  std::string message;                    // why, when state is not kOk
  std::optional<Error> last_write_error;  // the latest failed write to this drive
  std::optional<uint64_t> sequence;       // the sequence it holds, if known
};

class Locker;
namespace internal {
struct Slot;  // what Open found on one drive (locker.cc)
}

struct Opened {
  std::unique_ptr<Locker> locker;  // present even for kDiscarded, so Reset can write later
  Verdict verdict = Verdict::kEmpty;
  std::optional<Bytes> record;  // the adopted record; nullopt for kEmpty and kDiscarded
  std::string reason;           // why, for kDiscarded: "drive 1 (/m2b/sush): digest mismatch"
  std::array<DriveHealth, kSlots> drives;
};

class Locker {
 public:
  // Reads both slots, decides the verdict (table above) and claims. Fails only
  // for a programmer or configuration error: not exactly kSlots slots, the
  // same slot twice, a null fs or rng, a record_name that is not a plain file
  // name (kInvalidArgument); a slot locked by another locker
  // (kPermissionDenied). Anything a drive does (missing, corrupt, failing) is
  // a verdict, not an error.
  static Result<Opened> Open(const LockerOptions& options);

  Locker(const Locker&) = delete;
  Locker& operator=(const Locker&) = delete;
  ~Locker();

  // Writes `record` at sequence() + 1 to drive 0, then to drive 1, each:
  // WriteSynced(slot/"<record_name>.tmp"), Rename over slot/"<record_name>",
  // SyncDir(slot). Ok means both drives hold it durably. On an error (the
  // message names the drive), do not act on the record: drive 0 may hold the
  // old or the new record, and drive 1 the old one (or, if drive 1 failed,
  // the old or the new); a later Open decides kAdopted or kTorn from that (or
  // kDiscarded while the drive still fails), and a later successful Write
  // makes both drives equal again. Every attempt that reaches the drives uses
  // up its sequence, so nothing is ever written at a sequence a drive may already
  // hold. Before anything is written: kLimitExceeded ("record_bytes_max") over
  // kRecordBytesMax, kPermissionDenied when untrusted, and kLimitExceeded
  // "sequence exhausted" at 2^64 - 1 (only a crafted file gets there).
  Status Write(std::span<const uint8_t> record);

  // The operator's way out of kDiscarded: takes any lock Open could not
  // (kNotFound if a slot folder is still missing), removes leftover temp
  // files, and writes `record` (this process's nonce, a sequence above every
  // one either drive was seen to hold) as Write does. On success the locker is
  // trusted and the next Open adopts `record`; on an error it stays as it was.
  // On a trusted locker it is a Write after removing leftover temp files.
  Status Reset(std::span<const uint8_t> record);

  // False after a kDiscarded Open until a successful Reset: Write refuses.
  bool trusted() const { return trusted_; }
  // Why it is not trusted (the Opened reason); empty when trusted.
  const std::string& reason() const { return reason_; }
  const std::array<DriveHealth, kSlots>& drives() const { return drives_; }
  // This process's nonce.
  const Nonce& nonce() const { return nonce_; }
  // The highest sequence seen on a drive or consumed by a write.
  uint64_t sequence() const { return sequence_; }

 private:
  Locker(const LockerOptions& options, const Nonce& nonce);

  Result<internal::Slot> Probe(size_t drive);
  void Note(size_t drive, const internal::Slot& slot);
  Status TakeLock(size_t drive);
  Status RemoveTemps();
  Status WriteBoth(std::span<const uint8_t> record, std::array<size_t, kSlots> order);
  Status WriteDrive(size_t drive, uint64_t sequence, std::span<const uint8_t> bytes);
  Status Labeled(size_t drive, Status status) const;
  std::string DriveLabel(size_t drive) const;
  std::filesystem::path RecordPath(size_t drive) const;
  std::filesystem::path TempPath(size_t drive) const;

  Fs& fs_;
  std::array<std::filesystem::path, kSlots> slots_;
  std::string record_name_;
  Nonce nonce_;
  uint64_t sequence_ = 0;
  bool trusted_ = true;
  std::string reason_;
  std::array<DriveHealth, kSlots> drives_;
  std::array<std::unique_ptr<FsLock>, kSlots> locks_;
};

}  // namespace once::locker
