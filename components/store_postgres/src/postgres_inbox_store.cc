#include "once/store_postgres/postgres_inbox_store.h"

#include <algorithm>
#include <cstdlib>

#include "pg_conn.h"

namespace once::store {

using inbox::InboxMessage;
using pg::Conn;
using pg::IntAt;
using pg::Params;
using pg::PgResult;

namespace {

constexpr char kInboxVersionRow[] = "inbox_version";
constexpr char kCreateSchemaTable[] =
    "CREATE TABLE IF NOT EXISTS once_schema (name text PRIMARY KEY, value bigint NOT NULL)";

// Migration i brings the inbox version from i - 1 to i. Append, never edit.
constexpr const char* kInboxMigrations[] = {
    // 1: the numbering and the messages.
    R"(CREATE TABLE IF NOT EXISTS inbox_topics (
  execution_id text COLLATE "C" NOT NULL,
  topic text COLLATE "C" NOT NULL,
  last_seq bigint NOT NULL,
  PRIMARY KEY (execution_id, topic)
);
CREATE TABLE IF NOT EXISTS inbox_messages (
  execution_id text COLLATE "C" NOT NULL,
  topic text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  message text NOT NULL,
  PRIMARY KEY (execution_id, topic, seq)
))",
};
static_assert(std::size(kInboxMigrations) == kPostgresInboxSchemaVersion);

struct Statement {
  const char* name;
  const char* sql;
};

// put: $1 id, $2 topic, $3 message, $4 pending max. Returns (pending before,
// seq or NULL when refused). Runs after the execution's advisory lock, so
// its snapshot sees every committed Put of the execution.
constexpr Statement kStatements[] = {
    {"inbox_put",
     "WITH c AS (SELECT count(*) AS n FROM inbox_messages WHERE execution_id = $1::text), "
     "t AS (INSERT INTO inbox_topics (execution_id, topic, last_seq) "
     "  SELECT $1::text, $2::text, 1 FROM c WHERE c.n < $4::int8 "
     "  ON CONFLICT (execution_id, topic) DO UPDATE SET last_seq = inbox_topics.last_seq + 1 "
     "  RETURNING last_seq), "
     "m AS (INSERT INTO inbox_messages (execution_id, topic, seq, message) "
     "  SELECT $1::text, $2::text, last_seq, $3::text FROM t RETURNING seq) "
     "SELECT c.n, (SELECT seq FROM m) FROM c"},
    {"inbox_get",
     "SELECT message FROM inbox_messages "
     "WHERE execution_id = $1::text AND topic = $2::text AND seq = $3::int8"},
    {"inbox_pending",
     "SELECT topic, seq, message FROM inbox_messages WHERE execution_id = $1::text "
     "ORDER BY topic, seq"},
    {"inbox_trim",
     "DELETE FROM inbox_messages "
     "WHERE execution_id = $1::text AND topic = $2::text AND seq <= $3::int8"},
    {"inbox_forget",
     "WITH m AS (DELETE FROM inbox_messages WHERE execution_id = $1::text) "
     "DELETE FROM inbox_topics WHERE execution_id = $1::text"},
    {"inbox_holds", "SELECT 1 FROM inbox_topics WHERE execution_id = $1::text LIMIT 1"},
    {"inbox_executions",
     "SELECT DISTINCT execution_id FROM inbox_topics WHERE execution_id > $1::text "
     "ORDER BY execution_id LIMIT $2::int8"},
};

Status PrepareAll(Conn& conn) {
  for (const Statement& s : kStatements) ONCE_RETURN_IF_ERROR(conn.Prepare(s.name, s.sql));
  return Ok();
}

// 32-bit FNV-1a of the id: the advisory lock's second key.
int32_t LockKey(std::string_view id) {
  uint32_t h = 2166136261u;
  for (unsigned char c : id) {
    h ^= c;
    h *= 16777619u;
  }
  return static_cast<int32_t>(h);
}

Result<int64_t> ReadVersion(Conn& conn) {
  ONCE_ASSIGN_OR_RETURN(PgResult res,
                        conn.ExecParams("SELECT value FROM once_schema WHERE name = $1",
                                        Params().Text(kInboxVersionRow)));
  return PQntuples(res.get()) == 0 ? 0 : IntAt(res.get(), 0, 0);
}

// Everything after the advisory lock, inside the migration transaction.
Status MigrateLocked(Conn& conn, const PostgresInboxOptions& options) {
  ONCE_RETURN_IF_ERROR(
      conn.Exec("CREATE SCHEMA IF NOT EXISTS " + pg::QuoteIdentifier(options.schema)));
  ONCE_RETURN_IF_ERROR(conn.Exec(kCreateSchemaTable));
  ONCE_ASSIGN_OR_RETURN(int64_t version, ReadVersion(conn));
  if (version > kPostgresInboxSchemaVersion) {
    return MakeError(ErrorCode::kUnsupported, "postgres: inbox schema version " +
                                                  std::to_string(version) +
                                                  " is newer than this build's " +
                                                  std::to_string(kPostgresInboxSchemaVersion));
  }
  for (int64_t next = version + 1; next <= kPostgresInboxSchemaVersion; ++next) {
    ONCE_RETURN_IF_ERROR(conn.Exec(kInboxMigrations[next - 1]));
    ONCE_RETURN_IF_ERROR(
        conn.ExecParams("INSERT INTO once_schema (name, value) VALUES ($1, $2::int8) "
                        "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                        Params().Text(kInboxVersionRow).Int(next)));
  }
  return Ok();
}

Status Migrate(const PostgresInboxOptions& options) {
  return pg::MigrateUnderLock(options.conninfo, options.schema, kMigrationLockKey,
                              options.migration_lock_timeout_ms,
                              [&](Conn& conn) -> Status { return MigrateLocked(conn, options); });
}

// BEGIN and the execution's advisory lock, in one round trip.
Status BeginLocked(Conn& conn, std::string_view execution_id) {
  ONCE_RETURN_IF_ERROR(conn.Exec("BEGIN; SELECT pg_advisory_xact_lock(" +
                                 std::to_string(kInboxLockClass) + ", " +
                                 std::to_string(LockKey(execution_id)) + ")"));
  return Ok();
}

// Runs body() after BeginLocked; commits on success, rolls back otherwise.
template <class F>
auto Committed(Conn& conn, Status begun, F&& body) -> decltype(body()) {
  if (!begun) {
    conn.ResetTransaction();
    return std::unexpected(begun.error());
  }
  auto result = body();
  if (!result) {
    conn.ResetTransaction();
    return result;
  }
  if (auto committed = conn.Exec("COMMIT"); !committed) {
    conn.ResetTransaction();
    return std::unexpected(committed.error());
  }
  return result;
}

// An id or topic no valid row can have: reads and deletes have nothing to do.
bool Unstorable(std::string_view s) { return s.empty() || s.find('\0') != std::string_view::npos; }

}  // namespace

PostgresInboxStore::PostgresInboxStore(PostgresInboxOptions options,
                                       std::unique_ptr<pg::ConnectionPool> pool)
    : options_(std::move(options)), pool_(std::move(pool)) {}

PostgresInboxStore::~PostgresInboxStore() = default;

Result<std::unique_ptr<PostgresInboxStore>> PostgresInboxStore::Open(
    const PostgresInboxOptions& options) {
  ONCE_ASSIGN_OR_RETURN(auto pool,
                        pg::OpenSidePool(options, "PostgresInboxOptions", Migrate, PrepareAll));
  return std::unique_ptr<PostgresInboxStore>(new PostgresInboxStore(options, std::move(pool)));
}

Result<int64_t> PostgresInboxStore::SchemaVersion() {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  return ReadVersion(*conn);
}

Result<int64_t> PostgresInboxStore::Put(std::string_view execution_id, std::string_view topic,
                                        const events::Json& message) {
  ONCE_ASSIGN_OR_RETURN(std::string json,
                        inbox::ValidatePut(execution_id, topic, message, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  return Committed(*conn, BeginLocked(*conn, execution_id), [&]() -> Result<int64_t> {
    Params p;
    p.Text(std::string(execution_id)).Text(std::string(topic)).Text(std::move(json));
    p.Int(static_cast<int64_t>(limits().pending_messages_per_execution_max));
    ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("inbox_put", p));
    if (PQgetisnull(res.get(), 0, 1)) {
      return inbox::PendingLimitError(execution_id, static_cast<size_t>(IntAt(res.get(), 0, 0)),
                                      limits());
    }
    return IntAt(res.get(), 0, 1);
  });
}

Result<std::optional<InboxMessage>> PostgresInboxStore::Get(std::string_view execution_id,
                                                            std::string_view topic, int64_t seq) {
  if (Unstorable(execution_id) || Unstorable(topic)) return std::nullopt;
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("inbox_get",
                     Params().Text(std::string(execution_id)).Text(std::string(topic)).Int(seq)));
  if (PQntuples(res.get()) == 0) return std::nullopt;
  ONCE_ASSIGN_OR_RETURN(events::Json m,
                        inbox::DecodeMessage(execution_id, PQgetvalue(res.get(), 0, 0)));
  return InboxMessage{std::string(topic), seq, std::move(m)};
}

Result<std::vector<InboxMessage>> PostgresInboxStore::Pending(std::string_view execution_id) {
  std::vector<InboxMessage> out;
  if (Unstorable(execution_id)) return out;
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res,
                        conn->Prepared("inbox_pending", Params().Text(std::string(execution_id))));
  for (int i = 0; i < PQntuples(res.get()); ++i) {
    ONCE_ASSIGN_OR_RETURN(events::Json m,
                          inbox::DecodeMessage(execution_id, PQgetvalue(res.get(), i, 2)));
    out.push_back({PQgetvalue(res.get(), i, 0), IntAt(res.get(), i, 1), std::move(m)});
  }
  return out;
}

Status PostgresInboxStore::Trim(std::string_view execution_id, std::string_view topic,
                                int64_t through_seq) {
  if (Unstorable(execution_id) || Unstorable(topic)) return Ok();
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Text(std::string(execution_id)).Text(std::string(topic)).Int(through_seq);
  if (options_.trim_waits_for_disk) {
    ONCE_RETURN_IF_ERROR(conn->Prepared("inbox_trim", p));
    return Ok();
  }
  Status begun = [&]() -> Status {
    ONCE_RETURN_IF_ERROR(conn->Exec("BEGIN; SET LOCAL synchronous_commit = off"));
    return Ok();
  }();
  return Committed(*conn, begun, [&]() -> Status {
    ONCE_RETURN_IF_ERROR(conn->Prepared("inbox_trim", p));
    return Ok();
  });
}

Status PostgresInboxStore::Forget(std::string_view execution_id) {
  if (Unstorable(execution_id)) return Ok();
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  return Committed(*conn, BeginLocked(*conn, execution_id), [&]() -> Status {
    ONCE_RETURN_IF_ERROR(conn->Prepared("inbox_forget", Params().Text(std::string(execution_id))));
    return Ok();
  });
}

Result<bool> PostgresInboxStore::Holds(std::string_view execution_id) {
  if (Unstorable(execution_id)) return false;
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res,
                        conn->Prepared("inbox_holds", Params().Text(std::string(execution_id))));
  return PQntuples(res.get()) > 0;
}

Result<std::vector<std::string>> PostgresInboxStore::Executions(std::string_view after,
                                                                size_t limit) {
  limit = std::min(limit, options_.limits.executions_page_max);
  std::vector<std::string> out;
  if (limit == 0 || after.find('\0') != std::string_view::npos) return out;
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("inbox_executions",
                     Params().Text(std::string(after)).Int(static_cast<int64_t>(limit))));
  for (int i = 0; i < PQntuples(res.get()); ++i) out.emplace_back(PQgetvalue(res.get(), i, 0));
  return out;
}

}  // namespace once::store
