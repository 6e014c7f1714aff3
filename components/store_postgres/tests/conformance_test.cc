// The EventStore conformance kit on PostgreSQL. Every store the kit asks for
// is a fresh random schema on the server named by ONCE_TEST_POSTGRES_URL
// (dropped when the case ends); open_another opens a second store (its own
// pool and connections) on the same schema. Unset, every case skips, unless
// CI=true, where a missing server fails every case.

#include "once/store_testing/conformance.h"

#include <memory>

#include "once/store_postgres/postgres_event_store.h"
#include "test_database.h"

namespace {

using once::ErrorCode;
using once::MakeError;
using once::Result;
using once::store::PostgresEventStore;
using once::store::PostgresOptions;
using once::store::testing::InCi;
using once::store::testing::TestPostgresUrl;
using once::store::testing::TestSchema;
using once::store_testing::BackendFactory;
using once::store_testing::StoreConfig;
using once::store_testing::StoreHarness;

Result<StoreHarness> MakePostgres(const StoreConfig& config) {
  std::string url = TestPostgresUrl();
  if (url.empty()) {
    return MakeError(InCi() ? ErrorCode::kInternal : ErrorCode::kUnavailable,
                     "ONCE_TEST_POSTGRES_URL is unset");
  }
  auto schema = std::make_shared<TestSchema>(url);
  PostgresOptions options = schema->Options();
  options.limits = config.limits;
  options.connections_max = 4;
  const once::Clock* clock = config.clock;
  ONCE_ASSIGN_OR_RETURN(auto store, PostgresEventStore::Open(options, *clock));
  StoreHarness h;
  h.keep_alive = schema;
  h.store = std::move(store);
  h.open_another = [options, clock]() -> std::unique_ptr<once::store::EventStore> {
    auto another = PostgresEventStore::Open(options, *clock);
    EXPECT_TRUE(another.has_value()) << (another ? "" : another.error().ToString());
    return another ? std::move(*another) : nullptr;
  };
  return h;
}

BackendFactory PostgresFactory() { return {.name = "Postgres", .make = MakePostgres}; }

}  // namespace

ONCE_INSTANTIATE_STORE_CONFORMANCE(Postgres, PostgresFactory());
