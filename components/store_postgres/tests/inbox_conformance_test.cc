// The InboxStore conformance kit on PostgreSQL. Every case works in a fresh
// random schema on the server named by ONCE_TEST_POSTGRES_URL (dropped when
// the case ends); every Open is a new store object (its own pool) on that
// schema. Unset, every case skips, unless CI=true, where it fails.

#include "once/inbox_testing/inbox_conformance.h"

#include <memory>

#include "once/store_postgres/postgres_inbox_store.h"
#include "test_database.h"

namespace once::inbox_testing {
namespace {

using store::PostgresInboxOptions;
using store::PostgresInboxStore;
using store::testing::InCi;
using store::testing::TestPostgresUrl;
using store::testing::TestSchema;

Result<InboxOpener> MakePostgresDatabase() {
  std::string url = TestPostgresUrl();
  if (url.empty()) {
    if (InCi()) [] { FAIL() << "CI=true but ONCE_TEST_POSTGRES_URL is unset"; }();
    return MakeError(ErrorCode::kUnavailable, "ONCE_TEST_POSTGRES_URL is unset");
  }
  std::shared_ptr<TestSchema> schema = std::make_shared<TestSchema>(url);
  return InboxOpener(
      [schema](const inbox::InboxLimits& limits) -> Result<std::shared_ptr<inbox::InboxStore>> {
        PostgresInboxOptions options;
        options.conninfo = schema->Options().conninfo;
        options.schema = schema->name();
        options.limits = limits;
        ONCE_ASSIGN_OR_RETURN(auto opened, PostgresInboxStore::Open(options));
        // The store, then its schema: the pool closes before the drop.
        struct Held {
          std::shared_ptr<TestSchema> schema;
          std::unique_ptr<PostgresInboxStore> store;
        };
        auto held = std::make_shared<Held>(Held{schema, std::move(opened)});
        inbox::InboxStore* raw = held->store.get();
        return std::shared_ptr<inbox::InboxStore>(std::move(held), raw);
      });
}

INSTANTIATE_TEST_SUITE_P(Postgres, InboxStoreConformance,
                         testing::Values(InboxBackend{"postgres", true, MakePostgresDatabase}),
                         InboxBackendName);

}  // namespace
}  // namespace once::inbox_testing
