#include "once/store_sqlite/sqlite_inbox_store.h"

#include <algorithm>
#include <mutex>

#include "connection.h"

namespace once::store {
namespace {

using inbox::InboxMessage;
using sqlite_internal::Connection;
using sqlite_internal::Statement;

enum InboxSql : size_t {
  kBegin,
  kCommit,
  kRollback,
  kReadVersion,
  kWriteVersion,
  kCountPending,
  kNextSeq,
  kInsert,
  kGet,
  kPending,
  kTrim,
  kForgetMessages,
  kForgetTopics,
  kExecutions,
  kHolds,
  kInboxSqlCount,
};

constexpr const char* kCreateSchemaTable =
    "CREATE TABLE IF NOT EXISTS once_schema ("
    "  name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID";

const std::vector<std::string>& InboxSqlText() {
  static const std::vector<std::string> sql = [] {
    std::vector<std::string> s(kInboxSqlCount);
    s[kBegin] = "BEGIN IMMEDIATE";
    s[kCommit] = "COMMIT";
    s[kRollback] = "ROLLBACK";
    s[kReadVersion] = "SELECT value FROM once_schema WHERE name = 'inbox_version'";
    s[kWriteVersion] =
        "INSERT INTO once_schema(name, value) VALUES ('inbox_version', ?1) "
        "ON CONFLICT(name) DO UPDATE SET value = excluded.value";
    s[kCountPending] = "SELECT COUNT(*) FROM inbox_messages WHERE execution_id = ?1";
    s[kNextSeq] =
        "INSERT INTO inbox_topics(execution_id, topic, last_seq) VALUES (?1, ?2, 1) "
        "ON CONFLICT(execution_id, topic) DO UPDATE SET last_seq = last_seq + 1 "
        "RETURNING last_seq";
    s[kInsert] =
        "INSERT INTO inbox_messages(execution_id, topic, seq, message) VALUES (?1, ?2, ?3, ?4)";
    s[kGet] =
        "SELECT message FROM inbox_messages WHERE execution_id = ?1 AND topic = ?2 AND seq = ?3";
    s[kPending] =
        "SELECT topic, seq, message FROM inbox_messages WHERE execution_id = ?1 "
        "ORDER BY topic, seq";
    s[kTrim] = "DELETE FROM inbox_messages WHERE execution_id = ?1 AND topic = ?2 AND seq <= ?3";
    s[kForgetMessages] = "DELETE FROM inbox_messages WHERE execution_id = ?1";
    s[kForgetTopics] = "DELETE FROM inbox_topics WHERE execution_id = ?1";
    s[kExecutions] =
        "SELECT DISTINCT execution_id FROM inbox_topics WHERE execution_id > ?1 "
        "ORDER BY execution_id LIMIT ?2";
    s[kHolds] = "SELECT 1 FROM inbox_topics WHERE execution_id = ?1 LIMIT 1";
    return s;
  }();
  return sql;
}

// Migration i brings the inbox version from i - 1 to i. Append, never edit.
constexpr const char* kInboxMigrations[] = {
    // 1: the numbering and the messages.
    "CREATE TABLE IF NOT EXISTS inbox_topics ("
    "  execution_id TEXT NOT NULL, topic TEXT NOT NULL, last_seq INTEGER NOT NULL,"
    "  PRIMARY KEY (execution_id, topic)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS inbox_messages ("
    "  execution_id TEXT NOT NULL, topic TEXT NOT NULL, seq INTEGER NOT NULL,"
    "  message TEXT NOT NULL, PRIMARY KEY (execution_id, topic, seq)) WITHOUT ROWID",
};
static_assert(std::size(kInboxMigrations) == kSqliteInboxSchemaVersion);

template <class F>
auto Transaction(Connection& c, F&& body) -> decltype(body()) {
  return sqlite_internal::InTransaction(c, kBegin, kCommit, kRollback, std::forward<F>(body));
}

Result<int> ReadVersion(Connection& c) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kReadVersion));
  ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? static_cast<int>(s.Int(0)) : 0;
}

Status MigrateLocked(Connection& c) {
  ONCE_RETURN_IF_ERROR(c.Exec(kCreateSchemaTable));
  ONCE_ASSIGN_OR_RETURN(int version, ReadVersion(c));
  if (version > kSqliteInboxSchemaVersion) {
    return MakeError(ErrorCode::kUnsupported, "sqlite: inbox schema version " +
                                                  std::to_string(version) +
                                                  " is newer than this build's " +
                                                  std::to_string(kSqliteInboxSchemaVersion));
  }
  for (int next = version + 1; next <= kSqliteInboxSchemaVersion; ++next) {
    ONCE_RETURN_IF_ERROR(c.Exec(kInboxMigrations[next - 1]));
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kWriteVersion));
    ONCE_RETURN_IF_ERROR(s.Bind(1, int64_t{next}));
    ONCE_RETURN_IF_ERROR(s.Run());
  }
  return Ok();
}

Result<int64_t> QueryInt(Statement& s) {
  ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return MakeError(ErrorCode::kInternal, "sqlite: inbox: a statement returned no row");
  return s.Int(0);
}

}  // namespace

struct SqliteInboxStore::Impl {
  SqliteInboxOptions options;
  std::mutex mu;
  std::unique_ptr<Connection> conn;  // GUARDED_BY(mu)
};

SqliteInboxStore::SqliteInboxStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteInboxStore::~SqliteInboxStore() = default;

Result<std::unique_ptr<SqliteInboxStore>> SqliteInboxStore::Open(const std::string& path,
                                                                 SqliteInboxOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  ONCE_ASSIGN_OR_RETURN(
      impl->conn,
      sqlite_internal::OpenFileInWal(
          "inbox", path, sqlite_internal::ConnectionOptionsOf(impl->options), InboxSqlText()));
  Connection& c = *impl->conn;
  ONCE_RETURN_IF_ERROR(Transaction(c, [&] { return MigrateLocked(c); }));
  return std::unique_ptr<SqliteInboxStore>(new SqliteInboxStore(std::move(impl)));
}

const inbox::InboxLimits& SqliteInboxStore::limits() const { return impl_->options.limits; }

Result<int> SqliteInboxStore::SchemaVersion() {
  std::lock_guard lock(impl_->mu);
  return ReadVersion(*impl_->conn);
}

Result<int64_t> SqliteInboxStore::Put(std::string_view execution_id, std::string_view topic,
                                      const events::Json& message) {
  ONCE_ASSIGN_OR_RETURN(std::string json,
                        inbox::ValidatePut(execution_id, topic, message, limits()));
  std::lock_guard lock(impl_->mu);
  Connection& c = *impl_->conn;
  return Transaction(c, [&]() -> Result<int64_t> {
    {
      ONCE_ASSIGN_OR_RETURN(Statement count, c.Prepare(kCountPending));
      ONCE_RETURN_IF_ERROR(count.Bind(1, execution_id));
      ONCE_ASSIGN_OR_RETURN(int64_t pending, QueryInt(count));
      if (static_cast<size_t>(pending) >= limits().pending_messages_per_execution_max) {
        return inbox::PendingLimitError(execution_id, static_cast<size_t>(pending), limits());
      }
    }
    int64_t seq = 0;
    {
      ONCE_ASSIGN_OR_RETURN(Statement next, c.Prepare(kNextSeq));
      ONCE_RETURN_IF_ERROR(next.Bind(1, execution_id));
      ONCE_RETURN_IF_ERROR(next.Bind(2, topic));
      ONCE_ASSIGN_OR_RETURN(seq, QueryInt(next));
    }
    ONCE_ASSIGN_OR_RETURN(Statement insert, c.Prepare(kInsert));
    ONCE_RETURN_IF_ERROR(insert.Bind(1, execution_id));
    ONCE_RETURN_IF_ERROR(insert.Bind(2, topic));
    ONCE_RETURN_IF_ERROR(insert.Bind(3, seq));
    ONCE_RETURN_IF_ERROR(insert.Bind(4, json));
    ONCE_RETURN_IF_ERROR(insert.Run());
    return seq;
  });
}

Result<std::optional<InboxMessage>> SqliteInboxStore::Get(std::string_view execution_id,
                                                          std::string_view topic, int64_t seq) {
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kGet));
  ONCE_RETURN_IF_ERROR(s.Bind(1, execution_id));
  ONCE_RETURN_IF_ERROR(s.Bind(2, topic));
  ONCE_RETURN_IF_ERROR(s.Bind(3, seq));
  ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::nullopt;
  ONCE_ASSIGN_OR_RETURN(events::Json message, inbox::DecodeMessage(execution_id, s.Text(0)));
  return InboxMessage{std::string(topic), seq, std::move(message)};
}

Result<std::vector<InboxMessage>> SqliteInboxStore::Pending(std::string_view execution_id) {
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kPending));
  ONCE_RETURN_IF_ERROR(s.Bind(1, execution_id));
  std::vector<InboxMessage> out;
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    ONCE_ASSIGN_OR_RETURN(events::Json message, inbox::DecodeMessage(execution_id, s.Text(2)));
    out.push_back({std::string(s.Text(0)), s.Int(1), std::move(message)});
  }
}

Status SqliteInboxStore::Trim(std::string_view execution_id, std::string_view topic,
                              int64_t through_seq) {
  std::lock_guard lock(impl_->mu);
  Connection& c = *impl_->conn;
  auto trim = [&]() -> Status {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kTrim));
    ONCE_RETURN_IF_ERROR(s.Bind(1, execution_id));
    ONCE_RETURN_IF_ERROR(s.Bind(2, topic));
    ONCE_RETURN_IF_ERROR(s.Bind(3, through_seq));
    return s.Run();
  };
  const SqliteInboxOptions& o = impl_->options;
  if (o.trim_waits_for_disk || o.durability != Durability::kFull) return trim();
  // WAL with synchronous=NORMAL: the commit is ordered after every earlier
  // one and reaches the disk with the next synced commit or checkpoint.
  ONCE_RETURN_IF_ERROR(c.Exec("PRAGMA synchronous=NORMAL"));
  Status trimmed = trim();
  Status restored = c.Exec("PRAGMA synchronous=FULL");
  if (!trimmed) return trimmed;
  return restored;
}

Status SqliteInboxStore::Forget(std::string_view execution_id) {
  std::lock_guard lock(impl_->mu);
  Connection& c = *impl_->conn;
  return Transaction(c, [&]() -> Status {
    for (InboxSql id : {kForgetMessages, kForgetTopics}) {
      ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(id));
      ONCE_RETURN_IF_ERROR(s.Bind(1, execution_id));
      ONCE_RETURN_IF_ERROR(s.Run());
    }
    return Ok();
  });
}

Result<bool> SqliteInboxStore::Holds(std::string_view execution_id) {
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kHolds));
  ONCE_RETURN_IF_ERROR(s.Bind(1, execution_id));
  return s.Step();
}

Result<std::vector<std::string>> SqliteInboxStore::Executions(std::string_view after,
                                                              size_t limit) {
  auto capped = static_cast<int64_t>(std::min(limit, limits().executions_page_max));
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kExecutions));
  ONCE_RETURN_IF_ERROR(s.Bind(1, after));
  ONCE_RETURN_IF_ERROR(s.Bind(2, capped));
  std::vector<std::string> out;
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    out.emplace_back(s.Text(0));
  }
}

}  // namespace once::store
