#include "once/locker/locker.h"

#include <algorithm>
#include <limits>

namespace once::locker {

// What Open found on one drive.
struct internal::Slot {
  DriveState state = DriveState::kOk;
  std::string message;
  std::optional<Envelope> envelope;  // when state is kOk
};

using internal::Slot;

namespace {

// Open's decision, before the claim.
struct Decision {
  Verdict verdict = Verdict::kEmpty;
  std::optional<Bytes> record;
  std::string reason;
  std::array<size_t, kSlots> order = {0, 1};  // the claim's drive order: the repaired one first
};

Status CheckRecordSize(size_t size) {
  if (size > kRecordBytesMax) {
    return LimitError("record_bytes_max", static_cast<int64_t>(size), kRecordBytesMax);
  }
  return Ok();
}

// "/m2a/sush/" and "/m2a/./sush" are "/m2a/sush".
std::filesystem::path Canonical(const std::filesystem::path& path) {
  std::filesystem::path normal = path.lexically_normal();
  if (!normal.has_filename() && normal.has_relative_path()) normal = normal.parent_path();
  return normal;
}

Status CheckOptions(const LockerOptions& options) {
  auto invalid = [](std::string what) {
    return MakeError(ErrorCode::kInvalidArgument, "locker: " + std::move(what));
  };
  if (options.slots.size() != kSlots) {
    return invalid("needs exactly 2 slots, one folder per M.2 drive; got " +
                   std::to_string(options.slots.size()));
  }
  if (options.fs == nullptr || options.rng == nullptr) return invalid("needs an fs and an rng");
  const std::string& name = options.record_name;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return invalid("record_name must be a plain file name, not '" + name + "'");
  }
  for (const auto& slot : options.slots) {
    if (slot.empty()) return invalid("a slot folder is empty");
  }
  if (Canonical(options.slots[0]) == Canonical(options.slots[1])) {
    return invalid("both slots are " + options.slots[0].string() + "; give one per drive");
  }
  return Ok();
}

Decision DecideBothValid(const Envelope& a, const Envelope& b) {
  if (a.record == b.record) return {Verdict::kAdopted, a.record, "", {0, 1}};
  const std::string sequences = " (drive 0 at sequence " + std::to_string(a.sequence) +
                                ", drive 1 at " + std::to_string(b.sequence) + ")";
  if (a.nonce != b.nonce) {
    return {Verdict::kDiscarded, std::nullopt, "drives disagree: different writers" + sequences};
  }
  if (a.sequence == b.sequence) {
    return {Verdict::kDiscarded, std::nullopt,
            "drives disagree: one writer, two records at one sequence" + sequences};
  }
  const size_t newest = a.sequence > b.sequence ? 0 : 1;
  return {Verdict::kTorn, newest == 0 ? a.record : b.record, "", {1 - newest, newest}};
}

Decision Decide(const std::array<internal::Slot, kSlots>& slots,
                const std::array<std::string, kSlots>& labels) {
  std::string bad;
  for (size_t d = 0; d < kSlots; ++d) {
    const DriveState state = slots[d].state;
    if (state == DriveState::kOk || state == DriveState::kRecordMissing) continue;
    if (!bad.empty()) bad += "; ";
    bad += labels[d] + ": " + slots[d].message;
  }
  if (!bad.empty()) return {Verdict::kDiscarded, std::nullopt, bad};
  const bool valid0 = slots[0].envelope.has_value();
  const bool valid1 = slots[1].envelope.has_value();
  if (!valid0 && !valid1) return {Verdict::kEmpty};
  if (valid0 != valid1) {
    const size_t survivor = valid0 ? 0 : 1;
    return {Verdict::kRestored, slots[survivor].envelope->record, "", {1 - survivor, survivor}};
  }
  return DecideBothValid(*slots[0].envelope, *slots[1].envelope);
}

}  // namespace

std::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kAdopted:
      return "adopted";
    case Verdict::kRestored:
      return "restored";
    case Verdict::kEmpty:
      return "empty";
    case Verdict::kTorn:
      return "torn";
    case Verdict::kDiscarded:
      return "discarded";
  }
  return "?";
}

std::string_view DriveStateName(DriveState state) {
  switch (state) {
    case DriveState::kOk:
      return "ok";
    case DriveState::kRecordMissing:
      return "record missing";
    case DriveState::kCorrupt:
      return "corrupt";
    case DriveState::kIoError:
      return "io error";
    case DriveState::kMissingFolder:
      return "missing folder";
  }
  return "?";
}

Locker::Locker(const LockerOptions& options, const Nonce& nonce)
    : fs_(*options.fs), record_name_(options.record_name), nonce_(nonce) {
  for (size_t d = 0; d < kSlots; ++d) {
    slots_[d] = options.slots[d];
    drives_[d].path = options.slots[d];
  }
}

Locker::~Locker() = default;

Result<Opened> Locker::Open(const LockerOptions& options) {
  ONCE_RETURN_IF_ERROR(CheckOptions(options));
  Nonce nonce;
  options.rng->Fill(nonce.data(), nonce.size());
  std::unique_ptr<Locker> locker(new Locker(options, nonce));
  std::array<Slot, kSlots> slots;
  for (size_t d = 0; d < kSlots; ++d) {
    ONCE_ASSIGN_OR_RETURN(slots[d], locker->Probe(d));
    locker->Note(d, slots[d]);
  }
  Decision decision = Decide(slots, {locker->DriveLabel(0), locker->DriveLabel(1)});
  if (decision.verdict != Verdict::kDiscarded) {
    Status settled = locker->RemoveTemps();
    if (settled && decision.verdict != Verdict::kEmpty) {
      settled = locker->WriteBoth(*decision.record, decision.order);
      if (!settled) settled.error().message = "claim failed: " + settled.error().message;
    }
    if (!settled) decision = {Verdict::kDiscarded, std::nullopt, settled.error().message};
  }
  if (decision.verdict == Verdict::kDiscarded) {
    locker->trusted_ = false;
    locker->reason_ = decision.reason;
  }
  Opened opened{.verdict = decision.verdict,
                .record = std::move(decision.record),
                .reason = std::move(decision.reason),
                .drives = locker->drives_};
  opened.locker = std::move(locker);
  return opened;
}

Result<internal::Slot> Locker::Probe(size_t drive) {
  Result<bool> is_dir = fs_.IsDir(slots_[drive]);
  if (!is_dir) return Slot{DriveState::kIoError, is_dir.error().message};
  if (!*is_dir) return Slot{DriveState::kMissingFolder, "folder missing"};
  if (Status locked = TakeLock(drive); !locked) {
    if (locked.error().code == ErrorCode::kPermissionDenied) {
      return MakeError(ErrorCode::kPermissionDenied,
                       "locker: " + DriveLabel(drive) + ": " + locked.error().message,
                       slots_[drive].string());
    }
    return Slot{DriveState::kIoError, locked.error().message};
  }
  Result<std::optional<Bytes>> read = fs_.Read(RecordPath(drive), kEnvelopeBytesMax);
  if (!read && read.error().code == ErrorCode::kLimitExceeded) {
    return Slot{DriveState::kCorrupt, "record file larger than envelope_bytes_max (" +
                                          std::to_string(kEnvelopeBytesMax) + " bytes)"};
  }
  if (!read) return Slot{DriveState::kIoError, read.error().message};
  if (!*read) return Slot{DriveState::kRecordMissing, "no record file"};
  Result<Envelope> envelope = DecodeEnvelope(**read);
  if (!envelope) return Slot{DriveState::kCorrupt, envelope.error().message};
  return Slot{DriveState::kOk, "", std::move(*envelope)};
}

void Locker::Note(size_t drive, const Slot& slot) {
  DriveHealth& health = drives_[drive];
  health.state = slot.state;
  health.message = slot.message;
  if (slot.envelope) {
    health.sequence = slot.envelope->sequence;
    sequence_ = std::max(sequence_, slot.envelope->sequence);
  }
}

Status Locker::TakeLock(size_t drive) {
  if (locks_[drive]) return Ok();
  ONCE_ASSIGN_OR_RETURN(locks_[drive], fs_.LockExclusive(slots_[drive] / (record_name_ + ".lock")));
  return Ok();
}

Status Locker::RemoveTemps() {
  for (size_t d = 0; d < kSlots; ++d) {
    ONCE_RETURN_IF_ERROR(Labeled(d, fs_.Remove(TempPath(d))));
  }
  return Ok();
}

Status Locker::Write(std::span<const uint8_t> record) {
  ONCE_RETURN_IF_ERROR(CheckRecordSize(record.size()));
  if (!trusted_) {
    return MakeError(ErrorCode::kPermissionDenied,
                     "locker is untrusted (" + reason_ + "); only Reset writes");
  }
  return WriteBoth(record, {0, 1});
}

Status Locker::Reset(std::span<const uint8_t> record) {
  ONCE_RETURN_IF_ERROR(CheckRecordSize(record.size()));
  for (size_t d = 0; d < kSlots; ++d) {
    if (locks_[d]) continue;
    Result<bool> is_dir = fs_.IsDir(slots_[d]);
    if (!is_dir) return Labeled(d, Status(std::unexpected(is_dir.error())));
    if (!*is_dir) return MakeError(ErrorCode::kNotFound, DriveLabel(d) + ": folder missing");
    ONCE_RETURN_IF_ERROR(Labeled(d, TakeLock(d)));
  }
  ONCE_RETURN_IF_ERROR(RemoveTemps());
  ONCE_RETURN_IF_ERROR(WriteBoth(record, {0, 1}));
  trusted_ = true;
  reason_.clear();
  return Ok();
}

Status Locker::WriteBoth(std::span<const uint8_t> record, std::array<size_t, kSlots> order) {
  if (sequence_ == std::numeric_limits<uint64_t>::max()) {
    return MakeError(ErrorCode::kLimitExceeded, "locker: sequence exhausted");
  }
  const uint64_t sequence = sequence_ + 1;
  Envelope envelope{nonce_, sequence, Bytes(record.begin(), record.end())};
  ONCE_ASSIGN_OR_RETURN(Bytes bytes, EncodeEnvelope(envelope));
  // Paired with the decoder: what reaches the drives reads back as asked.
  Result<Envelope> back = DecodeEnvelope(bytes);
  ONCE_CHECK(back && *back == envelope);
  sequence_ = sequence;  // consumed even if a drive fails: it may hold it now
  for (size_t d : order) ONCE_RETURN_IF_ERROR(WriteDrive(d, sequence, bytes));
  return Ok();
}

Status Locker::WriteDrive(size_t drive, uint64_t sequence, std::span<const uint8_t> bytes) {
  DriveHealth& health = drives_[drive];
  // A lower or equal sequence is never written over a higher one.
  ONCE_CHECK(!health.sequence || sequence > *health.sequence);
  Status written = fs_.WriteSynced(TempPath(drive), bytes, kRecordFileMode);
  if (written) written = fs_.Rename(TempPath(drive), RecordPath(drive));
  if (written) written = fs_.SyncDir(slots_[drive]);
  if (!written) {
    health.state = DriveState::kIoError;
    health.message = written.error().message;
    written = Labeled(drive, std::move(written));
    health.last_write_error = written.error();
    return written;
  }
  health.state = DriveState::kOk;
  health.message.clear();
  health.sequence = sequence;
  return Ok();
}

Status Locker::Labeled(size_t drive, Status status) const {
  if (!status) status.error().message = DriveLabel(drive) + ": " + status.error().message;
  return status;
}

std::string Locker::DriveLabel(size_t drive) const {
  return "drive " + std::to_string(drive) + " (" + slots_[drive].string() + ")";
}

std::filesystem::path Locker::RecordPath(size_t drive) const {
  return slots_[drive] / record_name_;
}

std::filesystem::path Locker::TempPath(size_t drive) const {
  return slots_[drive] / (record_name_ + ".tmp");
}

}  // namespace once::locker
