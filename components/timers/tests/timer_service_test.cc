#include "once/timers/timer_service.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

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

// Counts concurrent Wake calls; each call waits (up to 5 s) until `gate`
// calls have been inside at once, so a service that fires one at a time
// shows max_in_flight 1.
class GatedWaker final : public Waker {
 public:
  explicit GatedWaker(int gate) : gate_(gate) {}
  Result<WakeVerdict> Wake(const TimerRow& row) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++in_flight_;
    max_in_flight = std::max(max_in_flight, in_flight_);
    if (in_flight_ >= gate_) opened_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return opened_; });
    threads[row.execution_id].push_back(std::this_thread::get_id());
    order.push_back(row);
    --in_flight_;
    return WakeVerdict::kResumed;
  }
  size_t calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return order.size();
  }
  int max_in_flight = 0;
  std::map<std::string, std::vector<std::thread::id>> threads;
  std::vector<TimerRow> order;

 private:
  int gate_;
  int in_flight_ = 0;
  bool opened_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
};

TEST(TimerServiceTest, FireConcurrencyFiresOnePollsRowsAtOnce) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(5);
  MemoryTimerStore timers;
  GatedWaker waker(4);
  TimerService service(timers, waker, clock, rng,
                       {.owner = "n", .claim_rows_max = 100, .fire_concurrency = 4});
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(timers.Schedule({"e" + std::to_string(i), clock.NowUnixMillis() - 1, {}}));
  }
  EXPECT_EQ(service.PollOnce().value(), 12u);  // returns once every row is fired
  EXPECT_EQ(waker.max_in_flight, 4);           // never more than fire_concurrency
  EXPECT_EQ(waker.order.size(), 12u);
  EXPECT_EQ(service.stats().resumed, 12);
  EXPECT_EQ(service.stats().fired, 12);
  EXPECT_TRUE(timers.Due(clock.NowUnixMillis(), 100, true).value().empty());
}

TEST(TimerServiceTest, FireConcurrencyKeepsOneExecutionsRowsOnOneThreadInOrder) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(6);
  MemoryTimerStore timers;
  GatedWaker waker(2);
  TimerService service(timers, waker, clock, rng,
                       {.owner = "n", .claim_rows_max = 100, .fire_concurrency = 8});
  int64_t now = clock.NowUnixMillis();
  ASSERT_TRUE(timers.Schedule({"a", now - 3, {}}));
  ASSERT_TRUE(timers.Schedule({"a", now - 1, {}}));
  ASSERT_TRUE(timers.Schedule({"b", now - 2, {}}));
  EXPECT_EQ(service.PollOnce().value(), 3u);
  ASSERT_EQ(waker.threads["a"].size(), 2u);
  EXPECT_EQ(waker.threads["a"][0], waker.threads["a"][1]);
  std::vector<int64_t> a_wakes;
  for (const TimerRow& r : waker.order) {
    if (r.execution_id == "a") a_wakes.push_back(r.wake_at_ms);
  }
  EXPECT_EQ(a_wakes, (std::vector<int64_t>{now - 3, now - 1}));
  EXPECT_EQ(waker.max_in_flight, 2);  // "a" and "b" at once
}

TEST(TimerServiceTest, RepollWhenFullDrainsABacklogWithoutWaitingAnInterval) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(7);
  MemoryTimerStore timers;
  GatedWaker waker(1);
  TimerService service(
      timers, waker, clock, rng,
      {.owner = "n", .poll_interval_ms = 600'000, .claim_rows_max = 2, .repoll_when_full = true});
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(timers.Schedule({"e" + std::to_string(i), clock.NowUnixMillis() - 1, {}}));
  }
  service.Start();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (waker.calls() < 7 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  service.Stop();
  // 2 + 2 + 2 + 1: the short fourth batch ends the burst; without the option
  // the second batch would wait for the 10-minute interval.
  EXPECT_EQ(waker.calls(), 7u);
  EXPECT_EQ(service.stats().fired, 7);
}

}  // namespace
}  // namespace once::timers
