#include "once/timers/timer_service.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "once/timers/memory_timer_store.h"

namespace once::timers {
namespace {

// The runtime side, scripted: answers the queued verdicts in order.
// Thread-safe: the service fires on several threads by default.
class ScriptedWaker final : public Waker {
 public:
  Result<WakeVerdict> Wake(const TimerRow& row) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back(row);
    if (answers.empty()) return WakeVerdict::kResumed;
    WakeVerdict v = answers.front();
    answers.pop_front();
    return v;
  }
  std::mutex mu;
  std::deque<WakeVerdict> answers;  // GUARDED_BY(mu)
  std::vector<TimerRow> calls;      // GUARDED_BY(mu)
};

class ScriptedRedriver final : public Redriver {
 public:
  explicit ScriptedRedriver(RedriveAnswer always) : always_(always) {}
  Result<RedriveAnswer> Redrive(const TimerRow& row) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back(row);
    if (fail) return MakeError(ErrorCode::kUnavailable, "store down");
    return always_;
  }
  std::mutex mu;
  RedriveAnswer always_;
  bool fail = false;
  std::vector<TimerRow> calls;  // GUARDED_BY(mu)
};

struct Fixture {
  ManualClock clock{FromUnixMillis(1'000'000)};
  SeededRng rng{42};
  MemoryTimerStore timers;
  ScriptedWaker waker;
  std::mutex errors_mu;
  std::vector<Error> errors;  // GUARDED_BY(errors_mu)
  TimerService service{timers, waker, clock, rng,
                       TimerServiceOptions{.owner = "n1", .on_error = [this](const Error& e) {
                                             std::lock_guard<std::mutex> lock(errors_mu);
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

// GatedWaker does not wake together: wake_batch_max (64 by default) leaves
// it one row a thread, fire_concurrency at once.
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

// A waker that wakes batches together: records each WakeMany's rows and
// answers the scripted verdicts (by execution) or resumed.
class BatchWaker final : public Waker {
 public:
  Result<WakeVerdict> Wake(const TimerRow& row) override {
    std::lock_guard<std::mutex> lock(mu);
    alone.push_back(row);
    return VerdictFor(row);
  }
  std::vector<Result<WakeVerdict>> WakeMany(std::span<const TimerRow* const> rows) override {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<Result<WakeVerdict>> out;
    batches.emplace_back();
    for (const TimerRow* row : rows) {
      batches.back().push_back(*row);
      out.push_back(VerdictFor(*row));
    }
    return out;
  }
  bool WakesTogether() const override { return true; }
  std::mutex mu;
  std::map<std::string, WakeVerdict> verdicts;  // GUARDED_BY(mu); else resumed
  std::vector<std::vector<TimerRow>> batches;   // GUARDED_BY(mu)
  std::vector<TimerRow> alone;                  // GUARDED_BY(mu)

 private:
  Result<WakeVerdict> VerdictFor(const TimerRow& row) {
    auto it = verdicts.find(row.execution_id);
    return it == verdicts.end() ? WakeVerdict::kResumed : it->second;
  }
};

// With a waker that wakes together, each firing thread takes
// wake_batch_max executions of the poll at once: their first rows go to one
// WakeMany, a second row of one execution is woken alone after it, and a
// contended verdict in a batch backs off as a single wake's does.
TEST(TimerServiceTest, AWakerThatWakesTogetherGetsThePollInBatches) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(7);
  MemoryTimerStore timers;
  BatchWaker waker;
  waker.verdicts["e3"] = WakeVerdict::kContended;
  TimerService service(
      timers, waker, clock, rng,
      {.owner = "n", .claim_rows_max = 100, .fire_concurrency = 8, .wake_batch_max = 4});
  const int64_t now = clock.NowUnixMillis();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(timers.Schedule({"e" + std::to_string(i), now - 10 + i, {}}));
  }
  ASSERT_TRUE(timers.Schedule({"e0", now - 1, {}}));  // a second row of e0
  EXPECT_EQ(service.PollOnce().value(), 11u);
  size_t batched = 0;
  std::set<std::string> seen;
  for (const std::vector<TimerRow>& batch : waker.batches) {
    EXPECT_LE(batch.size(), 4u);
    for (const TimerRow& row : batch) {
      EXPECT_TRUE(seen.insert(row.execution_id).second) << row.execution_id << " batched twice";
    }
    batched += batch.size();
  }
  EXPECT_EQ(batched, 10u);
  EXPECT_EQ(waker.batches.size(), 3u);  // 4 + 4 + 2 executions
  ASSERT_EQ(waker.alone.size(), 1u);
  EXPECT_EQ(waker.alone[0].execution_id, "e0");
  EXPECT_EQ(waker.alone[0].wake_at_ms, now - 1);
  EXPECT_EQ(service.stats().resumed, 10);
  EXPECT_EQ(service.stats().contended, 1);
  // The contended row stays, deferred by its backoff; the others are retired.
  EXPECT_EQ(timers.RowsOf("e3").value().size(), 1u);
  for (int i : {0, 1, 2, 4, 9}) EXPECT_TRUE(timers.RowsOf("e" + std::to_string(i)).value().empty());
  // Backing off, e3 is not woken (nor batched) before its next try.
  waker.batches.clear();
  waker.alone.clear();
  ASSERT_TRUE(timers.Schedule({"e20", now, {}}));
  ASSERT_TRUE(timers.Schedule({"e21", now, {}}));
  (void)service.PollOnce();
  for (const std::vector<TimerRow>& batch : waker.batches) {
    for (const TimerRow& row : batch) EXPECT_NE(row.execution_id, "e3");
  }
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

// The first row's wake is held until a row of the NEXT claim has been
// woken (or 2 s pass): it shows whether the next poll starts while the
// poll before still has a wake in flight.
class HoldFirstWaker final : public Waker {
 public:
  Result<WakeVerdict> Wake(const TimerRow& row) override {
    std::unique_lock<std::mutex> lock(mu_);
    woken_.push_back(row.execution_id);
    cv_.notify_all();
    if (row.execution_id == "e0") {
      overlapped = cv_.wait_for(lock, std::chrono::seconds(2), [&] { return woken_.size() >= 3; });
    }
    return WakeVerdict::kResumed;
  }
  size_t calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return woken_.size();
  }
  bool overlapped = false;

 private:
  std::vector<std::string> woken_;
  std::mutex mu_;
  std::condition_variable cv_;
};

TEST(TimerServiceTest, OverlapPollsStartsTheNextPollWhileTheLastWakesFinish) {
  for (bool overlap : {true, false}) {
    ManualClock clock(FromUnixMillis(1'000'000));
    SeededRng rng(9);
    MemoryTimerStore timers;
    HoldFirstWaker waker;
    TimerService service(timers, waker, clock, rng,
                         {.owner = "n",
                          .poll_interval_ms = 600'000,
                          .claim_rows_max = 2,
                          .fire_concurrency = 2,
                          .repoll_when_full = true,
                          .overlap_polls = overlap});
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(timers.Schedule({"e" + std::to_string(i), clock.NowUnixMillis() - 1, {}}));
    }
    service.Start();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (waker.calls() < 4 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    service.Stop();
    EXPECT_EQ(waker.calls(), 4u) << overlap;
    // e0 and e1 are the first claim: e0's wake ends only after a row of the
    // second claim was woken, which needs the overlap.
    EXPECT_EQ(waker.overlapped, overlap);
    EXPECT_EQ(service.stats().fired, 4) << overlap;
    EXPECT_TRUE(timers.Due(clock.NowUnixMillis(), 10, true).value().empty()) << overlap;
  }
}

// A MemoryTimerStore that records its writes in order.
class RecordingTimerStore final : public TimerStore {
 public:
  explicit RecordingTimerStore(TimerLimits limits = {}) : inner_(limits) {}
  Status Schedule(const TimerRow& row) override {
    Note("schedule " + row.execution_id + "@" + std::to_string(row.wake_at_ms));
    return inner_.Schedule(row);
  }
  Result<std::vector<TimerRow>> Due(int64_t now_ms, size_t limit, bool include_redrive) override {
    return inner_.Due(now_ms, limit, include_redrive);
  }
  Result<std::vector<TimerRow>> Claim(const ClaimRequest& req) override {
    return inner_.Claim(req);
  }
  Status Complete(const TimerKey& key) override {
    Note("complete " + key.execution_id);
    return inner_.Complete(key);
  }
  Status CompleteMany(std::span<const TimerKey> keys) override {
    std::string note = "complete_many";
    for (const TimerKey& k : keys)
      note += " " + k.execution_id + "@" + std::to_string(k.wake_at_ms);
    Note(note);
    return inner_.CompleteMany(keys);
  }
  Status Defer(const TimerKey& key, std::string_view owner, int64_t until_ms) override {
    return inner_.Defer(key, owner, until_ms);
  }
  Result<std::vector<TimerRow>> RowsOf(std::string_view id) override { return inner_.RowsOf(id); }
  const TimerLimits& limits() const override { return inner_.limits(); }

  std::vector<std::string> writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    writes_.clear();
  }

 private:
  void Note(std::string s) {
    std::lock_guard<std::mutex> lock(mu_);
    writes_.push_back(std::move(s));
  }
  MemoryTimerStore inner_;
  std::mutex mu_;
  std::vector<std::string> writes_;  // GUARDED_BY(mu_)
};

TEST(TimerServiceTest, RetiresAPollsRowsTogetherInChunksOfCompleteKeysMax) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(8);
  RecordingTimerStore timers({.claim_rows_max = 1'000, .complete_keys_max = 4});
  ScriptedWaker waker;
  waker.answers = {WakeVerdict::kResumed, WakeVerdict::kObsolete};
  TimerService service(timers, waker, clock, rng, {.owner = "n", .fire_concurrency = 1});
  int64_t now = clock.NowUnixMillis();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(timers.Schedule({"e" + std::to_string(i), now - 10 + i, std::nullopt}));
  }
  timers.Clear();
  EXPECT_EQ(service.PollOnce().value(), 10u);
  // Resumed and obsolete rows alike: 10 rows, three commits (4 + 4 + 2), in
  // firing order, and no per-row Complete.
  auto key = [&](int i) { return " e" + std::to_string(i) + "@" + std::to_string(now - 10 + i); };
  EXPECT_EQ(timers.writes(),
            (std::vector<std::string>{"complete_many" + key(0) + key(1) + key(2) + key(3),
                                      "complete_many" + key(4) + key(5) + key(6) + key(7),
                                      "complete_many" + key(8) + key(9)}));
  EXPECT_TRUE(timers.Due(now, 100, true).value().empty());
}

TEST(TimerServiceTest, ContendedRedriveSchedulesTheNextRowBeforeTheBatchRetiresIt) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(9);
  RecordingTimerStore timers;
  ScriptedWaker waker;
  ScriptedRedriver contended(RedriveAnswer::kContended);
  TimerService service(timers, waker, clock, rng, {.owner = "n"});
  service.AddRedriver(&contended);
  int64_t now = clock.NowUnixMillis();
  ASSERT_TRUE(timers.Schedule({"r", now - 1, Redrive{0}}));
  ASSERT_TRUE(timers.Schedule({"p", now - 1, std::nullopt}));
  timers.Clear();
  ASSERT_EQ(service.PollOnce().value(), 2u);
  auto writes = timers.writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_TRUE(writes[0].starts_with("schedule r@")) << writes[0];
  // One batch retires both; its order is the firing threads' (either).
  const std::string p = "p@" + std::to_string(now - 1), r = "r@" + std::to_string(now - 1);
  EXPECT_TRUE(writes[1] == "complete_many " + p + " " + r ||
              writes[1] == "complete_many " + r + " " + p)
      << writes[1];
  ASSERT_EQ(timers.RowsOf("r").value().size(), 1u);
  EXPECT_EQ(timers.RowsOf("r").value()[0].redrive, Redrive{1});
}

// A re-drive row whose successor cannot be written is kept (leased), never
// retired: the successor is written before the retire or not at all.
class FailingScheduleStore final : public TimerStore {
 public:
  Status Schedule(const TimerRow& row) override {
    if (fail_schedule) return MakeError(ErrorCode::kUnavailable, "disk gone");
    return inner.Schedule(row);
  }
  Result<std::vector<TimerRow>> Due(int64_t n, size_t l, bool r) override {
    return inner.Due(n, l, r);
  }
  Result<std::vector<TimerRow>> Claim(const ClaimRequest& req) override { return inner.Claim(req); }
  Status Complete(const TimerKey& key) override { return inner.Complete(key); }
  Status CompleteMany(std::span<const TimerKey> keys) override { return inner.CompleteMany(keys); }
  Status Defer(const TimerKey& key, std::string_view owner, int64_t until_ms) override {
    return inner.Defer(key, owner, until_ms);
  }
  Result<std::vector<TimerRow>> RowsOf(std::string_view id) override { return inner.RowsOf(id); }
  const TimerLimits& limits() const override { return inner.limits(); }
  MemoryTimerStore inner;
  bool fail_schedule = false;
};

TEST(TimerServiceTest, ARedriveRowWhoseSuccessorFailsIsKept) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(10);
  FailingScheduleStore timers;
  ScriptedWaker waker;
  ScriptedRedriver contended(RedriveAnswer::kContended);
  std::vector<Error> errors;
  TimerService service(timers, waker, clock, rng,
                       {.owner = "n", .on_error = [&](const Error& e) { errors.push_back(e); }});
  service.AddRedriver(&contended);
  int64_t wake = clock.NowUnixMillis() - 1;
  ASSERT_TRUE(timers.Schedule({"r", wake, Redrive{0}}));
  timers.fail_schedule = true;
  ASSERT_EQ(service.PollOnce().value(), 1u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code, ErrorCode::kUnavailable);
  EXPECT_EQ(timers.RowsOf("r").value(), (std::vector<TimerRow>{{"r", wake, Redrive{0}}}));
}

TEST(TimerServiceTest, ClaimAheadHoldsARowUntilItsWakeAndKeepsOtherNodesOff) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(11);
  MemoryTimerStore timers;
  ScriptedWaker waker, other_waker;
  TimerService service(timers, waker, clock, rng, {.owner = "n1", .claim_ahead_ms = 250});
  TimerService other(timers, other_waker, clock, rng, {.owner = "n2", .claim_ahead_ms = 250});
  int64_t wake = clock.NowUnixMillis() + 100;
  ASSERT_TRUE(timers.Schedule({"a", wake, std::nullopt}));
  EXPECT_EQ(service.PollOnce().value(), 0u);  // claimed, not fired: not due yet
  EXPECT_EQ(service.held_rows(), 1u);
  clock.Advance(std::chrono::milliseconds(99));
  EXPECT_EQ(service.PollOnce().value(), 0u);  // never before its wake
  EXPECT_EQ(other.PollOnce().value(), 0u);    // leased to n1
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_EQ(service.PollOnce().value(), 1u);
  EXPECT_EQ(other.PollOnce().value(), 0u);
  ASSERT_EQ(waker.calls.size(), 1u);
  EXPECT_TRUE(other_waker.calls.empty());
  EXPECT_EQ(service.held_rows(), 0u);
  EXPECT_TRUE(timers.RowsOf("a").value().empty());
}

TEST(TimerServiceTest, RowsInHandNeverExceedClaimRowsMax) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(12);
  MemoryTimerStore timers;
  ScriptedWaker waker;
  TimerService service(timers, waker, clock, rng, {.owner = "n", .claim_rows_max = 3});
  int64_t now = clock.NowUnixMillis();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(timers.Schedule({"e" + std::to_string(i), now + 10 + i, std::nullopt}));
  }
  EXPECT_EQ(service.PollOnce().value(), 0u);
  EXPECT_EQ(service.held_rows(), 3u);
  EXPECT_EQ(service.PollOnce().value(), 0u);  // no room: no claim
  EXPECT_EQ(service.held_rows(), 3u);
  clock.Advance(std::chrono::milliseconds(20));
  EXPECT_EQ(service.PollOnce().value(), 3u);  // the held three; no room to claim more
  EXPECT_EQ(service.PollOnce().value(), 2u);
  EXPECT_EQ(waker.calls.size(), 5u);
}

TEST(TimerServiceTest, StopHandsHeldRowsBackDueAtTheirOwnWake) {
  ManualClock clock(FromUnixMillis(1'000'000));
  SeededRng rng(13);
  MemoryTimerStore timers;
  ScriptedWaker waker;
  int64_t wake = clock.NowUnixMillis() + 200;
  ASSERT_TRUE(timers.Schedule({"a", wake, std::nullopt}));
  {
    TimerService service(timers, waker, clock, rng, {.owner = "n1"});
    EXPECT_EQ(service.PollOnce().value(), 0u);
    EXPECT_EQ(service.held_rows(), 1u);
    service.Stop();
    EXPECT_EQ(service.held_rows(), 0u);
  }
  // Not a lease (30 s) later: at its wake, for another node.
  clock.Advance(std::chrono::milliseconds(200));
  auto claimed = timers.Claim({.now_ms = clock.NowUnixMillis(), .owner = "n2"}).value();
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].execution_id, "a");
  EXPECT_TRUE(waker.calls.empty());
}

TEST(TimerServiceTest, ThePollingThreadWakesForAHeldRowBeforeTheInterval) {
  SystemClock clock;
  SeededRng rng(14);
  MemoryTimerStore timers;
  GatedWaker waker(1);
  // A 10-minute interval: only the held row's own wake can fire it soon.
  TimerService service(timers, waker, clock, rng,
                       {.owner = "n", .poll_interval_ms = 600'000, .claim_ahead_ms = 10'000});
  ASSERT_TRUE(timers.Schedule({"a", clock.NowUnixMillis() + 300, std::nullopt}));
  service.Start();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (waker.calls() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  service.Stop();
  EXPECT_EQ(waker.calls(), 1u);
  EXPECT_TRUE(timers.RowsOf("a").value().empty());
}

TEST(TimerServiceTest, DefaultsFireABurstConcurrentlyWithBoundedRowsInHand) {
  TimerServiceOptions defaults;
  EXPECT_GT(defaults.fire_concurrency, 1u);
  EXPECT_TRUE(defaults.repoll_when_full);
  EXPECT_GT(defaults.claim_ahead_ms, 0);
  EXPECT_LT(defaults.claim_ahead_ms, defaults.lease_ms);
  EXPECT_LE(defaults.claim_rows_max, TimerLimits{}.claim_rows_max);
  EXPECT_LE(defaults.claim_rows_max, TimerLimits{}.complete_keys_max);  // one commit per poll
}

}  // namespace
}  // namespace once::timers

namespace once::timers {
namespace {

// The redrive cell both SQL stores write and the operator's views read.
TEST(RedriveTextTest, RoundTripsAndReadsJsonbSpacingAndRefusesOtherShapes) {
  for (int attempt : {0, 1, 7, std::numeric_limits<int>::max()}) {
    Result<Redrive> back = ParseRedriveText(RedriveText(Redrive{attempt}));
    ASSERT_TRUE(back) << attempt;
    EXPECT_EQ(back->attempt, attempt);
  }
  EXPECT_EQ(RedriveText(Redrive{3}), R"({"attempt":3})");
  EXPECT_EQ(ParseRedriveText(R"({"attempt": 3})").value().attempt, 3);  // jsonb's text
  for (const char* bad :
       {"", "not json", "[]", "{}", R"({"attempt":"3"})", R"({"attempt":-1})",
        R"({"attempt":2147483648})", R"({"attempt":1.5})", R"({"attempt":18446744073709551615})"}) {
    Result<Redrive> r = ParseRedriveText(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kCorruption) << bad;
  }
}

}  // namespace
}  // namespace once::timers
