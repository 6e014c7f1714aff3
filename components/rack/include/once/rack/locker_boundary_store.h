// File: locker_boundary_store.h
//
// The boundary record on both M.2 drives: a BoundaryStore over a
// locker::Locker (components/locker, docs/locker-format.md). Open reads both
// drives; the locker's verdict decides what the sled starts from: a record it
// adopted (adopted, restored, torn: the newest), an empty record (both drives
// empty: a new sled), or untrusted (the drives disagree, are corrupt, fail or
// are missing, or hold a record that does not decode), which refuses every
// job until an operator's reset writes a fresh record over both drives.
//
//   locker::PosixFs fs;
//   ONCE_ASSIGN_OR_RETURN(auto drives, LockerBoundaryStore::Open(
//       {.slots = {"/m2a/sush", "/m2b/sush"}, .fs = &fs, .rng = &rng}));
//   SledCore core(config, rng, *drives);   // reads drives->loaded()
//
// Each Record is one locker Write: 2 renames and 4 fsyncs before it returns.
// Not thread-safe: the sled core's thread owns it.

#pragma once

#include <memory>

#include "once/locker/locker.h"
#include "once/rack/boundary.h"

namespace once::rack {

class LockerBoundaryStore final : public BoundaryStore {
 public:
  // Errors only for configuration (as locker::Locker::Open: two slots, a
  // drive another process holds); what the drives hold is the load verdict.
  static Result<std::unique_ptr<LockerBoundaryStore>> Open(const locker::LockerOptions& options);

  const BoundaryLoad& loaded() const override { return load_; }
  Status Record(const BoundaryRecord& record) override;
  Status Reset(const BoundaryRecord& record) override;
  std::vector<DriveStatus> Drives() const override;

  // Writes that reached the drives, and the bytes of the last record.
  uint64_t writes() const { return writes_; }
  size_t last_record_bytes() const { return last_record_bytes_; }

 private:
  explicit LockerBoundaryStore(std::unique_ptr<locker::Locker> locker)
      : locker_(std::move(locker)) {}
  Status Write(const BoundaryRecord& record, bool reset);

  std::unique_ptr<locker::Locker> locker_;
  BoundaryLoad load_;
  uint64_t writes_ = 0;
  size_t last_record_bytes_ = 0;
};

// The drives as an operator reads them.
std::vector<DriveStatus> DriveStatuses(const locker::Locker& locker);

}  // namespace once::rack
