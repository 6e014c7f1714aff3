// The InboxStore conformance kit over SqliteInboxStore: a fresh database
// file per case; every Open is a new store object on that file.

#include "once/inbox_testing/inbox_conformance.h"

#include <memory>

#include "once/store_sqlite/sqlite_inbox_store.h"
#include "test_support.h"

namespace once::inbox_testing {
namespace {

Result<InboxOpener> MakeSqliteDatabase() {
  auto dir = std::make_shared<store::testing::TempDir>();
  return InboxOpener(
      [dir](const inbox::InboxLimits& limits) -> Result<std::shared_ptr<inbox::InboxStore>> {
        ONCE_ASSIGN_OR_RETURN(
            auto opened, store::SqliteInboxStore::Open(dir->File("inbox.db"), {.limits = limits}));
        // The store holds the folder: it goes after the last store object.
        struct Held {
          std::shared_ptr<store::testing::TempDir> dir;
          std::unique_ptr<store::SqliteInboxStore> store;
        };
        auto held = std::make_shared<Held>(Held{dir, std::move(opened)});
        inbox::InboxStore* raw = held->store.get();
        return std::shared_ptr<inbox::InboxStore>(std::move(held), raw);
      });
}

INSTANTIATE_TEST_SUITE_P(Sqlite, InboxStoreConformance,
                         testing::Values(InboxBackend{"sqlite", true, MakeSqliteDatabase}),
                         InboxBackendName);

}  // namespace
}  // namespace once::inbox_testing
