// ChildSupervisor: the resume rule, the live re-drive, the flag, the pin.
// Each case runs on memory and on SQLite (a temp file).
#include "once/orchestration/child_supervisor.h"

#include <gtest/gtest.h>

#include "once/lifecycle/log_lifecycle.h"
#include "once/orchestration/runtime_waker.h"
#include "once/store_decorators/crypto_store.h"
#include "once/timers/memory_timer_store.h"
#include "test_support.h"

namespace once::orchestration {
namespace {

using events::Json;
using testing::Backend;
using testing::Count;
using testing::HookStore;
using timers::TimerService;

const std::string kChild = runtime::ChildExecutionId("p", "c1");

class SupervisorTest : public ::testing::TestWithParam<Backend> {
 public:
  runtime::RuntimeOptions RtOptions() {
    return {.on_error = [this](const Error& e) { rt_errors_.push_back(e); },
            .on_child_settled =
                [this](const Json& p) {
                  if (listener_) listener_->OnChildSettled(p);
                }};
  }
  // A runtime that leaves parent notification to a (here absent) supervisor.
  static runtime::RuntimeOptions Quiet() {
    return {.on_child_settled = [](const Json&) {}};
  }
  ChildSupervisorOptions SupOptions(bool redrive) {
    ChildSupervisorOptions o{.on_error = [this](const Error& e) { sup_errors_.push_back(e); }};
    if (redrive) o.redrive = RedriveWiring{&timers_, &service_};
    return o;
  }
  // Starts "parent" p (parks on c1; c1 parks on its sleep).
  void StartParent(const std::string& workflow = "parent") {
    Result<runtime::RunOutcome> out = rt_.Start(workflow, "p", 5);
    ASSERT_TRUE(out) << out.error().ToString();
    ASSERT_EQ(out->status, runtime::ExecutionStatus::kSuspended);
  }
  // Wakes c1, which completes (and notifies whoever listens).
  void SettleChild(const std::string& key = "c1") {
    Result<runtime::RunOutcome> out = rt_.Resume(runtime::ChildExecutionId("p", key));
    ASSERT_TRUE(out) << out.error().ToString();
    ASSERT_EQ(out->status, runtime::ExecutionStatus::kCompleted);
  }
  runtime::ExecutionStatus Status(std::string_view id) { return rt_.Inspect(id).value().status; }
  // A rival that acquires right after each of our successful acquires.
  void RivalBehindEveryAcquire(int budget) {
    rival_budget_ = budget;
    store_.after_acquire_if = [this](int, const store::ConditionalAcquire& got) {
      if (got.stale || rival_budget_ == 0) return;
      if (rival_budget_ > 0) --rival_budget_;
      ASSERT_TRUE(base_.get().AcquireFence("p"));
    };
  }

  ManualClock clock_;
  SeededRng rng_{7};
  testing::BaseStore base_{GetParam(), clock_};
  HookStore store_{base_.get()};
  timers::MemoryTimerStore timers_;
  std::vector<Error> rt_errors_, sup_errors_, svc_errors_;
  ChildSupervisor* listener_ = nullptr;
  int rival_budget_ = 0;  // -1: forever
  runtime::Runtime rt_{store_, clock_, RtOptions()};
  RuntimeWaker waker_{rt_};
  TimerService service_{
      timers_, waker_, clock_, rng_, {.owner = "n1", .on_error = [this](const Error& e) {
                                        svc_errors_.push_back(e);
                                      }}};
  void SetUp() override { testing::RegisterWorkflows(rt_); }
};

TEST_P(SupervisorTest, FirstTryIsUnfencedAndTakesNoToken) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(false));
  listener_ = &sup;
  StartParent();
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kSuspended);
  SettleChild();
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(rt_.Inspect("p").value().result["value"], 5);
  EXPECT_EQ(store_.acquire_if_calls, 0);
  EXPECT_EQ(base_.get().ReadFence("p").value(), 0);  // never fenced
  EXPECT_EQ(sup.stats().resumed, 1);
  EXPECT_EQ(sup.stats().conditional_resumes, 0);
  EXPECT_TRUE(sup_errors_.empty());
}

TEST_P(SupervisorTest, NothingHappensUntilEveryAwaitedChildIsTerminal) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(false));
  StartParent("group");
  EXPECT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kNoop);
  SettleChild("c1");
  EXPECT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kNoop);  // c2 still sleeps
  SettleChild("c2");
  EXPECT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kResumed);
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kNoop);  // already answered
  EXPECT_EQ(Count(base_.get(), "p", "EXECUTION_RESUMED"), 1);
}

TEST_P(SupervisorTest, DeadAcquirerIsOvercomeByTheConditionalResume) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(false));
  listener_ = &sup;
  StartParent();
  ASSERT_EQ(base_.get().AcquireFence("p").value(), 1);  // acquired, never appended
  SettleChild();
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(sup.stats().conditional_resumes, 1);  // the unfenced try was stale
  // The unfenced try's stale fence named the current token: {1, park} at
  // once (the park's own token, 0, is stale forever).
  EXPECT_EQ(store_.acquire_if_calls, 1);
  EXPECT_EQ(Count(base_.get(), "p", "EXECUTION_RESUMED"), 1);
  EXPECT_TRUE(sup_errors_.empty());
}

// Two supervisors (two nodes: two runtimes on one store) race a fenced
// parent. B runs start to finish inside A's resume: before A's first
// conditional acquire, or between A's acquire and A's append.
void RaceTwoSupervisors(SupervisorTest& t, bool between);

TEST_P(SupervisorTest, TwoSupervisorsRacingAFencedParentBeforeTheAcquire) {
  RaceTwoSupervisors(*this, false);
}
TEST_P(SupervisorTest, TwoSupervisorsRacingAFencedParentBetweenAcquireAndAppend) {
  RaceTwoSupervisors(*this, true);
}

TEST_P(SupervisorTest, RivalBehindEveryAcquireGivesThreeConditionalTriesThenOnError) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(false));
  StartParent();
  SettleChild();
  ASSERT_TRUE(base_.get().AcquireFence("p"));  // so the unfenced first try is stale
  RivalBehindEveryAcquire(-1);
  auto before = testing::Log(base_.get(), "p");
  EXPECT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kContended);
  EXPECT_EQ(sup.stats().conditional_resumes, 3);
  ASSERT_EQ(sup_errors_.size(), 1u);
  EXPECT_EQ(sup_errors_[0].code, ErrorCode::kResumeContended);
  EXPECT_EQ(sup_errors_[0].subject, "p");
  EXPECT_EQ(sup_errors_[0].As<ResumeContendedDetail>()->attempts, 3);
  EXPECT_EQ(testing::Log(base_.get(), "p"), before);  // nothing appended
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kSuspended);
}

TEST_P(SupervisorTest, FlagOffWritesNoRowAndSendsTheContendedResumeToOnError) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(/*redrive=*/false));
  StartParent();
  SettleChild();
  ASSERT_TRUE(base_.get().AcquireFence("p"));
  RivalBehindEveryAcquire(-1);
  EXPECT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kContended);
  EXPECT_TRUE(timers_.Due(clock_.NowUnixMillis() + 3'600'000, 100, true).value().empty());
  EXPECT_EQ(sup.stats().redrive_rows_written, 0);
  ASSERT_EQ(sup_errors_.size(), 1u);
  EXPECT_EQ(sup_errors_[0].code, ErrorCode::kResumeContended);
  // Recover() is the way out once the rival is gone.
  store_.after_acquire_if = nullptr;
  runtime::RecoverReport report = rt_.Recover().value();
  EXPECT_EQ(report.notified, 1u);
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kCompleted);
}

TEST_P(SupervisorTest, StoreWithoutFenceIfKeepsTheTwoAcquisitionLoop) {
  testing::NoFenceIfStore plain(base_.get());
  struct Counter final : store::EventStoreWrapper<Counter, store::ForwardEverything> {
    using EventStoreWrapper::EventStoreWrapper;
    int acquires = 0;
    Result<int64_t> AcquireFence(std::string_view id) override {
      ++acquires;
      Result<int64_t> r = target().AcquireFence(id);
      if (rival) (void)rival_store->AcquireFence(id);  // fences right behind
      return r;
    }
    bool rival = false;
    store::EventStore* rival_store = nullptr;
  } counting(plain);
  counting.rival_store = &base_.get();
  runtime::Runtime rt(counting, clock_, Quiet());
  testing::RegisterWorkflows(rt);
  ChildSupervisor sup(rt, clock_, rng_, SupOptions(false));
  ASSERT_TRUE(rt.Start("parent", "p", 5));
  ASSERT_TRUE(rt.Resume(kChild));
  ASSERT_TRUE(base_.get().AcquireFence("p"));
  counting.acquires = 0;
  counting.rival = true;
  EXPECT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kContended);
  EXPECT_EQ(counting.acquires, 2);
  ASSERT_EQ(sup_errors_.size(), 1u);
  EXPECT_EQ(sup_errors_[0].As<ResumeContendedDetail>()->attempts, 2);
  counting.rival = false;
  EXPECT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kResumed);
  EXPECT_EQ(rt.Inspect("p").value().status, runtime::ExecutionStatus::kCompleted);
}

// The live re-drive: a contended resume leaves a re-drive row, the
// TimerService fires it with backoff, and the parent completes. No
// Recover() anywhere.
TEST_P(SupervisorTest, LiveRedriveCompletesWithNoRecover) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(/*redrive=*/true));
  listener_ = &sup;
  StartParent();
  ASSERT_TRUE(base_.get().AcquireFence("p"));
  // The rival outlasts the first resume (3 tries) and the first re-drive (3).
  RivalBehindEveryAcquire(6);
  SettleChild();
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kSuspended);
  auto rows = timers_.RowsOf("p").value();
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_TRUE(rows[0].redrive.has_value());
  EXPECT_EQ(rows[0].redrive->attempt, 0);
  EXPECT_TRUE(sup_errors_.empty());  // handed to the re-driver, not to an operator
  for (int i = 0; i < 200 && Status("p") != runtime::ExecutionStatus::kCompleted; ++i) {
    clock_.Advance(std::chrono::milliseconds(100));
    ASSERT_TRUE(service_.PollOnce());
  }
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(rt_.Inspect("p").value().result["value"], 5);
  EXPECT_EQ(Count(base_.get(), "p", "EXECUTION_RESUMED"), 1);
  EXPECT_EQ(service_.stats().redrive_rows_written, 1);  // attempt 1, after the contended one
  EXPECT_TRUE(timers_.RowsOf("p").value().empty());
  EXPECT_TRUE(svc_errors_.empty());
  EXPECT_TRUE(sup_errors_.empty());
}

TEST_P(SupervisorTest, RedriveExhaustionReportsOnceAndLeavesTheParentParked) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(true));
  listener_ = &sup;
  StartParent();
  ASSERT_TRUE(base_.get().AcquireFence("p"));
  RivalBehindEveryAcquire(-1);
  SettleChild();
  for (int i = 0; i < 100 && !timers_.RowsOf("p").value().empty(); ++i) {
    clock_.Advance(std::chrono::seconds(31));
    ASSERT_TRUE(service_.PollOnce());
  }
  EXPECT_TRUE(timers_.RowsOf("p").value().empty());
  ASSERT_EQ(svc_errors_.size(), 1u);
  EXPECT_EQ(svc_errors_[0].code, ErrorCode::kRedriveExhausted);
  EXPECT_EQ(svc_errors_[0].subject, "p");
  EXPECT_EQ(service_.stats().exhausted, 1);
  EXPECT_EQ(service_.stats().redrive_rows_written, 7);  // attempts 1..7 after row 0
  EXPECT_TRUE(sup_errors_.empty());
  EXPECT_EQ(Status("p"), runtime::ExecutionStatus::kSuspended);
  EXPECT_EQ(Count(base_.get(), "p", "EXECUTION_RESUMED"), 0);
}

// ---- The pin (D3) ------------------------------------------------------------

TEST_P(SupervisorTest, PinParkedThenAnswered) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(false));
  lifecycle::PinPredicate pin = PinParkedChildren(sup);
  StartParent();
  EXPECT_TRUE(pin(kChild).value());  // running child, parent parked on it
  SettleChild();
  EXPECT_TRUE(pin(kChild).value());  // finished, parent still parked on it
  ASSERT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kResumed);
  EXPECT_FALSE(pin(kChild).value());  // answered (and terminal)
  EXPECT_FALSE(pin("p").value());     // not a child
  EXPECT_FALSE(pin("nobody").value());
}

TEST_P(SupervisorTest, PinReleasedWhenTheParentIsTerminal) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(false));
  StartParent();
  SettleChild();
  ASSERT_TRUE(sup.ParkedOnChild(kChild).value());
  ASSERT_TRUE(rt_.Cancel("p", "operator"));
  EXPECT_FALSE(sup.ParkedOnChild(kChild).value());
}

TEST_P(SupervisorTest, PinCoversGroupMembersButNotADifferentKey) {
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(false));
  StartParent("group");
  SettleChild("c1");
  EXPECT_TRUE(sup.ParkedOnChild(runtime::ChildExecutionId("p", "c1")).value());
  EXPECT_TRUE(sup.ParkedOnChild(runtime::ChildExecutionId("p", "c2")).value());

  ASSERT_TRUE(rt_.Start("two", "q", 1));  // parked on c2 only
  ASSERT_TRUE(rt_.Resume(runtime::ChildExecutionId("q", "c1")));
  EXPECT_FALSE(sup.ParkedOnChild(runtime::ChildExecutionId("q", "c1")).value());
  EXPECT_TRUE(sup.ParkedOnChild(runtime::ChildExecutionId("q", "c2")).value());
}

// A child log from before EXECUTION_STARTED carried `parent`: the edge comes
// from the supervisor's state, which a restarted node rebuilds.
TEST_P(SupervisorTest, PinAfterARestartComesFromTheRebuiltSupervisor) {
  using events::KernelEvent;
  using events::KernelKind;
  store::EventStore& s = base_.get();
  const std::string child = runtime::ChildExecutionId("old", "k");
  ASSERT_TRUE(s.Append(
      {.execution_id = child,
       .expected_next = 1,
       .events = {KernelEvent(KernelKind::kExecutionStarted, {{"workflow", "child"}, {"input", 1}}),
                  KernelEvent(KernelKind::kExecutionCompleted, {{"value", 1}})}}));
  ASSERT_TRUE(s.Append(
      {.execution_id = "old",
       .expected_next = 1,
       .events = {
           KernelEvent(KernelKind::kExecutionStarted, {{"workflow", "parent"}, {"input", 1}}),
           KernelEvent(KernelKind::kChildStarted,
                       {{"key", "k"}, {"workflow", "child"}, {"child_id", child}}),
           KernelEvent(KernelKind::kExecutionSuspended,
                       {{"call", "await_child"},
                        {"waits", Json::array({{{"type", "child"}, {"key", "k"}}})}})}}));
  ChildSupervisor restarted(rt_, clock_, rng_, SupOptions(false));
  EXPECT_FALSE(restarted.ParkedOnChild(child).value());  // no edge known yet
  EXPECT_GE(restarted.Rebuild().value(), 1u);
  EXPECT_TRUE(restarted.ParkedOnChild(child).value());
}

TEST_P(SupervisorTest, AFinishedChildIsArchivableAgainOnceItsParentIsAnswered) {
  store::MemoryEventStore archive(store::Limits{}, clock_);
  ChildSupervisor sup(rt_, clock_, rng_, SupOptions(false));
  lifecycle::LogLifecycle lifecycle(
      base_.get(), clock_,
      {.policy = {.age_ms_min = 60'000, .mode = lifecycle::RetentionMode::kArchive},
       .archive = &archive,
       .pinned = PinParkedChildren(sup)});
  StartParent();
  SettleChild();
  clock_.Advance(std::chrono::minutes(2));
  lifecycle::RetentionReport r = lifecycle.ApplyRetention().value();
  EXPECT_EQ(r.eligible, 1u);
  EXPECT_EQ(r.pinned, 1u);
  EXPECT_GT(base_.get().Head(kChild).value(), 0);  // left exactly where it is
  EXPECT_EQ(archive.Head(kChild).value(), 0);

  ASSERT_EQ(sup.ResumeParent("p").value(), SuperviseVerdict::kResumed);
  clock_.Advance(std::chrono::minutes(2));
  r = lifecycle.ApplyRetention().value();
  EXPECT_EQ(r.pinned, 0u);
  EXPECT_EQ(r.archived, 2u);  // the child, and the finished parent
  EXPECT_EQ(base_.get().Head(kChild).value(), 0);
  EXPECT_GT(archive.Head(kChild).value(), 0);
}

TEST_P(SupervisorTest, AShreddedLogIsNotPinnedAndAnyOtherReadFailureFailsTheRun) {
  store::MemoryKeyVault vault;
  store::CryptoStore crypto(base_.get(), vault);
  testing::FailingReadStore failing(crypto);
  runtime::Runtime rt(failing, clock_, Quiet());
  testing::RegisterWorkflows(rt);
  ChildSupervisor sup(rt, clock_, rng_, SupOptions(false));
  ASSERT_TRUE(rt.Start("parent", "p", 5));
  ASSERT_TRUE(rt.Resume(kChild));
  EXPECT_TRUE(sup.ParkedOnChild(kChild).value());

  failing.fail_id = "p";
  Result<bool> failed = sup.ParkedOnChild(kChild);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::kUnavailable);
  clock_.Advance(std::chrono::minutes(2));
  lifecycle::LogLifecycle lifecycle(
      base_.get(), clock_, {.policy = {.age_ms_min = 60'000}, .pinned = PinParkedChildren(sup)});
  ASSERT_FALSE(lifecycle.ApplyRetention());
  EXPECT_GT(base_.get().Head(kChild).value(), 0);  // kept
  failing.fail_id.clear();

  ASSERT_TRUE(vault.Shred("p"));  // the parent's payloads are gone for good
  EXPECT_FALSE(sup.ParkedOnChild(kChild).value());
  ASSERT_TRUE(vault.Shred(kChild));
  EXPECT_FALSE(sup.ParkedOnChild(kChild).value());
}

void RaceTwoSupervisors(SupervisorTest& t, bool between) {
  runtime::Runtime rt_b(t.store_, t.clock_, SupervisorTest::Quiet());
  testing::RegisterWorkflows(rt_b);
  ChildSupervisor a(t.rt_, t.clock_, t.rng_, t.SupOptions(false));
  ChildSupervisor b(rt_b, t.clock_, t.rng_, t.SupOptions(false));
  ASSERT_NO_FATAL_FAILURE(t.StartParent());
  ASSERT_TRUE(t.base_.get().AcquireFence("p"));  // the parent is fenced
  ASSERT_NO_FATAL_FAILURE(t.SettleChild());      // nobody listens
  Result<SuperviseVerdict> b_verdict;
  bool b_ran = false;
  auto run_b = [&] {
    if (b_ran) return;
    b_ran = true;
    b_verdict = b.ResumeParent("p");
  };
  t.store_.before_acquire_if = [&](int) {
    if (!between) run_b();
  };
  t.store_.after_acquire_if = [&](int, const store::ConditionalAcquire& got) {
    if (between && !got.stale) run_b();
  };
  Result<SuperviseVerdict> a_verdict = a.ResumeParent("p");
  t.store_.before_acquire_if = nullptr;
  t.store_.after_acquire_if = nullptr;
  ASSERT_TRUE(b_ran);
  ASSERT_TRUE(a_verdict) << a_verdict.error().ToString();
  ASSERT_TRUE(b_verdict) << b_verdict.error().ToString();
  EXPECT_EQ(*b_verdict, SuperviseVerdict::kResumed);
  EXPECT_EQ(*a_verdict, SuperviseVerdict::kNoop);
  EXPECT_EQ(Count(t.base_.get(), "p", "EXECUTION_RESUMED"), 1);
  // The winner's body was never fenced out: it ran to the end.
  EXPECT_EQ(t.Status("p"), runtime::ExecutionStatus::kCompleted);
  EXPECT_TRUE(t.sup_errors_.empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, SupervisorTest,
                         ::testing::Values(Backend::kMemory, Backend::kSqlite),
                         testing::BackendName);

}  // namespace
}  // namespace once::orchestration
