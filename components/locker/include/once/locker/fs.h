// File: fs.h
//
// The filesystem seam of the locker: the few operations a two-drive record
// store needs, behind a small abstract class, so that the same Locker code
// runs on the real disk (PosixFs) and on an in-memory disk with crash
// semantics and injected faults (MemoryFs), the one the tests and the rack
// simulator use. FsWrapper forwards every call, so a decorator overrides only
// what it changes.
//
//   PosixFs fs;
//   ONCE_RETURN_IF_ERROR(fs.WriteSynced("/m2a/sush/record.tmp", bytes, 0600));
//   ONCE_RETURN_IF_ERROR(fs.Rename("/m2a/sush/record.tmp", "/m2a/sush/record"));
//   ONCE_RETURN_IF_ERROR(fs.SyncDir("/m2a/sush"));
//   ONCE_ASSIGN_OR_RETURN(std::optional<Bytes> back, fs.Read("/m2a/sush/record", 4096));
//
//   MemoryFs mem;                       // a test: tear a write, lose power, look
//   mem.MakeDirs("/d0");
//   mem.CrashAfter(1);                  // the write succeeds, the rename fails
//   (void)mem.WriteSynced("/d0/r.tmp", bytes, 0600);
//   (void)mem.Rename("/d0/r.tmp", "/d0/r");   // kUnavailable "crashed"
//   mem.Crash();                        // the unsynced directory entry is gone
//
// Errors, for every operation: kNotFound (a folder on the path, or the file an
// operation needs, does not exist), kPermissionDenied (the OS refused access,
// or a lock is held elsewhere), kUnavailable (any other I/O failure: EIO,
// ENOSPC, EROFS, ...; the message names the operation, the path and the errno
// text, e.g. "write /d0/record.tmp: No space left on device (ENOSPC)").
// Nothing here crashes on a failing disk.

#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "once/base/hex.h"
#include "once/base/result.h"

namespace once::locker {

// A held exclusive lock; destroying it releases the lock.
class FsLock {
 public:
  virtual ~FsLock() = default;
};

class Fs {
 public:
  virtual ~Fs() = default;

  // Creates `path` (or truncates it), writes all of `bytes`, fsyncs the file,
  // closes it, and sets its permission bits to `mode` (e.g. 0600) whether or
  // not it existed. On success the content is durable; the directory entry of
  // a newly created file is durable only after SyncDir of its folder. On
  // failure the file may be missing, empty or partly written.
  virtual Status WriteSynced(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                             uint32_t mode) = 0;

  // Atomically replaces `to` with `from` (rename(2)). Durable only after
  // SyncDir of the folders involved. kNotFound if `from` does not exist.
  virtual Status Rename(const std::filesystem::path& from, const std::filesystem::path& to) = 0;

  // Opens the folder `dir` and fsyncs it: every entry created, renamed or
  // removed in it before the call is durable when it returns. kNotFound if the
  // folder does not exist.
  virtual Status SyncDir(const std::filesystem::path& dir) = 0;

  // The whole content of `path`; nullopt if there is no such file (or no such
  // folder on its path). kLimitExceeded ("file_bytes_max") if it holds more
  // than `max_bytes`.
  virtual Result<std::optional<Bytes>> Read(const std::filesystem::path& path,
                                            size_t max_bytes) = 0;

  // Unlinks `path`; a file that does not exist is fine. Durable only after
  // SyncDir of its folder.
  virtual Status Remove(const std::filesystem::path& path) = 0;

  // Whether a folder exists at `path` (false for nothing there and for a
  // file); an error only when the OS cannot tell (EIO, EACCES, ...).
  virtual Result<bool> IsDir(const std::filesystem::path& path) = 0;

  // Takes an exclusive lock on the lock file `path` (created, mode 0600, if
  // missing) without waiting: flock(LOCK_EX | LOCK_NB). kPermissionDenied,
  // naming the path, if another holder (another process, or another Fs lock
  // on the same file) has it. Released when the returned FsLock is destroyed.
  virtual Result<std::unique_ptr<FsLock>> LockExclusive(const std::filesystem::path& path) = 0;
};

// Forwards every call to `target`, which must outlive it. A decorator derives
// from it and overrides only what it changes. Thread rules: the target's.
class FsWrapper : public Fs {
 public:
  explicit FsWrapper(Fs* target) : target_(target) {}
  Fs* target() const { return target_; }

  Status WriteSynced(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                     uint32_t mode) override {
    return target_->WriteSynced(path, bytes, mode);
  }
  Status Rename(const std::filesystem::path& from, const std::filesystem::path& to) override {
    return target_->Rename(from, to);
  }
  Status SyncDir(const std::filesystem::path& dir) override { return target_->SyncDir(dir); }
  Result<std::optional<Bytes>> Read(const std::filesystem::path& path, size_t max_bytes) override {
    return target_->Read(path, max_bytes);
  }
  Status Remove(const std::filesystem::path& path) override { return target_->Remove(path); }
  Result<bool> IsDir(const std::filesystem::path& path) override { return target_->IsDir(path); }
  Result<std::unique_ptr<FsLock>> LockExclusive(const std::filesystem::path& path) override {
    return target_->LockExclusive(path);
  }

 private:
  Fs* target_;
};

// The real disk, through POSIX calls: open with O_CLOEXEC, write loops that
// retry EINTR, fsync, rename, open(dir, O_RDONLY | O_DIRECTORY) + fsync, and
// flock on an open file description (so two PosixFs locks on one file
// conflict even inside one process). Stateless: every method may be called
// from any thread.
class PosixFs final : public Fs {
 public:
  Status WriteSynced(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                     uint32_t mode) override;
  Status Rename(const std::filesystem::path& from, const std::filesystem::path& to) override;
  Status SyncDir(const std::filesystem::path& dir) override;
  Result<std::optional<Bytes>> Read(const std::filesystem::path& path, size_t max_bytes) override;
  Status Remove(const std::filesystem::path& path) override;
  Result<bool> IsDir(const std::filesystem::path& path) override;
  Result<std::unique_ptr<FsLock>> LockExclusive(const std::filesystem::path& path) override;
};

// An in-memory disk with crash semantics and fault injection, for tests and
// the deterministic rack simulator. Deterministic (no clock, no randomness,
// ordered maps); single-threaded: one thread (or one simulated actor at a
// time) calls it, including the destructors of its locks. It must outlive
// every FsLock it hands out.
//
// The model. Folders are made and removed durably by the harness (MakeDirs,
// RemoveDir). A file is an inode: its content is durable as soon as
// WriteSynced returns (that call fsyncs). A directory entry (a name pointing
// at an inode) is volatile when created, renamed or removed, and durable only
// after SyncDir of its folder. Crash() is a power loss: every folder's entries
// revert to their durable state, locks are released, and any pending
// CrashAfter is cleared. Faults outlive a Crash (a broken drive stays broken).
//
// A "drive" is a folder: the faults apply to the folder and to every path
// under it. Precedence for an operation: crashed, then Fail (EIO), then
// NoSpace (ENOSPC, WriteSynced only), then the ordinary answers (kNotFound,
// ...). Messages: "<op> <path>: Input/output error (EIO)", "...: No space left
// on device (ENOSPC)", "...: crashed".
//
// Mutating operations are WriteSynced, Rename, SyncDir and Remove (a Remove of
// a missing file included); CrashAfter counts those that succeed.
// LockExclusive creates its lock file like open(O_CREAT) but is not counted.
class MemoryFs final : public Fs {
 public:
  MemoryFs() = default;
  MemoryFs(const MemoryFs&) = delete;
  MemoryFs& operator=(const MemoryFs&) = delete;

  Status WriteSynced(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                     uint32_t mode) override;
  Status Rename(const std::filesystem::path& from, const std::filesystem::path& to) override;
  Status SyncDir(const std::filesystem::path& dir) override;
  Result<std::optional<Bytes>> Read(const std::filesystem::path& path, size_t max_bytes) override;
  Status Remove(const std::filesystem::path& path) override;
  Result<bool> IsDir(const std::filesystem::path& path) override;
  Result<std::unique_ptr<FsLock>> LockExclusive(const std::filesystem::path& path) override;

  // The harness: makes `dir` and its parents, durably (an existing folder is
  // kept as it is). A new, empty folder where RemoveDir took one away is a
  // replaced drive.
  void MakeDirs(const std::filesystem::path& dir);
  // The drive is missing: `dir`, its files and its subfolders are gone,
  // durably. Locks on files in it stay held (the process still has them).
  void RemoveDir(const std::filesystem::path& dir);
  // Every file in `dir` and its subfolders is deleted, durably; the folders
  // stay.
  void Wipe(const std::filesystem::path& dir);
  // Flips bit `bit_index` (bit 0 = the most significant bit of byte 0) of the
  // file `path`, durably. kNotFound if there is no such file, kInvalidArgument
  // if the file is shorter.
  Status FlipBit(const std::filesystem::path& path, size_t bit_index);

  // While on, every operation on `dir` or under it answers kUnavailable EIO.
  void Fail(const std::filesystem::path& dir, bool on);
  // While on, WriteSynced under `dir` answers kUnavailable ENOSPC (and writes
  // nothing).
  void NoSpace(const std::filesystem::path& dir, bool on);

  // After `mutating_ops` more mutating operations succeed, the next one fails
  // (with no effect), and so does every operation after it, with kUnavailable
  // "crashed", until Crash(). CrashAfter(0): the very next one.
  void CrashAfter(size_t mutating_ops);
  // Whether a CrashAfter has fired (and Crash() has not been called since).
  bool crashed() const { return crashed_; }
  // Power loss: volatile directory entries are lost (see the model above).
  void Crash();
  // A kinder power loss: every volatile directory entry happened to reach the
  // disk (as if each folder had been synced), then as Crash(). Together with
  // Crash() it brackets what a real file system may keep.
  void CrashKeepingVolatile();

  // Successful mutating operations since construction (to enumerate crash
  // points: CrashAfter(k) for k below the count an operation took).
  size_t mutating_ops() const { return mutating_ops_; }
  // The names in folder `dir` as they are now (volatile entries included),
  // sorted; empty if there is no such folder.
  std::vector<std::string> List(const std::filesystem::path& dir) const;

 private:
  struct Dir {
    std::map<std::string, uint64_t> live;     // name -> inode, as the process sees it
    std::map<std::string, uint64_t> durable;  // what survives a Crash()
  };
  struct Faults {
    bool fail = false;
    bool no_space = false;
  };
  class Lock;

  Status Check(const char* op, const std::string& path, bool write = false) const;
  Status BeginMutation(const char* op, const std::string& path, bool write = false);
  void EndMutation();
  Dir* FindDir(const std::string& dir);
  void Collect();
  void Unlock(const std::string& path, uint64_t token);

  std::map<std::string, Dir> dirs_;
  std::map<uint64_t, Bytes> inodes_;
  uint64_t next_inode_ = 1;
  std::map<std::string, Faults> faults_;
  std::map<std::string, uint64_t> locks_;  // lock file -> token of its holder
  uint64_t next_lock_ = 1;
  std::optional<size_t> crash_budget_;
  bool crashed_ = false;
  size_t mutating_ops_ = 0;
};

}  // namespace once::locker
