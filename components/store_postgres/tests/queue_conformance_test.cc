// The QueueStore kit on PostgreSQL: a fresh schema of the server named by
// ONCE_TEST_POSTGRES_URL per case (skipped when unset, failed under CI=true).
#include "once/queues_testing/queue_conformance.h"

#include "once/store_postgres/postgres_queue_store.h"
#include "test_database.h"

namespace once::queues_testing {
namespace {

using store::testing::InCi;
using store::testing::TestPostgresUrl;
using store::testing::TestSchema;

Result<std::shared_ptr<queues::QueueStore>> MakePostgres() {
  std::string url = TestPostgresUrl();
  if (url.empty()) {
    if (InCi()) [] { FAIL() << "CI=true but ONCE_TEST_POSTGRES_URL is unset"; }();
    return MakeError(ErrorCode::kUnavailable, "ONCE_TEST_POSTGRES_URL is unset");
  }
  struct Owned {
    std::unique_ptr<TestSchema> schema;
    std::unique_ptr<store::PostgresQueueStore> store;
  };
  auto owned = std::make_shared<Owned>();
  owned->schema = std::make_unique<TestSchema>(url);
  store::PostgresQueueOptions options;
  options.conninfo = owned->schema->Options().conninfo;
  options.schema = owned->schema->name();
  options.connections_max = 8;
  ONCE_ASSIGN_OR_RETURN(owned->store, store::PostgresQueueStore::Open(options));
  queues::QueueStore* raw = owned->store.get();
  return std::shared_ptr<queues::QueueStore>(std::move(owned), raw);
}

INSTANTIATE_TEST_SUITE_P(Postgres, QueueStoreConformance,
                         testing::Values(QueueBackend{"Postgres", MakePostgres}), QueueBackendName);

}  // namespace
}  // namespace once::queues_testing
