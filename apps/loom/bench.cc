// loom bench: the throughput table of the design record, on this machine.
//
// An execution is start, one step, complete; the park/resume cases add a
// park (Sleep) and a resume. Each case runs `executions` executions with
// `concurrency` of them in flight (one client thread each), `runs` times on
// a fresh store, and reports the median executions/s and the median of the
// runs' p50 latency (start call to completion).
//
// Store round trips and commits per execution (runtime as of the
// one-append-per-boundary change; for BENCHMARKS.md). A boundary is where a
// step's result must be durable before a later effect (context.h):
//
//   case               round trips                                   commits
//   unfenced           Append{STARTED,STEP,COMPLETED}                      1
//   fenced             AcquireFence, Append{...}                           2
//   park_resume        Append{STARTED,STEP,SUSPENDED}, ReadRange(log),     2
//                      Append{RESUMED,COMPLETED}                  (3 trips)
//   park_resume_fence  Append{..park}, AcquireFence, ReadRange(log),      3
//                      Append{RESUMED,COMPLETED}                  (4 trips)
//   park_resume_if     Append{..park}, ReadRange(log), AcquireFenceIf,    3
//                      ReadRange(tail), Append{RESUMED,COMPLETED} (5 trips)
//
// (Before: the start was flushed before the step and the step's result after
// it, so 3 appends per start; a resume re-read the tail even under a held
// token: unfenced 1->3 commits, park_resume_if 7 trips / 5 commits.)
// Why this is the minimum: Start must not return before its events are
// durable (one commit); a park must be durable before Start returns, so the
// resume is a second commit; the resume must read the log it replays (the
// runtime does not keep logs between calls); a fence is its own write
// (AcquireFence / AcquireFenceIf bump a token the append is then guarded by,
// so they cannot share the append's commit). The conditional resume's extra
// read is the tail under the new token (design record review round 1 P2-1:
// an ignorable append between the read and the acquire must not make the
// run append at a stale sequence); it is a read, not a commit. With group
// commit the commits of concurrent executions share store writes (SQL
// backends); the in-memory store has no durable write to share, so the
// runtime appends on the calling thread without a Committer.

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "loom_app.h"
#include "once/runtime/runtime.h"
#include "once/store_decorators/profiling_store.h"

namespace once::loom_app {
namespace {

using runtime::Context;
using runtime::Json;
using runtime::RunOptions;
using runtime::Runtime;
using runtime::StartOptions;
using Steady = std::chrono::steady_clock;

const std::vector<std::string> kCases = {"unfenced", "fenced", "park_resume", "park_resume_fence",
                                         "park_resume_if"};

bool Parks(const std::string& c) { return c.rfind("park", 0) == 0; }

void RegisterWorkflows(Runtime& rt) {
  (void)rt.Register("one_step", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json v, ctx.Step("work", [&]() -> Result<Json> { return in; }));
    return v;
  });
  (void)rt.Register("park_once", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json v, ctx.Step("work", [&]() -> Result<Json> { return in; }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::milliseconds(0)));
    return v;
  });
}

// One execution of a case, synchronously on the calling thread.
Status RunOne(Runtime& rt, const std::string& c, const std::string& id) {
  store::EventStore& store = rt.store();
  StartOptions start;
  if (c == "fenced") {
    ONCE_ASSIGN_OR_RETURN(int64_t token, store.AcquireFence(id));
    start.fence = token;
  }
  ONCE_ASSIGN_OR_RETURN(auto out,
                        rt.Start(Parks(c) ? "park_once" : "one_step", id, Json{{"n", 1}}, start));
  if (!Parks(c)) {
    if (out.status != runtime::ExecutionStatus::kCompleted) {
      return MakeError(ErrorCode::kInternal, "execution did not complete", id);
    }
    return Ok();
  }
  if (!out.park_seq) return MakeError(ErrorCode::kInternal, "execution did not park", id);
  RunOptions resume;
  if (c == "park_resume_fence") {
    ONCE_ASSIGN_OR_RETURN(int64_t token, store.AcquireFence(id));
    resume.fence = token;
  } else if (c == "park_resume_if") {
    resume.fence_if_parked_at = *out.park_seq;
  }
  ONCE_ASSIGN_OR_RETURN(auto done, rt.Resume(id, resume));
  if (done.status != runtime::ExecutionStatus::kCompleted) {
    return MakeError(ErrorCode::kInternal, "resumed execution did not complete", id);
  }
  return Ok();
}

struct RunFigures {
  double wf_per_s = 0;
  double p50_ms = 0;
  double round_trips = 0;                // store calls per execution (only when counted)
  double commits = 0;                    // store writes per execution (only when counted)
  runtime::CommitterStats group_commit;  // the runtime's appends and store writes
  std::string error;
};

RunFigures RunCase(store::EventStore& store, const std::string& c, int executions, int concurrency,
                   const std::string& tag) {
  SystemClock clock;
  Runtime rt(store, clock, {.workers = 0});
  RegisterWorkflows(rt);
  std::atomic<int> next{0};
  std::vector<std::vector<double>> latencies(concurrency);
  std::mutex error_mu;
  std::string first_error;
  auto worker = [&](int w) {
    for (int i = next.fetch_add(1); i < executions; i = next.fetch_add(1)) {
      auto t0 = Steady::now();
      Status s = RunOne(rt, c, fmt::format("{}-{}", tag, i));
      latencies[w].push_back(std::chrono::duration<double, std::milli>(Steady::now() - t0).count());
      if (!s) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (first_error.empty()) first_error = s.error().ToString();
      }
    }
  };
  // The clients are started before the clock and released together: thread
  // creation is not the runtime's cost (at memory speed it was most of a run).
  std::mutex go_mu;
  std::condition_variable go_cv;
  bool go = false;
  std::vector<std::thread> threads;
  for (int w = 0; w < concurrency; ++w) {
    threads.emplace_back([&, w] {
      {
        std::unique_lock<std::mutex> lock(go_mu);
        go_cv.wait(lock, [&] { return go; });
      }
      worker(w);
    });
  }
  auto start = Steady::now();
  {
    std::lock_guard<std::mutex> lock(go_mu);
    go = true;
  }
  go_cv.notify_all();
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(Steady::now() - start).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  RunFigures f;
  f.wf_per_s = executions / seconds;
  f.p50_ms = all.empty() ? 0 : all[all.size() / 2];
  f.error = first_error;
  f.group_commit = rt.commit_stats();
  return f;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int RunBench(const BenchOptions& options) {
  std::vector<std::string> cases = options.cases.empty() ? kCases : options.cases;
  SystemClock clock;
  int failures = 0;
  fmt::print("loom bench: {} executions per run, {} in flight, median of {} runs\n",
             options.executions, options.concurrency, options.runs);
  fmt::print("{:<10} {:<18} {:>12} {:>8} {:>12} {:>10}\n", "backend", "case", "exec/s", "p50 ms",
             "calls/exec", "commits/exec");
  for (const auto& backend : options.backends) {
    for (const auto& c : cases) {
      std::vector<double> rates, p50s;
      for (int run = 0; run < options.runs; ++run) {
        BackendSpec spec{.backend = backend, .url = options.url};
        std::string tag = fmt::format("{}-{}-{}", c, run, clock.NowUnixMillis());
        spec.path = (std::filesystem::path(options.dir) / ("loom-bench-" + tag + ".db")).string();
        auto store = OpenBackend(spec, clock);
        if (!store) {
          fmt::print(stderr, "loom bench: {}: {}\n", backend, store.error().ToString());
          ++failures;
          break;
        }
        RunFigures f = RunCase(**store, c, options.executions, options.concurrency, tag);
        if (!f.error.empty()) {
          fmt::print(stderr, "loom bench: {} {}: {}\n", backend, c, f.error);
          ++failures;
        }
        if (f.group_commit.store_writes > 0) {
          fmt::print(stderr,
                     "loom bench: {} {} run {}: {} appends in {} store writes ({:.1f}/write)\n",
                     backend, c, run, f.group_commit.requests, f.group_commit.store_writes,
                     double(f.group_commit.requests) / double(f.group_commit.store_writes));
        }
        rates.push_back(f.wf_per_s);
        p50s.push_back(f.p50_ms);
        store->reset();
        if (backend == "sqlite") {
          std::error_code ec;
          for (auto suffix : {"", "-wal", "-shm"}) std::filesystem::remove(spec.path + suffix, ec);
        }
      }
      if (rates.empty()) continue;
      double calls = 0, commits = 0;
      if (options.count_round_trips) {
        // A separate, small run through the profiling decorator: its
        // bookkeeping would distort the timed runs.
        BackendSpec spec{.backend = backend, .url = options.url};
        std::string tag = fmt::format("{}-count-{}", c, clock.NowUnixMillis());
        spec.path = (std::filesystem::path(options.dir) / ("loom-bench-" + tag + ".db")).string();
        if (auto store = OpenBackend(spec, clock)) {
          store::ProfilingStore profiled(**store, clock);
          const int n = 64;
          RunCase(profiled, c, n, 1, tag);
          for (const auto& [method, s] : profiled.Snapshot()) {
            calls += s.calls;
            if (method != "ReadRange" && method != "Head" && method != "ReadFence" &&
                method != "ListExecutions") {
              commits += s.calls;
            }
          }
          calls /= n;
          commits /= n;
          store->reset();
          std::error_code ec;
          for (auto suffix : {"", "-wal", "-shm"}) std::filesystem::remove(spec.path + suffix, ec);
        }
      }
      double rate = Median(rates), p50 = Median(p50s);
      fmt::print("{:<10} {:<18} {:>12.0f} {:>8.2f} {:>12.2f} {:>10.2f}\n", backend, c, rate, p50,
                 calls, commits);
      fmt::print(
          "loom-bench backend={} case={} wf_per_s={:.0f} p50_ms={:.2f} calls_per_exec={:.2f} "
          "commits_per_exec_unbatched={:.2f}\n",
          backend, c, rate, p50, calls, commits);
      std::fflush(stdout);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace once::loom_app
