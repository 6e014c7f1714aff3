// App: one config wires runtime, timers, supervisor, inbox and lifecycle.
#include "once/orchestration/app.h"

#include <gtest/gtest.h>

#include "once/store/memory_store.h"
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

TEST(AppTest, TheInboxStoreIsBuiltOnTheBackendWhenNoneIsGiven) {
  AppFixture f;
  AppConfig c = f.Config();
  c.inbox = nullptr;
  EXPECT_EQ(App::Create(c).value()->inbox(), nullptr);  // no store, no backend: no inbox
  c.backend = AppBackend{};                             // memory
  c.inbox_limits.pending_messages_per_execution_max = 1;
  auto app = App::Create(c).value();
  ASSERT_NE(app->inbox_store(), nullptr);
  EXPECT_NE(dynamic_cast<MemoryInboxStore*>(app->inbox_store()), nullptr);
  EXPECT_EQ(app->inbox_store()->limits().pending_messages_per_execution_max, 1u);
  ASSERT_TRUE(app->inbox()->Send("r", "approve", "ok"));
  EXPECT_EQ(app->inbox()->Send("r", "approve", "ok").error().code, ErrorCode::kLimitExceeded);
  // A backend that does not open fails Create with the store's error.
  c.backend = AppBackend{.kind = AppBackend::Kind::kSqlite, .sqlite_path = ""};
  EXPECT_EQ(App::Create(c).error().code, ErrorCode::kInvalidArgument);
  // A store given explicitly wins over the backend.
  c = f.Config();
  c.backend = AppBackend{.kind = AppBackend::Kind::kSqlite, .sqlite_path = ""};
  EXPECT_EQ(App::Create(c).value()->inbox_store(), &f.inbox);
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
  bool rival = true;
  bool fenced_at_park = false;
  std::unique_ptr<App> app;

  explicit ParkTimeContention(bool redrive) {
    AppConfig c = f.Config();
    c.store = &hook;
    c.features.redrive = redrive;
    c.runtime.on_error = [this](const Error& e) { errors.push_back(e); };
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
}

}  // namespace
}  // namespace once::orchestration
