// Group commit and the worker pool: many executions at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "test_stores.h"

namespace once::runtime {
namespace {

using store::MemoryEventStore;
using testing::DurableLikeStore;
using testing::HookStore;

TEST(CommitterTest, ARefusedRowFailsOnlyItsOwnRequest) {
  MemoryEventStore memory;
  HookStore store(memory);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(memory.Append(
        {.execution_id = id,
         .expected_next = 1,
         .events = {events::KernelEvent(events::KernelKind::kExecutionStarted, Json::object())}}));
  }
  ASSERT_TRUE(memory.AcquireFence("b"));
  Committer committer(store, {.flush_requests_min = 3, .linger_us_max = 2'000'000});
  Result<int64_t> results[3];
  std::vector<std::thread> threads;
  const char* ids[] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      results[i] =
          committer.Commit({.execution_id = ids[i],
                            .expected_next = 2,
                            .events = {events::KernelEvent(events::KernelKind::kStepCompleted,
                                                           Json{{"name", "s"}, {"value", i}})},
                            .fence = 0});
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(results[0].value(), 2);
  ASSERT_FALSE(results[1]);
  EXPECT_EQ(results[1].error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(results[2].value(), 2);
  EXPECT_EQ(store.batches, 1);
  EXPECT_EQ(committer.stats().store_writes, 1u);
  EXPECT_EQ(memory.Head("b").value(), 1);
}

// Holds every write until `hold_until_in_flight` writes have once been in
// flight together (or a second passed), then a little longer so that more would pile in if the
// committer let them; records the peak and any execution written by two
// writes at once.
class HoldingStore final : public store::EventStoreWrapper<HoldingStore, store::ForwardEverything> {
 public:
  HoldingStore(EventStore& target, size_t hold_until_in_flight)
      : EventStoreWrapper(target), hold_until_in_flight_(hold_until_in_flight) {}

  Result<int64_t> Append(const store::AppendRequest& req) override {
    Enter(std::span(&req, 1));
    Result<int64_t> r = target().Append(req);
    Leave(std::span(&req, 1));
    return r;
  }
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const store::AppendRequest> requests) override {
    Enter(requests);
    auto r = target().AppendBatch(requests);
    Leave(requests);
    return r;
  }

  size_t peak = 0;
  bool one_execution_in_two_writes = false;
  std::set<std::thread::id> writers;  // the threads that wrote (GUARDED_BY(mu_))

 private:
  void Enter(std::span<const store::AppendRequest> requests) {
    std::unique_lock lock(mu_);
    writers.insert(std::this_thread::get_id());
    for (const auto& r : requests) {
      if (!writing_.insert(r.execution_id).second) one_execution_in_two_writes = true;
    }
    peak = std::max(peak, ++in_flight_);
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return peak >= hold_until_in_flight_; });
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  void Leave(std::span<const store::AppendRequest> requests) {
    std::lock_guard lock(mu_);
    for (const auto& r : requests) writing_.erase(r.execution_id);
    --in_flight_;
  }

  const size_t hold_until_in_flight_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t in_flight_ = 0;
  std::set<std::string> writing_;
};

// Sixteen threads commit six appends each, half of them to one shared
// execution (its requests race each other); returns the appends that failed
// other than by losing that race.
int CommitUnderLoad(Committer& committer, store::EventStore& memory) {
  constexpr int kThreads = 16;
  constexpr int kCommitsPerThread = 6;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string id = t % 2 == 0 ? "shared" : "own-" + std::to_string(t);
      for (int i = 0; i < kCommitsPerThread; ++i) {
        int64_t next = memory.Head(id).value() + 1;
        Result<int64_t> r =
            committer.Commit({.execution_id = id,
                              .expected_next = next,
                              .events = {events::KernelEvent(events::KernelKind::kStepCompleted,
                                                             Json{{"name", "s"}, {"value", i}})},
                              .fence = std::nullopt});
        if (!r && r.error().code != ErrorCode::kSequenceConflict) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures;
}

// flushes_in_flight_max is reached under load and never passed, and no
// execution is ever in two writes at once (its appends keep their order).
TEST(CommitterTest, FlushesInFlightReachTheLimitAndNeverPassIt) {
  for (size_t limit : {size_t{1}, size_t{2}, size_t{4}}) {
    SCOPED_TRACE("flushes_in_flight_max " + std::to_string(limit));
    MemoryEventStore memory;
    HoldingStore store(memory, limit);
    // One request per flush: every flush needs a leader of its own.
    Committer committer(store, {.batch_executions_max = 1, .flushes_in_flight_max = limit});
    EXPECT_EQ(CommitUnderLoad(committer, memory), 0);
    EXPECT_EQ(store.peak, limit);
    EXPECT_EQ(committer.stats().flushes_in_flight_peak, limit);
    EXPECT_FALSE(store.one_execution_in_two_writes);
  }
}

// ---- Pipelined commits (Committer::CommitPipelined) ---------------------------

// The append at `next` of execution `id`: its start at 1, else a step.
store::AppendRequest AppendAt(const std::string& id, int64_t next) {
  Envelope e = next == 1
                   ? events::KernelEvent(events::KernelKind::kExecutionStarted, Json::object())
                   : events::KernelEvent(events::KernelKind::kStepCompleted,
                                         Json{{"name", "s"}, {"value", next}});
  return {.execution_id = id, .expected_next = next, .events = {std::move(e)}};
}

// What the dones of pipelined requests answered, per execution in the
// order they ran (-1 for an error, and its code).
struct Answered {
  std::mutex mu;
  std::map<std::string, std::vector<int64_t>> heads;  // GUARDED_BY(mu)
  std::vector<ErrorCode> errors;                      // GUARDED_BY(mu)
  int dones = 0;                                      // GUARDED_BY(mu)

  Committer::CommitDone For(std::string id) {
    return [this, id = std::move(id)](Result<int64_t> head) {
      std::lock_guard lock(mu);
      ++dones;
      heads[id].push_back(head ? *head : -1);
      if (!head) errors.push_back(head.error().code);
    };
  }
};

// All of five appends to each of twenty executions are queued at once, from
// one thread that waits for none: each is answered once, with its own head,
// an execution's appends land in the order they were queued (a later one
// waits for the flush of the one before), and flushes are shared.
TEST(CommitterTest, PipelinedRequestsAreAnsweredOnceEachInTheirExecutionsOrder) {
  MemoryEventStore memory;
  HookStore store(memory);
  Answered answered;
  Committer committer(store, {.flushes_in_flight_max = 2});
  for (int64_t next = 1; next <= 5; ++next) {
    for (int e = 0; e < 20; ++e) {
      std::string id = "p" + std::to_string(e);
      committer.CommitPipelined(AppendAt(id, next), answered.For(id));
    }
  }
  committer.Drain();
  std::lock_guard lock(answered.mu);  // Drain returned: every done has run
  EXPECT_EQ(answered.dones, 100);
  EXPECT_TRUE(answered.errors.empty());
  for (int e = 0; e < 20; ++e) {
    std::string id = "p" + std::to_string(e);
    EXPECT_EQ(answered.heads[id], (std::vector<int64_t>{1, 2, 3, 4, 5})) << id;
    EXPECT_EQ(memory.Head(id).value(), 5);
  }
  EXPECT_EQ(committer.stats().requests, 100u);
  EXPECT_LT(committer.stats().store_writes, 100u);
}

// A row its fence refuses fails only its own pipelined request, as in Commit.
TEST(CommitterTest, ARefusedPipelinedRowFailsOnlyItsOwnRequest) {
  MemoryEventStore memory;
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(memory.Append(AppendAt(id, 1)));
  ASSERT_TRUE(memory.AcquireFence("b"));
  Answered answered;
  {
    Committer committer(memory, {.flush_requests_min = 3, .linger_us_max = 2'000'000});
    for (const char* id : {"a", "b", "c"}) {
      store::AppendRequest req = AppendAt(id, 2);
      req.fence = 0;
      committer.CommitPipelined(std::move(req), answered.For(id));
    }
  }  // the destructor answers everything queued
  std::lock_guard lock(answered.mu);
  EXPECT_EQ(answered.heads["a"], std::vector<int64_t>{2});
  EXPECT_EQ(answered.heads["b"], std::vector<int64_t>{-1});
  EXPECT_EQ(answered.heads["c"], std::vector<int64_t>{2});
  EXPECT_EQ(answered.errors, std::vector<ErrorCode>{ErrorCode::kStaleFence});
  EXPECT_EQ(memory.Head("b").value(), 1);
}

// Pipelined requests are led by the committer's flushers up to the limit,
// never past it, never one execution in two writes; callers of Commit lead
// beside them; the destructor returns only once every done has run, though
// each write takes a while.
TEST(CommitterTest, PipelinedAndWaitingCallersShareTheLimitAndTheDestructorDrains) {
  for (size_t limit : {size_t{1}, size_t{3}}) {
    SCOPED_TRACE("flushes_in_flight_max " + std::to_string(limit));
    MemoryEventStore memory;
    HoldingStore store(memory, limit);
    Answered answered;
    {
      Committer committer(store, {.batch_executions_max = 1, .flushes_in_flight_max = limit});
      for (int64_t next = 1; next <= 3; ++next) {
        for (int e = 0; e < 8; ++e) {
          std::string id = "q" + std::to_string(e);
          committer.CommitPipelined(AppendAt(id, next), answered.For(id));
        }
      }
      std::thread waiting([&] {
        for (int64_t next = 1; next <= 3; ++next) {
          EXPECT_EQ(committer.Commit(AppendAt("w", next)).value(), next);
        }
      });
      waiting.join();
    }
    std::lock_guard lock(answered.mu);
    EXPECT_EQ(answered.dones, 24);
    EXPECT_TRUE(answered.errors.empty());
    EXPECT_EQ(store.peak, limit);
    EXPECT_FALSE(store.one_execution_in_two_writes);
    for (int e = 0; e < 8; ++e) EXPECT_EQ(memory.Head("q" + std::to_string(e)).value(), 3);
  }
}

// ---- Dones on the caller's thread (DoneQueue) ---------------------------------

// Starts the committer's flushers (with one request to write) and lets them
// go back to sleep.
void SettleFlushers(Committer& committer, DoneQueue& dones) {
  committer.CommitPipelined(
      AppendAt("settle", 1), [](Result<int64_t>) {}, &dones);
  while (dones.outstanding() > 0) dones.Drain(/*wait=*/true);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// Three appends to each of twenty executions queued with a DoneQueue: every
// done runs on the thread that drains it, once, in its execution's order, a
// flush's answers arrive together (no more hand-overs than store writes),
// the drainer leads flushes itself rather than sleep, and a drain that waits
// with nothing to come returns at once.
TEST(CommitterTest, DonesGivenAQueueRunOnTheThreadThatDrainsIt) {
  MemoryEventStore memory;
  HoldingStore store(memory, 2);  // each write takes a while: the answers pile up
  Committer committer(store, {.flushes_in_flight_max = 2});
  DoneQueue dones;
  std::map<std::string, std::vector<int64_t>> heads;  // this thread's only
  std::set<std::thread::id> threads;
  int ran = 0;
  SettleFlushers(committer, dones);  // no request below wakes them
  store.writers.clear();
  for (int64_t next = 1; next <= 3; ++next) {
    for (int e = 0; e < 20; ++e) {
      std::string id = "d" + std::to_string(e);
      committer.CommitPipelined(
          AppendAt(id, next),
          [&, id](Result<int64_t> head) {
            ++ran;
            threads.insert(std::this_thread::get_id());
            heads[id].push_back(head ? *head : -1);
          },
          &dones);
    }
  }
  EXPECT_EQ(dones.outstanding(), 60u);
  size_t hand_overs = 0;
  while (dones.outstanding() > 0) hand_overs += dones.Drain(/*wait=*/true) > 0 ? 1 : 0;
  EXPECT_EQ(ran, 60);
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
  for (int e = 0; e < 20; ++e) {
    EXPECT_EQ(heads["d" + std::to_string(e)], (std::vector<int64_t>{1, 2, 3})) << e;
  }
  EXPECT_LE(hand_overs, committer.stats().store_writes);
  EXPECT_LT(committer.stats().store_writes, 60u);
  EXPECT_TRUE(store.writers.contains(std::this_thread::get_id()));
  EXPECT_EQ(dones.Drain(/*wait=*/true), 0u);  // nothing to come: no wait
}

// A drainer that never waits still has its requests written (Drain(false)
// wakes a flusher for them), and so does one that never drains at all (the
// committer's Drain wakes the flushers).
TEST(CommitterTest, RequestsOfAQueueAreWrittenWhetherOrNotItsDrainerWaits) {
  MemoryEventStore memory;
  Committer committer(memory, {.flushes_in_flight_max = 2});
  DoneQueue polled;
  SettleFlushers(committer, polled);
  int ran = 0;
  for (int e = 0; e < 10; ++e) {
    committer.CommitPipelined(
        AppendAt("n" + std::to_string(e), 1), [&](Result<int64_t> head) { ran += head ? 1 : 0; },
        &polled);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (polled.outstanding() > 0 && std::chrono::steady_clock::now() < deadline) {
    polled.Drain(/*wait=*/false);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(ran, 10);
  DoneQueue idle;
  for (int e = 0; e < 10; ++e) {
    committer.CommitPipelined(
        AppendAt("i" + std::to_string(e), 1), [](Result<int64_t>) {}, &idle);
  }
  committer.Drain();  // returns once all ten are answered into the queue
  EXPECT_EQ(idle.Drain(/*wait=*/false), 10u);
  for (int e = 0; e < 10; ++e) EXPECT_EQ(memory.Head("i" + std::to_string(e)).value(), 1);
}

// Four drivers, each with its own queue, keep appends in flight at once
// through one committer: a flush answers several queues (one chain each),
// drainers lead flushes concurrently beside the flushers, and every done
// runs once, on its own driver, in its execution's order.
TEST(CommitterTest, SeveralDriversEachGetTheirOwnDonesOnly) {
  constexpr int kDrivers = 4, kExecutions = 25, kAppends = 4;
  MemoryEventStore memory;
  HookStore store(memory);
  Committer committer(store, {.flushes_in_flight_max = 2});
  std::vector<std::thread> drivers;
  std::atomic<int> foreign{0}, misordered{0}, ran{0};
  for (int d = 0; d < kDrivers; ++d) {
    drivers.emplace_back([&, d] {
      DoneQueue dones;
      const std::thread::id me = std::this_thread::get_id();
      std::map<std::string, int64_t> last;  // this driver's only
      for (int64_t next = 1; next <= kAppends; ++next) {
        for (int e = 0; e < kExecutions; ++e) {
          std::string id = "v" + std::to_string(d) + "-" + std::to_string(e);
          committer.CommitPipelined(
              AppendAt(id, next),
              [&, id](Result<int64_t> head) {
                ++ran;
                if (std::this_thread::get_id() != me) ++foreign;
                if (!head || *head != last[id] + 1) ++misordered;
                last[id] = head ? *head : -1;
              },
              &dones);
        }
        if (next % 2 == 0) dones.Drain(/*wait=*/true);  // some now, some later
      }
      while (dones.outstanding() > 0) dones.Drain(/*wait=*/true);
    });
  }
  for (std::thread& t : drivers) t.join();
  EXPECT_EQ(ran, kDrivers * kExecutions * kAppends);
  EXPECT_EQ(foreign, 0);
  EXPECT_EQ(misordered, 0);
  EXPECT_LT(committer.stats().store_writes, committer.stats().requests);
  for (int d = 0; d < kDrivers; ++d) {
    for (int e = 0; e < kExecutions; ++e) {
      EXPECT_EQ(memory.Head("v" + std::to_string(d) + "-" + std::to_string(e)).value(), kAppends);
    }
  }
}

// A queue that goes out of scope first runs every done queued to it, those
// still being written included.
TEST(CommitterTest, ADoneQueueGoingOutOfScopeRunsEveryDoneQueuedToIt) {
  MemoryEventStore memory;
  HoldingStore store(memory, 1);
  Committer committer(store, {.flushes_in_flight_max = 1});
  int ran = 0;
  {
    DoneQueue dones;
    for (int e = 0; e < 10; ++e) {
      committer.CommitPipelined(
          AppendAt("g" + std::to_string(e), 1), [&](Result<int64_t> head) { ran += head ? 1 : 0; },
          &dones);
    }
  }
  EXPECT_EQ(ran, 10);
  for (int e = 0; e < 10; ++e) EXPECT_EQ(memory.Head("g" + std::to_string(e)).value(), 1);
}

// A committer destroyed while a queue still holds one of its dones (which
// would report to a runtime that is gone) is a programming error, caught.
TEST(CommitterDeathTest, ACommitterOutlivedByItsUndrainedDonesIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        MemoryEventStore memory;
        DoneQueue dones;
        {
          Committer committer(memory);
          committer.CommitPipelined(
              AppendAt("x", 1), [](Result<int64_t>) {}, &dones);
          committer.Drain();  // answered into the queue, not run
        }
      },
      "a DoneQueue still holds pipelined dones");
}

TEST(GroupCommitTest, ManyConcurrentExecutionsShareStoreWrites) {
  ManualClock clock;
  MemoryEventStore memory(store::Limits{}, clock);
  DurableLikeStore durable(memory);  // group commit, as on SQLite or PostgreSQL
  HookStore store(durable);
  Runtime rt(store, clock,
             {.workers = 16, .committer = {.flush_requests_min = 8, .linger_us_max = 500}});
  std::atomic<int> fn_calls{0};
  ASSERT_TRUE(rt.Register("order", [&](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json v, ctx.Step("charge", [&]() -> Result<Json> {
      ++fn_calls;
      return in["n"];
    }));
    return v;
  }));
  constexpr int kExecutions = 400;
  std::vector<std::future<Result<RunOutcome>>> futures;
  for (int i = 0; i < kExecutions; ++i) {
    futures.push_back(rt.StartAsync("order", "o-" + std::to_string(i), Json{{"n", i}}));
  }
  for (int i = 0; i < kExecutions; ++i) {
    Result<RunOutcome> out = futures[i].get();
    ASSERT_TRUE(out) << out.error().ToString();
    EXPECT_EQ(out->status, ExecutionStatus::kCompleted);
    EXPECT_EQ(out->value, i);
  }
  rt.WaitIdle();
  EXPECT_EQ(fn_calls, kExecutions);
  for (int i = 0; i < kExecutions; ++i) {
    auto log = memory.ReadRange("o-" + std::to_string(i), 1, store::kToEnd).value();
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(log[1].payload["value"], i);
    EXPECT_EQ(log[2].kind, "EXECUTION_COMPLETED");
  }
  CommitterStats stats = rt.commit_stats();
  EXPECT_EQ(stats.requests, 1u * kExecutions);  // start + step + complete: one append
  int writes = store.appends + store.batches;
  EXPECT_EQ(static_cast<uint64_t>(writes), stats.store_writes);
  EXPECT_LT(writes * 2, static_cast<int>(stats.requests)) << "batches barely grouped";
}

TEST(GroupCommitTest, ChildrenAndParentsOnThePool) {
  MemoryEventStore memory;
  SystemClock clock;
  std::vector<Error> errors;
  std::mutex errors_mu;
  Runtime rt(memory, clock, {.workers = 8, .on_error = [&](const Error& e) {
                               std::lock_guard lock(errors_mu);
                               errors.push_back(e);
                             }});
  ASSERT_TRUE(rt.Register("child", [](Context& ctx, const Json& in) -> Result<Json> {
    return ctx.Step("w", [&]() -> Result<Json> { return in["x"].get<int>() + 1; });
  }));
  ASSERT_TRUE(rt.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
    for (int i = 0; i < 4; ++i) {
      ONCE_RETURN_IF_ERROR(ctx.StartChild("child", std::to_string(i), Json{{"x", i}}, "g"));
    }
    ONCE_ASSIGN_OR_RETURN(Json all, ctx.AwaitChildren("g"));
    int sum = 0;
    for (auto& [k, r] : all.items()) sum += r["value"].get<int>();
    return sum;
  }));
  constexpr int kParents = 50;
  std::vector<std::future<Result<RunOutcome>>> futures;
  for (int i = 0; i < kParents; ++i) {
    futures.push_back(rt.StartAsync("parent", "p" + std::to_string(i), Json::object()));
  }
  for (auto& f : futures) ASSERT_TRUE(f.get());
  // Children notify parents in the background; wait until everything settles.
  for (int round = 0; round < 200; ++round) {
    rt.WaitIdle();
    bool all_done = true;
    for (int i = 0; i < kParents && all_done; ++i) {
      all_done = rt.Inspect("p" + std::to_string(i))->status == ExecutionStatus::kCompleted;
    }
    if (all_done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 0; i < kParents; ++i) {
    ExecutionState st = rt.Inspect("p" + std::to_string(i)).value();
    ASSERT_EQ(st.status, ExecutionStatus::kCompleted) << i;
    EXPECT_EQ(st.result["value"], 1 + 2 + 3 + 4);
  }
  std::lock_guard lock(errors_mu);
  for (const Error& e : errors) ADD_FAILURE() << e.ToString();
}

// A store that says how many batches in flight help it (as PostgreSQL does).
class AdvisingStore final
    : public store::EventStoreWrapper<AdvisingStore, store::ForwardEverything> {
 public:
  AdvisingStore(EventStore& target, size_t useful) : EventStoreWrapper(target), useful_(useful) {}
  size_t AppendBatchesInFlightUseful() const override { return useful_; }

 private:
  const size_t useful_;
};

// By default the committer allows as many flushes at once as the store says
// help it, through decorators; an explicit limit wins.
TEST(CommitterTest, TheStoreSetsTheDefaultFlushesInFlight) {
  MemoryEventStore memory;
  EXPECT_EQ(memory.AppendBatchesInFlightUseful(), 1u);
  AdvisingStore advising(memory, 3);
  HoldingStore store(advising, 3);  // a forwarding decorator between them
  EXPECT_EQ(store.AppendBatchesInFlightUseful(), 3u);
  Committer committer(store, {.batch_executions_max = 1});
  EXPECT_EQ(committer.stats().flushes_in_flight_max, 3u);
  EXPECT_EQ(CommitUnderLoad(committer, memory), 0);
  EXPECT_EQ(store.peak, 3u);
  EXPECT_EQ(committer.stats().flushes_in_flight_peak, 3u);
  EXPECT_FALSE(store.one_execution_in_two_writes);

  Committer one(advising, {.flushes_in_flight_max = 1});
  EXPECT_EQ(one.stats().flushes_in_flight_max, 1u);
  Committer plain(memory);
  EXPECT_EQ(plain.stats().flushes_in_flight_max, 1u);
}

// Group commit shares a durable write. A store without one (the memory
// store) is not group committed, whatever decorators wrap it: each append is
// the caller's own store call. (With a Committer, a decorator over the
// memory store ran the park cases at 0.14x the exec/s, BENCHMARKS.md.)
TEST(GroupCommitTest, OnlyAStoreWithDurableWritesIsGroupCommitted) {
  SystemClock clock;
  // One execution (start, one step, end: one append) on a fresh runtime.
  auto run_one = [&](store::EventStore& s) {
    Runtime rt(s, clock);
    EXPECT_TRUE(rt.Register("w", [](Context& ctx, const Json& in) -> Result<Json> {
      return ctx.Step("s", [&]() -> Result<Json> { return in; });
    }));
    Result<RunOutcome> out = rt.Start("w", "e", Json{{"n", 1}});
    EXPECT_TRUE(out && out->status == ExecutionStatus::kCompleted);
    return rt.commit_stats();
  };

  MemoryEventStore memory;
  EXPECT_FALSE(memory.GroupCommitUseful());
  HookStore wrapped(memory);  // a decorator answers what it wraps answers
  EXPECT_FALSE(wrapped.GroupCommitUseful());
  const CommitterStats direct = run_one(wrapped);
  EXPECT_EQ(direct.flushes_in_flight_max, 0u) << "a decorated memory store got a Committer";
  EXPECT_EQ(direct.requests, 1u);
  EXPECT_EQ(direct.store_writes, 1u);
  EXPECT_EQ(wrapped.appends.load(), 1);
  EXPECT_EQ(wrapped.batches.load(), 0);

  MemoryEventStore memory2;
  DurableLikeStore durable(memory2);
  HookStore wrapped_durable(durable);
  EXPECT_TRUE(wrapped_durable.GroupCommitUseful());
  const CommitterStats grouped = run_one(wrapped_durable);
  EXPECT_EQ(grouped.flushes_in_flight_max, 1u) << "a store with durable writes lost its Committer";
  EXPECT_EQ(grouped.requests, 1u);
  EXPECT_EQ(grouped.store_writes, 1u);
}

}  // namespace
}  // namespace once::runtime

#include "once/runtime/throughput.h"

namespace once::runtime {
namespace {

TEST(ThroughputTest, TheBenchEntryPointRunsEveryExecution) {
  store::MemoryEventStore memory;
  SystemClock clock;
  Result<ThroughputReport> r = MeasureThroughput(memory, clock, {.executions = 5'000});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->executions, 5'000u);
  EXPECT_EQ(r->failures, 0u);
  EXPECT_EQ(r->commits.requests, 5'000u);  // one append per execution
  EXPECT_EQ(memory.ReadRange("bench-4999", 1, store::kToEnd)->size(), 3u);
  std::printf("memory: %.0f exec/s, %.1f requests per store write\n", r->executions_per_second,
              double(r->commits.requests) / double(r->commits.store_writes));
}

}  // namespace
}  // namespace once::runtime
