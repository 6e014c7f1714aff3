// File: boundary.h
//
// The seam through which the sled core remembers, before a process starts,
// what it is about to execute. SledCore calls BoundaryStore::Record from its
// single execution gate, and starts the process only if Record succeeded. The
// on-disk implementation (both M.2 drives, the seed's Boundary with its Bloom
// filter of left universes) comes next; MemoryBoundaryStore serves tests and
// the simulator and can be told to fail.
//
//   MemoryBoundaryStore drives;
//   SledCore core(config, rng, drives);
//   drives.FailNext(MakeError(ErrorCode::kUnavailable, "M.2 gone").error());

#pragma once

#include <optional>
#include <vector>

#include "once/base/result.h"
#include "once/itc/version.h"
#include "once/rack/ids.h"

namespace once::rack {

// Metadata only: never a command or output (the drives are unencrypted).
struct BoundaryRecord {
  SessionId session_id;
  itc::Version session_version;  // the session start's version
  JobId last_executed;
  JobId next_job_id;  // the chain's successor, so a later life can verify it
  friend bool operator==(const BoundaryRecord&, const BoundaryRecord&) = default;
};

class BoundaryStore {
 public:
  virtual ~BoundaryStore() = default;
  // Durably records `record` before the job it names starts. On error the job
  // must not run. Called only from the sled core's thread.
  virtual Status Record(const BoundaryRecord& record) = 0;
};

// Keeps every record in memory. Not thread-safe.
class MemoryBoundaryStore final : public BoundaryStore {
 public:
  Status Record(const BoundaryRecord& record) override;
  // The next Record fails with `error` and records nothing.
  void FailNext(Error error) { fail_next_ = std::move(error); }
  const std::vector<BoundaryRecord>& records() const { return records_; }

 private:
  std::optional<Error> fail_next_;
  std::vector<BoundaryRecord> records_;
};

}  // namespace once::rack
