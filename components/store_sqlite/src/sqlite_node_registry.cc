#include "once/store_sqlite/sqlite_node_registry.h"

#include <algorithm>
#include <mutex>

#include "connection.h"
#include "sqlite_schema.h"

namespace once::store {
namespace {

using nodes::Beat;
using nodes::NodeInfo;
using nodes::NodeRecord;
using nodes::RunRow;
using sqlite_internal::Connection;
using sqlite_internal::Statement;

enum NodeSql : size_t {
  kBegin,
  kCommit,
  kRollback,
  kPrevious,
  kUpsert,
  kStop,
  kNodes,
  kOrphans,
  kRunsOf,
  kForgetRun,
  kForgetNodes,
  kNodeSqlCount,
};

// A node is alive while NOT stopped AND heartbeat_at_ms + lease_ms >= now.
const std::vector<std::string>& NodeSqlText() {
  static const std::vector<std::string> sql = [] {
    std::vector<std::string> s(kNodeSqlCount);
    s[kBegin] = "BEGIN IMMEDIATE";
    s[kCommit] = "COMMIT";
    s[kRollback] = "ROLLBACK";
    s[kPrevious] = "SELECT heartbeat_at_ms, lease_ms, stopped FROM loom_nodes WHERE node_id = ?1";
    s[kUpsert] =
        "INSERT INTO loom_nodes(node_id, host, pid, version, started_at_ms, heartbeat_at_ms, "
        "lease_ms, stopped) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, 0) "
        "ON CONFLICT(node_id) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
        "version = excluded.version, heartbeat_at_ms = excluded.heartbeat_at_ms, "
        "lease_ms = excluded.lease_ms, stopped = 0";
    s[kStop] = "UPDATE loom_nodes SET stopped = 1 WHERE node_id = ?1";
    s[kNodes] =
        "SELECT node_id, host, pid, version, started_at_ms, heartbeat_at_ms, lease_ms, stopped "
        "FROM loom_nodes ORDER BY node_id LIMIT ?1";
    // ?1 self, ?2 after, ?3 limit, ?4 now, ?5 unknown_owner_lease_ms.
    s[kOrphans] =
        "SELECT r.execution_id, r.owner, r.since_ms FROM loom_runs r "
        "LEFT JOIN loom_nodes n ON n.node_id = r.owner "
        "WHERE r.owner <> ?1 AND r.execution_id > ?2 AND ("
        "  (n.node_id IS NULL AND r.since_ms + ?5 < ?4) OR"
        "  n.stopped OR n.heartbeat_at_ms + n.lease_ms < ?4) "
        "ORDER BY r.execution_id LIMIT ?3";
    s[kRunsOf] =
        "SELECT execution_id, owner, since_ms FROM loom_runs WHERE owner = ?1 "
        "AND execution_id > ?2 ORDER BY execution_id LIMIT ?3";
    s[kForgetRun] = "DELETE FROM loom_runs WHERE execution_id = ?1 AND owner = ?2";
    s[kForgetNodes] =
        "DELETE FROM loom_nodes WHERE (stopped OR heartbeat_at_ms + lease_ms < ?1) "
        "AND heartbeat_at_ms + lease_ms + ?2 < ?1 "
        "AND NOT EXISTS (SELECT 1 FROM loom_runs r WHERE r.owner = loom_nodes.node_id)";
    return s;
  }();
  return sql;
}

template <class F>
auto Transaction(Connection& c, F&& body) -> decltype(body()) {
  return sqlite_internal::InTransaction(c, kBegin, kCommit, kRollback, std::forward<F>(body));
}

Result<std::vector<RunRow>> Rows(Statement& s) {
  std::vector<RunRow> out;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    out.push_back(RunRow{std::string(s.Text(0)), std::string(s.Text(1)), s.Int(2)});
  }
}

}  // namespace

struct SqliteNodeRegistry::Impl {
  SqliteNodeOptions options;
  SystemClock system_clock;
  const Clock* clock = nullptr;
  std::mutex mu;
  std::unique_ptr<Connection> conn;  // GUARDED_BY(mu)

  int64_t Now() const { return clock->NowUnixMillis(); }
};

SqliteNodeRegistry::SqliteNodeRegistry(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteNodeRegistry::~SqliteNodeRegistry() = default;

Result<std::unique_ptr<SqliteNodeRegistry>> SqliteNodeRegistry::Open(const std::string& path,
                                                                     SqliteNodeOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->clock = impl->options.clock ? impl->options.clock : &impl->system_clock;
  ONCE_ASSIGN_OR_RETURN(
      impl->conn, sqlite_internal::OpenFileInWal(
                      "node registry", path, sqlite_internal::ConnectionOptionsOf(impl->options),
                      NodeSqlText()));
  Connection& c = *impl->conn;
  ONCE_RETURN_IF_ERROR(Transaction(c, [&] { return c.Exec(sqlite_internal::kCreateNodeTables); }));
  return std::unique_ptr<SqliteNodeRegistry>(new SqliteNodeRegistry(std::move(impl)));
}

const nodes::NodeLimits& SqliteNodeRegistry::limits() const { return impl_->options.limits; }

Result<int64_t> SqliteNodeRegistry::NowMs() { return impl_->Now(); }

Result<Beat> SqliteNodeRegistry::Heartbeat(const NodeInfo& node, int64_t lease_ms) {
  ONCE_RETURN_IF_ERROR(nodes::ValidateNodeInfo(node, limits()));
  ONCE_RETURN_IF_ERROR(nodes::ValidateLease(lease_ms));
  std::lock_guard lock(impl_->mu);
  Connection& c = *impl_->conn;
  return Transaction(c, [&]() -> Result<Beat> {
    Beat beat{.at_ms = impl_->Now()};
    {
      ONCE_ASSIGN_OR_RETURN(Statement prev, c.Prepare(kPrevious));
      ONCE_RETURN_IF_ERROR(prev.Bind(1, node.node_id));
      ONCE_ASSIGN_OR_RETURN(bool row, prev.Step());
      beat.first = !row;
      if (row) beat.lapsed = prev.Int(2) != 0 || prev.Int(0) + prev.Int(1) < beat.at_ms;
    }
    ONCE_ASSIGN_OR_RETURN(Statement up, c.Prepare(kUpsert));
    ONCE_RETURN_IF_ERROR(up.Bind(1, node.node_id));
    ONCE_RETURN_IF_ERROR(up.Bind(2, node.host));
    ONCE_RETURN_IF_ERROR(up.Bind(3, node.pid));
    ONCE_RETURN_IF_ERROR(up.Bind(4, node.version));
    ONCE_RETURN_IF_ERROR(up.Bind(5, beat.at_ms));
    ONCE_RETURN_IF_ERROR(up.Bind(6, lease_ms));
    ONCE_RETURN_IF_ERROR(up.Run());
    return beat;
  });
}

Status SqliteNodeRegistry::Stop(std::string_view node_id) {
  ONCE_RETURN_IF_ERROR(nodes::ValidateNodeId(node_id, limits()));
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kStop));
  ONCE_RETURN_IF_ERROR(s.Bind(1, node_id));
  return s.Run();
}

Result<std::vector<NodeRecord>> SqliteNodeRegistry::Nodes() {
  std::lock_guard lock(impl_->mu);
  int64_t now = impl_->Now();
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kNodes));
  ONCE_RETURN_IF_ERROR(s.Bind(1, static_cast<int64_t>(limits().nodes_max)));
  std::vector<NodeRecord> out;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    NodeRecord r;
    r.info =
        NodeInfo{std::string(s.Text(0)), std::string(s.Text(1)), s.Int(2), std::string(s.Text(3))};
    r.started_at_ms = s.Int(4);
    r.heartbeat_at_ms = s.Int(5);
    r.lease_ms = s.Int(6);
    r.stopped = s.Int(7) != 0;
    r.alive = !r.stopped && r.heartbeat_at_ms + r.lease_ms >= now;
    out.push_back(std::move(r));
  }
}

Result<std::vector<RunRow>> SqliteNodeRegistry::OrphanedRuns(std::string_view self,
                                                             std::string_view after, size_t limit,
                                                             int64_t unknown_owner_lease_ms) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits().runs_page_max);
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kOrphans));
  ONCE_RETURN_IF_ERROR(s.Bind(1, self));
  ONCE_RETURN_IF_ERROR(s.Bind(2, after));
  ONCE_RETURN_IF_ERROR(s.Bind(3, static_cast<int64_t>(limit)));
  ONCE_RETURN_IF_ERROR(s.Bind(4, impl_->Now()));
  ONCE_RETURN_IF_ERROR(s.Bind(5, unknown_owner_lease_ms));
  return Rows(s);
}

Result<std::vector<RunRow>> SqliteNodeRegistry::RunsOf(std::string_view owner,
                                                       std::string_view after, size_t limit) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits().runs_page_max);
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kRunsOf));
  ONCE_RETURN_IF_ERROR(s.Bind(1, owner));
  ONCE_RETURN_IF_ERROR(s.Bind(2, after));
  ONCE_RETURN_IF_ERROR(s.Bind(3, static_cast<int64_t>(limit)));
  return Rows(s);
}

Status SqliteNodeRegistry::ForgetRun(std::string_view execution_id, std::string_view owner) {
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kForgetRun));
  ONCE_RETURN_IF_ERROR(s.Bind(1, execution_id));
  ONCE_RETURN_IF_ERROR(s.Bind(2, owner));
  return s.Run();
}

Result<size_t> SqliteNodeRegistry::ForgetNodes(int64_t dead_for_ms) {
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kForgetNodes));
  ONCE_RETURN_IF_ERROR(s.Bind(1, impl_->Now()));
  ONCE_RETURN_IF_ERROR(s.Bind(2, dead_for_ms));
  ONCE_RETURN_IF_ERROR(s.Run());
  return static_cast<size_t>(sqlite3_changes(impl_->conn->db()));
}

}  // namespace once::store
