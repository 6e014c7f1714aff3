#include <fmt/format.h>

#include "loom_app.h"
#include "once/base/rng.h"
#include "once/store/memory_store.h"
#include "once/store_postgres/postgres_event_store.h"
#include "once/store_sqlite/sqlite_event_store.h"

namespace once::loom_app {

Result<std::unique_ptr<store::EventStore>> OpenBackend(const BackendSpec& spec,
                                                       const Clock& clock) {
  if (spec.backend == "memory") {
    return std::unique_ptr<store::EventStore>(
        std::make_unique<store::MemoryEventStore>(store::Limits{}, clock));
  }
  if (spec.backend == "sqlite") {
    store::SqliteOptions options;
    options.clock = &clock;
    ONCE_ASSIGN_OR_RETURN(auto s, store::SqliteEventStore::Open(spec.path, options));
    return std::unique_ptr<store::EventStore>(std::move(s));
  }
  if (spec.backend == "postgres") {
    if (spec.url.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "postgres needs --url (or ONCE_TEST_POSTGRES_URL)");
    }
    store::PostgresOptions options;
    options.conninfo = spec.url;
    options.connections_max = 32;
    SystemRng rng;
    options.schema = spec.schema.empty() ? fmt::format("loom_{:016x}", rng.Next()) : spec.schema;
    ONCE_ASSIGN_OR_RETURN(auto s, store::PostgresEventStore::Open(options, clock));
    return std::unique_ptr<store::EventStore>(std::move(s));
  }
  return MakeError(ErrorCode::kInvalidArgument, "unknown backend " + spec.backend);
}

}  // namespace once::loom_app
