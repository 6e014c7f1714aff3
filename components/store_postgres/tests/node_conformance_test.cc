// The NodeRegistry kit on PostgreSQL: the event store and the registry in a
// fresh schema of the server named by ONCE_TEST_POSTGRES_URL (skipped when
// unset, failed under CI=true).
#include "once/nodes_testing/node_conformance.h"

#include <chrono>
#include <thread>

#include "once/events/envelope.h"
#include "once/store_postgres/postgres_node_registry.h"
#include "test_database.h"

namespace once::nodes_testing {
namespace {

using store::testing::InCi;
using store::testing::TestPostgresUrl;
using store::testing::TestSchema;

Result<NodeHarness> MakePostgres() {
  static const SystemClock clock;
  std::string url = TestPostgresUrl();
  if (url.empty()) {
    if (InCi()) [] { FAIL() << "CI=true but ONCE_TEST_POSTGRES_URL is unset"; }();
    return MakeError(ErrorCode::kUnavailable, "ONCE_TEST_POSTGRES_URL is unset");
  }
  auto schema = std::make_shared<TestSchema>(url);
  ONCE_ASSIGN_OR_RETURN(auto store, store::PostgresEventStore::Open(schema->Options(), clock));
  store::PostgresNodeOptions options;
  options.conninfo = schema->Options().conninfo;
  options.schema = schema->name();
  ONCE_ASSIGN_OR_RETURN(auto registry, store::PostgresNodeRegistry::Open(options));
  NodeHarness h;
  h.keep_alive = schema;
  h.store = std::move(store);
  h.registry = std::move(registry);
  return h;
}

// The registry opened before any event store on a fresh schema creates the
// event store's schema (the run owners are its fences rows'), and the event
// store opened after it finds it current.
TEST(PostgresNodeRegistryTest, OpensFirstOnAFreshSchema) {
  std::string url = TestPostgresUrl();
  if (url.empty()) GTEST_SKIP() << "ONCE_TEST_POSTGRES_URL is unset";
  TestSchema schema(url);
  store::PostgresNodeOptions options;
  options.conninfo = schema.Options().conninfo;
  options.schema = schema.name();
  auto registry = store::PostgresNodeRegistry::Open(options);
  ASSERT_TRUE(registry) << registry.error().ToString();
  ASSERT_TRUE((*registry)->Heartbeat({.node_id = "a", .host = "h", .pid = 1}, 150));
  EXPECT_EQ(schema.Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(store::kPostgresSchemaVersion));
  static const SystemClock clock;
  auto events = store::PostgresEventStore::Open(schema.Options(), clock);
  ASSERT_TRUE(events) << events.error().ToString();
  store::AppendRequest req{.execution_id = "r", .expected_next = 1, .owner = "a"};
  req.events.push_back(
      events::KernelEvent(events::KernelKind::kExecutionStarted, events::Json{{"workflow", "w"}}));
  ASSERT_TRUE((*events)->Append(req));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto orphans = (*registry)->OrphanedRuns("b", "", 10, 60'000);
  ASSERT_TRUE(orphans) << orphans.error().ToString();
  ASSERT_EQ(orphans->size(), 1u);
  EXPECT_EQ((*orphans)[0].execution_id, "r");
}

// A park or an end leaves the owner in the fences row (the log releases it,
// with no write). The first orphan pass that finds no orphan clears those
// owners of its dead nodes, so that later passes, RunsOf and ForgetNodes do
// not probe them again; a row whose run runs again (taken over) is left.
TEST(PostgresNodeRegistryTest, TheSweepClearsTheOwnersTheLogReleased) {
  Result<NodeHarness> h = MakePostgres();
  if (!h && h.error().code == ErrorCode::kUnavailable) GTEST_SKIP() << h.error().ToString();
  ASSERT_TRUE(h) << h.error().ToString();
  auto& schema = *std::static_pointer_cast<TestSchema>(h->keep_alive);
  ASSERT_TRUE(h->registry->Heartbeat({.node_id = "self", .host = "h", .pid = 1}, 60'000));
  ASSERT_TRUE(h->registry->Heartbeat({.node_id = "x", .host = "h", .pid = 2}, 150));
  for (const char* id : {"a", "b", "c"}) {
    store::AppendRequest start{.execution_id = id, .expected_next = 1, .owner = "x"};
    start.events.push_back(events::KernelEvent(events::KernelKind::kExecutionStarted,
                                               events::Json{{"workflow", "w"}}));
    ASSERT_TRUE(h->store->Append(start));
    store::AppendRequest end{.execution_id = id, .expected_next = 2, .owner = "x"};
    end.events.push_back(
        events::KernelEvent(events::KernelKind::kExecutionCompleted, events::Json{{"value", 1}}));
    ASSERT_TRUE(h->store->Append(end));
  }
  EXPECT_EQ(schema.Sql("SELECT count(*) FROM fences WHERE owner = 'x'"), "3");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto orphans = h->registry->OrphanedRuns("self", "", 10, 60'000);
  ASSERT_TRUE(orphans) << orphans.error().ToString();
  EXPECT_TRUE(orphans->empty());
  EXPECT_EQ(schema.Sql("SELECT count(*) FROM fences WHERE owner IS NOT NULL"), "0");
  EXPECT_EQ(schema.Sql("SELECT swept FROM loom_nodes WHERE node_id = 'x'"), "t");
}

INSTANTIATE_TEST_SUITE_P(Postgres, NodeRegistryConformance,
                         testing::Values(NodeBackend{"Postgres", MakePostgres}), NodeBackendName);

}  // namespace
}  // namespace once::nodes_testing
