#include "once/store_postgres/postgres_node_registry.h"

#include <algorithm>

#include "pg_conn.h"
#include "sql.h"

namespace once::store {

using nodes::Beat;
using nodes::NodeInfo;
using nodes::NodeRecord;
using nodes::RunRow;
using pg::Conn;
using pg::IntAt;
using pg::Params;
using pg::PgResult;

namespace {

// Every statement reads the server's clock once, as an initplan.
std::string Now() { return "(SELECT " + std::string(sql::kDbNowMs) + ")"; }

struct Statement {
  const char* name;
  std::string sql;
};

// A node is dead when NOT (NOT stopped AND heartbeat_at_ms + lease_ms >= now).
std::string Dead(std::string_view alias, std::string_view now) {
  std::string a(alias);
  return "(" + a + ".stopped OR " + a + ".heartbeat_at_ms + " + a + ".lease_ms < " +
         std::string(now) + ")";
}

// The stale run rows a pass of the orphan scan clears at most (see
// OrphansSql): rows past it wait for the next pass, which scans again.
constexpr int64_t kTidyRowsMax = 100'000;

// The rows of fences `f` (joined to their owner's node `n`, LEFT) whose
// owner is a dead node or, for an owner no longer registered, whose run is
// older than $4: the orphan scan's candidates, running or not.
std::string DeadOwned() {
  return "f.owner IS NOT NULL AND f.owner <> $1::text AND ((n.node_id IS NULL AND f.since_ms + "
         "$4::int8 < t.ms) OR " +
         Dead("n", "t.ms") + ")";
}

// The orphan scan reads the fences rows' owners (no index on them: the hot
// path's updates stay HOT), so it runs only while some dead node other than
// `self` is not yet swept. A page lists the candidates whose run still runs
// (sql::RunningPredicate). A first page that finds none clears the owner of
// candidates whose run parked or ended (a park or an end leaves the row for
// the log to release: this is where the rows of a dead node are tidied,
// kTidyRowsMax a pass) and, if it cleared them all, marks every such node
// swept, in the same statement (one `now`), so that the nodes it judged dead
// are exactly the ones it looked for. A node's next heartbeat clears its
// mark. A tidy writes only rows whose run does not run: under a concurrent
// acquire the row is re-checked at its new version, which runs.
std::string OrphansSql() {
  return "WITH t AS (SELECT " + std::string(sql::kDbNowMs) +
         " AS ms), "
         "dead AS MATERIALIZED (SELECT d.node_id FROM loom_nodes d, t WHERE NOT d.swept "
         "AND d.node_id <> $1::text AND " +
         Dead("d", "t.ms") +
         "), "
         "page AS MATERIALIZED (SELECT f.execution_id, f.owner, f.since_ms FROM t, fences f "
         "LEFT JOIN loom_nodes n ON n.node_id = f.owner "
         "WHERE EXISTS (SELECT 1 FROM dead) AND f.execution_id > $2::text AND " +
         DeadOwned() + " AND " + sql::RunningPredicate("f") +
         " ORDER BY f.execution_id LIMIT $3::int8), "
         "tidy AS (UPDATE fences s SET owner = NULL, since_ms = NULL, run_from = NULL "
         "WHERE s.execution_id IN (SELECT f.execution_id FROM t, fences f "
         "LEFT JOIN loom_nodes n ON n.node_id = f.owner "
         "WHERE EXISTS (SELECT 1 FROM dead) AND $2::text = '' AND NOT EXISTS (SELECT 1 FROM page) "
         "AND " +
         DeadOwned() + " AND NOT " + sql::RunningPredicate("f") + " LIMIT " +
         std::to_string(kTidyRowsMax) + ") AND s.owner IS NOT NULL AND NOT " +
         sql::RunningPredicate("s") +
         " RETURNING 1), "
         "sweep AS (UPDATE loom_nodes s SET swept = true FROM dead, t "
         "WHERE s.node_id = dead.node_id AND $2::text = '' AND NOT EXISTS (SELECT 1 FROM page) "
         "AND (SELECT count(*) FROM tidy) < " +
         std::to_string(kTidyRowsMax) + " AND NOT s.swept AND " + Dead("s", "t.ms") +
         ") "
         "SELECT execution_id, owner, since_ms FROM page ORDER BY execution_id";
}

std::vector<Statement> Statements() {
  const std::string now = Now();
  return {
      {"node_beat",
       "WITH t AS (SELECT " + std::string(sql::kDbNowMs) +
           " AS ms), prev AS (SELECT heartbeat_at_ms, lease_ms, stopped FROM loom_nodes "
           "WHERE node_id = $1::text FOR UPDATE), "
           "up AS (INSERT INTO loom_nodes (node_id, host, pid, version, started_at_ms, "
           "heartbeat_at_ms, lease_ms, stopped) SELECT $1::text, $2::text, $3::int8, $4::text, "
           "t.ms, t.ms, $5::int8, false FROM t ON CONFLICT (node_id) DO UPDATE SET "
           "host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version, "
           "heartbeat_at_ms = EXCLUDED.heartbeat_at_ms, lease_ms = EXCLUDED.lease_ms, "
           "stopped = false, swept = false) "
           "SELECT t.ms, NOT EXISTS (SELECT 1 FROM prev), COALESCE((SELECT p.stopped OR "
           "p.heartbeat_at_ms + p.lease_ms < t.ms FROM prev p), false) FROM t"},
      {"node_stop", "UPDATE loom_nodes SET stopped = true WHERE node_id = $1::text"},
      {"node_list",
       "SELECT node_id, host, pid, version, started_at_ms, heartbeat_at_ms, lease_ms, stopped, "
       "NOT stopped AND heartbeat_at_ms + lease_ms >= " +
           now + " FROM loom_nodes ORDER BY node_id LIMIT $1::int8"},
      {"node_orphans", OrphansSql()},
      {"node_runs_of",
       "SELECT f.execution_id, f.owner, f.since_ms FROM fences f WHERE f.owner = $1::text "
       "AND f.execution_id > $2::text AND " +
           sql::RunningPredicate("f") + " ORDER BY f.execution_id LIMIT $3::int8"},
      {"node_forget_run",
       "UPDATE fences SET owner = NULL, since_ms = NULL, run_from = NULL "
       "WHERE execution_id = $1::text AND owner = $2::text"},
      {"node_forget_nodes",
       "DELETE FROM loom_nodes n WHERE " + Dead("n", now) +
           " AND n.heartbeat_at_ms + n.lease_ms + $1::int8 < " + now +
           " AND NOT EXISTS (SELECT 1 FROM fences f WHERE f.owner = n.node_id AND " +
           sql::RunningPredicate("f") + ")"},
      {"node_now", "SELECT " + std::string(sql::kDbNowMs)},
  };
}

Status PrepareAll(Conn& conn) {
  for (const auto& s : Statements()) ONCE_RETURN_IF_ERROR(conn.Prepare(s.name, s.sql));
  return Ok();
}

Status Migrate(const PostgresNodeOptions& options) {
  return pg::MigrateUnderLock(options.conninfo, options.schema, kMigrationLockKey,
                              options.migration_lock_timeout_ms, [&](Conn& conn) -> Status {
                                // The run rows are the fences rows' owners: the event store's
                                // schema (at its version) is this registry's. Its park backfill is
                                // left to the event store's own Open.
                                PostgresOptions events;
                                events.conninfo = options.conninfo;
                                events.schema = options.schema;
                                events.backfill_park_fences = false;
                                SystemClock clock;
                                return sql::MigrateEventSchemaLocked(conn, events, clock);
                              });
}

Result<std::vector<RunRow>> Rows(pg::ConnectionPool& pool, const char* statement,
                                 const Params& params) {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool.Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared(statement, params));
  const PGresult* r = res.get();
  std::vector<RunRow> out;
  out.reserve(PQntuples(r));
  for (int i = 0; i < PQntuples(r); ++i) {
    out.push_back(RunRow{PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), IntAt(r, i, 2)});
  }
  return out;
}

}  // namespace

PostgresNodeRegistry::PostgresNodeRegistry(PostgresNodeOptions options,
                                           std::unique_ptr<pg::ConnectionPool> pool)
    : options_(std::move(options)), pool_(std::move(pool)) {}

PostgresNodeRegistry::~PostgresNodeRegistry() = default;

Result<std::unique_ptr<PostgresNodeRegistry>> PostgresNodeRegistry::Open(
    const PostgresNodeOptions& options) {
  ONCE_ASSIGN_OR_RETURN(auto pool,
                        pg::OpenSidePool(options, "PostgresNodeOptions", Migrate, PrepareAll));
  return std::unique_ptr<PostgresNodeRegistry>(new PostgresNodeRegistry(options, std::move(pool)));
}

Result<Beat> PostgresNodeRegistry::Heartbeat(const NodeInfo& node, int64_t lease_ms) {
  ONCE_RETURN_IF_ERROR(nodes::ValidateNodeInfo(node, limits()));
  ONCE_RETURN_IF_ERROR(nodes::ValidateLease(lease_ms));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Text(node.node_id).Text(node.host).Int(node.pid).Text(node.version).Int(lease_ms);
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("node_beat", p));
  const PGresult* r = res.get();
  if (PQntuples(r) != 1) return MakeError(ErrorCode::kInternal, "heartbeat returned no row");
  return Beat{.at_ms = IntAt(r, 0, 0),
              .first = PQgetvalue(r, 0, 1)[0] == 't',
              .lapsed = PQgetvalue(r, 0, 2)[0] == 't'};
}

Status PostgresNodeRegistry::Stop(std::string_view node_id) {
  ONCE_RETURN_IF_ERROR(nodes::ValidateNodeId(node_id, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_RETURN_IF_ERROR(conn->Prepared("node_stop", Params().Text(std::string(node_id))));
  return Ok();
}

Result<std::vector<NodeRecord>> PostgresNodeRegistry::Nodes() {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("node_list", Params().Int(static_cast<int64_t>(limits().nodes_max))));
  const PGresult* r = res.get();
  std::vector<NodeRecord> out;
  for (int i = 0; i < PQntuples(r); ++i) {
    NodeRecord n;
    n.info =
        NodeInfo{PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), IntAt(r, i, 2), PQgetvalue(r, i, 3)};
    n.started_at_ms = IntAt(r, i, 4);
    n.heartbeat_at_ms = IntAt(r, i, 5);
    n.lease_ms = IntAt(r, i, 6);
    n.stopped = PQgetvalue(r, i, 7)[0] == 't';
    n.alive = PQgetvalue(r, i, 8)[0] == 't';
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<RunRow>> PostgresNodeRegistry::OrphanedRuns(std::string_view self,
                                                               std::string_view after, size_t limit,
                                                               int64_t unknown_owner_lease_ms) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits().runs_page_max);
  Params p;
  p.Text(std::string(self)).Text(std::string(after)).Int(static_cast<int64_t>(limit));
  p.Int(unknown_owner_lease_ms);
  return Rows(*pool_, "node_orphans", p);
}

Result<std::vector<RunRow>> PostgresNodeRegistry::RunsOf(std::string_view owner,
                                                         std::string_view after, size_t limit) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits().runs_page_max);
  Params p;
  p.Text(std::string(owner)).Text(std::string(after)).Int(static_cast<int64_t>(limit));
  return Rows(*pool_, "node_runs_of", p);
}

Status PostgresNodeRegistry::ForgetRun(std::string_view execution_id, std::string_view owner) {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_RETURN_IF_ERROR(conn->Prepared(
      "node_forget_run", Params().Text(std::string(execution_id)).Text(std::string(owner))));
  return Ok();
}

Result<size_t> PostgresNodeRegistry::ForgetNodes(int64_t dead_for_ms) {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res,
                        conn->Prepared("node_forget_nodes", Params().Int(dead_for_ms)));
  return static_cast<size_t>(std::strtoull(PQcmdTuples(res.get()), nullptr, 10));
}

Result<int64_t> PostgresNodeRegistry::NowMs() {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("node_now", Params()));
  return IntAt(res.get(), 0, 0);
}

}  // namespace once::store
