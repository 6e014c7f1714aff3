// Every decorator runs the whole EventStore conformance kit, over the memory
// backend and (for the ones that change what is written) over SQLite.

#include "once/store_testing/conformance.h"

#include <filesystem>
#include <memory>

#include "once/base/rng.h"
#include "once/store/memory_store.h"
#include "once/store_decorators/crypto_store.h"
#include "once/store_decorators/profiling_store.h"
#include "once/store_decorators/sharded_store.h"
#include "once/store_decorators/tenant_store.h"
#include "once/store_sqlite/sqlite_event_store.h"

namespace {

using once::Result;
using once::store::EventStore;
using once::store_testing::BackendFactory;
using once::store_testing::DecoratedFactory;
using once::store_testing::MemoryFactory;
using once::store_testing::StoreConfig;
using once::store_testing::StoreHarness;

const once::SystemClock& Clock() {
  static const once::SystemClock clock;
  return clock;
}

// A decorator that sees exactly the kit's limits over an inner store built
// with room for what the decorator adds (the tenant prefix, the sealing).
template <class Decorate>
BackendFactory WithOwnLimits(std::string name, BackendFactory inner,
                             std::function<once::store::Limits(const once::store::Limits&)> widen,
                             Decorate decorate) {
  return {.name = name,
          .make = [inner, widen, decorate](const StoreConfig& config) -> Result<StoreHarness> {
            StoreConfig wide = config;
            wide.limits = widen(config.limits);
            ONCE_ASSIGN_OR_RETURN(StoreHarness base, inner.make(wide));
            auto owned = std::make_shared<StoreHarness>(std::move(base));
            StoreHarness h;
            h.store = decorate(*owned->store, config.limits);
            h.keep_alive = owned;
            return h;
          }};
}

once::store::Limits WidenForTenant(const once::store::Limits& l) {
  once::store::Limits out = l;
  out.execution_id_bytes_max += 5;  // "acme:"
  return out;
}

std::unique_ptr<EventStore> TenantWithLimits(EventStore& inner, const once::store::Limits& l) {
  return once::store::TenantStore::Create(inner, "acme", l).value();
}

std::unique_ptr<EventStore> CryptoWithLimits(EventStore& inner, const once::store::Limits& l) {
  static auto* vaults = new std::vector<std::unique_ptr<once::store::MemoryKeyVault>>;
  vaults->push_back(std::make_unique<once::store::MemoryKeyVault>());
  return std::make_unique<once::store::CryptoStore>(inner, *vaults->back(), l);
}

std::unique_ptr<EventStore> Profiling(EventStore& inner) {
  return std::make_unique<once::store::ProfilingStore>(inner, Clock());
}

// Three memory shards behind one ShardedStore.
BackendFactory ShardedOverMemory() {
  return {.name = "ShardedOverMemory",
          .make = [](const StoreConfig& config) -> Result<StoreHarness> {
            auto shards = std::make_shared<std::vector<std::unique_ptr<EventStore>>>();
            std::vector<EventStore*> raw;
            for (int i = 0; i < 3; ++i) {
              shards->push_back(
                  std::make_unique<once::store::MemoryEventStore>(config.limits, *config.clock));
              raw.push_back(shards->back().get());
            }
            StoreHarness h;
            h.keep_alive = shards;
            h.store = std::make_unique<once::store::ShardedStore>(raw);
            return h;
          }};
}

// A fresh SQLite file per store, in a temp folder that lives with the harness.
BackendFactory SqliteFactory() {
  return {.name = "Sqlite", .make = [](const StoreConfig& config) -> Result<StoreHarness> {
            static once::SystemRng rng;
            auto dir = std::filesystem::temp_directory_path() /
                       ("once-deco-" + std::to_string(rng.Next()));
            std::filesystem::create_directories(dir);
            std::shared_ptr<void> cleanup(nullptr, [dir](void*) {
              std::error_code ec;
              std::filesystem::remove_all(dir, ec);
            });
            once::store::SqliteOptions options;
            options.limits = config.limits;
            options.clock = config.clock;
            options.durability = once::store::Durability::kNormal;
            ONCE_ASSIGN_OR_RETURN(
                auto store, once::store::SqliteEventStore::Open((dir / "db").string(), options));
            StoreHarness h;
            h.keep_alive = cleanup;
            h.store = std::move(store);
            return h;
          }};
}

}  // namespace

ONCE_INSTANTIATE_STORE_CONFORMANCE(TenantOverMemory,
                                   WithOwnLimits("TenantOverMemory", MemoryFactory(),
                                                 WidenForTenant, TenantWithLimits));
ONCE_INSTANTIATE_STORE_CONFORMANCE(ProfilingOverMemory,
                                   DecoratedFactory("ProfilingOverMemory", MemoryFactory(),
                                                    Profiling));
ONCE_INSTANTIATE_STORE_CONFORMANCE(CryptoOverMemory,
                                   WithOwnLimits("CryptoOverMemory", MemoryFactory(),
                                                 once::store::CryptoStore::SealedLimitsFor,
                                                 CryptoWithLimits));
ONCE_INSTANTIATE_STORE_CONFORMANCE(ShardedOverMemory, ShardedOverMemory());
ONCE_INSTANTIATE_STORE_CONFORMANCE(TenantOverSqlite,
                                   WithOwnLimits("TenantOverSqlite", SqliteFactory(),
                                                 WidenForTenant, TenantWithLimits));
ONCE_INSTANTIATE_STORE_CONFORMANCE(CryptoOverSqlite,
                                   WithOwnLimits("CryptoOverSqlite", SqliteFactory(),
                                                 once::store::CryptoStore::SealedLimitsFor,
                                                 CryptoWithLimits));
