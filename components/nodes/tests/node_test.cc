// The Node's side of the lease: the step gate and the epoch (node.h).
#include "once/nodes/node.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "once/nodes/memory_node_registry.h"

namespace once::nodes {
namespace {

using std::chrono::milliseconds;

class NodeTest : public ::testing::Test {
 protected:
  NodeOptions Options(std::string id) {
    return NodeOptions{.info = {.node_id = std::move(id)},
                       .heartbeat_interval_ms = 1'000,
                       .node_lease_ms = 10'000,
                       .step_margin_ms = 2'000,
                       .step_wait_ms_max = 300};
  }
  ManualClock clock_;  // the store's clock and the node's local one
  store::MemoryEventStore store_{store::Limits{}, clock_};
  MemoryNodeRegistry registry_{store_, clock_};
};

TEST_F(NodeTest, TheGateOpensWithAHeartbeatAndClosesBeforeTheLeaseRunsOut) {
  Node node(registry_, clock_, Options("a"));
  EXPECT_FALSE(node.GateOpen());  // never beaten
  EXPECT_EQ(node.PermitStep(0).error().code, ErrorCode::kUnavailable);
  ASSERT_TRUE(node.Beat());
  EXPECT_TRUE(node.GateOpen());
  EXPECT_TRUE(node.PermitStep(0));
  // Eight seconds on (lease 10 s, margin 2 s): closed, although the store
  // still counts the node alive for two more seconds.
  clock_.Advance(milliseconds(7'999));
  EXPECT_TRUE(node.GateOpen());
  clock_.Advance(milliseconds(1));
  EXPECT_FALSE(node.GateOpen());
  EXPECT_TRUE(registry_.Nodes().value()[0].alive);
  EXPECT_EQ(node.PermitStep(0).error().code, ErrorCode::kUnavailable);
  // A renewal in time opens it again, same epoch: a waiting step goes on.
  auto waiting = std::async(std::launch::async, [&] { return node.PermitStep(0); });
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(node.Beat());
  EXPECT_TRUE(waiting.get());
  EXPECT_EQ(node.epoch(), 0u);
}

TEST_F(NodeTest, ALapsedLeaseAbandonsTheBodiesOfTheOldEpoch) {
  Node node(registry_, clock_, Options("a"));
  ASSERT_TRUE(node.Beat());
  uint64_t started = node.epoch();
  clock_.Advance(milliseconds(10'001));  // dead by the store's clock
  Result<Beat> late = node.Beat();
  ASSERT_TRUE(late);
  EXPECT_TRUE(late->lapsed);
  EXPECT_EQ(node.epoch(), started + 1);
  Status refused = node.PermitStep(started);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(node.PermitStep(node.epoch()));  // bodies of the new epoch run
}

TEST_F(NodeTest, ReleaseDrainsAndStopsTheNodeForOthers) {
  Node node(registry_, clock_, Options("a"));
  ASSERT_TRUE(node.Beat());
  ASSERT_TRUE(node.Release());
  EXPECT_TRUE(node.draining());
  EXPECT_EQ(node.PermitStep(node.epoch()).error().code, ErrorCode::kCancelled);
  auto nodes = registry_.Nodes().value();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(nodes[0].stopped);
  EXPECT_FALSE(nodes[0].alive);
}

TEST_F(NodeTest, TheHeartbeatThreadRenews) {
  SystemClock real;
  store::MemoryEventStore store(store::Limits{}, real);
  MemoryNodeRegistry registry(store, real);
  NodeOptions options = Options("a");
  options.heartbeat_interval_ms = 20;
  options.node_lease_ms = 200;
  options.step_margin_ms = 50;
  Node node(registry, real, options);
  node.Start();
  std::this_thread::sleep_for(milliseconds(400));  // past two leases
  EXPECT_TRUE(node.GateOpen());
  EXPECT_EQ(node.epoch(), 0u);
  node.StopHeartbeats();
  std::this_thread::sleep_for(milliseconds(250));
  EXPECT_FALSE(node.GateOpen());
  EXPECT_FALSE(registry.Nodes().value()[0].alive);
}

}  // namespace
}  // namespace once::nodes
