// loom bench: the throughput table of the design record, on this machine.
//
// An execution is start, one step, complete; the park/resume cases add a
// park (Sleep) and a resume. Each case runs `executions` executions with
// `concurrency` of them in flight (one client thread each), `runs` times on
// a fresh store, each timed run after `warm_up_runs` untimed ones of its own
// case, and reports the median executions/s and the median of the runs' p50
// latency (start call to completion).
//
// Store round trips and commits per execution. A boundary is where a step's
// result must be durable before a later effect (context.h):
//
//   case               round trips                                   commits
//   unfenced           Append{STARTED,STEP,COMPLETED}                      1
//   fenced             AcquireFence, Append{...}                           2
//   park_resume        Append{STARTED,STEP,SUSPENDED}, ReadRange(log),     2
//                      Append{RESUMED,COMPLETED}                  (3 trips)
//   park_resume_fence  Append{..park}, AcquireFence, ReadRange(log),      3
//                      Append{RESUMED,COMPLETED}                  (4 trips)
//   park_resume_if     Append{..park}, ReadRange(log), Append{RESUMED,   2
//                      COMPLETED} under the park's token from Start's
//                      outcome: the resume answers first, its append is
//                      the conditional step (runtime.h)           (3 trips)
//   park_resume_if_acquire  the same acquiring first                  3
//                      (resume_answers_first off): Append{..park},
//                      AcquireFenceIfReadTail (the whole log comes with
//                      it), Append{RESUMED,COMPLETED}             (3 trips)
//   park_resume_if_read  without the park's token: ReadRange(log) first,
//                      then the acquire with the tail             (4 trips)
//   park_resume_if_separate  ReadRange(log), AcquireFenceIf, the tail a
//                      ReadRange of its own (as before the combined call
//                      existed), Append                           (5 trips)
//   raw_acquire        AcquireFence alone: not an execution, the floor of
//                      one unbatched commit, measured in the same run      1
//   raw_acquire_if     AcquireFenceIfReadTail alone (on an empty log)      1
//   raw_read           ReadRange alone (of an empty log)                   0
//
// Why this is the minimum: Start must not return before its events are
// durable (one commit); a park must be durable before Start returns, so the
// resume is a second commit; the resume must read the log it replays (the
// runtime does not keep logs between calls) and must read it BEFORE the
// acquire (the expected token is the park's own, and a refusal takes no
// token); a fence is its own write (AcquireFence / AcquireFenceIf bump a
// token the append is then guarded by, so they cannot share the append's
// commit). The conditional resume's tail under the new token (design record
// review round 1 P2-1) now travels with the acquire, so it costs what the
// AcquireFence resume costs. With group commit the appends of concurrent
// executions share store writes (SQL backends); on PostgreSQL concurrent
// fence acquires share transactions and concurrent log reads share
// statements too (acquire and read groups), so a round trip above is one
// caller's view, not one trip of its own. raw_acquire is the ceiling of the
// acquires, raw_read of the reads. The in-memory store has no durable write
// to share, so the runtime appends on the calling thread without a Committer.
//
// Nodes and queues (issue 15; docs/nodes.md, docs/queues.md):
//
//   CASE_node          CASE run by a runtime that is a node: the registry on
//                      the same database, the heartbeat thread (every 1,000
//                      ms), the step gate before every step, and the run rows
//                      (park_resume_if_node: the conditional acquire writes
//                      the row, the ending append deletes it; unfenced_node:
//                      a start that ends in its first append writes none)
//   CASE_notify        CASE with a PostgresEndListener on the schema (its
//                      trigger NOTIFYs every end inside the appending
//                      transaction; a listener hears them); PostgreSQL only
//   unfenced_pipelined unfenced through Runtime::StartPipelined: --drivers
//                      threads (one per core by default) keep `concurrency`
//                      executions in flight between them, each starting
//                      another as a done reports back (PipelinedRun), where
//                      the other cases keep a client thread asleep in each
//   queue              end to end through an App that is a node serving one
//                      queue: the client enqueues every item (EnqueueMany,
//                      batch_items_max at a time), the App claims
//                      (queue_claim_batch_max at a time), starts each on its
//                      runtime's workers (`concurrency` of them), one step,
//                      the App completes ended items in batches; the run
//                      ends when the queue is empty (the last item
//                      completed). p50 is not measured (0).
//
// --preload N (issue 20: growth curves; preload.h) adds, beside each case on
// fresh stores, the same case on one store per backend that already holds N
// finished executions of 10 events (CASE@N), run for run in the same pairs,
// so loom-bench-ratio lines give CASE@N over CASE from one invocation. That
// store is filled once (loom-preload: its rate and bytes per execution),
// kept open for all its runs (which add theirs to it), then `loom show` and
// `loom list` are timed on it (loom-preload-inspect, loom-preload-list:
// p50/p99) and it is removed (--keep-preload keeps it). On PostgreSQL every
// loom-bench line carries the WAL bytes per execution of its timed runs
// (pg_current_wal_lsn around the run, over the executions and the clients'
// warm-up executions). scripts/bench-scale runs the curve.
//
// --stages adds one run per case through the profiling decorator at full
// concurrency and prints where an execution's wall time goes (loom-stages
// lines): Start, Resume and each store method.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "loom_app.h"
#include "once/allocator/first_touch.h"
#include "once/allocator/settings.h"
#include "once/orchestration/app.h"
#include "once/runtime/runtime.h"
#include "once/runtime/worker_pool.h"
#include "once/store/wrapper.h"
#include "once/store_decorators/profiling_store.h"
#include "ops.h"
#include "preload.h"
#include "progress.h"

namespace once::loom_app {
namespace {

using runtime::Context;
using runtime::Json;
using runtime::RunOptions;
using runtime::Runtime;
using runtime::StartOptions;
using Steady = std::chrono::steady_clock;

// raw_acquire is not an execution: one AcquireFence per "execution", the
// floor of any case that needs an unbatched commit of its own (the fence),
// measured in the same run as the raw limit of the storage.
// park_resume_if_separate is park_resume_if on a store that does not offer
// AcquireFenceIfReadTail (the tail is a read of its own, as before it
// existed): the paired comparison of the two paths. park_resume_if_read is
// park_resume_if without the park's token (the log read first).
const std::vector<std::string> kCases = {"unfenced",
                                         "unfenced_pipelined",
                                         "fenced",
                                         "park_resume",
                                         "park_resume_fence",
                                         "park_resume_if",
                                         "park_resume_if_acquire",
                                         "park_resume_if_read",
                                         "park_resume_if_separate",
                                         "raw_acquire",
                                         "raw_acquire_if",
                                         "raw_read"};

struct SeparateTailDecisions : store::ForwardEverything {
  static constexpr store::Decide kAcquireFenceIfReadTail = store::Decide::kRefuse;
};
class SeparateTailStore final
    : public store::EventStoreWrapper<SeparateTailStore, SeparateTailDecisions> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
};

bool Parks(const std::string& c) { return c.rfind("park", 0) == 0; }

// CASE_pipelined: CASE through Runtime::StartPipelined (PipelinedRun).
bool IsPipelined(const std::string& c) { return c.find("_pipelined") != std::string::npos; }

// The case a variant runs ("park_resume_if_node" runs "park_resume_if").
std::string BaseCase(std::string c) {
  for (std::string_view suffix : {"_notify", "_node", "_pipelined"}) {
    if (c.ends_with(suffix)) c.resize(c.size() - suffix.size());
  }
  return c;
}
bool IsQueueCase(const std::string& c) { return BaseCase(c) == "queue"; }
SiblingNeeds NeedsOf(const std::string& c) {
  return {.nodes = c.ends_with("_node") || c.find("_node_") != std::string::npos || IsQueueCase(c),
          .queues = IsQueueCase(c),
          .ends = c.ends_with("_notify") || c.find("_notify_") != std::string::npos};
}

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

// The longest --input, in bytes of JSON text (a run holds a copy of it for
// every one of its executions before its clock starts).
constexpr size_t kInputBytesMax = size_t{64} << 10;

// Every execution's input (--input, {"n": 1} by default). A client holds its
// inputs already: they are built before the clock starts, like the ids, and
// moved into Start.
Result<Json> InputOf(const BenchOptions& options) {
  if (options.input.size() > kInputBytesMax) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        fmt::format("--input is {} bytes; at most {}", options.input.size(), kInputBytesMax));
  }
  Json input = Json::parse(options.input, nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded()) {
    return MakeError(ErrorCode::kInvalidArgument, "--input is not JSON text");
  }
  return input;
}

// Wall time an execution spends in Start and in Resume (the --stages run).
struct Phases {
  std::atomic<int64_t> start_us{0};
  std::atomic<int64_t> resume_us{0};
};

int64_t MicrosSince(Steady::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Steady::now() - t0).count();
}

// One execution of a case, synchronously on the calling thread.
// A case's execution that must have run to its end.
Status Completed(const runtime::RunOutcome& out) {
  if (out.status == runtime::ExecutionStatus::kCompleted) return Ok();
  return MakeError(ErrorCode::kInternal, "execution did not complete", out.execution_id);
}

// What RunOne does for a case, resolved from its name once per run (not
// compared by name for every execution: the harness's own work is billed
// to the execution it times).
struct CaseSteps {
  enum class Raw { kNone, kAcquire, kRead, kAcquireIf } raw = Raw::kNone;
  bool fenced = false;          // AcquireFence before the start
  bool parks = false;           // park_once, then a resume
  bool resume_fence = false;    // the resume presents a fresh AcquireFence
  bool resume_if = false;       // the resume is conditional on the park
  bool resume_if_read = false;  // ... without the park's token (reads the log first)
};

CaseSteps StepsOf(const std::string& c) {
  CaseSteps s;
  if (c == "raw_acquire") s.raw = CaseSteps::Raw::kAcquire;
  if (c == "raw_read") s.raw = CaseSteps::Raw::kRead;
  if (c == "raw_acquire_if") s.raw = CaseSteps::Raw::kAcquireIf;
  s.fenced = c == "fenced";
  s.parks = Parks(c);
  s.resume_fence = c == "park_resume_fence";
  s.resume_if = c.starts_with("park_resume_if");
  s.resume_if_read = s.resume_if && c.find("_read") != std::string::npos;
  return s;
}

// The clock, read only when the phases are measured (--stages).
Steady::time_point PhaseClock(const Phases* phases) {
  return phases ? Steady::now() : Steady::time_point();
}

Status RunOne(Runtime& rt, const CaseSteps& c, const std::string& id, Json input, Phases* phases) {
  store::EventStore& store = rt.store();
  switch (c.raw) {
    case CaseSteps::Raw::kNone:
      break;
    case CaseSteps::Raw::kAcquire:
      ONCE_RETURN_IF_ERROR(store.AcquireFence(id));
      return Ok();
    case CaseSteps::Raw::kRead:  // an empty log: the round trip alone
      ONCE_RETURN_IF_ERROR(store.ReadRange(id, 1, store::kToEnd));
      return Ok();
    case CaseSteps::Raw::kAcquireIf: {  // on an empty log: compares, bumps, reads nothing
      ONCE_ASSIGN_OR_RETURN(store::AcquireWithTail got, store.AcquireFenceIfReadTail(id, {}, 0));
      if (got.acquire.stale) return MakeError(ErrorCode::kInternal, "stale on an empty log", id);
      return Ok();
    }
  }
  StartOptions start;
  if (c.fenced) {
    ONCE_ASSIGN_OR_RETURN(int64_t token, store.AcquireFence(id));
    start.fence = token;
  }
  const auto t_start = PhaseClock(phases);
  ONCE_ASSIGN_OR_RETURN(auto out,
                        rt.Start(c.parks ? "park_once" : "one_step", id, std::move(input), start));
  if (phases) phases->start_us += MicrosSince(t_start);
  if (!c.parks) return Completed(out);
  if (!out.park_seq) return MakeError(ErrorCode::kInternal, "execution did not park", id);
  RunOptions resume;
  const auto t_resume = PhaseClock(phases);
  if (c.resume_fence) {
    ONCE_ASSIGN_OR_RETURN(int64_t token, store.AcquireFence(id));
    resume.fence = token;
  } else if (c.resume_if) {
    resume.fence_if_parked_at = *out.park_seq;
    // The park's token, as Start returned it (RunOptions::park_fence), but
    // in park_resume_if_read, the same resume reading the log first.
    if (!c.resume_if_read) resume.park_fence = out.park_fence;
  }
  ONCE_ASSIGN_OR_RETURN(auto done, rt.Resume(id, resume));
  if (phases) phases->resume_us += MicrosSince(t_resume);
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
  double cpu_us = 0;                     // this process's CPU time per execution
  runtime::CommitterStats group_commit;  // the runtime's appends and store writes
  int64_t wal_bytes = -1;                // PostgreSQL: WAL the timed run wrote (-1: not read)
  std::string error;
};

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// What a timed run's harness holds before its clock starts: the ids and
// inputs of its executions.
struct RunInputs {
  std::vector<std::string> ids;
  std::vector<Json> inputs;
};
RunInputs MakeInputs(const std::string& tag, int executions, const Json& input) {
  RunInputs in;
  in.ids.reserve(executions);
  in.inputs.reserve(executions);
  for (int i = 0; i < executions; ++i) {
    in.ids.push_back(fmt::format("{}-{}", tag, i));
    in.inputs.push_back(input);
  }
  return in;
}

// The start of a timed span: waits until `threads` threads are ready, then
// reads the clock and the CPU and releases them.
struct SpanStart {
  Steady::time_point at;
  double cpu_s = 0;
};
SpanStart Release(std::atomic<int>& ready, int threads, std::atomic<bool>& go) {
  for (int r = ready.load(); r < threads; r = ready.load()) ready.wait(r);
  SpanStart start{Steady::now(), ProcessCpuSeconds()};
  go.store(true);
  go.notify_all();
  return start;
}

// The first error a run's threads note (the run's error); thread-safe.
class FirstError {
 public:
  void Note(const Status& s) {
    if (s) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.empty()) first_ = s.error().ToString();
  }
  std::string Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(first_);
  }

 private:
  std::mutex mu_;
  std::string first_;  // GUARDED_BY(mu_)
};

// A run's figures: rate and CPU over the span, the median of the latencies.
RunFigures FiguresOf(int executions, SpanStart start, Steady::time_point end, double cpu_end_s,
                     const std::vector<std::vector<double>>& latencies, std::string error) {
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  RunFigures f;
  f.wf_per_s = executions / std::chrono::duration<double>(end - start.at).count();
  f.p50_ms = all.empty() ? 0 : all[all.size() / 2];
  f.cpu_us = (cpu_end_s - start.cpu_s) * 1e6 / executions;
  f.error = std::move(error);
  return f;
}

// The client threads of every ClientRun (and the drivers of every
// PipelinedRun) in this process: made once, as many as the largest run asks
// for, and kept between runs, as a service keeps its request threads. A
// thread made for one run starts cold: an empty allocator cache (tcmalloc
// grows a thread's lists a few objects at a time), stacks and thread-local
// blocks never touched (a page fault each). Kept, they ran the memory table's
// unfenced 1.07-1.34x and raw_acquire 1.5-1.6x as fast (BENCHMARKS.md, "the
// bench's client threads kept between runs").
class ClientThreads {
 public:
  // Calls job(w) for w = 0..n-1, each on a thread of its own, and returns at
  // once; Wait() returns when every call has. One job at a time.
  void Start(int n, const std::function<void(int)>& job) {
    if (threads_ < n) {  // a larger run: a pool its size (the old one drains and joins)
      pool_ = std::make_unique<runtime::WorkerPool>(n, n);
      threads_ = n;
    }
    for (int w = 0; w < n; ++w) {
      const Status queued = pool_->Submit([job, w] { job(w); });
      ONCE_CHECK(queued.has_value());  // n tasks on n idle threads: the queue holds them
    }
  }

  void Wait() { pool_->WaitIdle(); }

 private:
  // Every task blocks until all n are running (Release), so each needs a
  // thread of its own: the pool is at least as large as the run.
  std::unique_ptr<runtime::WorkerPool> pool_;
  int threads_ = 0;
};

ClientThreads& Clients() {
  static ClientThreads* clients = new ClientThreads();  // never destroyed: threads idle at exit
  return *clients;
}

// One timed run of a case: `concurrency` client threads, each calling
// RunOne synchronously, `executions` in all.
//
// The harness's own costs stay outside the timed span, each for a measured
// reason:
// - ids and inputs are made before the clock (a client holds them already;
//   formatting ids was a tenth of a memory-backend execution);
// - clients exist before the clock, as threads kept between runs
//   (ClientThreads), warm up with one execution of their own when warm_up
//   (a service's request threads are warm: stacks, allocator caches, code
//   paths), and are released by an atomic flag, not a mutex they would all
//   queue for;
// - they claim executions kClaim at a time, count completions per claim and
//   record latencies into vectors of their own (every per-execution write to
//   a shared cache line moved it between the cores);
// - the run ends when its last execution completes (clock and CPU read by
//   the thread that completed it), and clients out of work wait for that
//   moment before they go back to the pool (a thread's exit inside the span,
//   its stack handed back and the other core's TLB flushed, was the
//   harness's cost, when each run made its own threads).
class ClientRun {
 public:
  ClientRun(Runtime& rt, const std::string& c, int executions, const std::string& tag,
            const Json& input, Phases* phases)
      : rt_(rt),
        case_(StepsOf(c)),
        executions_(executions),
        tag_(tag),
        input_(input),
        phases_(phases),
        in_(MakeInputs(tag, executions, input)) {}

  // Runs the clients and returns the run's figures.
  RunFigures Run(int concurrency, bool warm_up) {
    std::vector<std::vector<double>> latencies(concurrency);
    Clients().Start(concurrency, [&](int w) { latencies[w] = Client(w, warm_up); });
    SpanStart start = Release(ready_, concurrency, go_);
    Clients().Wait();
    return FiguresOf(executions_, start, end_, cpu_end_, latencies, error_.Take());
  }

 private:
  static constexpr int kClaim = 8;

  // One client thread: warm up, wait for the release, work, wait for the end.
  std::vector<double> Client(int w, bool warm_up) {
    std::vector<double> mine;
    mine.reserve(executions_);  // no growth inside the timed run
    if (warm_up) Note(RunOne(rt_, case_, fmt::format("{}-warm-{}", tag_, w), input_, nullptr));
    ready_.fetch_add(1);
    ready_.notify_one();
    go_.wait(false);
    Work(mine);
    std::unique_lock<std::mutex> lock(done_mu_);
    done_cv_.wait(lock, [&] { return done_; });
    return mine;
  }

  void Work(std::vector<double>& mine) {
    for (int first = next_.fetch_add(kClaim); first < executions_;
         first = next_.fetch_add(kClaim)) {
      int last = std::min(first + kClaim, executions_);
      Steady::time_point t1;
      for (int i = first; i < last; ++i) {
        auto t0 = Steady::now();
        Status s = RunOne(rt_, case_, in_.ids[i], std::move(in_.inputs[i]), phases_);
        t1 = Steady::now();
        mine.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        Note(s);
      }
      if (completed_.fetch_add(last - first) + (last - first) == executions_) End(t1);
    }
  }

  // Called once, by the client that completed the last execution.
  void End(Steady::time_point t) {
    end_ = t;
    cpu_end_ = ProcessCpuSeconds();
    std::lock_guard<std::mutex> lock(done_mu_);
    done_ = true;
    done_cv_.notify_all();
  }

  void Note(const Status& s) { error_.Note(s); }

  Runtime& rt_;
  const CaseSteps case_;
  const int executions_;
  const std::string& tag_;
  const Json& input_;
  Phases* const phases_;
  RunInputs in_;
  std::atomic<int> ready_{0};
  std::atomic<bool> go_{false};
  std::atomic<int> next_{0};
  std::atomic<int> completed_{0};
  Steady::time_point end_;  // written by End, read after the joins
  double cpu_end_ = 0;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool done_ = false;  // GUARDED_BY(done_mu_)
  FirstError error_;
};

// One timed run of a pipelined case (CASE_pipelined; unfenced only): a few
// driver threads keep `concurrency` executions in flight between them with
// Runtime::StartPipelined, each starting its share and starting another as
// each one's done reports back, instead of a client thread asleep in each.
// Each driver drains its own DoneQueue, so that its executions' dones (and
// their frees) run on it, a flush's answers in one wake-up, and it leads
// the next flush itself rather than sleep (committer.h).
// The clock and the CPU figure cover the same span as ClientRun's: from the
// release of the drivers to the last execution's done. Latency is from the
// StartPipelined call to the done.
class PipelinedRun {
 public:
  PipelinedRun(Runtime& rt, int executions, const std::string& tag, const Json& input, int drivers)
      : rt_(rt),
        executions_(executions),
        tag_(tag),
        input_(input),
        drivers_(std::max(1, drivers)),
        in_(MakeInputs(tag, executions, input)),
        started_(executions) {}

  RunFigures Run(int concurrency, bool warm_up) {
    std::vector<std::unique_ptr<Driver>> drivers;
    for (int d = 0; d < drivers_; ++d) drivers.push_back(std::make_unique<Driver>());
    Clients().Start(drivers_, [&](int d) {
      // Shares of concurrency, as even as they go (at least one each).
      int share = std::max(1, concurrency / drivers_ + (d < concurrency % drivers_ ? 1 : 0));
      DriverMain(*drivers[d], d, share, warm_up);
    });
    SpanStart start = Release(ready_, drivers_, go_);
    Clients().Wait();
    std::vector<std::vector<double>> latencies;
    for (auto& d : drivers) latencies.push_back(std::move(d->latencies));
    return FiguresOf(executions_, start, end_, cpu_end_, latencies, error_.Take());
  }

 private:
  // A driver and what its dones hand back to it: all on its own thread (its
  // DoneQueue's dones, or a done run before StartPipelined returns).
  struct Driver {
    runtime::DoneQueue dones;
    int in_flight = 0;
    std::vector<double> latencies;
  };

  void DriverMain(Driver& d, int index, int share, bool warm_up) {
    d.latencies.reserve(executions_);
    if (warm_up) {  // its share once, untimed: warm threads, caches and code paths
      for (int k = 0; k < share; ++k) Start(d, fmt::format("{}-warm-{}-{}", tag_, index, k), -1);
      while (d.in_flight > 0) d.dones.Drain(/*wait=*/true);
      d.latencies.clear();
    }
    ready_.fetch_add(1);
    ready_.notify_one();
    go_.wait(false);
    for (;;) {
      while (d.in_flight < share) {
        int i = next_.fetch_add(1);
        if (i >= executions_) break;
        started_[i] = Steady::now();
        Start(d, in_.ids[i], i);
      }
      if (d.in_flight == 0) return;
      d.dones.Drain(/*wait=*/true);
    }
  }

  // Starts execution i (i < 0: a warm-up one) with its done on d's thread.
  void Start(Driver& d, const std::string& id, int i) {
    ++d.in_flight;
    rt_.StartPipelined(
        "one_step", id, i >= 0 ? std::move(in_.inputs[i]) : input_,
        [this, &d, i](Result<runtime::RunOutcome> out) {
          Note(Checked(out));
          Answer(d, i);
        },
        {}, &d.dones);
  }

  // A done, on its driver's thread. The run's end is written before the
  // figures are read (after every driver has joined).
  void Answer(Driver& d, int i) {
    --d.in_flight;
    if (i < 0) return;
    Steady::time_point t = Steady::now();
    if (completed_.fetch_add(1) + 1 == executions_) {
      end_ = t;
      cpu_end_ = ProcessCpuSeconds();
    }
    d.latencies.push_back(std::chrono::duration<double, std::milli>(t - started_[i]).count());
  }

  static Status Checked(const Result<runtime::RunOutcome>& out) {
    return out ? Completed(*out) : Status(std::unexpected(out.error()));
  }

  void Note(const Status& s) { error_.Note(s); }

  Runtime& rt_;
  const int executions_;
  const std::string& tag_;
  const Json& input_;
  const int drivers_;
  RunInputs in_;
  std::vector<Steady::time_point> started_;  // written before its start, read by its done
  std::atomic<int> ready_{0};
  std::atomic<bool> go_{false};
  std::atomic<int> next_{0};
  std::atomic<int> completed_{0};
  Steady::time_point end_;  // written by the last done, read after the joins
  double cpu_end_ = 0;
  FirstError error_;
};

// warm_up: see ClientRun (the round-trip count run has none).
// The node a _node case runs as (heartbeats on its own thread from now on).
std::unique_ptr<nodes::Node> StartNode(nodes::NodeRegistry& registry, const Clock& local,
                                       const std::string& tag, RunFigures& f) {
  auto node = std::make_unique<nodes::Node>(
      registry, local,
      nodes::NodeOptions{.info = {.node_id = "bench-" + tag, .host = "bench", .pid = getpid()}});
  if (Result<nodes::Beat> b = node->Beat(); !b) {
    f.error = b.error().ToString();
    return nullptr;
  }
  node->Start();
  return node;
}

RunFigures RunCase(store::EventStore& store, const std::string& c, int executions, int concurrency,
                   const std::string& tag, const Json& input, size_t flushes_in_flight,
                   bool warm_up, Phases* phases = nullptr, BenchSiblings* siblings = nullptr,
                   int drivers = 0) {
  SystemClock clock;
  SteadyClock local;
  RunFigures f;
  runtime::RuntimeOptions options{.workers = 0};
  options.committer.flushes_in_flight_max = flushes_in_flight;
  std::unique_ptr<nodes::Node> node;
  if (siblings && siblings->nodes) {
    node = StartNode(*siblings->nodes, local, tag, f);
    if (!node) return f;
    options.node = node.get();
  }
  if (siblings && siblings->ends) siblings->ends->Start({});  // a listener hears every end
  const std::string base = BaseCase(c);
  options.resume_answers_first = base != "park_resume_if_acquire";
  SeparateTailStore separate(store);
  Runtime rt(base == "park_resume_if_separate" ? static_cast<store::EventStore&>(separate) : store,
             clock, options);
  RegisterWorkflows(rt);
  if (IsPipelined(c)) {
    if (base != "unfenced") {
      f.error = "only unfenced runs pipelined (" + c + ")";
      return f;
    }
    if (drivers <= 0) drivers = int(std::max(1u, std::thread::hardware_concurrency()));
    f = PipelinedRun(rt, executions, tag, input, drivers).Run(concurrency, warm_up);
  } else {
    f = ClientRun(rt, base, executions, tag, input, phases).Run(concurrency, warm_up);
  }
  f.group_commit = rt.commit_stats();
  if (siblings && siblings->ends) siblings->ends->Stop();
  if (node) (void)node->Release();
  return f;
}

// The queue case (see the file comment): one App, a node serving "bench".
RunFigures RunQueueCase(store::EventStore& store, BenchSiblings& siblings, int executions,
                        int concurrency, const std::string& tag, const Json& input,
                        size_t flushes_in_flight) {
  SystemClock clock;
  SystemRng rng;
  RunFigures f;
  std::mutex mu;
  std::condition_variable cv;
  int ended = 0;  // GUARDED_BY(mu)
  orchestration::AppConfig config{.store = &store, .clock = &clock, .rng = &rng};
  config.runtime.workers = static_cast<size_t>(concurrency);
  config.runtime.committer.flushes_in_flight_max = flushes_in_flight;
  config.runtime.on_terminal = [&](const std::string&, runtime::ExecutionStatus) {
    std::lock_guard lock(mu);
    if (++ended == executions) cv.notify_all();
  };
  config.runtime.on_error = [&](const Error& e) {
    std::lock_guard lock(mu);
    if (f.error.empty()) f.error = e.ToString();
  };
  config.nodes = siblings.nodes.get();
  config.node.info = {.node_id = "bench-" + tag, .host = "bench", .pid = getpid()};
  config.queues = siblings.queues.get();
  config.serve_queues = {"bench"};
  config.schedule_interval_ms = 0;
  auto app = orchestration::App::Create(std::move(config));
  if (!app) {
    f.error = app.error().ToString();
    return f;
  }
  RegisterWorkflows((*app)->runtime());
  queues::QueueStore& queue = *siblings.queues;
  std::vector<queues::EnqueueRequest> requests;
  requests.reserve(executions);
  for (int i = 0; i < executions; ++i) {
    requests.push_back({.queue = "bench",
                        .workflow = "one_step",
                        .execution_id = fmt::format("{}-{}", tag, i),
                        .input = input});
  }
  if (Status s = (*app)->Start(); !s) {
    f.error = s.error().ToString();
    return f;
  }
  const size_t batch = queue.limits().batch_items_max;
  auto start = Steady::now();
  double cpu_start = ProcessCpuSeconds();
  for (size_t first = 0; first < requests.size(); first += batch) {
    size_t n = std::min(batch, requests.size() - first);
    auto added = queue.EnqueueMany(std::span(requests).subspan(first, n));
    if (!added) {
      f.error = added.error().ToString();
      return f;
    }
  }
  {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(300), [&] { return ended == executions; })) {
      f.error = fmt::format("queue: {} of {} ended in 300 s", ended, executions);
      return f;
    }
  }
  // Every execution ended; the run ends when the last item is completed
  // (the App completes them in batches after the ends).
  for (;;) {
    Result<queues::QueueCounts> left = queue.Counts("bench", "");
    if (!left) {
      f.error = left.error().ToString();
      return f;
    }
    if (left->pending + left->claimed == 0) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  Steady::time_point end = Steady::now();
  double cpu_end = ProcessCpuSeconds();
  (*app)->Stop();
  f.wf_per_s = executions / std::chrono::duration<double>(end - start).count();
  f.cpu_us = (cpu_end - cpu_start) * 1e6 / executions;
  f.group_commit = (*app)->runtime().commit_stats();
  return f;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

// Store calls and commits per execution: a separate, small run through the
// profiling decorator with one client (its bookkeeping would distort the
// timed runs, and one client means no group commit).
std::pair<double, double> CountRoundTrips(const BenchOptions& options, const std::string& backend,
                                          const std::string& c, const Clock& clock) {
  double calls = 0, commits = 0;
  if (c != BaseCase(c) || IsQueueCase(c)) return {0, 0};  // counted for the plain cases only
  BackendSpec spec{.backend = backend, .url = options.url};
  std::string tag = fmt::format("{}-count-{}", c, clock.NowUnixMillis());
  spec.path = (std::filesystem::path(options.dir) / ("loom-bench-" + tag + ".db")).string();
  if (auto store = OpenBackend(spec, clock)) {
    store::ProfilingStore profiled(**store, clock);
    const int n = 64;
    RunCase(profiled, c, n, 1, tag, *InputOf(options), 1, /*warm_up=*/false);
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
  return {calls, commits};
}

// One run of a case at full concurrency through the profiling decorator:
// the mean wall time of Start, Resume and each store method per execution.
// A method's time is the store's (pool waits and the acquire group's queue
// included); Start's or Resume's time less the store's is the runtime's own
// (the committer's queue included, as Append runs inside a flush).
void PrintStages(const BenchOptions& options, const std::string& backend, const std::string& c,
                 const Clock& clock) {
  if (IsQueueCase(c)) return;  // the execution cases only
  BackendSpec spec{.backend = backend, .url = options.url};
  std::string tag = fmt::format("{}-stages-{}", c, clock.NowUnixMillis());
  spec.path = (std::filesystem::path(options.dir) / ("loom-bench-" + tag + ".db")).string();
  if (backend == "postgres") spec.schema = fmt::format("loom_{:016x}", SystemRng().Next());
  auto store = OpenBackend(spec, clock);
  if (!store) return;
  Result<BenchSiblings> siblings = OpenSiblings(spec, clock, **store, NeedsOf(c));
  if (!siblings) return;
  store::ProfilingStore profiled(**store, clock);
  Phases phases;
  RunFigures f = RunCase(profiled, c, options.executions, options.concurrency, tag,
                         *InputOf(options), runtime::CommitterOptions{}.flushes_in_flight_max,
                         /*warm_up=*/true, &phases, &*siblings);
  *siblings = {};
  double n = options.executions;
  std::string line =
      fmt::format("loom-stages backend={} case={} wf_per_s={:.0f} start_ms={:.2f} resume_ms={:.2f}",
                  backend, c, f.wf_per_s, phases.start_us / n / 1e3, phases.resume_us / n / 1e3);
  for (const auto& [method, s] : profiled.Snapshot()) {
    if (s.calls == 0) continue;
    line += fmt::format(" {}_per_exec={:.2f} {}_mean_ms={:.2f} {}_max_ms={:.1f}", method,
                        s.calls / n, method, s.total_us / 1e3 / s.calls, method, s.max_us / 1e3);
  }
  fmt::print("{}\n", line);
  store->reset();
  std::error_code ec;
  for (auto suffix : {"", "-wal", "-shm"}) std::filesystem::remove(spec.path + suffix, ec);
}

// The preloaded store of one backend (--preload): opened once and kept for
// every run of the preloaded cells, as a service keeps its store open (the
// fresh cells open a store per run, but on an empty file or schema there is
// nothing cold to warm). Runs add their executions to it: runs x (1 +
// warm-up runs) x executions, small beside the preload.
struct SharedStore {
  BackendSpec spec;
  std::unique_ptr<store::EventStore> store;
  PreloadFigures figures;
};

// The WAL a run writes, read around the timed span (PostgreSQL only): the
// server's insert position before and after; -1 when it could not be read.
int64_t WalSince(const std::string& url, int64_t before) {
  Result<int64_t> after = WalPositionBytes(url);
  return before >= 0 && after ? *after - before : -1;
}

// One timed run of one case on a fresh store (or on the preloaded one when
// `shared`); false when the store did not open.
bool TimedRun(const BenchOptions& options, const std::string& backend, const std::string& c,
              int run, size_t flushes, const Clock& clock, RunFigures& out,
              SharedStore* shared = nullptr) {
  BackendSpec spec{.backend = backend, .url = options.url};
  // Ids of the same length on both stores (a longer id is more WAL and
  // more bytes in every row and index entry of the execution).
  std::string tag =
      fmt::format("{}-{}-f{}-{}-{}", c, run, flushes, clock.NowUnixMillis(), shared ? 'p' : 'f');
  spec.path = (std::filesystem::path(options.dir) / ("loom-bench-" + tag + ".db")).string();
  if (backend == "postgres") spec.schema = fmt::format("loom_{:016x}", SystemRng().Next());
  if (shared) spec = shared->spec;
  Result<std::unique_ptr<store::EventStore>> store =
      shared ? std::unique_ptr<store::EventStore>() : OpenBackend(spec, clock);
  if (!store) {
    out.error = store.error().ToString();
    return false;
  }
  store::EventStore& events = shared ? *shared->store : **store;
  Result<BenchSiblings> siblings = OpenSiblings(spec, clock, events, NeedsOf(c));
  if (!siblings) {
    out.error = siblings.error().ToString();
    return false;
  }
  const int64_t wal_before =
      backend == "postgres" ? WalPositionBytes(spec.url).value_or(int64_t{-1}) : -1;
  const Json input = *InputOf(options);  // RunBench checked it
  if (IsQueueCase(c)) {
    out = RunQueueCase(events, *siblings, options.executions, options.concurrency, tag, input,
                       flushes);
  } else {
    out = RunCase(events, c, options.executions, options.concurrency, tag, input, flushes,
                  /*warm_up=*/true, nullptr, &*siblings, options.drivers);
  }
  if (backend == "postgres") out.wal_bytes = WalSince(spec.url, wal_before);
  *siblings = {};
  if (out.group_commit.store_writes > 0) {
    fmt::print(stderr,
               "loom bench: {} {} f{} run {}: {} appends in {} store writes ({:.1f}/write, "
               "{} in flight at most)\n",
               backend, c, out.group_commit.flushes_in_flight_max, run, out.group_commit.requests,
               out.group_commit.store_writes,
               double(out.group_commit.requests) / double(out.group_commit.store_writes),
               out.group_commit.flushes_in_flight_peak);
  }
  if (shared) return true;
  store->reset();
  if (backend == "sqlite") {
    std::error_code ec;
    for (auto suffix : {"", "-wal", "-shm"}) std::filesystem::remove(spec.path + suffix, ec);
  }
  return true;
}

// The cells of one backend: a case at one flush setting, on fresh stores or
// on the preloaded one; per-run figures in run order.
struct Cell {
  std::string c;
  size_t flushes;  // 0: the committer's default (the store's)
  bool preloaded = false;
  std::vector<double> rates, p50s, cpus, wal_per_exec;
  size_t in_force = 1;  // the flushes in flight the last run allowed
};

// The flushes in flight a cell ran with, as its lines name it.
size_t FlushesOf(const Cell& cell) { return cell.flushes > 0 ? cell.flushes : cell.in_force; }

std::string CellName(const Cell& cell, int64_t preload) {
  return cell.preloaded ? fmt::format("{}@{}", cell.c, preload) : cell.c;
}

// The median and quartiles of cell's rates over base's, run by run.
void PrintRatio(const std::string& backend, const std::string& name, const std::string& base_name,
                const Cell& cell, const Cell& base) {
  std::vector<double> ratios;
  for (size_t r = 0; r < std::min(cell.rates.size(), base.rates.size()); ++r) {
    if (base.rates[r] > 0) ratios.push_back(cell.rates[r] / base.rates[r]);
  }
  if (ratios.empty()) return;
  std::sort(ratios.begin(), ratios.end());
  auto at = [&](double q) {
    return ratios[std::min(ratios.size() - 1, size_t(q * ratios.size()))];
  };
  fmt::print(
      "loom-bench-ratio backend={} case={} base={} flushes_in_flight={} runs={} "
      "median={:.3f} q1={:.3f} q3={:.3f}\n",
      backend, name, base_name, FlushesOf(cell), ratios.size(), Median(ratios), at(0.25), at(0.75));
}

// The case a cell is compared with: its base case, but the queue against
// unfenced and the conditional resumes against park_resume (issue 20: at
// least 0.85 of it).
std::string RatioBase(const std::string& c) {
  if (IsQueueCase(c)) return "unfenced";
  if (c == "park_resume_if" || c == "park_resume_if_acquire") return "park_resume";
  return BaseCase(c);
}

// A variant's cost against its base case in the same run (CASE_node vs
// CASE, CASE_notify vs CASE; queue vs unfenced; park_resume_if and
// park_resume_if_acquire vs park_resume; CASE@N, on the preloaded store, vs
// CASE on fresh ones): run r of the two shares its moment of the machine's
// load, so the median of the per-run ratios (with its quartiles) survives
// the load's drift where the rates do not.
void PrintPairedRatios(const std::string& backend, const std::vector<Cell>& cells,
                       int64_t preload) {
  for (const Cell& cell : cells) {
    const std::string base = RatioBase(cell.c);
    for (const Cell& b : cells) {
      if (b.flushes != cell.flushes || b.preloaded) continue;
      bool variant = base != cell.c && b.c == base && !cell.preloaded;
      bool grown = cell.preloaded && b.c == cell.c;
      if (variant || grown) PrintRatio(backend, CellName(cell, preload), b.c, cell, b);
    }
  }
}

// The raw limit beside a memory store that grew by a preload: what this
// machine charges for memory touched for the first time, measured right
// after the preload (the big store's runs keep growing its heap; a fresh
// store's reuse what the last one freed).
void PrintFirstTouch() {
  if (std::optional<allocator::FirstTouch> raw = allocator::MeasureFirstTouch()) {
    fmt::print(
        "loom-preload-raw backend=memory first_touch_us_per_4k_page={:.2f} "
        "first_touch_us_per_2m_page={:.1f}\n",
        raw->us_per_small_page, raw->us_per_huge_page);
  }
}

// Opens the backend's store for --preload and fills it; nullopt (and a
// message) when it could not.
std::optional<SharedStore> OpenPreloaded(const BenchOptions& options, const std::string& backend,
                                         const Clock& clock) {
  SharedStore shared;
  shared.spec = {.backend = backend, .url = options.url};
  shared.spec.path = (std::filesystem::path(options.dir) /
                      fmt::format("loom-bench-preload-{}.db", clock.NowUnixMillis()))
                         .string();
  if (backend == "postgres") shared.spec.schema = fmt::format("loom_{:016x}", SystemRng().Next());
  auto fail = [&](const Error& e) {
    fmt::print(stderr, "loom bench: {} preload: {}\n", backend, e.ToString());
    return std::nullopt;
  };
  auto store = OpenBackend(shared.spec, clock);
  if (!store) return fail(store.error());
  shared.store = std::move(*store);
  Result<PreloadFigures> f = Preload(shared.spec, *shared.store, options.preload, clock);
  if (!f) return fail(f.error());
  shared.figures = *f;
  if (Status ok = VerifyPreload(shared.spec, *shared.store, shared.figures); !ok) {
    return fail(ok.error());
  }
  double n = double(f->executions);
  fmt::print(
      "loom-preload backend={} executions={} events={} write_s={:.1f} exec_per_s={:.0f} "
      "events_per_s={:.0f} settle_s={:.1f} bytes={} bytes_per_exec={:.0f} verified=ok "
      "store={}\n",
      backend, f->executions, f->events, f->write_s, n / f->write_s, double(f->events) / f->write_s,
      f->settle_s, f->bytes, double(f->bytes) / n,
      backend == "sqlite"     ? shared.spec.path
      : backend == "postgres" ? shared.spec.schema
                              : "-");
  if (backend == "memory") PrintFirstTouch();
  std::fflush(stdout);
  return shared;
}

// --retention: the age that makes every preloaded execution eligible and no
// execution of the bench's runs (the preload ends a minute before it starts).
constexpr int64_t kRetentionAgeMs = 3'600'000;
// --retention: the most live pairs run while it deletes. A pass lists only
// the executions ended by its cutoff (ListEnded), so it ends while the live
// runs add new ones; before that it read every id after its cursor, the live
// runs' too, and did not end (PostgreSQL at N = 100,000). Past this many
// pairs the pass finishes alone.
constexpr size_t kRetentionLivePairsMax = 40;

// --retention, SQL backends: `loom retention run` on a thread deletes the
// preloaded executions while unfenced runs on the same store and on fresh
// ones, run for run, until it ends (or kRetentionLivePairsMax pairs): its
// rate and the live case's ratio.
int RetentionWhileLive(const BenchOptions& options, SharedStore& shared, const Clock& clock) {
  const std::string& backend = shared.spec.backend;
  if (backend == "memory") return 0;
  std::atomic<bool> done{false};
  Result<RetentionFigures> figures = RetentionFigures{};
  std::thread deleter([&] {
    figures = RunRetention(shared.spec, kRetentionAgeMs, options.retention_pause_ms);
    done.store(true);
  });
  const size_t flushes = runtime::CommitterOptions{}.flushes_in_flight_max;
  Cell live{"unfenced", flushes, /*preloaded=*/true}, fresh{"unfenced", flushes};
  int failures = 0;
  const auto live_start = Steady::now();
  while (!done.load() && live.rates.size() < kRetentionLivePairsMax) {
    for (Cell* cell : {&fresh, &live}) {
      RunFigures f;
      TimedRun(options, backend, "unfenced", int(live.rates.size()), flushes, clock, f,
               cell->preloaded ? &shared : nullptr);
      if (!f.error.empty()) ++failures;
      cell->rates.push_back(f.wf_per_s);
    }
  }
  const double live_s = std::chrono::duration<double>(Steady::now() - live_start).count();
  deleter.join();
  if (!figures) {
    fmt::print(stderr, "loom bench: {} retention: {}\n", backend, figures.error().ToString());
    return failures + 1;
  }
  fmt::print(
      "loom-retention backend={} executions={} examined={} deleted={} seconds={:.1f} "
      "deleted_per_s={:.0f} live_pairs={} live_s={:.1f} batch={} pause_ms={}\n",
      backend, shared.figures.executions, figures->examined, figures->deleted, figures->seconds,
      double(figures->deleted) / figures->seconds, live.rates.size(), live_s,
      RetentionPace{}.batch_executions,
      options.retention_pause_ms >= 0 ? options.retention_pause_ms
                                      : RetentionPace{}.batch_pause_ms);
  PrintRatio(backend, fmt::format("unfenced@{}+retention", options.preload), "unfenced", live,
             fresh);
  return failures;
}

// The inspect and list percentiles on the preloaded store; 1 when a read failed.
int PrintInspects(const BenchOptions& options, SharedStore& shared) {
  SystemRng rng;
  Result<InspectFigures> inspect =
      TimeInspects(shared.spec, *shared.store, shared.figures, options.inspects, rng);
  if (!inspect) {
    fmt::print(stderr, "loom bench: {} inspect: {}\n", shared.spec.backend,
               inspect.error().ToString());
    return 1;
  }
  fmt::print(
      "loom-preload-inspect backend={} executions={} samples={} p50_ms={:.3f} p99_ms={:.3f} "
      "show_p50_ms={:.3f} show_p99_ms={:.3f}\n",
      shared.spec.backend, shared.figures.executions, inspect->log.samples, inspect->log.p50_ms,
      inspect->log.p99_ms, inspect->show.p50_ms, inspect->show.p99_ms);
  return 0;
}
int PrintLists(const BenchOptions& options, SharedStore& shared) {
  if (shared.spec.backend == "memory") return 0;  // no `loom list` on memory
  auto lists = TimeLists(shared.spec, options.lists);
  if (!lists) {
    fmt::print(stderr, "loom bench: {} list: {}\n", shared.spec.backend, lists.error().ToString());
    return 1;
  }
  auto [any, completed] = *lists;
  fmt::print(
      "loom-preload-list backend={} executions={} samples={} any_p50_ms={:.3f} "
      "any_p99_ms={:.3f} completed_p50_ms={:.3f} completed_p99_ms={:.3f}\n",
      shared.spec.backend, shared.figures.executions, any.samples, any.p50_ms, any.p99_ms,
      completed.p50_ms, completed.p99_ms);
  return 0;
}

// After the timed runs: inspects and list pages on the preloaded store, its
// size now, retention (--retention), then the store is removed (SQLite file,
// PostgreSQL schema) unless --keep-preload.
int ReadPreloaded(const BenchOptions& options, SharedStore& shared, const Clock& clock) {
  const std::string& backend = shared.spec.backend;
  int failures = PrintInspects(options, shared) + PrintLists(options, shared);
  if (Result<int64_t> bytes = BytesOnDisk(shared.spec)) {
    fmt::print("loom-preload-after backend={} bytes={}\n", backend, *bytes);
  }
  if (options.retention) failures += RetentionWhileLive(options, shared, clock);
  shared.store.reset();
  if (options.keep_preload) return failures;
  if (Status gone = RemovePreloaded(shared.spec); !gone) {
    fmt::print(stderr, "loom bench: {} cleanup: {}\n", backend, gone.error().ToString());
  }
  return failures;
}

// Runs the cells of one backend, paired (run r of every cell before run
// r + 1 of any, so the machine's load drifts over all of them alike), and
// adds to `failures`; false when a store did not open.
bool RunCells(const BenchOptions& options, const std::string& backend, std::vector<Cell>& cells,
              SharedStore* shared, const Clock& clock, int& failures) {
  bool opened = true;
  // Runs done of this backend, on stderr when it is a terminal (progress.h).
  Progress bar("bench " + backend + ": runs");
  const int64_t runs_total =
      static_cast<int64_t>(cells.size()) * options.runs * (1 + options.warm_up_runs);
  int64_t runs_done = 0;
  for (int run = 0; run < options.runs && opened; ++run) {
    for (Cell& cell : cells) {
      SharedStore* on = cell.preloaded ? shared : nullptr;
      // Each timed run follows untimed runs of its own case, so it finds
      // the allocator's free lists, the caches and the server as its own
      // case leaves them, not as the previous cell's store did (paired,
      // memory unfenced in the full table: 1.55 times the exec/s with one
      // warm-up run; alone it was already there; BENCHMARKS.md).
      for (int w = 0; w < options.warm_up_runs && opened; ++w) {
        RunFigures warm;
        opened = TimedRun(options, backend, cell.c, -1 - w, cell.flushes, clock, warm, on);
        bar.Update(++runs_done, runs_total);
        if (!warm.error.empty()) {
          fmt::print(stderr, "loom bench: {} {} (warm-up run): {}\n", backend, cell.c, warm.error);
          ++failures;
        }
      }
      RunFigures f;
      opened = opened && TimedRun(options, backend, cell.c, run, cell.flushes, clock, f, on);
      bar.Update(++runs_done, runs_total);
      if (!f.error.empty()) {
        fmt::print(stderr, "loom bench: {} {}: {}\n", backend, cell.c, f.error);
        ++failures;
      }
      if (!opened) break;
      cell.rates.push_back(f.wf_per_s);
      // No committer (the memory store) is one write at a time.
      cell.in_force = std::max<size_t>(1, f.group_commit.flushes_in_flight_max);
      cell.p50s.push_back(f.p50_ms);
      cell.cpus.push_back(f.cpu_us);
      // The clients' warm-up executions are inside the WAL span too.
      const int written = options.executions + (IsQueueCase(cell.c) ? 0 : options.concurrency);
      if (f.wal_bytes >= 0) cell.wal_per_exec.push_back(double(f.wal_bytes) / written);
    }
  }
  bar.Finish();
  return opened;
}

void PrintCells(const BenchOptions& options, const std::string& backend,
                const std::vector<Cell>& cells, const Clock& clock) {
  for (const Cell& cell : cells) {
    auto [calls, commits] = options.count_round_trips && !cell.preloaded
                                ? CountRoundTrips(options, backend, cell.c, clock)
                                : std::pair<double, double>{0, 0};
    double rate = Median(cell.rates), p50 = Median(cell.p50s), cpu = Median(cell.cpus);
    const std::string name = CellName(cell, options.preload);
    fmt::print("{:<10} {:<24} {:>3} {:>10.0f} {:>8.2f} {:>9.1f} {:>10.2f} {:>12.2f}\n", backend,
               name, FlushesOf(cell), rate, p50, cpu, calls, commits);
    std::string wal;
    if (!cell.wal_per_exec.empty()) {
      wal = fmt::format(" wal_bytes_per_exec={:.0f}", Median(cell.wal_per_exec));
    }
    fmt::print(
        "loom-bench backend={} case={} flushes_in_flight={} wf_per_s={:.0f} p50_ms={:.2f} "
        "cpu_us_per_exec={:.1f} calls_per_exec={:.2f} commits_per_exec_unbatched={:.2f}{}\n",
        backend, name, FlushesOf(cell), rate, p50, cpu, calls, commits, wal);
  }
}

int RunBench(const BenchOptions& options) {
  if (Result<Json> input = InputOf(options); !input) {
    fmt::print(stderr, "loom bench: {}\n", input.error().message);
    return 2;
  }
  std::vector<std::string> cases = options.cases.empty() ? kCases : options.cases;
  std::vector<size_t> flushes = options.flushes_in_flight;
  if (flushes.empty()) flushes.push_back(runtime::CommitterOptions{}.flushes_in_flight_max);
  SystemClock clock;
  int failures = 0;
  fmt::print(
      "loom bench: {} executions per run, {} in flight, an input of {} bytes, median of {} runs "
      "(each after {} untimed); allocator {}\n",
      options.executions, options.concurrency, options.input.size(), options.runs,
      options.warm_up_runs, allocator::Description());
  for (const auto& backend : options.backends) {
    std::optional<SharedStore> shared;
    if (options.preload > 0) {
      shared = OpenPreloaded(options, backend, clock);
      if (!shared) {
        ++failures;
        continue;
      }
    }
    std::vector<Cell> cells;
    for (const auto& c : cases) {
      for (size_t f : flushes) {
        cells.push_back(Cell{c, f});
        if (shared) cells.push_back(Cell{c, f, /*preloaded=*/true});
      }
    }
    bool opened = RunCells(options, backend, cells, shared ? &*shared : nullptr, clock, failures);
    if (opened) {
      fmt::print("{:<10} {:<24} {:>3} {:>10} {:>8} {:>9} {:>10} {:>12}\n", "backend", "case", "f",
                 "exec/s", "p50 ms", "cpu us", "calls/exec", "commits/exec");
      PrintCells(options, backend, cells, clock);
      PrintPairedRatios(backend, cells, options.preload);
      if (options.stages) {
        for (const auto& c : cases) PrintStages(options, backend, c, clock);
      }
    }
    if (shared) failures += ReadPreloaded(options, *shared, clock);
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace once::loom_app
