// The TimerStore conformance kit over SqliteTimerStore: a fresh database file
// per case.

#include "once/timers_testing/timer_conformance.h"

#include <memory>

#include "once/store_sqlite/sqlite_timer_store.h"
#include "test_support.h"

namespace once::timers_testing {
namespace {

// The store and the folder of its file, destroyed in that order.
struct Held {
  store::testing::TempDir dir;
  std::unique_ptr<store::SqliteTimerStore> store;
};

Result<std::shared_ptr<timers::TimerStore>> MakeSqliteTimers() {
  auto held = std::make_shared<Held>();
  ONCE_ASSIGN_OR_RETURN(held->store, store::SqliteTimerStore::Open(held->dir.File("timers.db")));
  timers::TimerStore* raw = held->store.get();
  return std::shared_ptr<timers::TimerStore>(std::move(held), raw);
}

INSTANTIATE_TEST_SUITE_P(Sqlite, TimerStoreConformance,
                         testing::Values(TimerBackend{"sqlite", MakeSqliteTimers}),
                         TimerBackendName);

}  // namespace
}  // namespace once::timers_testing
