#include "once/rack/locker_boundary_store.h"

namespace once::rack {

std::vector<DriveStatus> DriveStatuses(const locker::Locker& locker) {
  std::vector<DriveStatus> out;
  for (const locker::DriveHealth& drive : locker.drives()) {
    DriveStatus status;
    status.path = drive.path.string();
    status.state = std::string(locker::DriveStateName(drive.state));
    status.message = drive.message;
    if (drive.last_write_error) {
      status.message += (status.message.empty() ? "" : "; ") + std::string("last write: ") +
                        drive.last_write_error->message;
    }
    status.sequence = drive.sequence.value_or(0);
    out.push_back(std::move(status));
  }
  return out;
}

Result<std::unique_ptr<LockerBoundaryStore>> LockerBoundaryStore::Open(
    const locker::LockerOptions& options) {
  ONCE_ASSIGN_OR_RETURN(locker::Opened opened, locker::Locker::Open(options));
  std::unique_ptr<LockerBoundaryStore> store(new LockerBoundaryStore(std::move(opened.locker)));
  BoundaryLoad& load = store->load_;
  load.verdict = std::string(locker::VerdictName(opened.verdict));
  load.drives = DriveStatuses(*store->locker_);
  if (opened.verdict == locker::Verdict::kDiscarded) {
    load.untrusted_reason = opened.reason;
  } else if (!opened.record) {
    load.record = BoundaryRecord{};  // a new sled, or both drives wiped
  } else if (auto record = DecodeBoundary(*opened.record); record) {
    load.record = std::move(*record);
  } else {
    load.verdict = "discarded";
    load.untrusted_reason = "the boundary record does not decode: " + record.error().message;
  }
  return store;
}

Status LockerBoundaryStore::Write(const BoundaryRecord& record, bool reset) {
  ONCE_ASSIGN_OR_RETURN(Bytes bytes, EncodeBoundary(record));
  ++writes_;
  Status written = reset ? locker_->Reset(bytes) : locker_->Write(bytes);
  if (written) last_record_bytes_ = bytes.size();
  return written;
}

Status LockerBoundaryStore::Record(const BoundaryRecord& record) { return Write(record, false); }

Status LockerBoundaryStore::Reset(const BoundaryRecord& record) { return Write(record, true); }

std::vector<DriveStatus> LockerBoundaryStore::Drives() const { return DriveStatuses(*locker_); }

}  // namespace once::rack
