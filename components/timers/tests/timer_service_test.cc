#include "once/timers/timer_service.h"

#include <gtest/gtest.h>

#include <deque>

#include "once/timers/memory_timer_store.h"

namespace once::timers {
namespace {

// The runtime side, scripted: answers the queued verdicts in order.
class ScriptedWaker final : public Waker {
 public:
  Result<WakeVerdict> Wake(const TimerRow& row) override {
    calls.push_back(row);
    if (answers.empty()) return WakeVerdict::kResumed;
    WakeVerdict v = answers.front();
    answers.pop_front();
    return v;
  }
  std::deque<WakeVerdict> answers;
  std::vector<TimerRow> calls;
};

class ScriptedRedriver final : public Redriver {
 public:
  explicit ScriptedRedriver(RedriveAnswer always) : always_(always) {}
  Result<RedriveAnswer> Redrive(const TimerRow& row) override {
    calls.push_back(row);
    if (fail) return MakeError(ErrorCode::kUnavailable, "store down");
    return always_;
  }
  RedriveAnswer always_;
  bool fail = false;
  std::vector<TimerRow> calls;
};

struct Fixture {
  ManualClock clock{FromUnixMillis(1'000'000)};
  SeededRng rng{42};
  MemoryTimerStore timers;
  ScriptedWaker waker;
  std::vector<Error> errors;
  TimerService service{timers, waker, clock, rng,
                       TimerServiceOptions{.owner = "n1", .on_error = [this](const Error& e) {
                                             errors.push_back(e);
                                           }}};
  int64_t now() const { return clock.NowUnixMillis(); }
};

TEST(TimerServiceTest, FiresDueRowsAndRetiresThem) {
  Fixture f;
  ASSERT_TRUE(f.timers.Schedule({"a", f.now() - 1, std::nullopt}));
  ASSERT_TRUE(f.timers.Schedule({"b", f.now() + 1000, std::nullopt}));
  EXPECT_EQ(f.service.PollOnce().value(), 1u);
  EXPECT_EQ(f.waker.calls.size(), 1u);
  EXPECT_TRUE(f.timers.RowsOf("a").value().empty());
  EXPECT_EQ(f.timers.RowsOf("b").value().size(), 1u);
  f.clock.Advance(std::chrono::seconds(1));
  EXPECT_EQ(f.service.PollOnce().value(), 1u);
  EXPECT_TRUE(f.timers.RowsOf("b").value().empty());
}

TEST(TimerServiceTest, ContendedWakeBacksOffInProcessThenReportsOnce) {
  Fixture f;
  for (int i = 0; i < 20; ++i) f.waker.answers.push_back(WakeVerdict::kContended);
  ASSERT_TRUE(f.timers.Schedule({"a", f.now(), std::nullopt}));
  int wakes_seen = 0;
  for (int step = 0; step < 2000 && f.errors.empty(); ++step) {
    ASSERT_TRUE(f.service.PollOnce());
    f.clock.Advance(std::chrono::milliseconds(50));
    wakes_seen = static_cast<int>(f.waker.calls.size());
  }
  // No acquire storm: exactly max_attempts wakes, then one exhaustion.
  EXPECT_EQ(wakes_seen, 8);
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].code, ErrorCode::kRedriveExhausted);
  EXPECT_TRUE(f.timers.RowsOf("a").value().empty());
  EXPECT_EQ(f.service.backoff_entries(), 0u);
  for (int i = 0; i < 10; ++i) f.service.PollOnce();
  EXPECT_EQ(f.errors.size(), 1u);
}

TEST(TimerServiceTest, ContendedThenResumedClearsTheBackoff) {
  Fixture f;
  f.waker.answers = {WakeVerdict::kContended, WakeVerdict::kResumed};
  ASSERT_TRUE(f.timers.Schedule({"a", f.now(), std::nullopt}));
  ASSERT_TRUE(f.service.PollOnce());
  EXPECT_EQ(f.service.backoff_entries(), 1u);
  f.clock.Advance(std::chrono::seconds(31));
  ASSERT_TRUE(f.service.PollOnce());
  EXPECT_EQ(f.waker.calls.size(), 2u);
  EXPECT_EQ(f.service.backoff_entries(), 0u);
  EXPECT_TRUE(f.timers.RowsOf("a").value().empty());
}

TEST(TimerServiceTest, NoRedriverLeavesRedriveRowsAlone) {
  Fixture f;
  ASSERT_TRUE(f.timers.Schedule({"r", f.now() - 5, Redrive{0}}));
  ASSERT_TRUE(f.timers.Schedule({"p", f.now(), std::nullopt}));
  EXPECT_EQ(f.service.PollOnce().value(), 1u);
  EXPECT_EQ(f.waker.calls.size(), 1u);
  EXPECT_EQ(f.waker.calls[0].execution_id, "p");
  EXPECT_EQ(f.timers.RowsOf("r").value().size(), 1u);
}

TEST(TimerServiceTest, ContendedRedriveWritesTheNextRowBeforeRetiring) {
  Fixture f;
  ScriptedRedriver noop(RedriveAnswer::kNoop), contended(RedriveAnswer::kContended);
  f.service.AddRedriver(&noop);
  f.service.AddRedriver(&contended);
  int64_t wake = f.now();
  ASSERT_TRUE(f.timers.Schedule({"r", wake, Redrive{0}}));
  ASSERT_TRUE(f.service.PollOnce());
  auto rows = f.timers.RowsOf("r").value();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].redrive, Redrive{1});
  EXPECT_GE(rows[0].wake_at_ms, wake + 1);  // never the same key
  EXPECT_EQ(noop.calls.size(), 1u);         // every re-driver is asked until a non-noop answer
}

TEST(TimerServiceTest, RedriveExhaustsAtMaxAttemptsAndReportsOnce) {
  Fixture f;
  ScriptedRedriver contended(RedriveAnswer::kContended);
  f.service.AddRedriver(&contended);
  ASSERT_TRUE(f.timers.Schedule({"r", f.now(), Redrive{0}}));
  for (int step = 0; step < 400; ++step) {
    ASSERT_TRUE(f.service.PollOnce());
    f.clock.Advance(std::chrono::milliseconds(250));
  }
  EXPECT_EQ(contended.calls.size(), 8u);
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].code, ErrorCode::kRedriveExhausted);
  EXPECT_TRUE(f.timers.RowsOf("r").value().empty());
  EXPECT_EQ(f.service.stats().redrive_rows_written, 7);
}

TEST(TimerServiceTest, DoneRedriveRetiresAndAFailingRedriverCountsAsContended) {
  Fixture f;
  ScriptedRedriver done(RedriveAnswer::kDone);
  done.fail = true;
  f.service.AddRedriver(&done);
  ASSERT_TRUE(f.timers.Schedule({"r", f.now(), Redrive{2}}));
  ASSERT_TRUE(f.service.PollOnce());
  EXPECT_EQ(f.timers.RowsOf("r").value()[0].redrive, Redrive{3});
  done.fail = false;
  f.clock.Advance(std::chrono::seconds(40));
  ASSERT_TRUE(f.service.PollOnce());
  EXPECT_TRUE(f.timers.RowsOf("r").value().empty());
}

TEST(TimerServiceTest, BackoffIsFullJitterCappedAndDeterministic) {
  BackoffPolicy p;
  SeededRng a(1), b(1);
  for (int attempt = 0; attempt < 12; ++attempt) {
    int64_t d = p.DelayMs(attempt, a);
    EXPECT_EQ(d, p.DelayMs(attempt, b));
    EXPECT_GE(d, 0);
    EXPECT_LE(d, std::min<int64_t>(30'000, 200LL << attempt));
  }
}

TEST(TimerServiceTest, BackoffMapIsBounded) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(3);
  MemoryTimerStore timers;
  ScriptedWaker waker;
  for (int i = 0; i < 50; ++i) waker.answers.push_back(WakeVerdict::kContended);
  TimerService service(timers, waker, clock, rng,
                       {.owner = "n", .claim_rows_max = 100, .backoff_entries_max = 10});
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(timers.Schedule({"e" + std::to_string(i), clock.NowUnixMillis(), std::nullopt}));
  }
  ASSERT_TRUE(service.PollOnce());
  EXPECT_EQ(service.backoff_entries(), 10u);
}

}  // namespace
}  // namespace once::timers
