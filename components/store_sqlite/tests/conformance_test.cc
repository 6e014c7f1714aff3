// The EventStore conformance kit over SqliteEventStore: a fresh database file
// per store; open_another opens a second SqliteEventStore (its own
// connections) on the same file, as a second process would.

#include "once/store_testing/conformance.h"

#include <memory>

#include "once/store_sqlite/sqlite_event_store.h"
#include "test_support.h"

namespace {

using once::Result;
using once::store::EventStore;
using once::store::SqliteEventStore;
using once::store::SqliteOptions;
using once::store::testing::TempDir;
using once::store_testing::BackendFactory;
using once::store_testing::StoreConfig;
using once::store_testing::StoreHarness;

SqliteOptions OptionsFor(const StoreConfig& config) {
  SqliteOptions options;
  options.limits = config.limits;
  options.clock = config.clock;
  return options;
}

BackendFactory SqliteFactory() {
  return {.name = "Sqlite", .make = [](const StoreConfig& config) -> Result<StoreHarness> {
            auto dir = std::make_shared<TempDir>();
            std::string path = dir->File("events.db");
            ONCE_ASSIGN_OR_RETURN(auto store, SqliteEventStore::Open(path, OptionsFor(config)));
            StoreHarness h;
            h.keep_alive = dir;
            h.store = std::move(store);
            h.open_another = [dir, path, config]() -> std::unique_ptr<EventStore> {
              auto another = SqliteEventStore::Open(path, OptionsFor(config));
              return another ? std::move(*another) : nullptr;
            };
            return h;
          }};
}

}  // namespace

ONCE_INSTANTIATE_STORE_CONFORMANCE(Sqlite, SqliteFactory());
