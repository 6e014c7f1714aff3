// File: throughput.h
//
// The throughput driver behind `loom bench`: runs `executions` executions of
// a built-in workflow (start + `steps` steps + complete) on a runtime over
// `store` with `concurrency` worker threads and group commit, and reports the
// rate. Execution ids are `<id_prefix><n>`, so use a fresh store or prefix.
//
//   MemoryEventStore store;
//   SystemClock clock;
//   Result<ThroughputReport> r = MeasureThroughput(store, clock, {.executions = 100'000});
//   fmt::print("{:.0f} exec/s\n", r->executions_per_second);
//
// Threads: blocks the caller until every execution is done.

#pragma once

#include <cstddef>
#include <string>

#include "once/runtime/runtime.h"

namespace once::runtime {

struct ThroughputOptions {
  size_t executions = 10'000;
  size_t concurrency = 64;  // worker threads = executions in flight
  size_t steps = 1;         // steps per execution
  std::string id_prefix = "bench-";
  CommitterOptions committer;
};

struct ThroughputReport {
  size_t executions = 0;  // completed
  size_t failures = 0;    // calls that returned an error or did not complete
  double seconds = 0;
  double executions_per_second = 0;
  CommitterStats commits;
};

// Errors: only the runtime's setup; per-execution failures are counted.
Result<ThroughputReport> MeasureThroughput(store::EventStore& store, const Clock& clock,
                                           const ThroughputOptions& options);

}  // namespace once::runtime
