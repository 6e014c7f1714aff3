#include <fmt/format.h>

#include "loom_app.h"
#include "once/base/rng.h"
#include "once/nodes/memory_node_registry.h"
#include "once/queues/memory_queue_store.h"
#include "once/store/memory_store.h"
#include "once/store_postgres/postgres_end_listener.h"
#include "once/store_postgres/postgres_event_store.h"
#include "once/store_postgres/postgres_node_registry.h"
#include "once/store_postgres/postgres_queue_store.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/store_sqlite/sqlite_node_registry.h"
#include "once/store_sqlite/sqlite_queue_store.h"

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

Result<BenchSiblings> OpenSiblings(const BackendSpec& spec, const Clock& clock,
                                   store::EventStore& events, SiblingNeeds needs) {
  BenchSiblings out;
  if (needs.ends && spec.backend != "postgres") {
    return MakeError(ErrorCode::kUnsupported, "an end listener needs PostgreSQL");
  }
  if (spec.backend == "memory") {
    auto* memory = dynamic_cast<store::MemoryEventStore*>(&events);
    if (!memory) return MakeError(ErrorCode::kInvalidArgument, "not a memory store");
    if (needs.nodes) out.nodes = std::make_unique<nodes::MemoryNodeRegistry>(*memory, clock);
    if (needs.queues) out.queues = std::make_unique<queues::MemoryQueueStore>(clock);
    return out;
  }
  if (spec.backend == "sqlite") {
    if (needs.nodes) {
      ONCE_ASSIGN_OR_RETURN(out.nodes,
                            store::SqliteNodeRegistry::Open(spec.path, {.clock = &clock}));
    }
    if (needs.queues) {
      ONCE_ASSIGN_OR_RETURN(out.queues,
                            store::SqliteQueueStore::Open(spec.path, {.clock = &clock}));
    }
    return out;
  }
  if (spec.schema.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "siblings need the event store's schema");
  }
  if (needs.nodes) {
    store::PostgresNodeOptions o;
    o.conninfo = spec.url;
    o.schema = spec.schema;
    ONCE_ASSIGN_OR_RETURN(out.nodes, store::PostgresNodeRegistry::Open(o));
  }
  if (needs.queues) {
    store::PostgresQueueOptions o;
    o.conninfo = spec.url;
    o.schema = spec.schema;
    ONCE_ASSIGN_OR_RETURN(out.queues, store::PostgresQueueStore::Open(o));
  }
  if (needs.ends) {
    ONCE_ASSIGN_OR_RETURN(
        out.ends, store::PostgresEndListener::Open({.conninfo = spec.url, .schema = spec.schema}));
  }
  return out;
}

}  // namespace once::loom_app
