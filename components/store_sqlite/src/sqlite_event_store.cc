#include "once/store_sqlite/sqlite_event_store.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <mutex>

#include "connection.h"
#include "once/events/kinds.h"
#include "once/store/validate.h"
#include "sqlite_schema.h"
#include "write_group.h"

namespace once::store {
namespace {

using sqlite_internal::Connection;
using sqlite_internal::EnableWal;
using sqlite_internal::Statement;

// Statement ids; SqlText() holds their text in the same order.
enum Sql : size_t {
  kBegin,
  kCommit,
  kRollback,
  kSavepoint,
  kRelease,
  kRollbackTo,
  kHead,
  kFence,
  kFenceAndHead,
  kInsertEvent,
  kAcquireFence,
  kSetFence,
  kAnsweringPast,
  kReadRange,
  kListEvents,
  kListKept,
  kDeleteEvents,
  kDeleteZeroFence,
  kDeleteKeptHead,
  kCountPrefix,
  kCopyPrefix,
  kDeletePrefix,
  kUpsertRun,
  kDeleteRun,
  kReleaseRun,
  kRunOwner,
  kEndedBy,
  // ListEnded: one statement per ending kind (EndingKindNames order), the
  // kind inlined so that the partial index events_by_status_kind applies.
  kListEndedFirst,
  kListEndedLast = kListEndedFirst + 3,
  kSqlCount,
};

std::vector<std::string> BuildSql() {
  std::vector<std::string> sql(kSqlCount);
  sql[kBegin] = "BEGIN IMMEDIATE";
  sql[kCommit] = "COMMIT";
  sql[kRollback] = "ROLLBACK";
  sql[kSavepoint] = "SAVEPOINT op";
  sql[kRelease] = "RELEASE op";
  sql[kRollbackTo] = "ROLLBACK TO op";
  // kept_heads: the head of a log that an earlier build's TruncatePrefixKeeping
  // emptied (this build keeps the newest event, so it writes no new rows).
  // COALESCE stops at its first non-NULL argument: a log with events never
  // reads kept_heads.
  const std::string head =
      "COALESCE((SELECT sequence FROM events WHERE execution_id = ?1 "
      "ORDER BY sequence DESC LIMIT 1), "
      "(SELECT head FROM kept_heads WHERE execution_id = ?1), 0)";
  sql[kHead] = "SELECT " + head;
  sql[kFence] = "SELECT token FROM fences WHERE execution_id = ?1";
  // The append's guard and sequence check in one step: token, head.
  sql[kFenceAndHead] =
      "SELECT COALESCE((SELECT token FROM fences WHERE execution_id = ?1), 0), " + head;
  sql[kInsertEvent] =
      "INSERT INTO events(execution_id, sequence, kind, payload, metadata, time_ms) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
  sql[kAcquireFence] =
      "INSERT INTO fences(execution_id, token) VALUES (?1, 1) "
      "ON CONFLICT(execution_id) DO UPDATE SET token = token + 1 RETURNING token";
  sql[kSetFence] =
      "INSERT INTO fences(execution_id, token) VALUES (?1, ?2) "
      "ON CONFLICT(execution_id) DO UPDATE SET token = excluded.token";
  // events::IsAnswering in SQL. json_type(...) = 'true' is the boolean true
  // only (json_extract would also match the number 1).
  sql[kAnsweringPast] =
      "SELECT 1 FROM events WHERE execution_id = ?1 AND sequence > ?2 AND (kind IN (" +
      SqlQuotedList(events::AnsweringKernelKindNames()) + ") OR (kind NOT IN (" +
      SqlQuotedList(events::AllKernelKindNames()) +
      ") AND json_type(metadata, '$.kernel') = 'true')) LIMIT 1";
  sql[kReadRange] =
      "SELECT sequence, kind, payload, metadata, time_ms FROM events "
      "WHERE execution_id = ?1 AND sequence >= ?2 AND sequence <= ?3 "
      "ORDER BY sequence LIMIT ?4";
  sql[kListEvents] =
      "SELECT DISTINCT execution_id FROM events WHERE execution_id > ?1 "
      "ORDER BY execution_id LIMIT ?2";
  sql[kListKept] =
      "SELECT execution_id FROM kept_heads WHERE execution_id > ?1 "
      "ORDER BY execution_id LIMIT ?2";
  sql[kDeleteEvents] = "DELETE FROM events WHERE execution_id = ?1";
  sql[kDeleteZeroFence] = "DELETE FROM fences WHERE execution_id = ?1 AND token = 0";
  sql[kDeleteKeptHead] = "DELETE FROM kept_heads WHERE execution_id = ?1";
  sql[kCountPrefix] =
      "SELECT COUNT(*) FROM events WHERE execution_id = ?1 AND sequence >= 1 AND sequence <= ?2";
  sql[kCopyPrefix] =
      "INSERT INTO events(execution_id, sequence, kind, payload, metadata, time_ms) "
      "SELECT ?2, sequence, kind, payload, metadata, time_ms FROM events "
      "WHERE execution_id = ?1 AND sequence >= 1 AND sequence <= ?3";
  // The newest event always stays (see TruncatePrefixKeeping in event_store.h).
  sql[kDeletePrefix] =
      "DELETE FROM events WHERE execution_id = ?1 AND sequence < MIN(?2, (SELECT sequence FROM "
      "events WHERE execution_id = ?1 ORDER BY sequence DESC LIMIT 1))";
  sql[kUpsertRun] =
      "INSERT INTO loom_runs(execution_id, owner, since_ms) VALUES (?1, ?2, ?3) "
      "ON CONFLICT(execution_id) DO UPDATE SET owner = excluded.owner, since_ms = "
      "excluded.since_ms";
  sql[kDeleteRun] = "DELETE FROM loom_runs WHERE execution_id = ?1";
  sql[kReleaseRun] = "DELETE FROM loom_runs WHERE execution_id = ?1";
  sql[kRunOwner] = "SELECT owner, since_ms FROM loom_runs WHERE execution_id = ?1";
  sql[kEndedBy] = "SELECT 1 FROM events WHERE execution_id = ?1 AND time_ms <= ?2 AND kind IN (" +
                  SqlQuotedList(EndingKindNames()) + ") LIMIT 1";
  std::span<const std::string_view> ending = EndingKindNames();
  ONCE_CHECK_MSG(ending.size() == kListEndedLast - kListEndedFirst + 1, "one statement a kind");
  for (size_t i = 0; i < ending.size(); ++i) {
    sql[kListEndedFirst + i] = "SELECT execution_id, time_ms FROM events WHERE kind = '" +
                               std::string(ending[i]) +
                               "' AND time_ms <= ?1 AND (time_ms, execution_id) > (?2, ?3) "
                               "ORDER BY time_ms, execution_id LIMIT ?4";
  }
  return sql;
}

const std::vector<std::string>& SqlText() {
  static const std::vector<std::string> sql = BuildSql();
  return sql;
}

// Migration i brings user_version from i to i + 1. Append, never edit.
struct Migration {
  int version;
  const char* sql;
};
constexpr Migration kMigrations[] = {
    {1,
     "CREATE TABLE IF NOT EXISTS events ("
     "  execution_id TEXT NOT NULL, sequence INTEGER NOT NULL, kind TEXT NOT NULL,"
     "  payload TEXT NOT NULL, metadata TEXT NOT NULL, time_ms INTEGER NOT NULL,"
     "  PRIMARY KEY (execution_id, sequence)) WITHOUT ROWID;"
     "CREATE TABLE IF NOT EXISTS fences ("
     "  execution_id TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL) WITHOUT ROWID;"
     "CREATE TABLE IF NOT EXISTS kept_heads ("
     "  execution_id TEXT PRIMARY KEY NOT NULL, head INTEGER NOT NULL) WITHOUT ROWID;"},
    // events becomes an ordinary rowid table with its primary key as an index.
    // Rows of a few hundred bytes clustered by execution made every grouped
    // commit rewrite one leaf page per execution; appended by rowid, a group's
    // rows share a few pages and only the small index entries scatter. Measured
    // with bench/store (64 executions a commit): 234 -> 144 WAL writes a
    // commit (plain INSERTs of the same rows: 150), 21 -> 14 us of CPU an event. Rows are
    // copied in key order, so old logs stay contiguous.
    {2,
     "CREATE TABLE events_v2 ("
     "  execution_id TEXT NOT NULL, sequence INTEGER NOT NULL, kind TEXT NOT NULL,"
     "  payload TEXT NOT NULL, metadata TEXT NOT NULL, time_ms INTEGER NOT NULL,"
     "  PRIMARY KEY (execution_id, sequence));"
     "INSERT INTO events_v2 (execution_id, sequence, kind, payload, metadata, time_ms)"
     "  SELECT execution_id, sequence, kind, payload, metadata, time_ms FROM events"
     "  ORDER BY execution_id, sequence;"
     "DROP TABLE events;"
     "ALTER TABLE events_v2 RENAME TO events;"},
    // Run rows and the node registry (issue 15): who runs which body, and
    // which nodes are alive (docs/nodes.md). As written then (the shared
    // kCreateNodeTables has moved on since).
    {3,
     "CREATE TABLE IF NOT EXISTS loom_runs ("
     "  execution_id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,"
     "  since_ms INTEGER NOT NULL) WITHOUT ROWID;"
     "CREATE INDEX IF NOT EXISTS loom_runs_by_owner ON loom_runs(owner, execution_id);"
     "CREATE TABLE IF NOT EXISTS loom_nodes ("
     "  node_id TEXT PRIMARY KEY NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
     "  version TEXT NOT NULL, started_at_ms INTEGER NOT NULL, heartbeat_at_ms INTEGER NOT NULL,"
     "  lease_ms INTEGER NOT NULL, stopped INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"},
    // The run rows lose their owner index (sqlite_schema.h): a run's start and
    // end write one B-tree entry each instead of two; the rows are kept.
    {4, "DROP INDEX IF EXISTS loom_runs_by_owner"},
};
static_assert(std::size(kMigrations) == kSqliteSchemaVersion);

Result<int64_t> QueryInt(Connection& c, Sql id, std::string_view text, int64_t absent) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(id));
  ONCE_RETURN_IF_ERROR(s.Bind(1, text));
  ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
  return row && !s.IsNull(0) ? s.Int(0) : absent;
}

Result<int64_t> HeadOn(Connection& c, std::string_view id) { return QueryInt(c, kHead, id, 0); }

struct FenceAndHead {
  int64_t token = 0;
  int64_t head = 0;
};

Result<FenceAndHead> FenceAndHeadOn(Connection& c, std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kFenceAndHead));
  ONCE_RETURN_IF_ERROR(s.Bind(1, id));
  ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return MakeError(ErrorCode::kInternal, "sqlite: fence and head returned no row");
  return FenceAndHead{.token = s.Int(0), .head = s.Int(1)};
}
Result<int64_t> FenceOn(Connection& c, std::string_view id) { return QueryInt(c, kFence, id, 0); }

Status InsertEvents(Connection& c, std::string_view id, const EncodedAppend& enc) {
  for (const EncodedEvent& e : enc.events) {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kInsertEvent));
    ONCE_RETURN_IF_ERROR(s.Bind(1, id));
    ONCE_RETURN_IF_ERROR(s.Bind(2, e.sequence));
    ONCE_RETURN_IF_ERROR(s.Bind(3, e.kind));
    ONCE_RETURN_IF_ERROR(s.Bind(4, e.payload_json));
    ONCE_RETURN_IF_ERROR(s.Bind(5, e.metadata_json));
    ONCE_RETURN_IF_ERROR(s.Bind(6, e.time_ms));
    ONCE_RETURN_IF_ERROR(s.Run());
  }
  return Ok();
}

// The run row of `id` on `c`, inside a write transaction: names `owner`
// (kRun) or releases it (kEnd: whoever it names; `owner` is not used).
Status SetRunOn(Connection& c, std::string_view id, std::string_view owner, RunRowChange change,
                int64_t now_ms) {
  ONCE_ASSIGN_OR_RETURN(Statement s,
                        c.Prepare(change == RunRowChange::kEnd ? kReleaseRun : kUpsertRun));
  ONCE_RETURN_IF_ERROR(s.Bind(1, id));
  if (change == RunRowChange::kRun) {
    ONCE_RETURN_IF_ERROR(s.Bind(2, owner));
    ONCE_RETURN_IF_ERROR(s.Bind(3, now_ms));
  }
  return s.Run();
}

Result<std::optional<RunOwner>> RunOwnerOn(Connection& c, std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kRunOwner));
  ONCE_RETURN_IF_ERROR(s.Bind(1, id));
  ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<RunOwner>();
  return std::optional<RunOwner>(RunOwner{std::string(s.Text(0)), s.Int(1)});
}

enum class GuardKind { kFence, kIfUnchanged };

// Inside a write transaction: the guard, the sequence, then the rows. A
// refusal returns before anything is written.
// Model: models/fence_atomic.pml (issue 19; spin checks it, scripts/models).
Result<int64_t> AppendOn(Connection& c, const AppendRequest& req, const EncodedAppend& enc,
                         GuardKind guard, int64_t observed, int64_t now_ms) {
  // One statement reads both (an unguarded append ignores the token).
  ONCE_ASSIGN_OR_RETURN(FenceAndHead now, FenceAndHeadOn(c, req.execution_id));
  if (guard == GuardKind::kIfUnchanged && now.token != observed) {
    return StaleFence(req.execution_id, observed, now.token);
  }
  if (guard == GuardKind::kFence && req.fence && *req.fence < now.token) {
    return StaleFence(req.execution_id, *req.fence, now.token);
  }
  if (req.expected_next != now.head + 1) {
    return SequenceConflict(req.execution_id, now.head + 1, req.expected_next);
  }
  ONCE_RETURN_IF_ERROR(InsertEvents(c, req.execution_id, enc));
  // Any park or end releases the row (a new log has none); a run names its owner.
  if (enc.run_row == RunRowChange::kEnd ? req.expected_next > 1 : !req.owner.empty()) {
    ONCE_RETURN_IF_ERROR(SetRunOn(c, req.execution_id, req.owner, enc.run_row, now_ms));
  }
  return req.expected_next + static_cast<int64_t>(req.events.size()) - 1;
}

Result<bool> AnsweringPast(Connection& c, std::string_view id, int64_t park_seq) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kAnsweringPast));
  ONCE_RETURN_IF_ERROR(s.Bind(1, id));
  ONCE_RETURN_IF_ERROR(s.Bind(2, park_seq));
  return s.Step();
}

Status MigrateLocked(Connection& c) {
  ONCE_ASSIGN_OR_RETURN(std::string text, c.QueryText("PRAGMA user_version"));
  int version = std::stoi(text.empty() ? "0" : text);
  if (version > kSqliteSchemaVersion) {
    return MakeError(ErrorCode::kUnsupported, "sqlite: schema version " + std::to_string(version) +
                                                  " is newer than this build's " +
                                                  std::to_string(kSqliteSchemaVersion));
  }
  for (const Migration& m : kMigrations) {
    if (m.version <= version) continue;
    ONCE_RETURN_IF_ERROR(c.Exec(m.sql));
    ONCE_RETURN_IF_ERROR(c.Exec("PRAGMA user_version=" + std::to_string(m.version)));
  }
  return Ok();
}

// The operator's index (components/visibility, docs/operations.md): the
// events that place an execution in a status, by kind and time, so that
// listing the newest executions of one status reads a page of index entries,
// not the log. Partial: steps, resumes and audit events are not in it (the
// predicate is OR-ed equalities: SQLite uses a partial index for `kind = 'X'`
// only when that term appears in the index's OR list, not in an IN). Not a
// versioned migration: an older build opens the file and ignores it. The
// kinds are events::StatusKernelKindNames (PostgreSQL's index has the same).
std::string CreateStatusIndexSql() {
  std::string sql =
      "CREATE INDEX IF NOT EXISTS events_by_status_kind ON events(kind, time_ms, execution_id, "
      "sequence) WHERE ";
  const char* separator = "";
  for (std::string_view kind : events::StatusKernelKindNames()) {
    sql += separator;
    sql += "kind = '" + std::string(kind) + "'";
    separator = " OR ";
  }
  return sql;
}

Status Migrate(Connection& c) {
  return sqlite_internal::InTransaction(c, kBegin, kCommit, kRollback, [&]() -> Status {
    ONCE_RETURN_IF_ERROR(MigrateLocked(c));
    return c.Exec(CreateStatusIndexSql());
  });
}

}  // namespace

namespace {
int AuthorizeStepSql(void* on, int action, const char* arg1, const char* arg2, const char*,
                     const char*);
}  // namespace

struct SqliteEventStore::Impl {
  std::string path;
  SqliteOptions options;
  std::unique_ptr<SystemClock> owned_clock;
  const Clock* clock = nullptr;
  sqlite_internal::ConnectionOptions connection_options;

  std::mutex writer_mu;
  std::unique_ptr<Connection> writer;  // GUARDED_BY(writer_mu)
  bool judging_step_sql = false;       // GUARDED_BY(writer_mu): see AuthorizeStepSql
  std::unique_ptr<sqlite_internal::WriteGroup> group;

  std::mutex readers_mu;
  std::condition_variable reader_returned;
  std::vector<std::unique_ptr<Connection>> idle_readers;  // GUARDED_BY(readers_mu)
  size_t readers_open = 0;                                // GUARDED_BY(readers_mu)

  // Runs body(writer) inside a group transaction (see write_group.h): its
  // error rolls back its own writes; its result is returned once the group
  // has committed.
  template <class F>
  auto Write(size_t bytes, F&& body) -> decltype(body(std::declval<Connection&>())) {
    return group->Run(bytes, std::forward<F>(body));
  }

  // Runs body(reader) on a pooled reader connection.
  template <class F>
  auto Read(F&& body) -> decltype(body(std::declval<Connection&>())) {
    auto leased = LeaseReader();
    if (!leased) return std::unexpected(leased.error());
    std::unique_ptr<Connection> c = std::move(*leased);
    auto result = body(*c);
    ReturnReader(std::move(c));
    return result;
  }

  Result<std::unique_ptr<Connection>> LeaseReader() {
    std::unique_lock<std::mutex> lock(readers_mu);
    reader_returned.wait(lock, [&] {
      return !idle_readers.empty() || readers_open < options.reader_connections_max;
    });
    if (!idle_readers.empty()) {
      auto c = std::move(idle_readers.back());
      idle_readers.pop_back();
      return c;
    }
    ++readers_open;
    lock.unlock();
    sqlite_internal::ConnectionOptions reader_options = connection_options;
    reader_options.query_only = true;
    auto c = Connection::Open(path, reader_options, SqlText());
    if (!c) {
      std::lock_guard<std::mutex> relock(readers_mu);
      --readers_open;
      reader_returned.notify_one();
    }
    return c;
  }

  void ReturnReader(std::unique_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(readers_mu);
    idle_readers.push_back(std::move(c));
    reader_returned.notify_one();
  }
};

SqliteEventStore::SqliteEventStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteEventStore::~SqliteEventStore() = default;

Result<std::unique_ptr<SqliteEventStore>> SqliteEventStore::Open(const std::string& path,
                                                                 SqliteOptions options) {
  if (path.empty() || path == ":memory:" || path.starts_with("file::memory:")) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "sqlite: the store needs a database file, not an in-memory database", path);
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->options = std::move(options);
  impl->options.reader_connections_max = std::max<size_t>(1, impl->options.reader_connections_max);
  impl->options.group_operations_max = std::max<size_t>(1, impl->options.group_operations_max);
  if (impl->options.clock == nullptr) {
    impl->owned_clock = std::make_unique<SystemClock>();
    impl->clock = impl->owned_clock.get();
  } else {
    impl->clock = impl->options.clock;
  }
  impl->connection_options = sqlite_internal::ConnectionOptionsOf(impl->options);
  ONCE_ASSIGN_OR_RETURN(impl->writer, Connection::Open(path, impl->connection_options, SqlText()));
  ONCE_RETURN_IF_ERROR(EnableWal(*impl->writer));
  ONCE_RETURN_IF_ERROR(Migrate(*impl->writer));
  sqlite3_set_authorizer(impl->writer->db(), AuthorizeStepSql, &impl->judging_step_sql);
  impl->group = std::make_unique<sqlite_internal::WriteGroup>(
      *impl->writer, impl->writer_mu,
      sqlite_internal::TransactionSql{.begin = kBegin,
                                      .commit = kCommit,
                                      .rollback = kRollback,
                                      .savepoint = kSavepoint,
                                      .release = kRelease,
                                      .rollback_to = kRollbackTo},
      sqlite_internal::WriteGroupLimits{.ops_max = impl->options.group_operations_max,
                                        .bytes_max = impl->options.group_bytes_max});
  return std::unique_ptr<SqliteEventStore>(new SqliteEventStore(std::move(impl)));
}

const Limits& SqliteEventStore::limits() const { return impl_->options.limits; }

uint64_t SqliteEventStore::write_transactions() const { return impl_->group->stats().commits; }

SqliteGroupStats SqliteEventStore::GroupStats() const {
  auto s = impl_->group->stats();
  return {.commits = s.commits, .operations = s.operations, .largest_group = s.largest};
}

Result<SqliteSettings> SqliteEventStore::Settings() {
  std::lock_guard<std::mutex> lock(impl_->writer_mu);
  Connection& c = *impl_->writer;
  SqliteSettings out;
  ONCE_ASSIGN_OR_RETURN(out.journal_mode, c.QueryText("PRAGMA journal_mode"));
  ONCE_ASSIGN_OR_RETURN(std::string sync, c.QueryText("PRAGMA synchronous"));
  ONCE_ASSIGN_OR_RETURN(std::string busy, c.QueryText("PRAGMA busy_timeout"));
  ONCE_ASSIGN_OR_RETURN(std::string version, c.QueryText("PRAGMA user_version"));
  out.synchronous = std::stoi(sync);
  out.busy_timeout_ms = std::stoll(busy);
  out.schema_version = std::stoi(version);
  return out;
}

Result<int64_t> SqliteEventStore::Append(const AppendRequest& req) {
  ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(req, limits(), *impl_->clock));
  int64_t now_ms = impl_->clock->NowUnixMillis();
  return impl_->Write(enc.bytes, [&](Connection& c) {
    return AppendOn(c, req, enc, GuardKind::kFence, 0, now_ms);
  });
}

Result<int64_t> SqliteEventStore::AppendIfUnchanged(const AppendRequest& req, int64_t observed) {
  ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(req, limits(), *impl_->clock));
  return impl_->Write(enc.bytes, [&](Connection& c) {
    return AppendOn(c, req, enc, GuardKind::kIfUnchanged, observed, impl_->clock->NowUnixMillis());
  });
}

Result<std::vector<Result<int64_t>>> SqliteEventStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  ONCE_RETURN_IF_ERROR(ValidateBatchShape(requests, limits()));
  // Encode before the transaction; a request that fails its own checks fails alone.
  std::vector<Result<EncodedAppend>> encoded;
  encoded.reserve(requests.size());
  size_t bytes = 0;
  bool any_valid = false;
  for (const auto& r : requests) {
    encoded.push_back(EncodeAppend(r, limits(), *impl_->clock));
    if (encoded.back()) {
      bytes += encoded.back()->bytes;
      any_valid = true;
    }
  }
  ONCE_RETURN_IF_ERROR(CheckBatchBytes(bytes, limits()));
  using Out = std::vector<Result<int64_t>>;
  const int64_t now_ms = impl_->clock->NowUnixMillis();
  auto append_all = [&](Connection* c) -> Result<Out> {
    Out out;
    out.reserve(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!encoded[i]) {
        out.push_back(std::unexpected(encoded[i].error()));
        continue;
      }
      Result<int64_t> r = AppendOn(*c, requests[i], *encoded[i], GuardKind::kFence, 0, now_ms);
      // A refusal wrote nothing; any other failure aborts the whole batch.
      if (!r && r.error().code != ErrorCode::kStaleFence &&
          r.error().code != ErrorCode::kSequenceConflict) {
        return std::unexpected(r.error());
      }
      out.push_back(std::move(r));
    }
    return out;
  };
  if (!any_valid) return append_all(nullptr);
  return impl_->Write(bytes, [&](Connection& c) { return append_all(&c); });
}

namespace {

// Events first..last of `id` on `c`, ascending, at most `limit`.
Result<std::vector<Envelope>> ReadRangeOn(Connection& c, std::string_view id, int64_t first,
                                          int64_t last, int64_t limit) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kReadRange));
  ONCE_RETURN_IF_ERROR(s.Bind(1, id));
  ONCE_RETURN_IF_ERROR(s.Bind(2, first));
  ONCE_RETURN_IF_ERROR(s.Bind(3, last));
  ONCE_RETURN_IF_ERROR(s.Bind(4, limit));
  std::vector<Envelope> out;
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    ONCE_ASSIGN_OR_RETURN(Envelope e, DecodeRow(id, s.Int(0), std::string(s.Text(1)), s.Text(2),
                                                s.Text(3), s.Int(4)));
    out.push_back(std::move(e));
  }
}

}  // namespace

Result<std::vector<Envelope>> SqliteEventStore::ReadRange(std::string_view id, int64_t first,
                                                          int64_t last) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  auto limit = static_cast<int64_t>(limits().read_events_max);
  return impl_->Read([&](Connection& c) { return ReadRangeOn(c, id, first, last, limit); });
}

Result<int64_t> SqliteEventStore::Head(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  return impl_->Read([&](Connection& c) { return HeadOn(c, id); });
}

namespace {

// Up to `limit` ids of statement `which` strictly after `after`, ascending.
Status ListInto(Connection& c, Sql which, std::string_view after, int64_t limit,
                std::vector<std::string>& out) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(which));
  ONCE_RETURN_IF_ERROR(s.Bind(1, after));
  ONCE_RETURN_IF_ERROR(s.Bind(2, limit));
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return Ok();
    out.emplace_back(s.Text(0));
  }
}

}  // namespace

Result<ExecutionPage> SqliteEventStore::ListExecutions(std::string_view after, size_t limit) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits().list_page_executions_max);
  // One more than the page, to know whether another page follows.
  auto fetch = static_cast<int64_t>(limit) + 1;
  return impl_->Read([&](Connection& c) -> Result<ExecutionPage> {
    std::vector<std::string> ids;
    // One snapshot for both tables.
    ONCE_RETURN_IF_ERROR(c.Exec("BEGIN"));
    Status s = ListInto(c, kListEvents, after, fetch, ids);
    if (s) s = ListInto(c, kListKept, after, fetch, ids);
    (void)c.Exec("COMMIT");
    ONCE_RETURN_IF_ERROR(s);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    ExecutionPage page;
    if (ids.size() > limit) {
      ids.resize(limit);
      if (!ids.empty()) page.next_after = ids.back();
    }
    page.execution_ids = std::move(ids);
    return page;
  });
}

namespace {
Status DeleteOn(Connection& c, std::string_view id);
}  // namespace

Status SqliteEventStore::DeleteExecution(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  return impl_->Write(0, [&](Connection& c) -> Status { return DeleteOn(c, id); });
}

namespace {

// Appends to `page` the ending events of kind `ending[k]` past `after` (the
// start of that kind when `after` names an earlier kind), until it holds
// `fetch` entries.
Status ListEndedOfKind(Connection& c, size_t k, int64_t ended_ms_max, const EndedCursor& after,
                       size_t fetch, std::vector<EndedExecution>& page) {
  std::string_view kind = EndingKindNames()[k];
  bool same_kind = after.kind == kind;
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kListEndedFirst + k));
  ONCE_RETURN_IF_ERROR(s.Bind(1, ended_ms_max));
  ONCE_RETURN_IF_ERROR(s.Bind(2, same_kind ? after.ended_ms : std::numeric_limits<int64_t>::min()));
  ONCE_RETURN_IF_ERROR(s.Bind(3, same_kind ? std::string_view(after.execution_id) : ""));
  ONCE_RETURN_IF_ERROR(s.Bind(4, static_cast<int64_t>(fetch - page.size())));
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return Ok();
    page.push_back(
        {.execution_id = std::string(s.Text(0)), .kind = std::string(kind), .ended_ms = s.Int(1)});
  }
}

Result<bool> EndedByOn(Connection& c, std::string_view id, int64_t ended_ms_max) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kEndedBy));
  ONCE_RETURN_IF_ERROR(s.Bind(1, id));
  ONCE_RETURN_IF_ERROR(s.Bind(2, ended_ms_max));
  ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
  ONCE_RETURN_IF_ERROR(s.Run());  // finish the statement before the deletes
  return row;
}

Status DeleteOn(Connection& c, std::string_view id) {
  for (Sql which : {kDeleteEvents, kDeleteZeroFence, kDeleteKeptHead, kDeleteRun}) {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(which));
    ONCE_RETURN_IF_ERROR(s.Bind(1, id));
    ONCE_RETURN_IF_ERROR(s.Run());
  }
  return Ok();
}

}  // namespace

Result<EndedPage> SqliteEventStore::ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                                              size_t limit) {
  ONCE_ASSIGN_OR_RETURN(limit, EndedPageLimit(limit, limits()));
  size_t fetch = limit + 1;  // one more: whether another page follows
  return impl_->Read([&](Connection& c) -> Result<EndedPage> {
    std::vector<EndedExecution> found;
    std::span<const std::string_view> ending = EndingKindNames();
    ONCE_RETURN_IF_ERROR(c.Exec("BEGIN"));  // one snapshot for every kind
    Status s = Ok();
    for (size_t k = 0; k < ending.size() && s && found.size() < fetch; ++k) {
      if (ending[k] < after.kind) continue;
      s = ListEndedOfKind(c, k, ended_ms_max, after, fetch, found);
    }
    (void)c.Exec("COMMIT");
    ONCE_RETURN_IF_ERROR(s);
    return EndedPageOf(std::move(found), limit);
  });
}

Result<std::vector<Status>> SqliteEventStore::DeleteEnded(std::span<const std::string> ids,
                                                          int64_t ended_ms_max) {
  ONCE_RETURN_IF_ERROR(CheckDeleteEnded(ids, limits()));
  return impl_->Write(0, [&](Connection& c) -> Result<std::vector<Status>> {
    std::vector<Status> out;
    out.reserve(ids.size());
    for (const std::string& id : ids) {
      if (Status valid = ValidateExecutionId(id, limits()); !valid) {
        out.push_back(std::move(valid));
        continue;
      }
      ONCE_ASSIGN_OR_RETURN(bool ended, EndedByOn(c, id, ended_ms_max));
      if (!ended) {
        out.push_back(NotEndedBy(id, ended_ms_max));
        continue;
      }
      ONCE_RETURN_IF_ERROR(DeleteOn(c, id));
      out.push_back(Ok());
    }
    return out;
  });
}

Result<int64_t> SqliteEventStore::AcquireFence(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  return impl_->Write(0, [&](Connection& c) -> Result<int64_t> {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kAcquireFence));
    ONCE_RETURN_IF_ERROR(s.Bind(1, id));
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return MakeError(ErrorCode::kInternal, "sqlite: fence upsert returned no row");
    int64_t token = s.Int(0);
    ONCE_RETURN_IF_ERROR(s.Run());  // finish the statement before COMMIT
    return token;
  });
}

Result<int64_t> SqliteEventStore::ReadFence(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  return impl_->Read([&](Connection& c) { return FenceOn(c, id); });
}

namespace {

// The conditional acquire on `c`, inside a write transaction.
// Model: models/fence_atomic.pml (issue 19; spin checks it, scripts/models).
Result<ConditionalAcquire> AcquireIfOn(Connection& c, std::string_view id, FenceExpectation expect,
                                       int64_t now_ms) {
  ONCE_ASSIGN_OR_RETURN(int64_t current, FenceOn(c, id));
  if (current != expect.fence) return ConditionalAcquire{.stale = true, .fence = current};
  if (expect.expected_owner) {
    ONCE_ASSIGN_OR_RETURN(std::optional<RunOwner> row, RunOwnerOn(c, id));
    std::string_view owner = row ? std::string_view(row->owner) : std::string_view();
    if (owner != *expect.expected_owner) return ConditionalAcquire{.stale = true, .fence = current};
  }
  ONCE_ASSIGN_OR_RETURN(bool answered, AnsweringPast(c, id, expect.park_seq));
  if (answered) return ConditionalAcquire{.stale = true, .fence = current};
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kSetFence));
  ONCE_RETURN_IF_ERROR(s.Bind(1, id));
  ONCE_RETURN_IF_ERROR(s.Bind(2, current + 1));
  ONCE_RETURN_IF_ERROR(s.Run());
  if (!expect.owner.empty()) {
    ONCE_RETURN_IF_ERROR(SetRunOn(c, id, expect.owner, RunRowChange::kRun, now_ms));
  }
  return ConditionalAcquire{.stale = false, .fence = current + 1};
}

// The combined acquire on `c`: the read shares the acquire's transaction,
// so nothing lands between.
Result<AcquireWithTail> AcquireIfReadOn(Connection& c, const AcquireIfRead& r, int64_t tail_max,
                                        int64_t now_ms) {
  AcquireWithTail out;
  ONCE_ASSIGN_OR_RETURN(out.acquire, AcquireIfOn(c, r.execution_id, r.expect, now_ms));
  ONCE_ASSIGN_OR_RETURN(out.tail,
                        ReadRangeOn(c, r.execution_id, r.read_after + 1, kToEnd, tail_max));
  return out;
}

}  // namespace

Result<ConditionalAcquire> SqliteEventStore::AcquireFenceIf(std::string_view id,
                                                            FenceExpectation expect) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, expect, limits()));
  // Compare, scan and bump in one BEGIN IMMEDIATE: no append can land between.
  return impl_->Write(0, [&](Connection& c) -> Result<ConditionalAcquire> {
    return AcquireIfOn(c, id, expect, impl_->clock->NowUnixMillis());
  });
}

// Model: models/fence_atomic.pml (issue 19; spin checks it, scripts/models).
Result<AcquireWithTail> SqliteEventStore::AcquireFenceIfReadTail(std::string_view id,
                                                                 FenceExpectation expect,
                                                                 int64_t read_after) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, expect, limits(), read_after));
  auto limit = static_cast<int64_t>(limits().read_events_max);
  return impl_->Write(0, [&](Connection& c) {
    return AcquireIfReadOn(c, {id, expect, read_after}, limit, impl_->clock->NowUnixMillis());
  });
}

// One operation of the write group: one transaction, one commit for the
// batch; each request validated alone first.
std::vector<Result<AcquireWithTail>> SqliteEventStore::AcquireFencesIfReadTail(
    std::span<const AcquireIfRead> requests) {
  std::vector<Result<AcquireWithTail>> out(requests.size());
  std::vector<size_t> valid;
  for (size_t i = 0; i < requests.size(); ++i) {
    const AcquireIfRead& r = requests[i];
    if (Status s = ValidateFenceIf(r.execution_id, r.expect, limits(), r.read_after); !s) {
      out[i] = std::unexpected(s.error());
    } else {
      valid.push_back(i);
    }
  }
  if (valid.empty()) return out;
  auto limit = static_cast<int64_t>(limits().read_events_max);
  Status batch = impl_->Write(0, [&](Connection& c) -> Status {
    const int64_t now_ms = impl_->clock->NowUnixMillis();
    for (size_t i : valid) {
      ONCE_ASSIGN_OR_RETURN(AcquireWithTail got, AcquireIfReadOn(c, requests[i], limit, now_ms));
      out[i] = std::move(got);
    }
    return Ok();
  });
  if (!batch) {
    for (size_t i : valid) out[i] = std::unexpected(batch.error());
  }
  return out;
}

Status SqliteEventStore::CopyPrefix(std::string_view from, std::string_view to, int64_t through) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(from, limits()));
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(to, limits()));
  if (through < 1) return MakeError(ErrorCode::kInvalidArgument, "through must be >= 1");
  return impl_->Write(0, [&](Connection& c) -> Status {
    ONCE_ASSIGN_OR_RETURN(Statement count, c.Prepare(kCountPrefix));
    ONCE_RETURN_IF_ERROR(count.Bind(1, from));
    ONCE_RETURN_IF_ERROR(count.Bind(2, through));
    ONCE_ASSIGN_OR_RETURN(bool row, count.Step());
    // Logs are dense, so the prefix is complete iff it holds `through` rows.
    if (!row || count.Int(0) != through) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "source has no complete prefix through " + std::to_string(through),
                       std::string(from));
    }
    ONCE_ASSIGN_OR_RETURN(int64_t to_head, HeadOn(c, to));
    if (to_head > 0) return SequenceConflict(to, to_head + 1, 1);
    ONCE_ASSIGN_OR_RETURN(Statement copy, c.Prepare(kCopyPrefix));
    ONCE_RETURN_IF_ERROR(copy.Bind(1, from));
    ONCE_RETURN_IF_ERROR(copy.Bind(2, to));
    ONCE_RETURN_IF_ERROR(copy.Bind(3, through));
    return copy.Run();
  });
}

Status SqliteEventStore::TruncatePrefixKeeping(std::string_view id, int64_t first_kept) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  if (first_kept < 1) return MakeError(ErrorCode::kInvalidArgument, "first_kept must be >= 1");
  return impl_->Write(0, [&](Connection& c) -> Status {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kDeletePrefix));
    ONCE_RETURN_IF_ERROR(s.Bind(1, id));
    ONCE_RETURN_IF_ERROR(s.Bind(2, first_kept));
    return s.Run();
  });
}

namespace {

// The stores' own tables (the event store's and its siblings' in the same
// file): a transactional step's SQL may read them, never write them.
// (SQLite's schema table is written by every CREATE TABLE, and SQLite
// refuses direct writes to it by itself.)
bool IsStoreTable(const char* table) {
  if (table == nullptr) return false;
  std::string_view t(table);
  return t == "events" || t == "fences" || t == "kept_heads" || t == "once_schema" ||
         t == "timers" || t.starts_with("inbox_") || t.starts_with("loom_");
}

// The writer's authorizer, installed once (installing one expires every
// cached statement): it judges only while `*on` is true, i.e. while a
// step's statement is being prepared (see sql_transaction.h): no transaction control, no session
// changes, no writes to the store's tables.
int AuthorizeStepSql(void* on, int action, const char* arg1, const char* arg2, const char*,
                     const char*) {
  if (!*static_cast<const bool*>(on)) return SQLITE_OK;  // the store's own statements
  switch (action) {
    case SQLITE_TRANSACTION:
    case SQLITE_SAVEPOINT:
    case SQLITE_ATTACH:
    case SQLITE_DETACH:
    case SQLITE_PRAGMA:
      return SQLITE_DENY;
    case SQLITE_INSERT:
    case SQLITE_UPDATE:
    case SQLITE_DELETE:
    case SQLITE_DROP_TABLE:
      return IsStoreTable(arg1) ? SQLITE_DENY : SQLITE_OK;
    case SQLITE_ALTER_TABLE:     // database, then table
    case SQLITE_CREATE_TRIGGER:  // trigger, then table
    case SQLITE_DROP_TRIGGER:
    case SQLITE_CREATE_INDEX:  // index, then table
    case SQLITE_DROP_INDEX:
      return IsStoreTable(arg2) ? SQLITE_DENY : SQLITE_OK;
    default:
      return SQLITE_OK;
  }
}

// The error of a step's statement: what the database refuses is the
// caller's input (see sql_transaction.h), the rest as the store's own.
std::unexpected<Error> StepSqlFailure(sqlite3* db, int rc, std::string_view what) {
  std::unexpected<Error> e = sqlite_internal::SqliteFailure(db, rc, what);
  switch (rc & 0xff) {
    case SQLITE_ERROR:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_TOOBIG:
      e.error().code = ErrorCode::kInvalidArgument;
      break;
    case SQLITE_CONSTRAINT:
      e.error().code = rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY
                           ? ErrorCode::kAlreadyExists
                           : ErrorCode::kInvalidArgument;
      break;
    case SQLITE_AUTH:
      e.error().code = ErrorCode::kPermissionDenied;
      break;
    default:
      break;
  }
  return e;
}

// A step's statements on the writer connection, inside the store's
// BEGIN IMMEDIATE (checks and spoiling: CheckedSqlTransaction).
class SqliteSqlTransaction final : public CheckedSqlTransaction {
 public:
  // `judging`: the writer authorizer's switch.
  SqliteSqlTransaction(sqlite3* db, bool& judging, const Limits& limits)
      : CheckedSqlTransaction(limits), db_(db), judging_(judging) {}

 private:
  using Stmt = std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)>;

  Result<Stmt> Prepare(std::string_view sql) {
    judging_ = true;
    sqlite3_stmt* raw = nullptr;
    const char* tail = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &raw, &tail);
    judging_ = false;
    Stmt stmt(raw, sqlite3_finalize);
    if (rc != SQLITE_OK) return StepSqlFailure(db_, rc, "prepare");
    if (raw == nullptr) return MakeError(ErrorCode::kInvalidArgument, "sql: an empty statement");
    std::string_view rest(tail, static_cast<size_t>(sql.data() + sql.size() - tail));
    if (!FirstSqlKeyword(rest).empty()) {
      return MakeError(ErrorCode::kInvalidArgument, "sql: one statement per Exec");
    }
    return stmt;
  }

  // $N binds params[N-1] (as PostgreSQL numbers them); ?N and ? by index.
  Status Bind(sqlite3_stmt* s, std::span<const Json> params) {
    if (sqlite3_bind_parameter_count(s) != static_cast<int>(params.size())) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "sql: the statement takes " +
                           std::to_string(sqlite3_bind_parameter_count(s)) + " parameters, " +
                           std::to_string(params.size()) + " given");
    }
    for (size_t i = 0; i < params.size(); ++i) {
      std::string name = "$" + std::to_string(i + 1);
      int index = sqlite3_bind_parameter_index(s, name.c_str());
      if (index == 0) index = static_cast<int>(i + 1);
      const Json& p = params[i];
      int rc = SQLITE_OK;
      if (p.is_null()) {
        rc = sqlite3_bind_null(s, index);
      } else if (p.is_boolean()) {
        rc = sqlite3_bind_int64(s, index, p.get<bool>() ? 1 : 0);
      } else if (p.is_number_integer()) {
        rc = p.is_number_unsigned() && p.get<uint64_t>() > INT64_MAX
                 ? sqlite3_bind_double(s, index, p.get<double>())
                 : sqlite3_bind_int64(s, index, p.get<int64_t>());
      } else if (p.is_number()) {
        rc = sqlite3_bind_double(s, index, p.get<double>());
      } else {
        const std::string& text = p.get_ref<const std::string&>();
        rc = sqlite3_bind_text64(s, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
      }
      if (rc != SQLITE_OK) return StepSqlFailure(db_, rc, "bind");
    }
    return Ok();
  }

  Result<SqlRows> Run(std::string_view sql, std::span<const Json> params) override {
    ONCE_ASSIGN_OR_RETURN(Stmt stmt, Prepare(sql));
    sqlite3_stmt* s = stmt.get();
    ONCE_RETURN_IF_ERROR(Bind(s, params));
    SqlRows out;
    const int columns = sqlite3_column_count(s);
    for (int c = 0; c < columns; ++c) out.columns.emplace_back(sqlite3_column_name(s, c));
    SqlResultBudget budget(limits());
    while (true) {
      int rc = sqlite3_step(s);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return StepSqlFailure(db_, rc, "step");
      auto& row = out.rows.emplace_back();
      size_t bytes = 0;
      for (int c = 0; c < columns; ++c) {
        const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, c));
        if (text == nullptr) {
          row.emplace_back();
          continue;
        }
        row.emplace_back(std::string(text, static_cast<size_t>(sqlite3_column_bytes(s, c))));
        bytes += row.back()->size();
      }
      ONCE_RETURN_IF_ERROR(budget.AddRow(bytes));
    }
    out.changed = sqlite3_stmt_readonly(s) ? 0 : sqlite3_changes64(db_);
    return out;
  }

  sqlite3* db_;
  bool& judging_;
};

}  // namespace

// Its own BEGIN IMMEDIATE on the writer, on the caller's thread (not a
// group operation: the work is the caller's code and may take a while).
Result<int64_t> SqliteEventStore::AppendInTransaction(std::string_view id,
                                                      TransactionWorkRef work) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  std::lock_guard<std::mutex> lock(impl_->writer_mu);
  Connection& c = *impl_->writer;
  return sqlite_internal::InTransaction(c, kBegin, kCommit, kRollback, [&]() -> Result<int64_t> {
    SqliteSqlTransaction sql(c.db(), impl_->judging_step_sql, limits());
    ONCE_ASSIGN_OR_RETURN(AppendRequest req, work(sql));
    if (sql.spoiled()) return std::unexpected(*sql.spoiled());
    if (req.execution_id != id) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "the transaction's append names another execution", std::string(id));
    }
    ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(req, limits(), *impl_->clock));
    return AppendOn(c, req, enc, GuardKind::kFence, 0, impl_->clock->NowUnixMillis());
  });
}

Result<std::optional<RunOwner>> SqliteEventStore::RunOwnerOf(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  return impl_->Read([&](Connection& c) { return RunOwnerOn(c, id); });
}

}  // namespace once::store
