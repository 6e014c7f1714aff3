// The NodeRegistry kit on PostgreSQL: the event store and the registry in a
// fresh schema of the server named by ONCE_TEST_POSTGRES_URL (skipped when
// unset, failed under CI=true).
#include "once/nodes_testing/node_conformance.h"

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

INSTANTIATE_TEST_SUITE_P(Postgres, NodeRegistryConformance,
                         testing::Values(NodeBackend{"Postgres", MakePostgres}), NodeBackendName);

}  // namespace
}  // namespace once::nodes_testing
