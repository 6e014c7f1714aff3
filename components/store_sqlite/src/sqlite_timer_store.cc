#include "once/store_sqlite/sqlite_timer_store.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <tuple>

#include "connection.h"
#include "write_group.h"

namespace once::store {
namespace {

using sqlite_internal::Connection;
using sqlite_internal::Statement;
using timers::ClaimRequest;
using timers::Redrive;
using timers::TimerKey;
using timers::TimerRow;

enum TimerSql : size_t {
  kBegin,
  kCommit,
  kRollback,
  kSchedule,
  kDue,
  kClaim,
  kComplete,
  kDefer,
  kRowsOf,
  kSavepoint,
  kRelease,
  kRollbackTo,
  kTimerSqlCount,
};

const std::vector<std::string>& TimerSqlText() {
  static const std::vector<std::string> sql = [] {
    std::vector<std::string> s(kTimerSqlCount);
    s[kBegin] = "BEGIN IMMEDIATE";
    s[kCommit] = "COMMIT";
    s[kRollback] = "ROLLBACK";
    // The newest park wins (a NULL park_seq compares to NULL: kept); a
    // strictly newer one ends the lease (a new wake). Every expression of
    // the SET sees the row as it was.
    s[kSchedule] =
        "INSERT INTO timers(execution_id, wake_at_ms, redrive, park_seq, park_fence) "
        "VALUES (?1, ?2, ?3, ?4, ?5) "
        "ON CONFLICT(execution_id, wake_at_ms) DO UPDATE SET "
        "redrive = COALESCE(excluded.redrive, timers.redrive), "
        "lease_until_ms = CASE WHEN excluded.park_seq > COALESCE(timers.park_seq, 0) "
        "  THEN 0 ELSE timers.lease_until_ms END, "
        "park_fence = CASE WHEN excluded.park_seq >= COALESCE(timers.park_seq, 0) "
        "  THEN excluded.park_fence ELSE timers.park_fence END, "
        "park_seq = CASE WHEN excluded.park_seq >= COALESCE(timers.park_seq, 0) "
        "  THEN excluded.park_seq ELSE timers.park_seq END";
    // ?3 = include_redrive: re-drive rows go in the WHERE, before the LIMIT.
    s[kDue] =
        "SELECT execution_id, wake_at_ms, redrive, park_seq, park_fence FROM timers "
        "WHERE wake_at_ms <= ?1 AND (?2 OR redrive IS NULL) "
        "ORDER BY wake_at_ms, execution_id LIMIT ?3";
    // A row under a live lease is skipped, whoever holds it.
    // ?6 = ahead_ms: rows due by then are taken; leases are judged at ?1.
    s[kClaim] =
        "UPDATE timers SET lease_owner = ?4, lease_until_ms = ?5 "
        "WHERE (execution_id, wake_at_ms) IN ("
        "  SELECT execution_id, wake_at_ms FROM timers "
        "  WHERE wake_at_ms <= ?1 + ?6 AND (?2 OR redrive IS NULL) "
        "    AND COALESCE(lease_until_ms, 0) <= ?1 "
        "  ORDER BY wake_at_ms, execution_id LIMIT ?3) "
        "RETURNING execution_id, wake_at_ms, redrive, park_seq, park_fence";
    // ?3 = the claim's view of the park (TimerKey::park_seq), -1 for none:
    // a newer park written since is spared.
    s[kComplete] =
        "DELETE FROM timers WHERE execution_id = ?1 AND wake_at_ms = ?2 "
        "AND (?3 < 0 OR COALESCE(park_seq, 0) <= ?3)";
    s[kDefer] =
        "UPDATE timers SET lease_until_ms = ?3 "
        "WHERE execution_id = ?1 AND wake_at_ms = ?2 AND lease_owner = ?4";
    s[kRowsOf] =
        "SELECT execution_id, wake_at_ms, redrive, park_seq, park_fence FROM timers "
        "WHERE execution_id = ?1 "
        "ORDER BY wake_at_ms";
    s[kSavepoint] = "SAVEPOINT timer_op";
    s[kRelease] = "RELEASE timer_op";
    s[kRollbackTo] = "ROLLBACK TO timer_op";
    return s;
  }();
  return sql;
}

// The current shape. An older table lacks some of kAddedColumns.
constexpr const char* kCreateTable =
    "CREATE TABLE IF NOT EXISTS timers ("
    "  execution_id TEXT NOT NULL, wake_at_ms INTEGER NOT NULL, redrive TEXT,"
    "  lease_owner TEXT, lease_until_ms INTEGER, park_seq INTEGER, park_fence INTEGER,"
    "  PRIMARY KEY (execution_id, wake_at_ms))";
constexpr const char* kCreateIndex =
    "CREATE INDEX IF NOT EXISTS timers_by_wake ON timers(wake_at_ms, execution_id)";
struct AddedColumn {
  const char* name;
  const char* type;
};
constexpr AddedColumn kAddedColumns[] = {{"redrive", "TEXT"},
                                         {"lease_owner", "TEXT"},
                                         {"lease_until_ms", "INTEGER"},
                                         {"park_seq", "INTEGER"},
                                         {"park_fence", "INTEGER"}};

Result<std::set<std::string>> ColumnsOf(Connection& c, const char* table) {
  sqlite3_stmt* raw = nullptr;
  std::string sql = std::string("PRAGMA table_info(") + table + ")";
  int rc = sqlite3_prepare_v2(c.db(), sql.c_str(), -1, &raw, nullptr);
  if (rc != SQLITE_OK) return sqlite_internal::SqliteFailure(c.db(), rc, sql);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  Statement s(c.db(), raw);
  std::set<std::string> out;
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    out.emplace(s.Text(1));  // cid, name, type, ...
  }
}

Status MigrateLocked(Connection& c) {
  ONCE_RETURN_IF_ERROR(c.Exec(kCreateTable));
  ONCE_ASSIGN_OR_RETURN(std::set<std::string> columns, ColumnsOf(c, "timers"));
  for (const AddedColumn& col : kAddedColumns) {
    if (columns.contains(col.name)) continue;
    Status added =
        c.Exec(std::string("ALTER TABLE timers ADD COLUMN ") + col.name + " " + col.type);
    // Another process added it first: what we wanted.
    if (!added && added.error().message.find("duplicate column name") == std::string::npos) {
      return added;
    }
  }
  return c.Exec(kCreateIndex);
}

Result<std::optional<Redrive>> DecodeRedrive(const Statement& s, int column, std::string_view id) {
  if (s.IsNull(column)) return std::nullopt;
  Result<Redrive> redrive = timers::ParseRedriveText(s.Text(column));
  if (!redrive) {
    return MakeError(ErrorCode::kCorruption, "sqlite: " + redrive.error().message, std::string(id));
  }
  return *redrive;
}

// Reads (execution_id, wake_at_ms, redrive, park_seq, park_fence) rows to
// the end. A park is there when both of its columns are.
Result<std::vector<TimerRow>> ReadRows(Statement& s) {
  std::vector<TimerRow> out;
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    TimerRow r{.execution_id = std::string(s.Text(0)), .wake_at_ms = s.Int(1)};
    ONCE_ASSIGN_OR_RETURN(r.redrive, DecodeRedrive(s, 2, r.execution_id));
    if (!s.IsNull(3) && !s.IsNull(4)) r.park = timers::TimerPark{s.Int(3), s.Int(4)};
    out.push_back(std::move(r));
  }
}

}  // namespace

struct SqliteTimerStore::Impl {
  SqliteTimerOptions options;
  std::mutex mu;
  std::unique_ptr<Connection> conn;  // GUARDED_BY(mu)
  // Every write goes through it: concurrent writers share one transaction
  // and one commit (write_group.h); reads take `mu` directly.
  std::unique_ptr<sqlite_internal::WriteGroup> group;

  template <class F>
  auto Write(F&& body) -> decltype(body(std::declval<Connection&>())) {
    return group->Run(0, std::forward<F>(body));
  }
};

SqliteTimerStore::SqliteTimerStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteTimerStore::~SqliteTimerStore() = default;

Result<std::unique_ptr<SqliteTimerStore>> SqliteTimerStore::Open(const std::string& path,
                                                                 SqliteTimerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  ONCE_ASSIGN_OR_RETURN(
      impl->conn,
      sqlite_internal::OpenFileInWal(
          "timer", path, sqlite_internal::ConnectionOptionsOf(impl->options), TimerSqlText()));
  ONCE_RETURN_IF_ERROR(sqlite_internal::InTransaction(*impl->conn, kBegin, kCommit, kRollback,
                                                      [&] { return MigrateLocked(*impl->conn); }));
  impl->group = std::make_unique<sqlite_internal::WriteGroup>(
      *impl->conn, impl->mu,
      sqlite_internal::TransactionSql{.begin = kBegin,
                                      .commit = kCommit,
                                      .rollback = kRollback,
                                      .savepoint = kSavepoint,
                                      .release = kRelease,
                                      .rollback_to = kRollbackTo},
      sqlite_internal::WriteGroupLimits{});
  return std::unique_ptr<SqliteTimerStore>(new SqliteTimerStore(std::move(impl)));
}

const timers::TimerLimits& SqliteTimerStore::limits() const { return impl_->options.limits; }

Status SqliteTimerStore::Schedule(const TimerRow& row) {
  ONCE_RETURN_IF_ERROR(timers::ValidateTimerRow(row));
  std::string redrive = row.redrive ? timers::RedriveText(*row.redrive) : "";
  return impl_->Write([&](Connection& c) -> Status {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kSchedule));
    ONCE_RETURN_IF_ERROR(s.Bind(1, row.execution_id));
    ONCE_RETURN_IF_ERROR(s.Bind(2, row.wake_at_ms));
    ONCE_RETURN_IF_ERROR(row.redrive ? s.Bind(3, redrive) : s.BindNull(3));
    ONCE_RETURN_IF_ERROR(row.park ? s.Bind(4, row.park->sequence) : s.BindNull(4));
    ONCE_RETURN_IF_ERROR(row.park ? s.Bind(5, row.park->fence) : s.BindNull(5));
    return s.Run();
  });
}

Result<std::vector<TimerRow>> SqliteTimerStore::Due(int64_t now_ms, size_t limit,
                                                    bool include_redrive) {
  auto capped = static_cast<int64_t>(std::min(limit, limits().claim_rows_max));
  std::lock_guard<std::mutex> lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kDue));
  ONCE_RETURN_IF_ERROR(s.Bind(1, now_ms));
  ONCE_RETURN_IF_ERROR(s.Bind(2, int64_t{include_redrive ? 1 : 0}));
  ONCE_RETURN_IF_ERROR(s.Bind(3, capped));
  return ReadRows(s);
}

Result<std::vector<TimerRow>> SqliteTimerStore::Claim(const ClaimRequest& req) {
  ONCE_RETURN_IF_ERROR(timers::ValidateClaim(req));
  auto capped = static_cast<int64_t>(std::min(req.limit, limits().claim_rows_max));
  // Select and lease in one statement inside the group's BEGIN IMMEDIATE: no
  // other claimer (thread or process) can take the same rows in between.
  auto claimed = impl_->Write([&](Connection& c) -> Result<std::vector<TimerRow>> {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kClaim));
    ONCE_RETURN_IF_ERROR(s.Bind(1, req.now_ms));
    ONCE_RETURN_IF_ERROR(s.Bind(2, int64_t{req.include_redrive ? 1 : 0}));
    ONCE_RETURN_IF_ERROR(s.Bind(3, capped));
    ONCE_RETURN_IF_ERROR(s.Bind(4, req.owner));
    ONCE_RETURN_IF_ERROR(s.Bind(5, req.now_ms + req.lease_ms));
    ONCE_RETURN_IF_ERROR(s.Bind(6, req.ahead_ms));
    return ReadRows(s);
  });
  if (!claimed) return claimed;
  // RETURNING has no order; the contract's is oldest first.
  std::sort(claimed->begin(), claimed->end(), [](const TimerRow& a, const TimerRow& b) {
    return std::tie(a.wake_at_ms, a.execution_id) < std::tie(b.wake_at_ms, b.execution_id);
  });
  return claimed;
}

namespace {

Status DeleteRow(Connection& c, const TimerKey& key) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kComplete));
  ONCE_RETURN_IF_ERROR(s.Bind(1, key.execution_id));
  ONCE_RETURN_IF_ERROR(s.Bind(2, key.wake_at_ms));
  ONCE_RETURN_IF_ERROR(s.Bind(3, key.park_seq.value_or(-1)));
  return s.Run();
}

}  // namespace

Status SqliteTimerStore::Complete(const TimerKey& key) {
  return impl_->Write([&](Connection& c) { return DeleteRow(c, key); });
}

Status SqliteTimerStore::CompleteMany(std::span<const TimerKey> keys) {
  ONCE_RETURN_IF_ERROR(timers::ValidateCompleteMany(keys, limits()));
  if (keys.empty()) return Ok();
  // One operation of a group: all its deletes or none (its own savepoint),
  // one commit shared with whatever else is writing.
  return impl_->Write([&](Connection& c) -> Status {
    for (const TimerKey& key : keys) ONCE_RETURN_IF_ERROR(DeleteRow(c, key));
    return Ok();
  });
}

Status SqliteTimerStore::Defer(const TimerKey& key, std::string_view owner, int64_t until_ms) {
  return impl_->Write([&](Connection& c) -> Status {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kDefer));
    ONCE_RETURN_IF_ERROR(s.Bind(1, key.execution_id));
    ONCE_RETURN_IF_ERROR(s.Bind(2, key.wake_at_ms));
    ONCE_RETURN_IF_ERROR(s.Bind(3, until_ms));
    ONCE_RETURN_IF_ERROR(s.Bind(4, owner));
    return s.Run();
  });
}

Result<std::vector<TimerRow>> SqliteTimerStore::RowsOf(std::string_view execution_id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kRowsOf));
  ONCE_RETURN_IF_ERROR(s.Bind(1, execution_id));
  return ReadRows(s);
}

}  // namespace once::store
