// App: one config wires runtime, timers, supervisor, inbox and lifecycle.
#include "once/orchestration/app.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "once/nodes/memory_node_registry.h"
#include "once/queues/memory_queue_store.h"
#include "once/store/memory_store.h"
#include "once/store_decorators/profiling_store.h"
#include "once/timers/memory_timer_store.h"
#include "test_support.h"

namespace once::orchestration {
namespace {

using events::Json;

struct AppFixture {
  ManualClock clock;
  SeededRng rng{5};
  store::MemoryEventStore store{store::Limits{}, clock};
  store::MemoryEventStore archive{store::Limits{}, clock};
  timers::MemoryTimerStore timers;
  MemoryInboxStore inbox;
  AppConfig Config() {
    return AppConfig{
        .store = &store, .timers = &timers, .clock = &clock, .rng = &rng, .inbox = &inbox};
  }
};

TEST(AppTest, CreateRefusesAMissingStoreOrAnArchiveLessArchivePolicy) {
  AppFixture f;
  AppConfig c = f.Config();
  c.store = nullptr;
  EXPECT_EQ(App::Create(c).error().code, ErrorCode::kInvalidArgument);
  c = f.Config();
  c.retention = lifecycle::RetentionPolicy{.mode = lifecycle::RetentionMode::kArchive};
  EXPECT_EQ(App::Create(c).error().code, ErrorCode::kInvalidArgument);
}

TEST(AppTest, RedriveIsHandedOutOnlyWithTheFlagOnAndTimers) {
  AppFixture f;
  auto off = App::Create(f.Config()).value();
  EXPECT_EQ(off->Redrive().error().code, ErrorCode::kUnsupported);  // default OFF
  AppConfig c = f.Config();
  c.features.redrive = true;
  c.timers = nullptr;
  EXPECT_EQ(App::Create(c).value()->Redrive().error().code, ErrorCode::kNotFound);
  c = f.Config();
  c.features.redrive = true;
  auto on = App::Create(c).value();
  RedriveWiring w = on->Redrive().value();
  EXPECT_EQ(w.timers, &f.timers);
  EXPECT_EQ(w.service, on->timer_service());
}

TEST(AppTest, TimersSupervisorAndInboxAreWiredEndToEnd) {
  AppFixture f;
  auto app = App::Create(f.Config()).value();
  testing::RegisterWorkflows(app->runtime());
  // A parent whose child sleeps: the timer wakes the child, the supervisor
  // resumes the parent.
  ASSERT_TRUE(app->runtime().Start("parent", "p", 9));
  for (int i = 0; i < 10; ++i) {
    f.clock.Advance(std::chrono::milliseconds(500));
    ASSERT_TRUE(app->timer_service()->PollOnce());
  }
  EXPECT_EQ(app->runtime().Inspect("p").value().status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(app->supervisor().stats().resumed, 1);
  // The inbox: a message sent before the start is delivered at the park.
  ASSERT_TRUE(app->inbox()->Send("r", "approve", "ok"));
  ASSERT_TRUE(app->runtime().Start("receiver", "r", Json()));
  EXPECT_EQ(app->runtime().Inspect("r").value().result["value"], "ok");
}

TEST(AppTest, AnInboxNeedsAnInboxStore) {
  AppFixture f;
  AppConfig c = f.Config();
  c.inbox = nullptr;
  EXPECT_EQ(App::Create(c).value()->inbox(), nullptr);
  c.inbox = &f.inbox;
  auto app = App::Create(c).value();
  EXPECT_EQ(app->inbox_store(), &f.inbox);
  ASSERT_NE(app->inbox(), nullptr);
}

// A finished execution whose inbox still holds a message is kept by
// retention until the inbox deletes its rows (Sweep); then it goes.
TEST(AppTest, RetentionKeepsAFinishedLogUntilTheInboxDeletedItsRows) {
  AppFixture f;
  AppConfig c = f.Config();
  c.retention = lifecycle::RetentionPolicy{.age_ms_min = 1000};
  auto app = App::Create(c).value();
  testing::RegisterWorkflows(app->runtime());
  ASSERT_TRUE(app->runtime().Start("receiver", "r", Json()));
  ASSERT_EQ(app->inbox()->Send("r", "reject", "no").value().delivery, Delivery::kNoop);
  ASSERT_TRUE(app->runtime().Cancel("r", "done"));
  f.clock.Advance(std::chrono::seconds(2));
  lifecycle::RetentionReport kept = app->lifecycle()->ApplyRetention().value();
  EXPECT_EQ(kept.pinned, 1u);
  EXPECT_EQ(kept.deleted, 0u);
  EXPECT_EQ(app->inbox()->Sweep().value().forgotten, 1u);
  EXPECT_FALSE(f.inbox.Holds("r").value());
  lifecycle::RetentionReport gone = app->lifecycle()->ApplyRetention().value();
  EXPECT_EQ(gone.pinned, 0u);
  EXPECT_EQ(gone.deleted, 1u);
}

TEST(AppTest, SuperviseOrsTheParkedChildPinIntoRetention) {
  AppFixture f;
  AppConfig c = f.Config();
  c.retention = lifecycle::RetentionPolicy{.age_ms_min = 1000};
  c.pinned = [](std::string_view id) -> Result<bool> { return id == "kept"; };
  auto app = App::Create(c).value();
  testing::RegisterWorkflows(app->runtime());
  ASSERT_TRUE(app->runtime().Start("group", "p", 1));  // children c1, c2 sleep
  ASSERT_TRUE(app->runtime().Resume(runtime::ChildExecutionId("p", "c1")));
  ASSERT_TRUE(app->runtime().Start("receiver", "kept", Json()));
  ASSERT_TRUE(app->runtime().Cancel("kept", "done"));
  f.clock.Advance(std::chrono::seconds(2));
  lifecycle::RetentionReport r = app->lifecycle()->ApplyRetention().value();
  EXPECT_EQ(r.eligible, 2u);  // c1 (finished, awaited) and "kept"
  EXPECT_EQ(r.pinned, 2u);    // one by the app's pin, one by the supervisor's
  EXPECT_EQ(r.deleted, 0u);
}

// The runtime's park-time self-resume: the child is already terminal when the
// parent parks, so the runtime resumes the parent itself (not through the
// supervisor). A rival fences the parent before every conditional acquire, so
// that resume is contended.
struct ParkTimeContention {
  AppFixture f;
  testing::HookStore hook{f.store};
  std::vector<Error> errors;
  struct Logged {
    LogLevel level;
    std::string component, subject, code;
  };
  std::vector<Logged> logged;
  bool rival = true;
  bool fenced_at_park = false;
  std::unique_ptr<App> app;

  explicit ParkTimeContention(bool redrive) {
    AppConfig c = f.Config();
    c.store = &hook;
    c.features.redrive = redrive;
    c.runtime.on_error = [this](const Error& e) { errors.push_back(e); };
    c.log = [this](const LogEvent& e) {
      logged.push_back(
          {e.level, std::string(e.component), std::string(e.subject), std::string(e.code)});
    };
    // Someone fenced the parent as it parked: the unfenced first try is stale.
    c.runtime.on_park = [this](const std::string& id, int64_t, const store::Envelope&) {
      if (id == "p" && !fenced_at_park) fenced_at_park = f.store.AcquireFence("p").has_value();
    };
    hook.before_acquire_if = [this](int) {
      if (rival) (void)f.store.AcquireFence("p");
    };
    app = App::Create(std::move(c)).value();
    testing::RegisterWorkflows(app->runtime());
    ONCE_CHECK(
        app->runtime()
            .Register("quick", [](runtime::Context&, const Json& in) -> Result<Json> { return in; })
            .has_value());
    // The child "c1" is done before its parent starts it (and parks on it).
    ONCE_CHECK(app->runtime().Start("quick", runtime::ChildExecutionId("p", "c1"), 7).has_value());
  }
  int ContendedErrors() const {
    int n = 0;
    for (const Error& e : errors) n += e.code == ErrorCode::kResumeContended;
    return n;
  }
};

TEST(AppTest, ParkTimeSelfResumeContendedWritesARedriveRowWhenTheFlagIsOn) {
  ParkTimeContention t(/*redrive=*/true);
  ASSERT_TRUE(t.app->runtime().Start("parent", "p", 1));
  ASSERT_TRUE(t.fenced_at_park);
  EXPECT_EQ(t.app->runtime().Inspect("p").value().status, runtime::ExecutionStatus::kSuspended);
  EXPECT_EQ(t.ContendedErrors(), 0);  // handed to a re-drive row, not to an operator
  auto rows = t.f.timers.RowsOf("p").value();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].redrive, timers::Redrive{0});
  // The rival goes away: the live re-drive completes the parent, no Recover().
  t.rival = false;
  for (int i = 0; i < 40 && t.app->runtime().Inspect("p").value().status !=
                                runtime::ExecutionStatus::kCompleted;
       ++i) {
    t.f.clock.Advance(std::chrono::milliseconds(250));
    ASSERT_TRUE(t.app->timer_service()->PollOnce());
  }
  EXPECT_EQ(t.app->runtime().Inspect("p").value().status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(t.app->runtime().Inspect("p").value().result["value"], 7);
  EXPECT_TRUE(t.f.timers.RowsOf("p").value().empty());
  EXPECT_EQ(t.ContendedErrors(), 0);
}

TEST(AppTest, ParkTimeSelfResumeContendedGoesToOnErrorWhenTheFlagIsOff) {
  ParkTimeContention t(/*redrive=*/false);
  ASSERT_TRUE(t.app->runtime().Start("parent", "p", 1));
  EXPECT_EQ(t.app->runtime().Inspect("p").value().status, runtime::ExecutionStatus::kSuspended);
  EXPECT_EQ(t.ContendedErrors(), 1);
  EXPECT_TRUE(t.f.timers.RowsOf("p").value().empty());  // nothing written
  // The App's LogSink reaches the runtime: the error is logged once, at warn.
  int logged = 0;
  for (const ParkTimeContention::Logged& r : t.logged) {
    if (r.code != ErrorCodeName(ErrorCode::kResumeContended)) continue;
    ++logged;
    EXPECT_EQ(r.level, LogLevel::kWarn);
    EXPECT_EQ(r.component, "runtime");
    EXPECT_EQ(r.subject, "p");
  }
  EXPECT_EQ(logged, 1);
}

// ---- Nodes (issue 15) -----------------------------------------------------

// Two Apps as two nodes of one memory store and registry. Leases are judged
// by the manual clock (the store's and the nodes' own).
struct TwoNodes {
  ManualClock clock;
  SeededRng rng{9};
  store::MemoryEventStore store{store::Limits{}, clock};
  nodes::MemoryNodeRegistry registry{store, clock};
  std::atomic<bool> block_on_a{true};
  std::atomic<int> step_runs{0};
  std::atomic<bool> in_step{false};
  std::atomic<bool> release{false};

  AppConfig Config(const std::string& id) {
    AppConfig c{.store = &store, .clock = &clock, .rng = &rng};
    c.nodes = &registry;
    c.local_clock = &clock;
    c.node.info = {.node_id = id, .host = "test", .pid = 1};
    c.node.heartbeat_interval_ms = 50;
    c.node.step_wait_ms_max = 200;
    c.takeover_interval_ms = 0;  // the test drives takeover
    c.recover_interval_ms = 0;
    c.drain_ms = 100;
    return c;
  }
  // step "slow" (blocks on node "a" until released), step "after".
  void Register(App& app, const std::string& node) {
    ONCE_CHECK(app.runtime()
                   .Register("job",
                             [this, node](runtime::Context& ctx, const Json&) -> Result<Json> {
                               ONCE_RETURN_IF_ERROR(ctx.Step("slow", [&]() -> Result<Json> {
                                 ++step_runs;
                                 if (node == "a" && block_on_a) {
                                   in_step = true;
                                   while (!release) std::this_thread::yield();
                                 }
                                 return node;
                               }));
                               return ctx.Step("after", [&]() -> Result<Json> { return node; });
                             })
                   .has_value());
  }
};

TEST(AppNodesTest, StartRegistersTheNodeAndStopReleasesIt) {
  TwoNodes t;
  auto a = App::Create(t.Config("a")).value();
  ASSERT_NE(a->node(), nullptr);
  ASSERT_TRUE(a->Start());
  auto listed = t.registry.Nodes().value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].info.node_id, "a");
  EXPECT_TRUE(listed[0].alive);
  a->Stop();
  listed = t.registry.Nodes().value();
  EXPECT_TRUE(listed[0].stopped);
  EXPECT_FALSE(listed[0].alive);
  EXPECT_TRUE(a->node()->draining());
}

// A running node forgets the rows of nodes dead for forget_nodes_after_ms
// (owning nothing), and keeps the rest: loom_nodes does not only grow.
TEST(AppNodesTest, ANodeForgetsNodesDeadLongerThanForgetNodesAfter) {
  TwoNodes t;
  ASSERT_TRUE(t.registry.Heartbeat({.node_id = "old", .host = "test", .pid = 2}, 1'000));
  ASSERT_TRUE(t.registry.Stop("old"));
  ASSERT_TRUE(t.registry.Heartbeat({.node_id = "recent", .host = "test", .pid = 3}, 1'000));
  t.clock.Advance(std::chrono::hours(2));
  ASSERT_TRUE(t.registry.Heartbeat({.node_id = "recent", .host = "test", .pid = 3}, 1'000));
  ASSERT_TRUE(t.registry.Stop("recent"));  // dead, but not for long
  AppConfig c = t.Config("a");
  c.forget_nodes_after_ms = 3'600'000;
  c.forget_nodes_interval_ms = 10;
  auto a = App::Create(c).value();
  ASSERT_TRUE(a->Start());
  std::set<std::string> ids;
  for (int i = 0; i < 500; ++i) {
    ids.clear();
    std::vector<nodes::NodeRecord> listed = t.registry.Nodes().value();
    for (const nodes::NodeRecord& n : listed) ids.insert(n.info.node_id);
    if (!ids.contains("old")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ids, (std::set<std::string>{std::string("a"), std::string("recent")}));
  a->Stop();
}

TEST(AppNodesTest, ARegistryNeedsANodeId) {
  TwoNodes t;
  AppConfig c = t.Config("");
  EXPECT_EQ(App::Create(c).error().code, ErrorCode::kInvalidArgument);
}

// Stop drains: the body running on A gets drain_ms to finish; it does not,
// so A closes its gate and is released, B takes the execution over at once
// (no lease wait), and A's late record is refused by the fence.
TEST(AppNodesTest, AStoppingNodeDrainsThenOthersTakeWhatItStillOwnsAtOnce) {
  TwoNodes t;
  auto a = App::Create(t.Config("a")).value();
  auto b = App::Create(t.Config("b")).value();
  t.Register(*a, "a");
  t.Register(*b, "b");
  ASSERT_TRUE(a->Start());
  ASSERT_TRUE(b->Start());
  // The first step is durable on A (its run row names A), the second blocks.
  t.block_on_a = false;
  ASSERT_TRUE(a->runtime().Start("job", "warm", Json()));
  t.block_on_a = true;
  auto running =
      std::async(std::launch::async, [&] { return a->runtime().Start("job", "ex", Json()); });
  while (!t.in_step) std::this_thread::yield();
  // A is alive: B takes nothing.
  EXPECT_EQ(b->runtime().Takeover().value().orphaned, 0u);
  auto started = std::chrono::steady_clock::now();
  a->Stop();  // drain_ms passes with the body still in its step
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(100));
  // Released: no lease wait (the clock has not moved).
  runtime::TakeoverReport taken = b->runtime().Takeover().value();
  EXPECT_EQ(taken.orphaned, 0u);  // the body on A never made a run row: nothing recorded yet
  t.release = true;
  Result<runtime::RunOutcome> late = running.get();
  ASSERT_FALSE(late);  // the gate closed under it: its next step was refused
  EXPECT_EQ(late.error().code, ErrorCode::kCancelled);
  // A's record of "slow" landed before the refusal, under A's ownership;
  // A is stopped, so B takes the run at once and finishes it.
  taken = b->runtime().Takeover().value();
  EXPECT_EQ(taken.redriven, 1u);
  runtime::ExecutionState st = b->runtime().Inspect("ex").value();
  EXPECT_EQ(st.status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(st.result["value"], "b");  // "after" ran on B; "slow" was replayed from A
  b->Stop();
}

// A node that dies (no heartbeat, no Stop) leaves a run: the survivor's
// periodic takeover resumes it once the lease has passed, with no operator.
TEST(AppNodesTest, TheSurvivorsPeriodicTakeoverResumesADeadNodesRun) {
  TwoNodes t;
  AppConfig ca = t.Config("a");
  auto a = App::Create(ca).value();
  t.Register(*a, "a");
  ASSERT_TRUE(a->Start());
  // A dies in the middle of "ex": its heartbeats stop, its body never ends.
  auto running =
      std::async(std::launch::async, [&] { return a->runtime().Start("job", "ex", Json()); });
  while (!t.in_step) std::this_thread::yield();
  a->node()->StopHeartbeats();
  AppConfig cb = t.Config("b");
  cb.takeover_interval_ms = 20;
  auto b = App::Create(cb).value();
  t.Register(*b, "b");
  ASSERT_TRUE(b->Start());
  // Nothing recorded for "ex" yet: A's run left no row. Record one the way
  // a body that had made its first step durable would have.
  store::AppendRequest req{.execution_id = "ex2", .expected_next = 1, .owner = "a"};
  req.events.push_back(
      events::KernelEvent(events::KernelKind::kExecutionStarted, Json{{"workflow", "job"}}));
  ASSERT_TRUE(t.store.Append(req));
  t.clock.Advance(std::chrono::milliseconds(a->node()->options().node_lease_ms + 1));
  for (int i = 0; i < 500 && b->runtime().Inspect("ex2").value().status !=
                                 runtime::ExecutionStatus::kCompleted;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(b->runtime().Inspect("ex2").value().status, runtime::ExecutionStatus::kCompleted);
  t.release = true;
  (void)running.get();
  b->Stop();
  a->Stop();
}

// ---- Durable queues (issue 15; docs/queues.md) ----------------------------

struct QueuedNodes : TwoNodes {
  queues::MemoryQueueStore queue_store{clock};
  std::mutex mu;
  std::map<std::string, int> runs;  // body runs per execution id
  std::atomic<int> in_flight{0};
  std::atomic<int> peak{0};

  AppConfig Serving(const std::string& id) {
    AppConfig c = Config(id);
    c.queues = &queue_store;
    c.serve_queues = {"q"};
    c.queue_poll_interval_ms = 5;
    c.runtime.workers = 4;
    return c;
  }
  void RegisterCount(App& app) {
    ONCE_CHECK(app.runtime()
                   .Register("count",
                             [this](runtime::Context& ctx, const Json&) -> Result<Json> {
                               return ctx.Step("work", [&]() -> Result<Json> {
                                 int now = ++in_flight;
                                 for (int p = peak;
                                      now > p && !peak.compare_exchange_weak(p, now);) {
                                 }
                                 {
                                   std::lock_guard lock(mu);
                                   ++runs[ctx.execution_id()];
                                 }
                                 std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                 --in_flight;
                                 return Json(1);
                               });
                             })
                   .has_value());
  }
};

// Two serving nodes drain one queue: every execution runs once, ends, is
// awaited from the node that enqueued it, and the claimed items never
// exceed the queue's limit (the bodies in flight, sampled in the step).
TEST(AppQueuesTest, EnqueuedWorkRunsOnceAcrossNodesWithinTheLimit) {
  QueuedNodes t;
  ASSERT_TRUE(t.queue_store.Configure({.name = "q", .concurrency_max = 3}));
  auto a = App::Create(t.Serving("a")).value();
  auto b = App::Create(t.Serving("b")).value();
  t.RegisterCount(*a);
  t.RegisterCount(*b);
  ASSERT_TRUE(a->Start());
  ASSERT_TRUE(b->Start());
  constexpr int kItems = 40;
  for (int i = 0; i < kItems; ++i) {
    auto e =
        a->Enqueue("q", "count", "c-" + std::to_string(i), Json::object(), {.priority = i % 3});
    ASSERT_TRUE(e) << e.error().ToString();
    EXPECT_FALSE(e->existing);
  }
  for (int i = 0; i < kItems; ++i) {
    auto st = a->Await("c-" + std::to_string(i), 20'000);
    ASSERT_TRUE(st) << st.error().ToString();
    EXPECT_EQ(st->status, runtime::ExecutionStatus::kCompleted);
  }
  EXPECT_LE(t.peak.load(), 3);
  EXPECT_GE(t.peak.load(), 1);
  {
    std::lock_guard lock(t.mu);
    ASSERT_EQ(t.runs.size(), static_cast<size_t>(kItems));
    for (const auto& [id, n] : t.runs) EXPECT_EQ(n, 1) << id;
  }
  // Every item completed by the node that ended its execution.
  EXPECT_TRUE(t.queue_store.Items("q", "", 100).value().empty());
  // Enqueuing an id that ran returns that execution; nothing runs again.
  auto again = b->Enqueue("q", "count", "c-0", Json::object());
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->existing);
  EXPECT_TRUE(t.queue_store.Items("q", "", 100).value().empty());
  a->Stop();
  b->Stop();
}

// queue_in_flight_max bounds what one App holds claimed; an end that makes
// room claims the next items at once, and a claim that got all it asked
// for claims again at once: with a 60 s poll interval every item still runs
// (each Await below would time out after 20 s if a claim waited for the poll).
TEST(AppQueuesTest, ClaimsStayWithinTheInFlightLimitAndRoomIsClaimedAtOnce) {
  QueuedNodes t;
  AppConfig c = t.Serving("a");
  c.queue_poll_interval_ms = 60'000;
  c.queue_claim_batch_max = 2;
  c.queue_in_flight_max = 3;
  auto a = App::Create(c).value();
  t.RegisterCount(*a);
  constexpr int kItems = 20;
  for (int i = 0; i < kItems; ++i) {
    ASSERT_TRUE(a->Enqueue("q", "count", "f-" + std::to_string(i), Json::object()));
  }
  ASSERT_TRUE(a->Start());
  for (int i = 0; i < kItems; ++i) {
    auto st = a->Await("f-" + std::to_string(i), 20'000);
    ASSERT_TRUE(st) << st.error().ToString();
    EXPECT_EQ(st->status, runtime::ExecutionStatus::kCompleted);
  }
  EXPECT_LE(t.peak.load(), 3);  // bodies in flight never above the App's limit
  a->Stop();
  EXPECT_TRUE(t.queue_store.Items("q", "", 100).value().empty());  // all completed
}

TEST(AppQueuesTest, ADedupKeyNamesTheHolderAndAStartedIdIsNotQueued) {
  QueuedNodes t;
  AppConfig c = t.Config("a");
  c.queues = &t.queue_store;  // not serving: items stay queued
  auto a = App::Create(c).value();
  t.RegisterCount(*a);
  ASSERT_TRUE(a->Start());
  ASSERT_TRUE(a->Enqueue("q", "count", "d-1", Json::object(), {.dedup_key = "user-3"}));
  auto refused = a->Enqueue("q", "count", "d-2", Json::object(), {.dedup_key = "user-3"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kAlreadyExists);
  ASSERT_NE(refused.error().As<AlreadyExistsDetail>(), nullptr);
  EXPECT_EQ(refused.error().As<AlreadyExistsDetail>()->execution_id, "d-1");
  EXPECT_TRUE(a->Enqueue("q", "count", "d-1", Json::object()).value().existing);
  auto direct = a->runtime().Start("count", "direct", Json::object());
  ASSERT_TRUE(direct) << direct.error().ToString();
  EXPECT_TRUE(a->Enqueue("q", "count", "direct", Json::object()).value().existing);
  EXPECT_EQ(t.queue_store.Items("q", "", 100).value().size(), 1u);  // d-1 only
  EXPECT_EQ(a->Enqueue("q", "count", "", Json::object()).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(a->Await("d-1", 20).error().code, ErrorCode::kTimeout);  // queued, never served
  EXPECT_EQ(a->Await("direct", 20).value().status, runtime::ExecutionStatus::kCompleted);
  a->Stop();
}

// Two nodes pass over one schedule at once, again and again: each tick is
// enqueued once, as "<name>@<tick>"; after a long outage only the newest
// schedule_catch_up_max missed ticks are.
TEST(AppQueuesTest, EachCronTickIsEnqueuedOnceAcrossNodesAndCatchUpIsBounded) {
  QueuedNodes t;
  AppConfig c{.store = &t.store, .clock = &t.clock, .rng = &t.rng};
  c.queues = &t.queue_store;
  c.schedule_catch_up_max = 5;
  auto a = App::Create(c).value();
  auto b = App::Create(c).value();
  EXPECT_EQ(a->Schedule("digest", "*/5 * *", "count").error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(a->Schedule("digest", "*/5 * * * *", "count", {.queue = "cron"}));
  ASSERT_TRUE(a->RunSchedules());  // new: its first tick is the next one
  EXPECT_TRUE(t.queue_store.Items("cron", "", 100).value().empty());
  const int64_t start_ms = t.clock.NowUnixMillis();
  for (int round = 0; round < 8; ++round) {  // 40 minutes, both nodes at once
    t.clock.Advance(std::chrono::minutes(5));
    auto on_b = std::async(std::launch::async, [&] { return b->RunSchedules(); });
    Status on_a = a->RunSchedules();
    ASSERT_TRUE(on_a) << on_a.error().ToString();
    ASSERT_TRUE(on_b.get());
  }
  auto items = t.queue_store.Items("cron", "", 100).value();
  ASSERT_EQ(items.size(), 8u);  // one per tick
  for (const auto& item : items) {
    EXPECT_EQ(item.execution_id.rfind("digest@", 0), 0u) << item.execution_id;
    int64_t tick = std::stoll(item.execution_id.substr(7));
    EXPECT_EQ(tick % 300'000, 0);
    EXPECT_GT(tick, start_ms);
  }
  // An outage of two hours: 24 ticks missed, the newest 5 enqueued.
  ASSERT_TRUE(t.queue_store.Complete([&] {
    std::vector<std::string> ids;
    for (const auto& item : items) ids.push_back(item.execution_id);
    return ids;
  }()));
  t.clock.Advance(std::chrono::hours(2));
  ASSERT_TRUE(b->RunSchedules());
  ASSERT_TRUE(a->RunSchedules());
  EXPECT_EQ(t.queue_store.Items("cron", "", 100).value().size(), 5u);
}

TEST(AppQueuesTest, ServingNeedsAQueueStoreAndANode) {
  QueuedNodes t;
  AppConfig c = t.Serving("a");
  c.queues = nullptr;
  EXPECT_EQ(App::Create(c).error().code, ErrorCode::kInvalidArgument);
  c = t.Serving("a");
  c.nodes = nullptr;
  EXPECT_EQ(App::Create(c).error().code, ErrorCode::kInvalidArgument);
  AppConfig plain{.store = &t.store, .clock = &t.clock, .rng = &t.rng};
  auto app = App::Create(plain).value();
  EXPECT_EQ(app->Enqueue("q", "count", "x", Json::object()).error().code, ErrorCode::kUnsupported);
}

// ---- Await: waiters, the end listener, the fallback to polling ----------

// An EndListener the test drives: up() as set, ends and up/down reported by
// hand (the PostgreSQL listener is tested in await_postgres_test.cc).
class DrivenEndListener final : public store::EndListener {
 public:
  void Start(store::EndHandlers handlers) override {
    std::lock_guard lock(mu_);
    handlers_ = std::move(handlers);
  }
  void Stop() override {}
  bool up() const override { return up_.load(); }
  void End(std::string_view id) {
    std::lock_guard lock(mu_);
    if (handlers_.on_end) handlers_.on_end(id);
  }
  void SetUp(bool up) {
    up_.store(up);
    std::lock_guard lock(mu_);
    if (handlers_.on_up) handlers_.on_up(up);
  }

 private:
  std::mutex mu_;
  store::EndHandlers handlers_;
  std::atomic<bool> up_{true};
};

struct AwaitFixture {
  AppFixture f;
  DrivenEndListener listener;
  store::ProfilingStore counted{f.store, f.clock};  // the App's: its reads are counted
  // Another node's runtime on the same store: its ends are not this App's.
  runtime::Runtime other{f.store, f.clock, {}};

  std::unique_ptr<App> Make(int64_t poll_ms, size_t waiters_max = 10'000) {
    AppConfig c = f.Config();
    c.store = &counted;
    c.end_listener = &listener;
    c.await_poll_interval_ms = poll_ms;
    c.await_waiters_max = waiters_max;
    return App::Create(std::move(c)).value();
  }
  AwaitFixture() {
    ONCE_CHECK(
        other
            .Register("one", [](runtime::Context&, const Json&) -> Result<Json> { return Json(1); })
            .has_value());
  }
  int64_t Reads() const {
    int64_t n = 0;
    for (const auto& [method, s] : counted.Snapshot()) n += s.calls;
    return n;
  }
  // Runs Await on a thread and returns once it has read the log `reads`
  // more times (the first read: it waits now); the caller ends the execution.
  std::future<Result<runtime::ExecutionState>> AwaitAsync(App& app, std::string id,
                                                          int64_t reads = 1) {
    const int64_t before = Reads();
    auto f = std::async(std::launch::async, [&app, id] { return app.Await(id, 60'000); });
    WaitForReads(before + reads);
    return f;
  }
  void WaitForReads(int64_t n) const {
    for (int i = 0; i < 30'000 && Reads() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

// With the listener up an Await reads the log only when woken: an end on
// another node is seen when the listener hears it, not by a poll (60 s).
TEST(AppAwaitTest, AnEndHeardByTheListenerWakesTheWaiter) {
  AwaitFixture t;
  auto app = t.Make(/*poll_ms=*/60'000);
  auto waiting = t.AwaitAsync(*app, "x");
  const int64_t reads = t.Reads();
  ASSERT_TRUE(t.other.Start("one", "x", Json::object()));
  t.listener.End("y");  // another id: this waiter sleeps on
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  EXPECT_EQ(t.Reads(), reads);  // no poll, no read
  t.listener.End("x");
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(waiting.get().value().status, runtime::ExecutionStatus::kCompleted);
}

// The listener going down turns every waiter to polling (ends are no longer
// heard); coming back up makes every waiter re-read (ends while it was down).
TEST(AppAwaitTest, AListenerDownFallsBackToPollingAndUpRereadsEveryWaiter) {
  AwaitFixture t;
  auto app = t.Make(/*poll_ms=*/20);
  auto waiting = t.AwaitAsync(*app, "x");
  const int64_t reads = t.Reads();
  t.listener.SetUp(false);
  t.WaitForReads(reads + 1);  // woken by the change, it read again, before the end
  ASSERT_TRUE(t.other.Start("one", "x", Json::object()));
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(waiting.get().value().status, runtime::ExecutionStatus::kCompleted);

  auto app2 = t.Make(/*poll_ms=*/60'000);
  t.listener.SetUp(true);
  auto second = t.AwaitAsync(*app2, "z");
  ASSERT_TRUE(t.other.Start("one", "z", Json::object()));  // not heard: the listener "was down"
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  t.listener.SetUp(true);  // a reconnection
  ASSERT_EQ(second.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(second.get().value().status, runtime::ExecutionStatus::kCompleted);
}

// await_waiters_max: one more Await is refused with the limit's name; the
// slot is free again once the waiter returns.
TEST(AppAwaitTest, AwaitersBeyondTheLimitAreRefused) {
  AwaitFixture t;
  auto app = t.Make(/*poll_ms=*/10, /*waiters_max=*/1);
  ASSERT_TRUE(app->runtime().Register(
      "one", [](runtime::Context&, const Json&) -> Result<Json> { return Json(1); }));
  auto waiting = t.AwaitAsync(*app, "x");  // holds the one slot
  Result<runtime::ExecutionState> refused = app->Await("y", 0);
  ASSERT_FALSE(refused);
  ASSERT_EQ(refused.error().code, ErrorCode::kLimitExceeded);
  ASSERT_NE(refused.error().As<LimitDetail>(), nullptr);
  EXPECT_EQ(refused.error().As<LimitDetail>()->limit, "await_waiters_max");
  ASSERT_TRUE(app->runtime().Start("one", "x", Json::object()));  // ends here: wakes it
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(waiting.get());
  EXPECT_EQ(app->Await("y", 0).error().code, ErrorCode::kTimeout);  // the slot is free
}

}  // namespace
}  // namespace once::orchestration
