// RuntimeWaker and ParkTimers: timer rows written at the park, fired into
// the runtime under the conditional fence.
#include "once/orchestration/runtime_waker.h"

#include <gtest/gtest.h>

#include "once/timers/memory_timer_store.h"
#include "test_support.h"

namespace once::orchestration {
namespace {

using events::Json;
using testing::Backend;
using testing::HookStore;
using timers::WakeVerdict;

class WakerTest : public ::testing::TestWithParam<Backend> {
 protected:
  runtime::RuntimeOptions RtOptions() {
    return {.on_park = [this](const std::string& id, int64_t seq, const store::Envelope& park) {
      if (hook_on) park_timers_.OnPark(id, seq, park);
    }};
  }
  void SetUp() override {
    if (std::string why = base_.SkipReason(); !why.empty()) GTEST_SKIP() << why;
    testing::RegisterWorkflows(rt_);
  }
  runtime::ExecutionStatus Status(std::string_view id) { return rt_.Inspect(id).value().status; }

  ManualClock clock_;
  SeededRng rng_{3};
  testing::BaseStore base_{GetParam(), clock_};
  HookStore store_{base_.get()};
  timers::MemoryTimerStore timers_;
  std::vector<Error> errors_;
  ParkTimers park_timers_{store_, timers_, [this](const Error& e) { errors_.push_back(e); }};
  bool hook_on = true;
  runtime::Runtime rt_{store_, clock_, RtOptions()};
  RuntimeWaker waker_{rt_};
  timers::TimerService service_{
      timers_, waker_, clock_, rng_, {.owner = "n1", .on_error = [this](const Error& e) {
                                        errors_.push_back(e);
                                      }}};
};

TEST_P(WakerTest, AParkWritesItsRowAndTheServiceWakesItUnderTheFence) {
  int64_t t0 = clock_.NowUnixMillis();
  ASSERT_TRUE(rt_.Start("sleeper", "s", Json()));
  auto rows = timers_.RowsOf("s").value();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].wake_at_ms, t0 + 1000);
  EXPECT_FALSE(rows[0].redrive.has_value());
  EXPECT_EQ(service_.PollOnce().value(), 0u);  // not due
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_EQ(service_.PollOnce().value(), 1u);
  EXPECT_EQ(service_.stats().resumed, 1);
  EXPECT_EQ(base_.get().ReadFence("s").value(), 1);  // resumed with fence_if_parked_at
  rows = timers_.RowsOf("s").value();                // the second sleep's row
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].wake_at_ms, t0 + 2000);
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_EQ(service_.PollOnce().value(), 1u);
  EXPECT_EQ(Status("s"), runtime::ExecutionStatus::kCompleted);
  EXPECT_TRUE(timers_.RowsOf("s").value().empty());
  EXPECT_TRUE(errors_.empty());
}

// A body woken by a timer that parks again on the same instant writes its
// new park into the row being fired (one row per id and instant): the
// retire of the first wake must spare it, or the second sleep waits for the
// next boot sweep.
TEST_P(WakerTest, ASecondSleepUntilTheSameInstantStillWakes) {
  ASSERT_TRUE(
      rt_.Register("twice_until", [](runtime::Context& ctx, const Json& in) -> Result<Json> {
        TimePoint at = FromUnixMillis(in.get<int64_t>());
        ONCE_RETURN_IF_ERROR(ctx.SleepUntil(at));
        ONCE_RETURN_IF_ERROR(ctx.SleepUntil(at));
        return "woke twice";
      }));
  int64_t at = clock_.NowUnixMillis() + 1000;
  ASSERT_TRUE(rt_.Start("twice_until", "u", Json(at)));
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_EQ(service_.PollOnce().value(), 1u);
  auto rows = timers_.RowsOf("u").value();  // the second park's row, same instant
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].wake_at_ms, at);
  EXPECT_EQ(service_.PollOnce().value(), 1u);  // not held by the first wake's lease
  EXPECT_EQ(Status("u"), runtime::ExecutionStatus::kCompleted);
  EXPECT_TRUE(timers_.RowsOf("u").value().empty());
  EXPECT_TRUE(errors_.empty());
}

TEST_P(WakerTest, AWakeForAnotherTimerOrNoParkIsObsolete) {
  ASSERT_TRUE(rt_.Start("sleeper", "s", Json()));
  int64_t wake = timers_.RowsOf("s").value()[0].wake_at_ms;
  clock_.Advance(std::chrono::seconds(1));  // the second sleep wakes later
  EXPECT_EQ(waker_.Wake({"s", wake + 5, std::nullopt}).value(), WakeVerdict::kObsolete);
  EXPECT_EQ(waker_.Wake({"nobody", wake, std::nullopt}).value(), WakeVerdict::kObsolete);
  EXPECT_EQ(base_.get().ReadFence("s").value(), 0);  // no token taken for either
  EXPECT_EQ(Status("s"), runtime::ExecutionStatus::kSuspended);
  EXPECT_EQ(waker_.Wake({"s", wake, std::nullopt}).value(), WakeVerdict::kResumed);
  // The first timer's park is answered: its row, fired again, is obsolete.
  EXPECT_EQ(waker_.Wake({"s", wake, std::nullopt}).value(), WakeVerdict::kObsolete);
  EXPECT_EQ(testing::Count(base_.get(), "s", "EXECUTION_RESUMED"), 1);
}

TEST_P(WakerTest, DeadAcquirersBeforeEveryTryAreContendedAndTheRowStays) {
  ASSERT_TRUE(rt_.Start("sleeper", "s", Json()));
  int64_t wake = timers_.RowsOf("s").value()[0].wake_at_ms;
  store_.before_acquire_if = [&](int) { ASSERT_TRUE(base_.get().AcquireFence("s")); };
  EXPECT_EQ(waker_.Wake({"s", wake, std::nullopt}).value(), WakeVerdict::kContended);
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(service_.PollOnce());
  EXPECT_EQ(service_.stats().contended, 1);
  EXPECT_EQ(timers_.RowsOf("s").value().size(), 1u);  // deferred, not retired
  store_.before_acquire_if = nullptr;
  for (int i = 0; i < 50 && Status("s") == runtime::ExecutionStatus::kSuspended &&
                  testing::Count(base_.get(), "s", "EXECUTION_RESUMED") == 0;
       ++i) {
    clock_.Advance(std::chrono::milliseconds(100));
    ASSERT_TRUE(service_.PollOnce());
  }
  EXPECT_EQ(testing::Count(base_.get(), "s", "EXECUTION_RESUMED"), 1);
}

TEST_P(WakerTest, SweepWritesTheRowsAParkHookMissed) {
  hook_on = false;  // a crash between the durable park and its row
  ASSERT_TRUE(rt_.Start("sleeper", "s", Json()));
  ASSERT_TRUE(rt_.Start("receiver", "r", Json()));
  EXPECT_TRUE(timers_.RowsOf("s").value().empty());
  EXPECT_EQ(park_timers_.Sweep().value(), 1u);  // the receiver has no timer
  EXPECT_EQ(timers_.RowsOf("s").value().size(), 1u);
  EXPECT_EQ(park_timers_.Sweep().value(), 1u);  // idempotent: still one row
  EXPECT_EQ(timers_.RowsOf("s").value().size(), 1u);
}

// A wake reads the log once: the park is found in that read and the resume
// takes it over (Runtime::ResumeWithLog). On a fencing store the tail under
// the new token comes with the acquire; on one that does not fence the
// resume reads the tail past the log in hand (no events when none landed).
TEST_P(WakerTest, AWakeReadsTheLogOnce) {
  testing::ReadCountingStore counting(base_.get());
  runtime::Runtime rt(counting, clock_);
  testing::RegisterWorkflows(rt);
  RuntimeWaker waker(rt);
  int64_t t0 = clock_.NowUnixMillis();
  ASSERT_TRUE(rt.Start("sleeper", "w", Json()));
  const bool fences = base_.get().Supports(store::Capability::kAcquireFenceIfReadTail);
  for (int64_t wake : {t0 + 1000, t0 + 2000}) {
    clock_.Advance(std::chrono::seconds(1));
    const int log_events = static_cast<int>(testing::Log(base_.get(), "w").size());
    counting.reads = 0;
    counting.events_read = 0;
    ASSERT_EQ(waker.Wake({"w", wake, std::nullopt}).value(), WakeVerdict::kResumed);
    EXPECT_EQ(counting.events_read, log_events) << wake;  // each event read once
    EXPECT_EQ(counting.reads, fences ? 1 : 2) << wake;
  }
  EXPECT_EQ(rt.Inspect("w").value().status, runtime::ExecutionStatus::kCompleted);
}

// A row written at the park carries the park (its sequence and token), so a
// wake answers first (Runtime::Resume with park_fence): one read of the
// log, then the run's appends, the first of them the conditional step; no
// token is taken.
class CarriedParkTest : public WakerTest {
 protected:
  CarriedParkTest() { testing::RegisterWorkflows(rt_counting_); }
  std::vector<timers::TimerRow> Rows(std::string_view id) { return timers_.RowsOf(id).value(); }
  int64_t Fence(std::string_view id) { return base_.get().ReadFence(id).value(); }
  int Resumes(std::string_view id) { return testing::Count(base_.get(), id, "EXECUTION_RESUMED"); }

  testing::ReadCountingStore counting_{base_.get()};
  runtime::Runtime rt_counting_{counting_, clock_, RtOptions()};
  RuntimeWaker counting_waker_{rt_counting_};
};

TEST_P(CarriedParkTest, AWakeAnswersFirstWithOneReadAndNoToken) {
  int64_t t0 = clock_.NowUnixMillis();
  ASSERT_TRUE(rt_counting_.Start("sleeper", "w", Json()));
  for (int64_t wake : {t0 + 1000, t0 + 2000}) {
    std::vector<timers::TimerRow> rows = Rows("w");
    ASSERT_EQ(rows.size(), 1u);
    ASSERT_TRUE(rows[0].park.has_value()) << "the row carries its park";
    const store::Envelope park = testing::Log(base_.get(), "w").back();
    EXPECT_EQ(rows[0].park->sequence, park.sequence);
    EXPECT_EQ(rows[0].park->fence, park.fence());
    ASSERT_TRUE(timers_.CompleteMany(std::vector<timers::TimerKey>{rows[0].key()}));
    clock_.Advance(std::chrono::seconds(1));
    counting_.reads = 0;
    ASSERT_EQ(counting_waker_.Wake(rows[0]).value(), WakeVerdict::kResumed) << wake;
    EXPECT_EQ(counting_.reads, 1) << wake;
  }
  EXPECT_EQ(rt_counting_.Inspect("w").value().status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(Fence("w"), 0);  // no token taken
  EXPECT_TRUE(errors_.empty());
}

TEST_P(CarriedParkTest, ARowOfAnAnsweredParkIsObsoleteAndTakesNoToken) {
  ASSERT_TRUE(rt_counting_.Start("sleeper", "s", Json()));
  timers::TimerRow first = Rows("s").at(0);
  ASSERT_TRUE(timers_.CompleteMany(std::vector<timers::TimerKey>{first.key()}));
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_EQ(counting_waker_.Wake(first).value(), WakeVerdict::kResumed);
  ASSERT_EQ(Fence("s"), 0);
  // Fired again (a retire lost to a crash): the park is answered.
  EXPECT_EQ(counting_waker_.Wake(first).value(), WakeVerdict::kObsolete);
  EXPECT_EQ(Fence("s"), 0);
  EXPECT_EQ(Resumes("s"), 1);
  EXPECT_EQ(rt_counting_.Inspect("s").value().status, runtime::ExecutionStatus::kSuspended);
}

// The key (id, wake) is shared by every park of that instant; a row still
// naming an older park wakes the open one that waits on the same instant.
TEST_P(CarriedParkTest, ARowNamingAnOlderParkWakesTheOpenParkOfItsInstant) {
  ASSERT_TRUE(rt_counting_.Start("sleeper", "s", Json()));
  timers::TimerRow row = Rows("s").at(0);
  row.park = timers::TimerPark{1, 0};  // EXECUTION_STARTED: answered by the park after it
  EXPECT_EQ(counting_waker_.Wake(row).value(), WakeVerdict::kResumed);
  EXPECT_EQ(Resumes("s"), 1);
  EXPECT_EQ(Fence("s"), 1);  // the stale acquire moved nothing
}

// A token moved by a resumer that died after its acquire: the answer under
// the carried token is refused before any step, the log read again shows
// the park still open, and the conditional acquire expects the current
// token the refusal reported.
TEST_P(CarriedParkTest, ADeadAcquirerBeforeTheWakeCostsTheAcquire) {
  ASSERT_TRUE(rt_counting_.Start("sleeper", "s", Json()));
  timers::TimerRow row = Rows("s").at(0);
  ASSERT_EQ(base_.get().AcquireFence("s").value(), 1);
  counting_.reads = 0;
  EXPECT_EQ(counting_waker_.Wake(row).value(), WakeVerdict::kResumed);
  EXPECT_EQ(counting_.reads, 2);  // the answer's read, the read after its refusal
  EXPECT_EQ(Fence("s"), 2);
  EXPECT_EQ(Resumes("s"), 1);
  // The second park was written under token 2, and its row says so.
  EXPECT_EQ(Rows("s").back().park->fence, 2);
}

INSTANTIATE_TEST_SUITE_P(Backends, CarriedParkTest, ::testing::ValuesIn(testing::InboxBackends()),
                         testing::BackendName);

INSTANTIATE_TEST_SUITE_P(Backends, WakerTest, ::testing::ValuesIn(testing::InboxBackends()),
                         testing::BackendName);

}  // namespace
}  // namespace once::orchestration
