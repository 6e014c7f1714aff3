// The NodeRegistry cases (node_registry.h is the spec).
#include "once/nodes_testing/node_conformance.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "once/events/envelope.h"

namespace once::nodes_testing {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NodeRegistryConformance);

void NodeRegistryConformance::SetUp() {
  Result<NodeHarness> h = GetParam().make();
  if (!h && h.error().code == ErrorCode::kUnavailable) {
    GTEST_SKIP() << GetParam().name << " unavailable: " << h.error().ToString();
  }
  ASSERT_TRUE(h) << h.error().ToString();
  h_ = std::move(*h);
}

void NodeRegistryConformance::TearDown() {
  h_.registry.reset();
  h_.store.reset();
}

namespace {

using nodes::Beat;
using nodes::NodeInfo;
using nodes::NodeRecord;
using nodes::RunRow;

constexpr int64_t kShortLeaseMs = 150;
constexpr int64_t kLongLeaseMs = 60'000;

void SleepPast(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms + 100)); }

NodeInfo Info(std::string id) {
  return NodeInfo{.node_id = std::move(id), .host = "host-1", .pid = 42, .version = "test"};
}

// An execution whose body `owner` runs: one owned append that leaves it running.
void Running(store::EventStore& s, const std::string& id, std::string_view owner) {
  store::AppendRequest req{.execution_id = id, .expected_next = 1, .owner = owner};
  req.events.push_back(
      events::KernelEvent(events::KernelKind::kExecutionStarted, events::Json{{"workflow", "w"}}));
  Result<int64_t> r = s.Append(req);
  ASSERT_TRUE(r) << r.error().ToString();
}

// The append after `Running` that parks (`park`) or ends the execution,
// naming no owner: whoever appends it, it releases the run row.
void Leaves(store::EventStore& s, const std::string& id, bool park) {
  store::AppendRequest req{.execution_id = id, .expected_next = 2};
  req.events.push_back(park ? events::KernelEvent(events::KernelKind::kExecutionSuspended,
                                                  events::Json{{"on", "timer"}})
                            : events::KernelEvent(events::KernelKind::kExecutionCompleted,
                                                  events::Json{{"value", 1}}));
  Result<int64_t> r = s.Append(req);
  ASSERT_TRUE(r) << r.error().ToString();
}

std::vector<std::string> Ids(const std::vector<RunRow>& rows) {
  std::vector<std::string> out;
  for (const RunRow& r : rows) out.push_back(r.execution_id);
  return out;
}

const NodeRecord* Find(const std::vector<NodeRecord>& nodes, std::string_view id) {
  for (const NodeRecord& n : nodes) {
    if (n.info.node_id == id) return &n;
  }
  return nullptr;
}

TEST_P(NodeRegistryConformance, AHeartbeatRegistersThenRenews) {
  Result<Beat> first = registry().Heartbeat(Info("node-a"), kLongLeaseMs);
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_TRUE(first->first);
  EXPECT_FALSE(first->lapsed);
  Result<Beat> again = registry().Heartbeat(Info("node-a"), kLongLeaseMs);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->first);
  EXPECT_FALSE(again->lapsed);
  EXPECT_GE(again->at_ms, first->at_ms);
  auto nodes = registry().Nodes();
  ASSERT_TRUE(nodes);
  const NodeRecord* a = Find(*nodes, "node-a");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->alive);
  EXPECT_FALSE(a->stopped);
  EXPECT_EQ(a->info.host, "host-1");
  EXPECT_EQ(a->info.pid, 42);
  EXPECT_EQ(a->info.version, "test");
  EXPECT_EQ(a->lease_ms, kLongLeaseMs);
  EXPECT_EQ(a->started_at_ms, first->at_ms);
  EXPECT_EQ(a->heartbeat_at_ms, again->at_ms);
  // The store's clock agrees with the beats.
  Result<int64_t> now = registry().NowMs();
  ASSERT_TRUE(now);
  EXPECT_GE(*now, again->at_ms);
}

TEST_P(NodeRegistryConformance, ALateHeartbeatIsLapsedAndTheNodeWasDeadMeanwhile) {
  ASSERT_TRUE(registry().Heartbeat(Info("node-a"), kShortLeaseMs));
  SleepPast(kShortLeaseMs);
  auto nodes = registry().Nodes();
  ASSERT_TRUE(nodes);
  ASSERT_NE(Find(*nodes, "node-a"), nullptr);
  EXPECT_FALSE(Find(*nodes, "node-a")->alive);
  Result<Beat> late = registry().Heartbeat(Info("node-a"), kShortLeaseMs);
  ASSERT_TRUE(late);
  EXPECT_TRUE(late->lapsed);
  EXPECT_TRUE(Find(registry().Nodes().value(), "node-a")->alive);
}

TEST_P(NodeRegistryConformance, OrphanedRunsAreTheRunsOfDeadNodesOnly) {
  ASSERT_TRUE(registry().Heartbeat(Info("alive"), kLongLeaseMs));
  ASSERT_TRUE(registry().Heartbeat(Info("expired"), kShortLeaseMs));
  ASSERT_TRUE(registry().Heartbeat(Info("stopped"), kLongLeaseMs));
  ASSERT_TRUE(registry().Heartbeat(Info("self"), kShortLeaseMs));
  Running(store(), "r-alive", "alive");
  Running(store(), "r-expired", "expired");
  Running(store(), "r-stopped", "stopped");
  Running(store(), "r-ghost", "never-registered");
  Running(store(), "r-self", "self");
  ASSERT_TRUE(registry().Stop("stopped"));
  // Before the lease: only the stopped node's run (and not the unknown
  // owner's, whose row is younger than the lease given).
  auto early = registry().OrphanedRuns("self", "", 100, kLongLeaseMs);
  ASSERT_TRUE(early) << early.error().ToString();
  EXPECT_EQ(Ids(*early), (std::vector<std::string>{"r-stopped"}));
  SleepPast(kShortLeaseMs);
  auto later = registry().OrphanedRuns("self", "", 100, kShortLeaseMs);
  ASSERT_TRUE(later);
  EXPECT_EQ(Ids(*later), (std::vector<std::string>{"r-expired", "r-ghost", "r-stopped"}));
  for (const RunRow& r : *later) {
    if (r.execution_id == "r-expired") {
      EXPECT_EQ(r.owner, "expired");
    }
    EXPECT_GT(r.since_ms, 0);
  }
  // Paging by execution id.
  auto page = registry().OrphanedRuns("self", "r-expired", 1, kShortLeaseMs);
  ASSERT_TRUE(page);
  EXPECT_EQ(Ids(*page), (std::vector<std::string>{"r-ghost"}));
  // A beat revives a stopped node: its runs are no longer orphaned.
  ASSERT_TRUE(registry().Heartbeat(Info("stopped"), kLongLeaseMs));
  auto revived = registry().OrphanedRuns("self", "", 100, kShortLeaseMs);
  ASSERT_TRUE(revived);
  EXPECT_EQ(Ids(*revived), (std::vector<std::string>{"r-expired", "r-ghost"}));
}

// A dead node none of whose runs is left may stop being looked for (the
// PostgreSQL registry marks it swept), but not for good: once it beats again
// and dies again, its new runs are orphans like any.
TEST_P(NodeRegistryConformance, ANodeThatDiesAgainIsLookedForAgain) {
  ASSERT_TRUE(registry().Heartbeat(Info("self"), kLongLeaseMs));
  ASSERT_TRUE(registry().Heartbeat(Info("x"), kShortLeaseMs));
  Running(store(), "r-1", "x");
  SleepPast(kShortLeaseMs);
  EXPECT_EQ(Ids(registry().OrphanedRuns("self", "", 100, kLongLeaseMs).value()),
            (std::vector<std::string>{"r-1"}));
  ASSERT_TRUE(registry().ForgetRun("r-1", "x"));  // as takeover would, for a run that ended
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_TRUE(registry().OrphanedRuns("self", "", 100, kLongLeaseMs).value().empty());
  }
  ASSERT_TRUE(registry().Heartbeat(Info("x"), kShortLeaseMs));
  Running(store(), "r-2", "x");
  EXPECT_TRUE(registry().OrphanedRuns("self", "", 100, kLongLeaseMs).value().empty());
  SleepPast(kShortLeaseMs);
  EXPECT_EQ(Ids(registry().OrphanedRuns("self", "", 100, kLongLeaseMs).value()),
            (std::vector<std::string>{"r-2"}));
  // Stopped (drained) rather than lapsed: the same.
  ASSERT_TRUE(registry().Heartbeat(Info("y"), kLongLeaseMs));
  EXPECT_TRUE(registry().OrphanedRuns("self", "", 100, kLongLeaseMs).value().size() == 1);
  Running(store(), "r-3", "y");
  ASSERT_TRUE(registry().Stop("y"));
  EXPECT_EQ(Ids(registry().OrphanedRuns("self", "", 100, kLongLeaseMs).value()),
            (std::vector<std::string>{"r-2", "r-3"}));
}

// A run that parked or ended is no one's: not an orphan of its dead node,
// not in RunsOf, and it does not keep its node from being forgotten.
TEST_P(NodeRegistryConformance, ARunThatParkedOrEndedIsNoOnes) {
  ASSERT_TRUE(registry().Heartbeat(Info("self"), kLongLeaseMs));
  ASSERT_TRUE(registry().Heartbeat(Info("x"), kShortLeaseMs));
  Running(store(), "r-ended", "x");
  Running(store(), "r-parked", "x");
  Running(store(), "r-running", "x");
  Leaves(store(), "r-ended", /*park=*/false);
  Leaves(store(), "r-parked", /*park=*/true);
  EXPECT_EQ(Ids(registry().RunsOf("x", "", 100).value()), (std::vector<std::string>{"r-running"}));
  SleepPast(kShortLeaseMs);
  EXPECT_EQ(Ids(registry().OrphanedRuns("self", "", 100, kLongLeaseMs).value()),
            (std::vector<std::string>{"r-running"}));
  EXPECT_EQ(registry().ForgetNodes(0).value(), 0u);  // x still owns r-running
  ASSERT_TRUE(registry().ForgetRun("r-running", "x"));
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_TRUE(registry().OrphanedRuns("self", "", 100, kLongLeaseMs).value().empty());
  }
  EXPECT_EQ(registry().ForgetNodes(0).value(), 1u);
  for (const char* id : {"r-ended", "r-parked", "r-running"}) {
    Result<std::optional<store::RunOwner>> row = store().RunOwnerOf(id);
    ASSERT_TRUE(row);
    EXPECT_FALSE(row->has_value()) << id;
  }
}

TEST_P(NodeRegistryConformance, RunsOfListsOneOwnersRows) {
  Running(store(), "b-2", "b");
  Running(store(), "a-1", "a");
  Running(store(), "b-1", "b");
  auto mine = registry().RunsOf("b", "", 100);
  ASSERT_TRUE(mine);
  EXPECT_EQ(Ids(*mine), (std::vector<std::string>{"b-1", "b-2"}));
  auto rest = registry().RunsOf("b", "b-1", 100);
  ASSERT_TRUE(rest);
  EXPECT_EQ(Ids(*rest), (std::vector<std::string>{"b-2"}));
  EXPECT_EQ(registry().RunsOf("b", "", 0).error().code, ErrorCode::kInvalidArgument);
}

TEST_P(NodeRegistryConformance, ForgetRunDeletesOnlyARowThatStillNamesTheOwner) {
  Running(store(), "ex", "a");
  ASSERT_TRUE(registry().ForgetRun("ex", "b"));
  EXPECT_EQ(Ids(registry().RunsOf("a", "", 10).value()), (std::vector<std::string>{"ex"}));
  ASSERT_TRUE(registry().ForgetRun("ex", "a"));
  EXPECT_TRUE(registry().RunsOf("a", "", 10).value().empty());
  Result<std::optional<store::RunOwner>> row = store().RunOwnerOf("ex");
  ASSERT_TRUE(row);
  EXPECT_FALSE(row->has_value());
}

TEST_P(NodeRegistryConformance, ForgetNodesKeepsTheLivingAndTheOwners) {
  ASSERT_TRUE(registry().Heartbeat(Info("alive"), kLongLeaseMs));
  ASSERT_TRUE(registry().Heartbeat(Info("dead-owner"), kShortLeaseMs));
  ASSERT_TRUE(registry().Heartbeat(Info("dead"), kShortLeaseMs));
  Running(store(), "ex", "dead-owner");
  SleepPast(kShortLeaseMs);
  Result<size_t> forgotten = registry().ForgetNodes(0);
  ASSERT_TRUE(forgotten);
  EXPECT_EQ(*forgotten, 1u);
  auto nodes = registry().Nodes().value();
  EXPECT_NE(Find(nodes, "alive"), nullptr);
  EXPECT_NE(Find(nodes, "dead-owner"), nullptr);
  EXPECT_EQ(Find(nodes, "dead"), nullptr);
}

TEST_P(NodeRegistryConformance, BadInputIsRefused) {
  EXPECT_EQ(registry().Heartbeat(Info(""), kLongLeaseMs).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(registry().Heartbeat(Info("a\nb"), kLongLeaseMs).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(registry().Heartbeat(Info("ok"), 0).error().code, ErrorCode::kInvalidArgument);
  NodeInfo long_host = Info("ok");
  long_host.host = std::string(registry().limits().node_text_bytes_max + 1, 'h');
  EXPECT_EQ(registry().Heartbeat(long_host, kLongLeaseMs).error().code, ErrorCode::kLimitExceeded);
  EXPECT_TRUE(registry().Nodes().value().empty());
}

TEST_P(NodeRegistryConformance, ManyNodesBeatAtOnce) {
  constexpr int kNodes = 8;
  constexpr int kBeats = 20;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int n = 0; n < kNodes; ++n) {
    threads.emplace_back([&, n] {
      for (int i = 0; i < kBeats; ++i) {
        Result<Beat> b = registry().Heartbeat(Info("node-" + std::to_string(n)), kLongLeaseMs);
        if (!b || b->lapsed || (i == 0) != b->first) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(registry().Nodes().value().size(), static_cast<size_t>(kNodes));
}

}  // namespace
}  // namespace once::nodes_testing
