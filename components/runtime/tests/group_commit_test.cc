// Group commit and the worker pool: many executions at once.
#include <gtest/gtest.h>

#include <thread>

#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "test_stores.h"

namespace once::runtime {
namespace {

using store::MemoryEventStore;
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
      results[i] = committer.Commit(
          {.execution_id = ids[i],
           .expected_next = 2,
           .events = {events::KernelEvent(events::KernelKind::kStepCompleted, Json(i))},
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

TEST(GroupCommitTest, ManyConcurrentExecutionsShareStoreWrites) {
  ManualClock clock;
  MemoryEventStore memory(store::Limits{}, clock);
  HookStore store(memory);
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
