#include "once/runtime/throughput.h"

#include <chrono>

namespace once::runtime {

Result<ThroughputReport> MeasureThroughput(store::EventStore& store, const Clock& clock,
                                           const ThroughputOptions& options) {
  Runtime rt(store, clock,
             {.workers = options.concurrency,
              .queue_tasks_max = options.executions + 1,
              .committer = options.committer});
  const size_t steps = options.steps;
  ONCE_RETURN_IF_ERROR(rt.Register("bench", [steps](Context& ctx, const Json& in) -> Result<Json> {
    Json last = in;
    for (size_t i = 0; i < steps; ++i) {
      // append, not "s" + ...: GCC 12 at -O3 warns (-Wrestrict, falsely)
      // on the insert that operator+ inlines.
      const std::string name = std::string("s").append(std::to_string(i));
      ONCE_ASSIGN_OR_RETURN(last, ctx.Step(name, [&]() -> Result<Json> { return last; }));
    }
    return last;
  }));
  std::vector<std::future<Result<RunOutcome>>> futures;
  futures.reserve(options.executions);
  auto begin = std::chrono::steady_clock::now();
  for (size_t i = 0; i < options.executions; ++i) {
    futures.push_back(rt.StartAsync("bench", options.id_prefix + std::to_string(i), Json(i)));
  }
  ThroughputReport report;
  for (auto& f : futures) {
    Result<RunOutcome> out = f.get();
    if (out && out->status == ExecutionStatus::kCompleted)
      ++report.executions;
    else
      ++report.failures;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  report.executions_per_second = report.seconds > 0 ? report.executions / report.seconds : 0;
  report.commits = rt.commit_stats();
  return report;
}

}  // namespace once::runtime
