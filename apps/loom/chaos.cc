// loom chaos run / loom chaos node (chaos.h; docs/nodes.md "The chaos test").
#include "chaos.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "chaos_check.h"
#include "once/base/rng.h"
#include "once/orchestration/app.h"
#include "once/store/read_log.h"
#include "once/store/sql_transaction.h"

namespace once::loom_app {
namespace {

using runtime::Context;
using runtime::Json;

// The queues, their limits, and the id prefixes of their executions.
struct ChaosQueue {
  const char* name;
  const char* prefix;
  queues::QueueConfig config;
};
const ChaosQueue kQueues[] = {
    {"q-a", "qa-", {.name = "q-a", .concurrency_max = 6, .per_node_concurrency_max = 3}},
    {"q-b",
     "qb-",
     {.name = "q-b",
      .concurrency_max = 4,
      .per_node_concurrency_max = 2,
      .rate_max = 20,
      .rate_period_ms = 1'000}},
};
constexpr const char* kCronQueue = "cron";
constexpr const char* kSchedule = "tick";
constexpr int64_t kCronSpeed = 60;           // cron minutes per real second
constexpr int64_t kCronPassMs = 200;         // a node's schedules' pass this often
constexpr int kSpinSteps = 100;              // latency mode: steps of one spin body
constexpr int64_t kSpinStepMs = 200;         // ... each this long
constexpr int64_t kSampleIntervalMs = 50;    // the driver samples claimed counts
constexpr int64_t kNodeExitWaitMs = 30'000;  // a SIGTERMed node drains within this

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SleepMs(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// ---------------------------------------------------------------- the node

// The node's side of the ledger (chaos_check.h): one write(2) per line on
// an O_APPEND descriptor, before the step function returns.
class LedgerWriter {
 public:
  static Result<std::unique_ptr<LedgerWriter>> Open(const std::string& path, std::string node) {
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return MakeError(ErrorCode::kUnavailable, "ledger " + path + ": " + std::strerror(errno));
    }
    return std::unique_ptr<LedgerWriter>(new LedgerWriter(fd, std::move(node)));
  }
  ~LedgerWriter() { ::close(fd_); }

  Status Write(std::string_view what, std::string_view execution_id, std::string_view step) {
    std::string line = FormatLedgerLine({.t_ns = SteadyNs(),
                                         .pid = pid_,
                                         .node = node_,
                                         .what = std::string(what),
                                         .execution_id = std::string(execution_id),
                                         .step = std::string(step)});
    for (;;) {
      ssize_t n = ::write(fd_, line.data(), line.size());
      if (n == static_cast<ssize_t>(line.size())) return Ok();
      if (n < 0 && errno == EINTR) continue;
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("ledger write: {}", n < 0 ? std::strerror(errno) : "short"));
    }
  }

 private:
  LedgerWriter(int fd, std::string node) : fd_(fd), pid_(getpid()), node_(std::move(node)) {}
  int fd_;
  int64_t pid_;
  std::string node_;
};

// A step whose effect is a ledger line, held `hold_ms` (a kill may land
// between the effect and its record).
Result<Json> EffectStep(Context& ctx, LedgerWriter& ledger, const std::string& step,
                        int64_t hold_ms) {
  return ctx.Step(step, [&]() -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ledger.Write("effect", ctx.execution_id(), step));
    if (hold_ms > 0) SleepMs(hold_ms);
    return Json(step);
  });
}

// The exactly-once step: a row per run in a table of the store's own
// database, committed with the step's record (docs/steps.md). The table
// has no key, so a second committed run would show as a second row.
Status TransactionalStep(Context& ctx, LedgerWriter& ledger) {
  Result<Json> done = ctx.Transaction("tx", [&](store::SqlTransaction& sql) -> Result<Json> {
    // fn may run more than once (only one run commits): the ledger shows
    // the runs, the table the commits.
    ONCE_RETURN_IF_ERROR(ledger.Write("txrun", ctx.execution_id(), "tx"));
    Json params[] = {Json(ctx.execution_id()), Json(int64_t{getpid()})};
    ONCE_RETURN_IF_ERROR(
        sql.Exec("INSERT INTO chaos_effects (execution_id, pid) VALUES ($1, $2)", params));
    return Json("tx");
  });
  if (!done) return std::unexpected(done.error());
  return Ok();
}

void RegisterChaosWorkflows(runtime::Runtime& rt, LedgerWriter& ledger) {
  // Queued and direct: a step, a timer, a step, a child (awaited), the
  // transactional hook, a last step.
  (void)rt.Register("job", [&ledger](Context& ctx, const Json& in) -> Result<Json> {
    const int64_t hold_ms = in.value("hold_ms", int64_t{0});
    ONCE_RETURN_IF_ERROR(EffectStep(ctx, ledger, "s1", hold_ms));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::milliseconds(in.value("sleep_ms", int64_t{100}))));
    ONCE_RETURN_IF_ERROR(EffectStep(ctx, ledger, "s2", hold_ms));
    if (in.value("child", false)) {
      ONCE_RETURN_IF_ERROR(ctx.StartChild("leaf", "c", Json{{"hold_ms", hold_ms}}));
      ONCE_RETURN_IF_ERROR(ctx.AwaitChild("c"));
    }
    ONCE_RETURN_IF_ERROR(TransactionalStep(ctx, ledger));
    ONCE_RETURN_IF_ERROR(EffectStep(ctx, ledger, "s3", hold_ms));
    return Json{{"done", true}};
  });
  (void)rt.Register("leaf", [&ledger](Context& ctx, const Json& in) -> Result<Json> {
    const int64_t hold_ms = in.value("hold_ms", int64_t{0});
    ONCE_RETURN_IF_ERROR(EffectStep(ctx, ledger, "c1", hold_ms));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::milliseconds(200)));
    ONCE_RETURN_IF_ERROR(EffectStep(ctx, ledger, "c2", hold_ms));
    return Json("leaf");
  });
  (void)rt.Register(kSchedule, [&ledger](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(EffectStep(ctx, ledger, "t1", 0));
    return Json("tick");
  });
  // Latency mode: a body that is always running (never parked), so its
  // node owns it from start to end.
  (void)rt.Register("spin", [&ledger](Context& ctx, const Json& in) -> Result<Json> {
    const int steps = in.value("steps", kSpinSteps);
    for (int i = 0; i < steps; ++i) {
      ONCE_RETURN_IF_ERROR(EffectStep(ctx, ledger, "p" + std::to_string(i), kSpinStepMs));
    }
    return Json("spun");
  });
}

std::atomic<bool> g_node_stop{false};
extern "C" void OnNodeTerm(int) { g_node_stop.store(true); }

// Starts one direct execution every direct_interval_ms until the load ends
// ("submit" before the start, "startfail" when the start was refused).
void StartDirect(orchestration::App& app, LedgerWriter& ledger, const ChaosNodeOptions& o) {
  SeededRng rng(o.seed ^ static_cast<uint64_t>(getpid()));
  std::deque<std::pair<std::string, std::future<Result<runtime::RunOutcome>>>> pending;
  for (int64_t n = 0; !g_node_stop.load() && UnixMs() < o.load_until_ms; ++n) {
    std::string id = fmt::format("d-{}-{}-{}", o.node_id, getpid(), n);
    const bool spin = o.mode == "latency";
    Json input = spin ? Json{{"steps", kSpinSteps}}
                      : Json{{"hold_ms", static_cast<int64_t>(rng.Below(8))},
                             {"sleep_ms", 100 + static_cast<int64_t>(rng.Below(500))},
                             {"child", rng.Below(2) == 0}};
    if (!ledger.Write("submit", id, "")) return;
    pending.emplace_back(id, app.runtime().StartAsync(spin ? "spin" : "job", id, std::move(input),
                                                      {.if_absent = true}));
    while (!pending.empty() &&
           pending.front().second.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      Result<runtime::RunOutcome> out = pending.front().second.get();
      if (!out) {
        (void)ledger.Write("startfail", pending.front().first, ErrorCodeName(out.error().code));
      }
      pending.pop_front();
    }
    SleepMs(o.direct_interval_ms);
  }
}

// The schedules' pass on cron time: 60 cron seconds a real second, from an
// epoch every node shares, by the queue store's clock.
void DriveCron(orchestration::App& app, const ChaosNodeOptions& o) {
  while (!g_node_stop.load() && UnixMs() < o.load_until_ms) {
    Result<int64_t> now_ms = app.queues()->NowMs();
    if (now_ms) {
      int64_t cron_ms = o.cron_epoch_ms + (*now_ms - o.cron_epoch_ms) * kCronSpeed;
      if (Status s = app.RunSchedules(cron_ms); !s) {
        fmt::print(stderr, "chaos node: schedules: {}\n", s.error().ToString());
      }
    }
    SleepMs(kCronPassMs);
  }
}

}  // namespace

int RunChaosNode(const StoreFlags& flags, const ChaosNodeOptions& o) {
  // The driver starts this process with SIGTERM blocked (a stop that came
  // before the handler would kill it): handle it, then take it.
  struct sigaction sa {};
  sa.sa_handler = OnNodeTerm;
  sigaction(SIGTERM, &sa, nullptr);
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_UNBLOCK, &term, nullptr);
  auto target = flags.ToTarget();
  if (!target) {
    fmt::print(stderr, "chaos node: {}\n", target.error().message);
    return 2;
  }
  SystemClock clock;
  SystemRng rng;
  auto stores = OpenNodeStores(*target, clock, /*as_node=*/true);
  auto ledger = LedgerWriter::Open(o.ledger, o.node_id);
  if (!stores || !ledger) {
    fmt::print(stderr, "chaos node: {}\n", (!stores ? stores.error() : ledger.error()).ToString());
    return 1;
  }
  orchestration::AppConfig config{.store = stores->events.get(),
                                  .timers = stores->timers.get(),
                                  .clock = &clock,
                                  .rng = &rng,
                                  .inbox = stores->inbox.get()};
  config.runtime.workers = static_cast<size_t>(o.workers);
  config.runtime.on_terminal = [&ledger](const std::string& id, runtime::ExecutionStatus) {
    (void)(*ledger)->Write("end", id, "");
  };
  config.runtime.on_error = [](const Error& e) {
    fmt::print(stderr, "chaos node: {}\n", e.ToString());
  };
  config.nodes = stores->nodes.get();
  config.node.info = {
      .node_id = o.node_id, .host = "chaos", .pid = getpid(), .version = "loom-chaos"};
  config.node.heartbeat_interval_ms = o.timing.heartbeat_ms;
  config.node.node_lease_ms = o.timing.lease_ms;
  config.node.step_margin_ms = o.timing.step_margin_ms;
  config.node.step_wait_ms_max = o.timing.lease_ms;
  config.takeover_interval_ms = o.timing.takeover_ms;
  config.recover_interval_ms = o.timing.recover_ms;
  config.drain_ms = 2'000;
  config.queues = stores->queues.get();
  config.serve_queues = {kQueues[0].name, kQueues[1].name, kCronQueue};
  config.queue_sweep_interval_ms = 1'000;
  // A timer row a dead node had claimed fires again after the timer lease
  // (TimerServiceOptions::lease_ms, 30 s by default, not the node lease):
  // here it is the node lease, so the test settles in bounded time.
  config.timer_service.lease_ms = std::max<int64_t>(o.timing.lease_ms, 1'000);
  config.schedule_interval_ms = 0;  // DriveCron runs the schedules on cron time
  auto app = orchestration::App::Create(std::move(config));
  if (!app) {
    fmt::print(stderr, "chaos node: {}\n", app.error().ToString());
    return 1;
  }
  RegisterChaosWorkflows((*app)->runtime(), **ledger);
  (void)(*ledger)->Write("boot", "", "");
  if (Status s = (*app)->Start(); !s) {
    fmt::print(stderr, "chaos node: start: {}\n", s.error().ToString());
    return 1;
  }
  std::thread direct([&] { StartDirect(**app, **ledger, o); });
  std::thread cron;
  if (o.mode == "chaos") cron = std::thread([&] { DriveCron(**app, o); });
  while (!g_node_stop.load()) SleepMs(20);
  direct.join();
  if (cron.joinable()) cron.join();
  (*app)->Stop();
  (void)(*ledger)->Write("stop", "", "");
  return 0;
}

// ---------------------------------------------------------------- the driver

namespace {

struct Slot {
  int index = 0;
  int generation = 0;
  pid_t pid = -1;  // -1: down
  std::string node_id;
  int64_t restart_at_ns = 0;
};

// The driver: starts, kills and restarts the node processes.
class Fleet {
 public:
  Fleet(const StoreFlags& flags, const ChaosOptions& o, int64_t load_until_ms,
        int64_t cron_epoch_ms)
      : flags_(flags), o_(o), load_until_ms_(load_until_ms), cron_epoch_ms_(cron_epoch_ms) {
    slots_.resize(static_cast<size_t>(o.nodes));
    for (int i = 0; i < o.nodes; ++i) slots_[static_cast<size_t>(i)].index = i;
  }

  // Chaos mode keeps a slot's node id across restarts every other time (a
  // restart takes its own runs back); latency mode always gives a new id
  // (the killed node's runs wait for its lease).
  Status Spawn(Slot& s) {
    bool same_id = o_.mode == "chaos" && s.generation % 2 == 1;
    if (!same_id || s.node_id.empty()) s.node_id = fmt::format("n{}g{}", s.index, s.generation);
    ++s.generation;
    std::vector<std::string> args = {"/proc/self/exe",
                                     "chaos",
                                     "node",
                                     "--node-id",
                                     s.node_id,
                                     "--ledger",
                                     o_.dir + "/ledger",
                                     "--mode",
                                     o_.mode,
                                     "--lease-ms",
                                     std::to_string(o_.timing.lease_ms),
                                     "--heartbeat-ms",
                                     std::to_string(o_.timing.heartbeat_ms),
                                     "--step-margin-ms",
                                     std::to_string(o_.timing.step_margin_ms),
                                     "--takeover-ms",
                                     std::to_string(o_.timing.takeover_ms),
                                     "--recover-ms",
                                     std::to_string(o_.timing.recover_ms),
                                     "--workers",
                                     std::to_string(o_.workers),
                                     "--direct-interval-ms",
                                     std::to_string(o_.direct_interval_ms),
                                     "--load-until-ms",
                                     std::to_string(load_until_ms_),
                                     "--cron-epoch-ms",
                                     std::to_string(cron_epoch_ms_),
                                     "--seed",
                                     std::to_string(o_.seed)};
    if (!flags_.db.empty()) {
      args.insert(args.end(), {"--db", flags_.db});
    } else {
      args.insert(args.end(), {"--url", flags_.url, "--schema", flags_.schema});
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string log = fmt::format("{}/node-{}.log", o_.dir, s.index);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pid_t pid = fork();
    if (pid < 0) return MakeError(ErrorCode::kUnavailable, "fork failed");
    if (pid == 0) {                            // async-signal-safe calls only until exec
      sigprocmask(SIG_BLOCK, &term, nullptr);  // RunChaosNode unblocks it
      int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    s.pid = pid;
    pids_.insert(pid);
    return Ok();
  }

  Status StartAll() {
    for (Slot& s : slots_) ONCE_RETURN_IF_ERROR(Spawn(s));
    return Ok();
  }

  // SIGKILLs the slot's process and reaps it; it restarts after `down_ms`.
  void KillOne(Slot& s, int64_t down_ms) {
    kills_.push_back({.pid = s.pid, .t_ns = SteadyNs()});
    ::kill(s.pid, SIGKILL);
    int status = 0;
    waitpid(s.pid, &status, 0);
    s.pid = -1;
    s.restart_at_ns = SteadyNs() + down_ms * 1'000'000;
  }

  // Reaps nodes that exited on their own (a failure) and restarts the down
  // slots whose time came.
  Status Tend() {
    for (Slot& s : slots_) {
      if (s.pid > 0) {
        int status = 0;
        if (waitpid(s.pid, &status, WNOHANG) == s.pid) {
          failures_.push_back(fmt::format("node {} (pid {}) exited by itself: status {:#x}",
                                          s.node_id, s.pid, status));
          s.pid = -1;
          s.restart_at_ns = SteadyNs();
        }
      }
      if (s.pid < 0 && SteadyNs() >= s.restart_at_ns) ONCE_RETURN_IF_ERROR(Spawn(s));
    }
    return Ok();
  }

  // SIGTERM (the node drains and exits 0) and reap every node.
  void StopAll() {
    for (Slot& s : slots_) {
      if (s.pid > 0) ::kill(s.pid, SIGTERM);
    }
    const int64_t deadline_ns = SteadyNs() + kNodeExitWaitMs * 1'000'000;
    for (Slot& s : slots_) {
      if (s.pid < 0) continue;
      int status = 0;
      while (waitpid(s.pid, &status, WNOHANG) == 0 && SteadyNs() < deadline_ns) SleepMs(20);
      if (SteadyNs() >= deadline_ns) {
        failures_.push_back(
            fmt::format("node {} did not drain within {} ms", s.node_id, kNodeExitWaitMs));
        ::kill(s.pid, SIGKILL);
        waitpid(s.pid, &status, 0);
      } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failures_.push_back(fmt::format("node {} stopped with status {:#x}", s.node_id, status));
      }
      s.pid = -1;
    }
  }

  std::vector<Slot>& slots() { return slots_; }
  const std::vector<Kill>& kills() const { return kills_; }
  const std::set<int64_t>& pids() const { return pids_; }
  const std::vector<std::string>& failures() const { return failures_; }

 private:
  const StoreFlags& flags_;
  const ChaosOptions& o_;
  int64_t load_until_ms_, cron_epoch_ms_;
  std::vector<Slot> slots_;
  std::vector<Kill> kills_;
  std::set<int64_t> pids_;
  std::vector<std::string> failures_;
};

// Samples the claimed items of every queue (one read of the claimed items
// per sample) until stopped: the most at once, in all and per node.
class QueueSampler {
 public:
  explicit QueueSampler(queues::QueueStore& queues) : queues_(queues) {
    for (const ChaosQueue& q : kQueues) {
      facts_[q.name] = {.concurrency_max = q.config.concurrency_max,
                        .per_node_concurrency_max = q.config.per_node_concurrency_max};
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~QueueSampler() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  const std::map<std::string, QueueLimitFacts>& facts() const { return facts_; }
  size_t errors() const { return errors_; }

 private:
  void Run() {
    while (!stop_.load()) {
      Sample();
      SleepMs(kSampleIntervalMs);
    }
  }
  void Sample() {
    std::map<std::string, size_t> all;
    std::map<std::pair<std::string, std::string>, size_t> by_node;
    std::string after;
    for (;;) {
      Result<std::vector<queues::QueueItem>> page = queues_.Claimed(after, 1'000);
      if (!page) {
        ++errors_;
        return;
      }
      for (const queues::QueueItem& item : *page) {
        ++all[item.queue];
        ++by_node[{item.queue, item.claimed_by}];
      }
      if (page->size() < 1'000) break;
      after = page->back().execution_id;
    }
    for (auto& [name, f] : facts_) {
      ++f.samples;
      f.claimed_max = std::max(f.claimed_max, all[name]);
    }
    for (const auto& [key, n] : by_node) {
      auto it = facts_.find(key.first);
      if (it != facts_.end())
        it->second.claimed_by_node_max = std::max(it->second.claimed_by_node_max, n);
    }
  }

  queues::QueueStore& queues_;
  std::map<std::string, QueueLimitFacts> facts_;
  size_t errors_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The driver's queued starts: `queued` over load_ms, into q-a and q-b, in
// bursts of kBurst (more than the limits admit, so they bind).
constexpr int kBurst = 12;
Result<std::vector<std::string>> EnqueueLoad(queues::QueueStore& queues, const ChaosOptions& o,
                                             SeededRng& rng) {
  std::vector<std::string> ids;
  const int64_t gap_ms = o.queued > 0 ? o.load_ms * kBurst / o.queued : o.load_ms;
  for (int i = 0; i < o.queued; ++i) {
    const ChaosQueue& q = kQueues[rng.Below(3) == 0 ? 1 : 0];
    std::string id = fmt::format("{}{}", q.prefix, i);
    Result<queues::Enqueued> e =
        queues.Enqueue({.queue = q.name,
                        .workflow = "job",
                        .execution_id = id,
                        .input = Json{{"hold_ms", static_cast<int64_t>(rng.Below(8))},
                                      {"sleep_ms", 100 + static_cast<int64_t>(rng.Below(500))},
                                      {"child", rng.Below(3) == 0}},
                        .priority = static_cast<int64_t>(rng.Below(3))});
    if (!e) return std::unexpected(e.error());
    ids.push_back(std::move(id));
    if (i % kBurst == kBurst - 1) SleepMs(gap_ms);
  }
  return ids;
}

// Every execution's log: its workflow and terminal events.
Result<std::map<std::string, LogFacts>> ReadLogs(store::EventStore& events) {
  std::map<std::string, LogFacts> logs;
  std::string after;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(store::ExecutionPage page, events.ListExecutions(after, 1'000));
    for (const std::string& id : page.execution_ids) {
      ONCE_ASSIGN_OR_RETURN(std::vector<store::Envelope> log, store::ReadLog(events, id));
      LogFacts& f = logs[id];
      f.status = "open";
      for (const store::Envelope& e : log) {
        if (!e.is_kernel()) continue;
        if (e.Is(events::KernelKind::kExecutionStarted)) {
          f.workflow = e.payload.value("workflow", "");
        }
        for (auto k :
             {events::KernelKind::kExecutionCompleted, events::KernelKind::kExecutionFailed,
              events::KernelKind::kExecutionCancelled, events::KernelKind::kExecutionContinued}) {
          if (e.Is(k)) {
            ++f.terminal_events;
            f.status = std::string(events::Name(k));
          }
        }
      }
    }
    if (page.next_after.empty()) break;
    after = page.next_after;
  }
  return logs;
}

// Settled: no execution open, no queued item left, every queued start in
// the store.
Result<bool> Settled(store::EventStore& events, queues::QueueStore& queues,
                     const std::vector<std::string>& enqueued) {
  for (const ChaosQueue& q : kQueues) {
    ONCE_ASSIGN_OR_RETURN(queues::QueueCounts c, queues.Counts(q.name, ""));
    if (c.pending + c.claimed > 0) return false;
  }
  ONCE_ASSIGN_OR_RETURN(queues::QueueCounts c, queues.Counts(kCronQueue, ""));
  if (c.pending + c.claimed > 0) return false;
  for (const std::string& id : enqueued) {
    ONCE_ASSIGN_OR_RETURN(int64_t head, events.Head(id));
    if (head == 0) return false;
  }
  ONCE_ASSIGN_OR_RETURN(auto logs, ReadLogs(events));
  for (const auto& [id, log] : logs) {
    if (log.terminal_events == 0) return false;
  }
  return true;
}

double Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return static_cast<double>(v[std::min(i, v.size() - 1)]) / 1e6;
}

// Kill times: chaos mode spreads `kills` at random over the load; latency
// mode kills every kill_gap_ms.
std::vector<int64_t> KillTimesMs(const ChaosOptions& o, SeededRng& rng) {
  std::vector<int64_t> at;
  for (int k = 0; k < o.kills; ++k) {
    if (o.mode == "latency") {
      at.push_back((k + 1) * o.kill_gap_ms);
    } else {
      at.push_back(1'000 +
                   static_cast<int64_t>(rng.Below(static_cast<uint64_t>(o.load_ms - 1'000))));
    }
  }
  std::sort(at.begin(), at.end());
  return at;
}

int Fail(const std::string& what) {
  fmt::print(stderr, "loom chaos: {}\n", what);
  return 1;
}

}  // namespace

namespace {

// SQL on the store's database through the one door Loom has for it, a
// transactional step of an execution of the driver's own ("chaos-sql-N"):
// the effects table's creation, and its rows counted at the end.
Result<store::SqlRows> DriverSql(NodeStores& stores, const std::string& id,
                                 const std::string& statement) {
  SystemClock clock;
  runtime::Runtime rt(*stores.events, clock);
  ONCE_RETURN_IF_ERROR(rt.Register("chaos-sql", [&](Context& ctx, const Json&) -> Result<Json> {
    return ctx.Transaction("sql", [&](store::SqlTransaction& sql) -> Result<Json> {
      ONCE_ASSIGN_OR_RETURN(store::SqlRows rows, sql.Exec(statement, {}));
      Json out = Json::array();
      for (const auto& row : rows.rows) {
        Json r = Json::array();
        for (const auto& v : row) r.push_back(v ? Json(*v) : Json());
        out.push_back(std::move(r));
      }
      return out;
    });
  }));
  ONCE_ASSIGN_OR_RETURN(runtime::RunOutcome out, rt.Start("chaos-sql", id, Json::object()));
  if (out.status != runtime::ExecutionStatus::kCompleted) {
    return MakeError(ErrorCode::kInternal, "chaos sql: " + out.value.dump(), id);
  }
  store::SqlRows rows;
  for (const Json& r : out.value) {
    std::vector<std::optional<std::string>> row;
    for (const Json& v : r)
      row.push_back(v.is_null() ? std::nullopt : std::optional(v.get<std::string>()));
    rows.rows.push_back(std::move(row));
  }
  return rows;
}

// The queues' limits and, in chaos mode, the cron schedule.
Status PrepareStore(const ChaosOptions& o, NodeStores& stores) {
  ONCE_RETURN_IF_ERROR(DriverSql(stores, "chaos-sql-create",
                                 "CREATE TABLE chaos_effects (execution_id TEXT NOT NULL, "
                                 "pid BIGINT NOT NULL)"));
  for (const ChaosQueue& q : kQueues) ONCE_RETURN_IF_ERROR(stores.queues->Configure(q.config));
  if (o.mode != "chaos") return Ok();
  return stores.queues->PutSchedule({.name = kSchedule,
                                     .cron = "* * * * *",
                                     .workflow = kSchedule,
                                     .queue = kCronQueue,
                                     .input = Json::object()});
}

// Kills and restarts until every kill is made and the load is over.
Status KillAndRestart(Fleet& fleet, const ChaosOptions& o, SeededRng& rng, int64_t load_until_ms) {
  std::vector<int64_t> kill_at = KillTimesMs(o, rng);
  const int64_t t0 = SteadyNs();
  size_t next_kill = 0;
  for (;;) {
    const int64_t elapsed_ms = (SteadyNs() - t0) / 1'000'000;
    if (next_kill < kill_at.size() && elapsed_ms >= kill_at[next_kill]) {
      std::vector<Slot*> up;
      for (Slot& s : fleet.slots()) {
        if (s.pid > 0) up.push_back(&s);
      }
      if (!up.empty()) {
        int64_t down_ms = o.mode == "latency" ? 1'000 : 100 + static_cast<int64_t>(rng.Below(900));
        fleet.KillOne(*up[rng.Below(up.size())], down_ms);
        ++next_kill;
      }
    }
    ONCE_RETURN_IF_ERROR(fleet.Tend());
    if (next_kill == kill_at.size() && UnixMs() >= load_until_ms) return Ok();
    SleepMs(10);
  }
}

// Waits (restarting nodes that fail) until everything ended: the ms it
// took, or -1 when settle_ms_max passed first.
Result<int64_t> SettleMs(Fleet& fleet, NodeStores& stores, const ChaosOptions& o,
                         const std::vector<std::string>& enqueued) {
  const int64_t start = SteadyNs();
  while ((SteadyNs() - start) / 1'000'000 < o.settle_ms_max) {
    ONCE_RETURN_IF_ERROR(fleet.Tend());
    Result<bool> done = Settled(*stores.events, *stores.queues, enqueued);
    if (done && *done) return (SteadyNs() - start) / 1'000'000;
    SleepMs(500);
  }
  return -1;
}

void PrintVerdict(const ChaosOptions& o, const StoreFlags& flags, const ChaosFacts& facts,
                  ChaosVerdict& v, int64_t settle_ms) {
  fmt::print(
      "chaos: {} on {}: {} kills, {} node processes, {} executions ({} completed), {} queued, "
      "{} direct submitted ({} never started: submitter killed; {} refused), {} cron ticks\n",
      o.mode, flags.db.empty() ? "postgresql" : "sqlite", facts.kills.size(), facts.pids.size(),
      v.executions, v.completed, facts.enqueued.size(), v.submitted, v.never_started,
      v.start_refused, v.ticks);
  fmt::print(
      "chaos: {} step effects, {} run twice (each after a kill of the first runner: {}); "
      "settled in {} ms\n",
      v.effects, v.duplicates, v.duplicates_by_kill, settle_ms);
  fmt::print("chaos: transactional step: {} executions committed it exactly once ({} rows)\n",
             v.tx_exactly_once, facts.tx_rows.size());
  for (const auto& [name, q] : facts.queues) {
    fmt::print(
        "chaos: queue {}: claimed at most {} (limit {}), by one node {} (limit {}), "
        "{} samples; ledger spans overlap at most {}\n",
        name, q.claimed_max, q.concurrency_max, q.claimed_by_node_max, q.per_node_concurrency_max,
        q.samples, v.span_overlap_max[name]);
  }
}

// Latency mode: how long each execution a kill interrupted took to resume
// elsewhere; one that never did is a breach.
void ReportLatency(const ChaosOptions& o, const std::vector<LedgerLine>& ledger,
                   const ChaosFacts& facts, ChaosVerdict& v) {
  std::set<std::string> last = {"p" + std::to_string(kSpinSteps - 1)};
  std::vector<TakeoverSample> samples =
      TakeoverLatencies(ledger, facts.kills, (kSpinStepMs + 500) * 1'000'000, last);
  std::vector<int64_t> ns;
  for (const TakeoverSample& s : samples) {
    if (s.latency_ns < 0) {
      v.breaches.push_back("never resumed elsewhere: " + s.execution_id);
    } else {
      ns.push_back(s.latency_ns);
    }
  }
  fmt::print(
      "chaos: takeover latency (SIGKILL to the first step elsewhere), lease {} ms: "
      "{} executions over {} kills: p50 {:.0f} ms, p99 {:.0f} ms, max {:.0f} ms\n",
      o.timing.lease_ms, ns.size(), facts.kills.size(), Percentile(ns, 0.5), Percentile(ns, 0.99),
      Percentile(ns, 1.0));
  if (ns.size() < facts.kills.size()) {
    v.breaches.push_back(
        fmt::format("only {} takeover samples for {} kills", ns.size(), facts.kills.size()));
  }
}

}  // namespace

int RunChaos(const StoreFlags& flags, const ChaosOptions& in) {
  ChaosOptions o = in;
  if (o.dir.empty()) return Fail("--dir is required");
  if (o.mode == "latency" && o.kill_gap_ms == 0) o.kill_gap_ms = o.timing.lease_ms + 5'000;
  if (o.mode == "latency") o.load_ms = o.kill_gap_ms * (o.kills + 1);
  if (o.mode == "latency") o.queued = 0;
  auto target = flags.ToTarget();
  if (!target) return Fail(target.error().message);
  SystemClock clock;
  auto stores = OpenNodeStores(*target, clock, /*as_node=*/true);
  if (!stores) return Fail(stores.error().ToString());
  if (Status s = PrepareStore(o, *stores); !s) return Fail(s.error().ToString());
  ::unlink((o.dir + "/ledger").c_str());
  SeededRng rng(o.seed);
  const int64_t start_ms = UnixMs();
  const int64_t load_until_ms = start_ms + o.load_ms;
  Fleet fleet(flags, o, load_until_ms, start_ms);
  if (Status s = fleet.StartAll(); !s) return Fail(s.error().ToString());
  QueueSampler sampler(*stores->queues);
  ChaosFacts facts;
  std::thread load([&] {
    SeededRng load_rng(o.seed * 7 + 1);
    auto ids = EnqueueLoad(*stores->queues, o, load_rng);
    if (ids) {
      facts.enqueued = std::move(*ids);
    } else {
      fmt::print(stderr, "loom chaos: enqueue: {}\n", ids.error().ToString());
    }
  });
  Status killed = KillAndRestart(fleet, o, rng, load_until_ms);
  load.join();
  if (!killed) return Fail(killed.error().ToString());
  fmt::print("chaos: {} kills made; settling\n", fleet.kills().size());
  Result<int64_t> settle_ms = SettleMs(fleet, *stores, o, facts.enqueued);
  if (!settle_ms) return Fail(settle_ms.error().ToString());
  fleet.StopAll();
  sampler.Stop();

  auto ledger = ReadLedger(o.dir + "/ledger");
  if (!ledger) return Fail(ledger.error().ToString());
  auto logs = ReadLogs(*stores->events);
  if (!logs) return Fail(logs.error().ToString());
  facts.kills = fleet.kills();
  facts.pids = fleet.pids();
  facts.logs = std::move(*logs);
  facts.queues = sampler.facts();
  facts.node_failures = fleet.failures();
  for (const ChaosQueue& q : kQueues) facts.queue_of_prefix[q.prefix] = q.name;
  facts.cron = o.mode == "chaos";
  facts.duplicates_within_kills = o.mode == "chaos";
  auto tx_rows = DriverSql(*stores, "chaos-sql-count",
                           "SELECT execution_id, CAST(COUNT(*) AS TEXT) FROM chaos_effects "
                           "GROUP BY execution_id");
  if (!tx_rows) return Fail(tx_rows.error().ToString());
  for (const auto& row : tx_rows->rows)
    facts.tx_rows[row[0].value_or("")] = std::stoll(row[1].value_or("0"));
  facts.logs.erase("chaos-sql-create");
  facts.logs.erase("chaos-sql-count");
  ChaosVerdict v = CheckChaos(*ledger, facts);
  if (*settle_ms < 0)
    v.breaches.push_back(fmt::format("not settled within {} ms", o.settle_ms_max));
  PrintVerdict(o, flags, facts, v, *settle_ms);
  if (o.mode == "latency") ReportLatency(o, *ledger, facts, v);
  if (static_cast<int>(facts.kills.size()) < o.kills) {
    v.breaches.push_back(fmt::format("only {} of {} kills made", facts.kills.size(), o.kills));
  }
  if (sampler.errors() > 0) {
    fmt::print("chaos: {} queue samples failed (not counted)\n", sampler.errors());
  }
  if (o.mode == "chaos") {
    std::vector<std::string> missed = CheckChaosControls(*ledger, facts);
    for (const std::string& m : missed) v.breaches.push_back("negative control not caught: " + m);
    if (missed.empty()) {
      fmt::print(
          "chaos: the checker's negative controls (doctored ledgers and facts): all caught\n");
    }
  }
  for (const std::string& b : v.breaches) fmt::print("BREACH {}\n", b);
  fmt::print("chaos: {}\n", v.breaches.empty() ? "every invariant held" : "FAILED");
  return v.breaches.empty() ? 0 : 1;
}

}  // namespace once::loom_app
