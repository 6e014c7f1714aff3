#include "once/store_postgres/postgres_timer_store.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <tuple>

#include "pg_conn.h"

namespace once::store {

using pg::Conn;
using pg::IntAt;
using pg::Params;
using pg::PgResult;
using timers::TimerKey;
using timers::TimerRow;

namespace {

// Ids compare in byte order (COLLATE "C"), as in the events table.
constexpr char kCreateTimers[] = R"(CREATE TABLE IF NOT EXISTS timers (
  execution_id text COLLATE "C" NOT NULL,
  wake_at_ms bigint NOT NULL,
  redrive jsonb NULL,
  lease_owner text NOT NULL DEFAULT '',
  lease_until_ms bigint NOT NULL DEFAULT 0,
  park_seq bigint NULL,
  park_fence bigint NULL,
  PRIMARY KEY (execution_id, wake_at_ms)
))";

// The columns an older table may lack, with their definitions. Defaults are
// constants, so ADD COLUMN does not rewrite the table.
struct Column {
  const char* name;
  const char* definition;
};
constexpr Column kLateColumns[] = {
    {"redrive", "redrive jsonb NULL"},
    {"lease_owner", "lease_owner text NOT NULL DEFAULT ''"},
    {"lease_until_ms", "lease_until_ms bigint NOT NULL DEFAULT 0"},
    {"park_seq", "park_seq bigint NULL"},
    {"park_fence", "park_fence bigint NULL"},
};
// The claim's order (wake_at_ms, execution_id) read from an index: with many
// rows due at one instant an index on wake_at_ms alone left the claim to
// sort every due row (100,000 rows of one instant: a claim took ~160 ms, 29
// ms with this index). It replaces the older one-column index.
constexpr char kWakeIndex[] = "timers_by_wake";
constexpr char kOldWakeIndex[] = "timers_wake_at_ms";

// The selected columns of a row: id, wake, has re-drive, attempt, the park
// (sequence and fence; both NULL without one).
constexpr char kRowColumns[] =
    "execution_id, wake_at_ms, redrive IS NOT NULL, COALESCE((redrive->>'attempt')::int8, 0), "
    "park_seq, park_fence";

struct Statement {
  const char* name;
  std::string sql;
};

std::vector<Statement> Statements() {
  const std::string cols = kRowColumns;
  return {
      // The newest park wins (a NULL park_seq compares to NULL: kept); a
      // strictly newer one ends the lease (a new wake). Every expression of
      // the SET sees the row as it was.
      {"schedule",
       "INSERT INTO timers (execution_id, wake_at_ms, redrive, park_seq, park_fence) "
       "VALUES ($1::text, $2::int8, $3::jsonb, $4::int8, $5::int8) "
       "ON CONFLICT (execution_id, wake_at_ms) "
       "DO UPDATE SET redrive = COALESCE(EXCLUDED.redrive, timers.redrive), "
       "lease_until_ms = CASE WHEN EXCLUDED.park_seq > COALESCE(timers.park_seq, 0) "
       "THEN 0 ELSE timers.lease_until_ms END, "
       "park_fence = CASE WHEN EXCLUDED.park_seq >= COALESCE(timers.park_seq, 0) "
       "THEN EXCLUDED.park_fence ELSE timers.park_fence END, "
       "park_seq = CASE WHEN EXCLUDED.park_seq >= COALESCE(timers.park_seq, 0) "
       "THEN EXCLUDED.park_seq ELSE timers.park_seq END"},
      {"due", "SELECT " + cols +
                  " FROM timers WHERE wake_at_ms <= $1::int8 AND ($3::bool OR redrive IS NULL) "
                  "ORDER BY wake_at_ms, execution_id LIMIT $2::int8"},
      // MATERIALIZED: the locking pick runs exactly once, whatever the plan
      // (a re-scanned LIMIT ... SKIP LOCKED could lock a different set).
      {"claim",
       "WITH pick AS MATERIALIZED (SELECT execution_id, wake_at_ms FROM timers "
       "WHERE wake_at_ms <= $1::int8 + $6::int8 AND lease_until_ms <= $1::int8 "
       "AND ($3::bool OR redrive IS NULL) "
       "ORDER BY wake_at_ms, execution_id LIMIT $2::int8 FOR UPDATE SKIP LOCKED) "
       "UPDATE timers SET lease_owner = $4::text, lease_until_ms = $1::int8 + $5::int8 "
       "WHERE (execution_id, wake_at_ms) IN (SELECT execution_id, wake_at_ms FROM pick) "
       "RETURNING " +
           cols},
      // $3 (per key) is the claim's view of the park (TimerKey::park_seq),
      // -1 for none: a newer park written since is spared.
      {"complete",
       "DELETE FROM timers WHERE execution_id = $1::text AND wake_at_ms = $2::int8 "
       "AND ($3::int8 < 0 OR COALESCE(park_seq, 0) <= $3::int8)"},
      // One statement, so one implicit transaction: all the keys or none.
      {"complete_many",
       "DELETE FROM timers t USING unnest($1::text[], $2::int8[], $3::int8[]) AS k(id, wake, seq) "
       "WHERE t.execution_id = k.id AND t.wake_at_ms = k.wake "
       "AND (k.seq < 0 OR COALESCE(t.park_seq, 0) <= k.seq)"},
      {"defer",
       "UPDATE timers SET lease_until_ms = $4::int8 WHERE execution_id = $1::text "
       "AND wake_at_ms = $2::int8 AND lease_owner = $3::text"},
      {"rows_of",
       "SELECT " + cols + " FROM timers WHERE execution_id = $1::text ORDER BY wake_at_ms"},
  };
}

Status PrepareAll(Conn& conn) {
  for (const auto& s : Statements()) ONCE_RETURN_IF_ERROR(conn.Prepare(s.name, s.sql));
  return Ok();
}

std::vector<TimerRow> Rows(const PGresult* res) {
  std::vector<TimerRow> out;
  out.reserve(PQntuples(res));
  for (int i = 0; i < PQntuples(res); ++i) {
    TimerRow row{PQgetvalue(res, i, 0), IntAt(res, i, 1), std::nullopt};
    if (PQgetvalue(res, i, 2)[0] == 't') {
      row.redrive = timers::Redrive{static_cast<int>(IntAt(res, i, 3))};
    }
    if (!PQgetisnull(res, i, 4) && !PQgetisnull(res, i, 5)) {
      row.park = timers::TimerPark{IntAt(res, i, 4), IntAt(res, i, 5)};
    }
    out.push_back(std::move(row));
  }
  return out;
}

// Everything after the advisory lock, inside the migration transaction.
Status MigrateLocked(Conn& conn, const PostgresTimerOptions& options) {
  ONCE_RETURN_IF_ERROR(
      conn.Exec("CREATE SCHEMA IF NOT EXISTS " + pg::QuoteIdentifier(options.schema)));
  // On an existing table this only finds the name: no lock on the table.
  ONCE_RETURN_IF_ERROR(conn.Exec(kCreateTimers));
  ONCE_ASSIGN_OR_RETURN(PgResult cols, conn.ExecParams("SELECT column_name::text FROM "
                                                       "information_schema.columns WHERE "
                                                       "table_schema = $1 AND table_name = "
                                                       "'timers'",
                                                       Params().Text(options.schema)));
  std::set<std::string> present;
  for (int i = 0; i < PQntuples(cols.get()); ++i) present.insert(PQgetvalue(cols.get(), i, 0));
  for (const Column& c : kLateColumns) {
    if (present.contains(c.name)) continue;
    // ACCESS EXCLUSIVE, under lock_timeout: only when the column is missing.
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string("ALTER TABLE timers ADD COLUMN ") + c.definition));
  }
  ONCE_ASSIGN_OR_RETURN(
      PgResult index,
      conn.ExecParams("SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = $2",
                      Params().Text(options.schema).Text(kWakeIndex)));
  if (PQntuples(index.get()) == 0) {
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string("CREATE INDEX ") + kWakeIndex +
                                   " ON timers (wake_at_ms, execution_id)"));
  }
  ONCE_RETURN_IF_ERROR(conn.Exec(std::string("DROP INDEX IF EXISTS ") + kOldWakeIndex));
  return Ok();
}

Status Migrate(const PostgresTimerOptions& options) {
  return pg::MigrateUnderLock(options.conninfo, options.schema, kMigrationLockKey,
                              options.migration_lock_timeout_ms,
                              [&](Conn& conn) -> Status { return MigrateLocked(conn, options); });
}

// An id no valid row can have: Complete / Defer / RowsOf have nothing to do.
bool Unstorable(std::string_view id) {
  return !timers::ValidateTimerRow(TimerRow{std::string(id), 0, std::nullopt});
}

}  // namespace

PostgresTimerStore::PostgresTimerStore(PostgresTimerOptions options,
                                       std::unique_ptr<pg::ConnectionPool> pool)
    : options_(std::move(options)), pool_(std::move(pool)) {}

PostgresTimerStore::~PostgresTimerStore() = default;

Result<std::unique_ptr<PostgresTimerStore>> PostgresTimerStore::Open(
    const PostgresTimerOptions& options) {
  ONCE_ASSIGN_OR_RETURN(auto pool,
                        pg::OpenSidePool(options, "PostgresTimerOptions", Migrate, PrepareAll));
  return std::unique_ptr<PostgresTimerStore>(new PostgresTimerStore(options, std::move(pool)));
}

Status PostgresTimerStore::Schedule(const TimerRow& row) {
  ONCE_RETURN_IF_ERROR(timers::ValidateTimerRow(row));
  Params p;
  p.Text(row.execution_id).Int(row.wake_at_ms);
  if (row.redrive) {
    p.Text("{\"attempt\":" + std::to_string(row.redrive->attempt) + "}");
  } else {
    p.Null();
  }
  if (row.park) {
    p.Int(row.park->sequence).Int(row.park->fence);
  } else {
    p.Null().Null();
  }
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_RETURN_IF_ERROR(conn->Prepared("schedule", p));
  return Ok();
}

Result<std::vector<TimerRow>> PostgresTimerStore::Due(int64_t now_ms, size_t limit,
                                                      bool include_redrive) {
  limit = std::min(limit, options_.limits.claim_rows_max);
  if (limit == 0) return std::vector<TimerRow>{};
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("due",
                     Params().Int(now_ms).Int(static_cast<int64_t>(limit)).Bool(include_redrive)));
  return Rows(res.get());
}

Result<std::vector<TimerRow>> PostgresTimerStore::Claim(const timers::ClaimRequest& req) {
  ONCE_RETURN_IF_ERROR(timers::ValidateClaim(req));
  size_t limit = std::min(req.limit, options_.limits.claim_rows_max);
  if (limit == 0) return std::vector<TimerRow>{};
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Int(req.now_ms).Int(static_cast<int64_t>(limit)).Bool(req.include_redrive);
  p.Text(req.owner).Int(req.lease_ms).Int(req.ahead_ms);
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("claim", p));
  std::vector<TimerRow> rows = Rows(res.get());
  // RETURNING has no order: oldest first, as Due.
  std::sort(rows.begin(), rows.end(), [](const TimerRow& a, const TimerRow& b) {
    return std::tie(a.wake_at_ms, a.execution_id) < std::tie(b.wake_at_ms, b.execution_id);
  });
  return rows;
}

Status PostgresTimerStore::Complete(const TimerKey& key) {
  if (Unstorable(key.execution_id)) return Ok();
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_RETURN_IF_ERROR(conn->Prepared(
      "complete",
      Params().Text(key.execution_id).Int(key.wake_at_ms).Int(key.park_seq.value_or(-1))));
  return Ok();
}

Status PostgresTimerStore::CompleteMany(std::span<const TimerKey> keys) {
  ONCE_RETURN_IF_ERROR(timers::ValidateCompleteMany(keys, options_.limits));
  std::vector<std::string_view> ids;
  std::vector<std::optional<int64_t>> wakes;
  std::vector<std::optional<int64_t>> seqs;
  for (const TimerKey& key : keys) {
    if (Unstorable(key.execution_id)) continue;  // no row can have it
    ids.push_back(key.execution_id);
    wakes.push_back(key.wake_at_ms);
    seqs.push_back(key.park_seq.value_or(-1));
  }
  if (ids.empty()) return Ok();
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Binary(pg::TextArrayBinary(ids))
      .Binary(pg::IntArrayBinary(wakes))
      .Binary(pg::IntArrayBinary(seqs));
  ONCE_RETURN_IF_ERROR(conn->Prepared("complete_many", p));
  return Ok();
}

Status PostgresTimerStore::Defer(const TimerKey& key, std::string_view owner, int64_t until_ms) {
  if (Unstorable(key.execution_id) || owner.find('\0') != std::string_view::npos) return Ok();
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Text(key.execution_id).Int(key.wake_at_ms).Text(std::string(owner)).Int(until_ms);
  ONCE_RETURN_IF_ERROR(conn->Prepared("defer", p));
  return Ok();
}

Result<std::vector<TimerRow>> PostgresTimerStore::RowsOf(std::string_view execution_id) {
  if (Unstorable(execution_id)) return std::vector<TimerRow>{};
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res,
                        conn->Prepared("rows_of", Params().Text(std::string(execution_id))));
  return Rows(res.get());
}

}  // namespace once::store
