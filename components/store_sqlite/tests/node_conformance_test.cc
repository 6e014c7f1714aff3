// The NodeRegistry kit on SQLite: the event store and the registry on one file.
#include "once/nodes_testing/node_conformance.h"

#include <filesystem>

#include "once/base/rng.h"
#include "once/store_sqlite/sqlite_node_registry.h"

namespace once::nodes_testing {
namespace {

Result<NodeHarness> MakeSqlite() {
  static SystemRng rng;
  auto dir = std::filesystem::temp_directory_path() / ("once-nodes-" + std::to_string(rng.Next()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "loom.db").string();
  store::SqliteOptions options;
  options.durability = store::Durability::kNormal;
  ONCE_ASSIGN_OR_RETURN(auto store, store::SqliteEventStore::Open(path, options));
  ONCE_ASSIGN_OR_RETURN(auto registry, store::SqliteNodeRegistry::Open(
                                           path, {.durability = store::Durability::kNormal}));
  NodeHarness h;
  h.keep_alive = std::shared_ptr<void>(nullptr, [dir](void*) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  });
  h.store = std::move(store);
  h.registry = std::move(registry);
  return h;
}

INSTANTIATE_TEST_SUITE_P(Sqlite, NodeRegistryConformance,
                         testing::Values(NodeBackend{"Sqlite", MakeSqlite}), NodeBackendName);

}  // namespace
}  // namespace once::nodes_testing
