// The TimerStore conformance kit on PostgreSQL. Every store the kit asks for
// works in a fresh random schema on the server named by
// ONCE_TEST_POSTGRES_URL (dropped when the case ends). Unset, every case
// skips, unless CI=true, where a missing server fails every case.

#include "once/timers_testing/timer_conformance.h"

#include <memory>

#include "once/store_postgres/postgres_timer_store.h"
#include "test_database.h"

namespace once::timers_testing {
namespace {

using store::PostgresTimerOptions;
using store::PostgresTimerStore;
using store::testing::InCi;
using store::testing::TestPostgresUrl;
using store::testing::TestSchema;

// The store, then its schema: members go in reverse order, so the pool
// closes before the schema is dropped.
struct Owned {
  std::unique_ptr<TestSchema> schema;
  std::unique_ptr<PostgresTimerStore> store;
};

Result<std::shared_ptr<timers::TimerStore>> MakePostgresTimers() {
  std::string url = TestPostgresUrl();
  if (url.empty()) {
    // A fatal failure, so that the case body (which the kit's SetUp then
    // skips) does not run against no store.
    if (InCi()) [] { FAIL() << "CI=true but ONCE_TEST_POSTGRES_URL is unset"; }();
    return MakeError(ErrorCode::kUnavailable, "ONCE_TEST_POSTGRES_URL is unset");
  }
  auto owned = std::make_shared<Owned>();
  owned->schema = std::make_unique<TestSchema>(url);
  PostgresTimerOptions options;
  options.conninfo = owned->schema->Options().conninfo;
  options.schema = owned->schema->name();
  ONCE_ASSIGN_OR_RETURN(owned->store, PostgresTimerStore::Open(options));
  timers::TimerStore* store = owned->store.get();
  return std::shared_ptr<timers::TimerStore>(std::move(owned), store);
}

INSTANTIATE_TEST_SUITE_P(Postgres, TimerStoreConformance,
                         testing::Values(TimerBackend{"postgres", MakePostgresTimers}),
                         TimerBackendName);

}  // namespace
}  // namespace once::timers_testing
