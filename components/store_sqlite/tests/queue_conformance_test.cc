// The QueueStore kit on SQLite (a fresh file per case).
#include "once/queues_testing/queue_conformance.h"

#include <filesystem>

#include "once/base/rng.h"
#include "once/store_sqlite/sqlite_queue_store.h"

namespace once::queues_testing {
namespace {

Result<std::shared_ptr<queues::QueueStore>> MakeSqlite() {
  static SystemRng rng;
  auto dir = std::filesystem::temp_directory_path() / ("once-queues-" + std::to_string(rng.Next()));
  std::filesystem::create_directories(dir);
  ONCE_ASSIGN_OR_RETURN(auto store,
                        store::SqliteQueueStore::Open((dir / "loom.db").string(),
                                                      {.durability = store::Durability::kNormal}));
  struct Owned {
    Owned(std::filesystem::path d, std::unique_ptr<store::SqliteQueueStore> s)
        : dir(std::move(d)), store(std::move(s)) {}
    std::filesystem::path dir;
    std::unique_ptr<store::SqliteQueueStore> store;
    ~Owned() {
      store.reset();
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  auto owned = std::make_shared<Owned>(dir, std::move(store));
  queues::QueueStore* raw = owned->store.get();
  return std::shared_ptr<queues::QueueStore>(owned, raw);
}

INSTANTIATE_TEST_SUITE_P(Sqlite, QueueStoreConformance,
                         testing::Values(QueueBackend{"Sqlite", MakeSqlite}), QueueBackendName);

}  // namespace
}  // namespace once::queues_testing
