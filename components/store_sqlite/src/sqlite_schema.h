// Internal: tables that more than one SQLite store of this component
// creates (the event store's migration 3 and the node registry's Open), so
// that either may open a file first. docs/nodes.md describes them.
#pragma once

namespace once::store::sqlite_internal {

// loom_runs: one row per execution whose body is running (written by the
// event store in the transaction of the append or acquire that names an
// owner). loom_nodes: one row per node (written by the node registry).
inline constexpr const char* kCreateNodeTables =
    "CREATE TABLE IF NOT EXISTS loom_runs ("
    "  execution_id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,"
    "  since_ms INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS loom_runs_by_owner ON loom_runs(owner, execution_id);"
    "CREATE TABLE IF NOT EXISTS loom_nodes ("
    "  node_id TEXT PRIMARY KEY NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
    "  version TEXT NOT NULL, started_at_ms INTEGER NOT NULL, heartbeat_at_ms INTEGER NOT NULL,"
    "  lease_ms INTEGER NOT NULL, stopped INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;";

}  // namespace once::store::sqlite_internal
