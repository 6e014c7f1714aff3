// The runtime as a node (issue 15): ownership of what it runs, the step
// gate, takeover of dead nodes' runs and of its own idle ones, and Recover
// leaving live nodes' runs alone. Memory store, memory registry, a manual
// clock for both (leases are judged by it).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <latch>
#include <mutex>
#include <thread>
#include <utility>

#include "once/nodes/memory_node_registry.h"
#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "test_stores.h"

namespace once::runtime {
namespace {

using nodes::MemoryNodeRegistry;
using nodes::Node;
using nodes::NodeOptions;
using std::chrono::milliseconds;
using store::MemoryEventStore;
using testing::HookStore;

constexpr int64_t kLeaseMs = 10'000;

NodeOptions Options(std::string id) {
  return NodeOptions{.info = {.node_id = std::move(id)},
                     .node_lease_ms = kLeaseMs,
                     .step_margin_ms = 2'000,
                     .step_wait_ms_max = 200};
}

std::optional<std::string> OwnerOf(store::EventStore& s, std::string_view id) {
  auto row = s.RunOwnerOf(id).value();
  if (!row) return std::nullopt;
  return row->owner;
}

class NodesTest : public ::testing::Test {
 protected:
  // step a; step b; return. Counts each step's runs.
  Status RegisterTwoSteps(Runtime& rt) {
    return rt.Register("two", [this](Context& ctx, const Json&) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return ++a_runs_; }));
      ONCE_RETURN_IF_ERROR(ctx.Step("b", [&]() -> Result<Json> { return ++b_runs_; }));
      return "done";
    });
  }
  // A run of "two" on node `node` that dies after step a is durable (its
  // next append fails, as if the process died): the run row names `node`.
  void CrashAfterStepA(Node& node, const std::string& id) {
    HookStore faulty(store_);
    Runtime rt(faulty, clock_, {.node = &node});
    ASSERT_TRUE(RegisterTwoSteps(rt));
    faulty.writes_left = 1;  // {STARTED, a} lands; {b, COMPLETED} fails
    ASSERT_FALSE(rt.Start("two", id, Json::object()));
    ASSERT_EQ(OwnerOf(store_, id), node.id());
  }

  ManualClock clock_;
  MemoryEventStore store_{store::Limits{}, clock_};
  MemoryNodeRegistry registry_{store_, clock_};
  std::atomic<int> a_runs_{0}, b_runs_{0};
};

TEST_F(NodesTest, WhatANodeRunsIsOwnedUntilItParksOrEnds) {
  Node a(registry_, clock_, Options("a"));
  ASSERT_TRUE(a.Beat());
  Runtime rt(store_, clock_, {.node = &a});
  std::optional<std::string> owner_in_step;
  ASSERT_TRUE(rt.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("one", [&]() -> Result<Json> { return 1; }));
    ONCE_RETURN_IF_ERROR(ctx.Step("two", [&]() -> Result<Json> {
      owner_in_step = OwnerOf(store_, ctx.execution_id());  // {STARTED, one} is durable
      EXPECT_TRUE(rt.RunningHere(ctx.execution_id()));
      return 2;
    }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return "done";
  }));
  Result<RunOutcome> out = rt.Start("w", "ex", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(owner_in_step, "a");
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(OwnerOf(store_, "ex"), std::nullopt);  // the park ended the run
  EXPECT_FALSE(rt.RunningHere("ex"));
  // A resume on another node: owned by it with the acquire, until the end.
  Node b(registry_, clock_, Options("b"));
  ASSERT_TRUE(b.Beat());
  Runtime rt_b(store_, clock_, {.node = &b});
  ASSERT_TRUE(rt_b.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("one", [&]() -> Result<Json> { return 1; }));
    ONCE_RETURN_IF_ERROR(ctx.Step("two", [&]() -> Result<Json> { return 2; }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return ctx.Step("three", [&]() -> Result<Json> {
      owner_in_step = OwnerOf(store_, ctx.execution_id());
      return 3;
    });
  }));
  ASSERT_TRUE(rt_b.Resume("ex", {.fence_if_parked_at = out->park_seq}));
  EXPECT_EQ(owner_in_step, "b");  // recorded by the acquire, before any append
  EXPECT_EQ(OwnerOf(store_, "ex"), std::nullopt);
  EXPECT_EQ(rt_b.Inspect("ex")->status, ExecutionStatus::kCompleted);
}

TEST_F(NodesTest, TakeoverClaimsOnlyWhatADeadNodeLeft) {
  Node a(registry_, clock_, Options("a"));
  Node b(registry_, clock_, Options("b"));
  ASSERT_TRUE(a.Beat());
  ASSERT_TRUE(b.Beat());
  CrashAfterStepA(a, "ex");
  Runtime rt_b(store_, clock_, {.node = &b});
  ASSERT_TRUE(RegisterTwoSteps(rt_b));
  // A is alive: nothing to take, and Recover leaves it alone too.
  TakeoverReport early = rt_b.Takeover().value();
  EXPECT_EQ(early.orphaned, 0u);
  RecoverReport recovered = rt_b.Recover().value();
  EXPECT_EQ(recovered.redriven, 0u);
  EXPECT_EQ(recovered.left_alive, 1u);
  EXPECT_EQ(b_runs_, 1);  // only the crashed run's
  // A's lease runs out (it beats no more); B beats on.
  clock_.Advance(milliseconds(kLeaseMs + 1));
  ASSERT_TRUE(b.Beat());
  TakeoverReport report = rt_b.Takeover().value();
  EXPECT_EQ(report.orphaned, 1u);
  EXPECT_EQ(report.redriven, 1u);
  EXPECT_TRUE(report.errors.empty()) << report.errors.front().ToString();
  EXPECT_EQ(rt_b.Inspect("ex")->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(a_runs_, 1);  // recorded before the crash: replayed
  EXPECT_EQ(b_runs_, 2);  // ran, died before its record: at least once
  EXPECT_EQ(OwnerOf(store_, "ex"), std::nullopt);
  EXPECT_EQ(store_.ReadFence("ex").value(), 1);  // the claim fenced A out
  // Nothing left to take.
  EXPECT_EQ(rt_b.Takeover().value().orphaned, 0u);
}

TEST_F(NodesTest, ARestartedNodeTakesItsOwnRunsBackAtOnce) {
  Node a(registry_, clock_, Options("a"));
  ASSERT_TRUE(a.Beat());
  CrashAfterStepA(a, "ex");
  // The same node id in a new process: its runs are claimed without
  // waiting for the lease (no body of this process runs them).
  Node again(registry_, clock_, Options("a"));
  ASSERT_TRUE(again.Beat());
  Runtime rt(store_, clock_, {.node = &again});
  ASSERT_TRUE(RegisterTwoSteps(rt));
  TakeoverReport report = rt.Takeover().value();
  EXPECT_EQ(report.redriven, 1u);
  EXPECT_EQ(rt.Inspect("ex")->status, ExecutionStatus::kCompleted);
}

TEST_F(NodesTest, TakeoverFromEveryNodeAtOnceRunsEachOrphanOnce) {
  Node dead(registry_, clock_, Options("dead"));
  ASSERT_TRUE(dead.Beat());
  constexpr int kOrphans = 20;
  for (int i = 0; i < kOrphans; ++i) CrashAfterStepA(dead, "ex-" + std::to_string(i));
  clock_.Advance(milliseconds(kLeaseMs + 1));
  constexpr int kNodes = 4;
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<std::unique_ptr<Runtime>> runtimes;
  for (int n = 0; n < kNodes; ++n) {
    nodes.push_back(std::make_unique<Node>(registry_, clock_, Options("n" + std::to_string(n))));
    ASSERT_TRUE(nodes.back()->Beat());
    runtimes.push_back(
        std::make_unique<Runtime>(store_, clock_, RuntimeOptions{.node = nodes.back().get()}));
    ASSERT_TRUE(RegisterTwoSteps(*runtimes.back()));
  }
  b_runs_ = 0;
  std::latch go(kNodes);
  std::vector<std::future<TakeoverReport>> reports;
  for (int n = 0; n < kNodes; ++n) {
    reports.push_back(std::async(std::launch::async, [&, n] {
      go.arrive_and_wait();
      return runtimes[n]->Takeover().value();
    }));
  }
  size_t redriven = 0;
  for (auto& f : reports) redriven += f.get().redriven;
  EXPECT_EQ(redriven, static_cast<size_t>(kOrphans));
  EXPECT_EQ(b_runs_, kOrphans);  // each orphan's step b ran once
  for (int i = 0; i < kOrphans; ++i) {
    EXPECT_EQ(runtimes[0]->Inspect("ex-" + std::to_string(i))->status, ExecutionStatus::kCompleted);
  }
}

TEST_F(NodesTest, ANodeWhoseHeartbeatIsLateStartsNoStep) {
  Node a(registry_, clock_, Options("a"));
  ASSERT_TRUE(a.Beat());
  Runtime rt(store_, clock_, {.node = &a});
  ASSERT_TRUE(RegisterTwoSteps(rt));
  clock_.Advance(milliseconds(8'000));  // lease 10 s, margin 2 s: the gate is closed
  Result<RunOutcome> out = rt.Start("two", "ex", Json::object());
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(a_runs_, 0);
  EXPECT_EQ(store_.Head("ex").value(), 0);
  // Renewed: steps start again.
  ASSERT_TRUE(a.Beat());
  ASSERT_TRUE(rt.Start("two", "ex", Json::object()));
  EXPECT_EQ(a_runs_, 1);
}

TEST_F(NodesTest, ALapsedLeaseAbandonsTheBodyAndTheNodeTakesItBack) {
  Node a(registry_, clock_, Options("a"));
  ASSERT_TRUE(a.Beat());
  Runtime rt(store_, clock_, {.node = &a});
  // Step a takes "too long": the node is judged dead meanwhile, then beats.
  ASSERT_TRUE(rt.Register("slow", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> {
      if (++a_runs_ == 1) {
        clock_.Advance(milliseconds(kLeaseMs + 1));
        EXPECT_TRUE(a.Beat().value().lapsed);
      }
      return 1;
    }));
    ONCE_RETURN_IF_ERROR(ctx.Step("b", [&]() -> Result<Json> { return ++b_runs_; }));
    return "done";
  }));
  Result<RunOutcome> out = rt.Start("slow", "ex", Json::object());
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kUnavailable);  // abandoned before step b
  EXPECT_EQ(b_runs_, 0);
  // Step a's result was made durable before the gate refused step b, and
  // nobody took the run: the node's own takeover re-drives it.
  TakeoverReport report = rt.Takeover().value();
  EXPECT_EQ(report.redriven, 1u);
  EXPECT_EQ(rt.Inspect("ex")->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(a_runs_, 1);
  EXPECT_EQ(b_runs_, 1);
}

TEST_F(NodesTest, ARunnerFencedOutByATakeoverIsRefusedAtItsRecord) {
  Node a(registry_, clock_, Options("a"));
  Node b(registry_, clock_, Options("b"));
  ASSERT_TRUE(a.Beat());
  ASSERT_TRUE(b.Beat());
  Runtime rt_a(store_, clock_, {.node = &a});
  Runtime rt_b(store_, clock_, {.node = &b});
  ASSERT_TRUE(RegisterTwoSteps(rt_b));
  // On A, step b runs across A's death and B's takeover (the window that
  // remains: a step that started before the gate closed).
  ASSERT_TRUE(rt_a.Register("two", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return ++a_runs_; }));
    ONCE_RETURN_IF_ERROR(ctx.Step("b", [&]() -> Result<Json> {
      clock_.Advance(milliseconds(kLeaseMs + 1));
      EXPECT_TRUE(b.Beat());
      TakeoverReport taken = rt_b.Takeover().value();
      EXPECT_EQ(taken.redriven, 1u);
      return ++b_runs_;
    }));
    return "done";
  }));
  Result<RunOutcome> out = rt_a.Start("two", "ex", Json::object());
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kStaleFence);  // A's record is refused
  EXPECT_EQ(rt_b.Inspect("ex")->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(b_runs_, 2);  // the window: both ran step b; one record
  int completed = 0;
  std::vector<Envelope> log = store_.ReadRange("ex", 1, store::kToEnd).value();
  for (const Envelope& e : log) {
    completed += e.Is(events::KernelKind::kStepCompleted) && e.payload["name"] == "b";
  }
  EXPECT_EQ(completed, 1);
}

TEST_F(NodesTest, TakeoverNeedsANode) {
  Runtime rt(store_, clock_);
  EXPECT_EQ(rt.Takeover().error().code, ErrorCode::kUnsupported);
}

// A child this node creates is its own to run from its first event: a
// takeover of this node's own runs between the child's start and its
// scheduled body must leave it alone. (The chaos test saw the takeover
// claim the child and run its first step while the scheduled body ran it
// too: one effect twice in one live process.)
TEST_F(NodesTest, OwnTakeoverLeavesAChildWhoseBodyIsScheduledHere) {
  Node a(registry_, clock_, Options("a"));
  ASSERT_TRUE(a.Beat());
  Runtime rt(store_, clock_, {.node = &a});  // workers 0: the child runs after the parent
  ASSERT_TRUE(RegisterTwoSteps(rt));
  ASSERT_TRUE(rt.Register("parent", [&rt](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.StartChild("two", "c", Json::object()));
    Result<TakeoverReport> taken = rt.Takeover();  // the child is scheduled, not yet run
    EXPECT_TRUE(taken);
    if (taken) {
      EXPECT_EQ(taken->redriven, 0u);
    }
    return ctx.AwaitChild("c");
  }));
  ASSERT_TRUE(rt.Start("parent", "p", Json::object()));
  EXPECT_EQ(a_runs_.load(), 1);
  EXPECT_EQ(b_runs_.load(), 1);
  EXPECT_FALSE(rt.RunningHere(ChildExecutionId("p", "c")));  // the mark ends with the body
}

// A parent re-driven after its node died finds its child already created
// (the node died between the child's start and the parent's CHILD_STARTED):
// the child is not run unfenced by the parent's taker, but claimed by
// takeover like every dead node's run, so it runs once. (With workers 0 the
// old unfenced run came after the takeover had finished the child, so this
// case passed before the fix too: it keeps the path working; the race it
// closes needs threads, and the chaos test is where it showed.)
TEST_F(NodesTest, AChildThatExistedIsLeftToTakeover) {
  Node a(registry_, clock_, Options("a"));
  Node b(registry_, clock_, Options("b"));
  ASSERT_TRUE(a.Beat());
  auto register_parent = [](Runtime& rt) {
    return rt.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(ctx.StartChild("two", "c", Json::object()));
      return ctx.AwaitChild("c");
    });
  };
  {
    HookStore faulty(store_);
    Runtime rt(faulty, clock_, {.node = &a});
    ASSERT_TRUE(RegisterTwoSteps(rt));
    ASSERT_TRUE(register_parent(rt));
    faulty.writes_left = 2;  // the parent's start and the child's start land; CHILD_STARTED fails
    ASSERT_FALSE(rt.Start("parent", "p", Json::object()));
  }
  ASSERT_EQ(OwnerOf(store_, ChildExecutionId("p", "c")), "a");
  clock_.Advance(milliseconds(kLeaseMs + 1));
  ASSERT_TRUE(b.Beat());
  Runtime rt(store_, clock_, {.node = &b});
  ASSERT_TRUE(RegisterTwoSteps(rt));
  ASSERT_TRUE(register_parent(rt));
  for (int pass = 0; pass < 3; ++pass) ASSERT_TRUE(rt.Takeover());
  rt.WaitIdle();
  EXPECT_EQ(a_runs_.load(), 1);
  EXPECT_EQ(b_runs_.load(), 1);
}

// Takeover re-drives what it claimed on the workers: a dead node's bodies
// that run long resume side by side, not one after another behind the
// first. (The latency mode of the chaos test saw a dead node's ten running
// bodies resume up to 33 s after the kill with a 3 s lease.)
TEST_F(NodesTest, TakeoverResumesADeadNodesRunsSideBySide) {
  Node a(registry_, clock_, Options("a"));
  ASSERT_TRUE(a.Beat());
  CrashAfterStepA(a, "x");
  CrashAfterStepA(a, "y");
  clock_.Advance(milliseconds(kLeaseMs + 1));
  Node b(registry_, clock_, Options("b"));
  ASSERT_TRUE(b.Beat());
  std::mutex mu;
  std::condition_variable cv;
  int in_step_b = 0;
  std::atomic<int> saw_both{0};
  Runtime rt(store_, clock_, {.workers = 2, .node = &b});
  ASSERT_TRUE(rt.Register("two", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return 0; }));
    ONCE_RETURN_IF_ERROR(ctx.Step("b", [&]() -> Result<Json> {
      std::unique_lock lock(mu);
      ++in_step_b;
      cv.notify_all();
      // Each waits (at most 10 s) for the other body to be in this step too.
      if (cv.wait_for(lock, std::chrono::seconds(10), [&] { return in_step_b == 2; })) ++saw_both;
      return 2;
    }));
    return "done";
  }));
  Result<TakeoverReport> taken = rt.Takeover();
  ASSERT_TRUE(taken) << taken.error().ToString();
  EXPECT_EQ(taken->redriven, 2u);
  rt.WaitIdle();
  EXPECT_EQ(saw_both.load(), 2);
  EXPECT_EQ(rt.Takeover().value().redriven, 0u);  // nothing claimed twice
}

// A resume's acquire names this node in the run row before the body runs:
// this node's own takeover in between must leave the run alone. (The chaos
// test on PostgreSQL saw it claim the run and run the next step beside the
// resumed body; with the log still showing the park it would forget the
// row of a running body instead.)
TEST_F(NodesTest, OwnTakeoverBetweenAResumesAcquireAndItsBodyLeavesTheRunAlone) {
  Node a(registry_, clock_, Options("a"));
  ASSERT_TRUE(a.Beat());
  testing::HookSeparateTailStore hooked(store_);
  Runtime rt(hooked, clock_, {.node = &a});
  ASSERT_TRUE(rt.Register("nap", [this](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    ONCE_RETURN_IF_ERROR(ctx.Step("b", [&]() -> Result<Json> { return ++b_runs_; }));
    return "done";
  }));
  Result<RunOutcome> parked = rt.Start("nap", "ex", Json::object());
  ASSERT_TRUE(parked);
  std::optional<TakeoverReport> between;
  hooked.before_acquire_if = [&](int) {
    // The tail read right after the acquire: the row names "a" already.
    hooked.before_next_read = [&] {
      EXPECT_EQ(OwnerOf(store_, "ex"), "a");
      between = rt.Takeover().value();
    };
  };
  Result<RunOutcome> resumed = rt.Resume("ex", {.fence_if_parked_at = parked->park_seq});
  ASSERT_TRUE(resumed) << resumed.error().ToString();
  EXPECT_EQ(resumed->status, ExecutionStatus::kCompleted);
  ASSERT_TRUE(between);
  EXPECT_EQ(between->orphaned, 0u);
  EXPECT_EQ(between->forgotten, 0u);
  EXPECT_EQ(between->redriven, 0u);
  EXPECT_EQ(b_runs_.load(), 1);
}

}  // namespace
}  // namespace once::runtime
