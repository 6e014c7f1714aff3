// Internal: tables that more than one SQLite store of this component
// creates (the event store's migration 3 and the node registry's Open), so
// that either may open a file first. docs/nodes.md describes them.
#pragma once

namespace once::store::sqlite_internal {

// loom_runs: one row per execution whose body is running (written by the
// event store in the transaction of the append or acquire that names an
// owner). No index on the owner (schema 4 dropped it): the table holds the
// running executions only, so the registry's scans by owner read it whole,
// and every start and end of a run wrote one B-tree entry fewer.
// loom_nodes: one row per node (written by the node registry).
inline constexpr const char* kCreateNodeTables =
    "CREATE TABLE IF NOT EXISTS loom_runs ("
    "  execution_id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,"
    "  since_ms INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS loom_nodes ("
    "  node_id TEXT PRIMARY KEY NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
    "  version TEXT NOT NULL, started_at_ms INTEGER NOT NULL, heartbeat_at_ms INTEGER NOT NULL,"
    "  lease_ms INTEGER NOT NULL, stopped INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;";

}  // namespace once::store::sqlite_internal

namespace once::store::sqlite_internal {

// The queue store's tables (docs/queues.md): queue limits and rate windows,
// start requests (seq: FIFO; claimed_by NULL while pending), schedules.
inline constexpr const char* kCreateQueueTables =
    "CREATE TABLE IF NOT EXISTS loom_queues ("
    "  name TEXT PRIMARY KEY NOT NULL, concurrency_max INTEGER NOT NULL DEFAULT 0,"
    "  per_node_concurrency_max INTEGER NOT NULL DEFAULT 0, rate_max INTEGER NOT NULL DEFAULT 0,"
    "  rate_period_ms INTEGER NOT NULL DEFAULT 1000, window_start_ms INTEGER NOT NULL DEFAULT 0,"
    "  window_count INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS loom_queue_items ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, execution_id TEXT NOT NULL UNIQUE,"
    "  queue TEXT NOT NULL, workflow TEXT NOT NULL, input TEXT NOT NULL,"
    "  priority INTEGER NOT NULL, dedup_key TEXT, enqueued_at_ms INTEGER NOT NULL,"
    "  visible_at_ms INTEGER NOT NULL, claimed_by TEXT, claimed_at_ms INTEGER);"
    "CREATE UNIQUE INDEX IF NOT EXISTS loom_queue_dedup ON loom_queue_items(queue, dedup_key)"
    "  WHERE dedup_key IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS loom_queue_pending ON loom_queue_items(queue, priority DESC, seq)"
    "  WHERE claimed_by IS NULL;"
    "CREATE INDEX IF NOT EXISTS loom_queue_claimed ON loom_queue_items(queue, claimed_by)"
    "  WHERE claimed_by IS NOT NULL;"
    "CREATE TABLE IF NOT EXISTS loom_schedules ("
    "  name TEXT PRIMARY KEY NOT NULL, cron TEXT NOT NULL, workflow TEXT NOT NULL,"
    "  queue TEXT NOT NULL, input TEXT NOT NULL, last_tick_ms INTEGER NOT NULL DEFAULT 0)"
    "  WITHOUT ROWID;";

}  // namespace once::store::sqlite_internal
