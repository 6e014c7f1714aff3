#include "once/store_postgres/postgres_timer_store.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "pg_conn.h"
#include "schedule_group.h"

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

// Half of every page is left free, so that a claim's lease (a write of the
// lease columns, which no index holds) lands in the same page as a HOT
// update and touches no index: a burst of 100,000 rows due at once claimed
// 1,000 rows in 13-18 ms at the default fillfactor, 3.5 ms at 50. The table
// holds only pending timers, so the space is small. Set on open on a table
// with no fillfactor of its own, new or older (new pages only; no rewrite);
// one an operator set is left alone.
constexpr char kTimersFillfactor[] = "fillfactor=50";

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

// A schedule's merge into an existing row (timer_store.h): the re-drive
// flag is never lost; the newest park wins (a NULL park_seq compares to
// NULL: kept) and a strictly newer one ends the lease (a new wake). Every
// expression of the SET sees the row as it was.
constexpr char kScheduleMerge[] =
    "ON CONFLICT (execution_id, wake_at_ms) "
    "DO UPDATE SET redrive = COALESCE(EXCLUDED.redrive, timers.redrive), "
    "lease_until_ms = CASE WHEN EXCLUDED.park_seq > COALESCE(timers.park_seq, 0) "
    "THEN 0 ELSE timers.lease_until_ms END, "
    "park_fence = CASE WHEN EXCLUDED.park_seq >= COALESCE(timers.park_seq, 0) "
    "THEN EXCLUDED.park_fence ELSE timers.park_fence END, "
    "park_seq = CASE WHEN EXCLUDED.park_seq >= COALESCE(timers.park_seq, 0) "
    "THEN EXCLUDED.park_seq ELSE timers.park_seq END";

std::vector<Statement> Statements() {
  const std::string cols = kRowColumns;
  return {
      {"schedule",
       "INSERT INTO timers (execution_id, wake_at_ms, redrive, park_seq, park_fence) "
       "VALUES ($1::text, $2::int8, $3::jsonb, $4::int8, $5::int8) " +
           std::string(kScheduleMerge)},
      // Rows in key order (concurrent groups lock shared keys in one
      // order); a key appears once (ON CONFLICT may touch a row once).
      {"schedule_many",
       "INSERT INTO timers (execution_id, wake_at_ms, redrive, park_seq, park_fence) "
       "SELECT r.id, r.wake, CASE WHEN r.attempt IS NULL THEN NULL "
       "ELSE jsonb_build_object('attempt', r.attempt) END, r.seq, r.fence "
       "FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::int8[]) "
       "AS r(id, wake, attempt, seq, fence) ORDER BY r.id, r.wake " +
           std::string(kScheduleMerge)},
      {"due", "SELECT " + cols +
                  " FROM timers WHERE wake_at_ms <= $1::int8 AND ($3::bool OR redrive IS NULL) "
                  "ORDER BY wake_at_ms, execution_id LIMIT $2::int8"},
      // MATERIALIZED: the locking pick runs exactly once, whatever the plan
      // (a re-scanned LIMIT ... SKIP LOCKED could lock a different set).
      // The picked rows are found again by their ctid (a TID scan; joining
      // on the key cost more than the pick itself). The pick locked them, so
      // no other writer moves them before the UPDATE; a ctid that no longer
      // names a visible row only leaves that row unclaimed (never claimed
      // twice: RETURNING gives the rows this UPDATE wrote).
      {"claim",
       "WITH pick AS MATERIALIZED (SELECT ctid AS row_id FROM timers "
       "WHERE wake_at_ms <= $1::int8 + $6::int8 AND lease_until_ms <= $1::int8 "
       "AND ($3::bool OR redrive IS NULL) "
       "ORDER BY wake_at_ms, execution_id LIMIT $2::int8 FOR UPDATE SKIP LOCKED) "
       "UPDATE timers SET lease_owner = $4::text, lease_until_ms = $1::int8 + $5::int8 "
       "WHERE ctid = ANY (ARRAY(SELECT row_id FROM pick)) "
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

// Every statement is index probes (the claim and Due walk timers_by_wake in
// order; the rest find rows by key): see pg::kIndexPlanSettings.
Status PrepareAll(Conn& conn) {
  ONCE_RETURN_IF_ERROR(conn.Exec(std::string(pg::kIndexPlanSettings)));
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
  ONCE_ASSIGN_OR_RETURN(
      PgResult fillfactor_set,
      conn.ExecParams("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE n.nspname = $1 AND c.relname = 'timers' AND "
                      "EXISTS (SELECT 1 FROM unnest(c.reloptions) o WHERE o LIKE 'fillfactor=%')",
                      Params().Text(options.schema)));
  if (PQntuples(fillfactor_set.get()) == 0) {
    ONCE_RETURN_IF_ERROR(
        conn.Exec(std::string("ALTER TABLE timers SET (") + kTimersFillfactor + ")"));
  }
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

namespace pg {

namespace {

// The one-row statement's parameters.
Params ScheduleParams(const TimerRow& row) {
  Params p;
  p.Text(row.execution_id).Int(row.wake_at_ms);
  if (row.redrive) {
    p.Text(timers::RedriveText(*row.redrive));
  } else {
    p.Null();
  }
  if (row.park) {
    p.Int(row.park->sequence).Int(row.park->fence);
  } else {
    p.Null().Null();
  }
  return p;
}

}  // namespace

void ScheduleGroup::RunGroup(std::span<ScheduleOp* const> group) {
  if (group.size() == 1) {
    group[0]->result = RunOne(*group[0]->row);
    return;
  }
  // A key's first row goes in the statement (which writes in key order);
  // its later rows follow it one by one, in arrival order, so the merges
  // happen in the order the calls came.
  std::vector<ScheduleOp*> first, later;
  std::set<std::pair<std::string_view, int64_t>> keys;
  for (ScheduleOp* op : group) {
    bool fresh = keys.emplace(op->row->execution_id, op->row->wake_at_ms).second;
    (fresh ? first : later).push_back(op);
  }
  if (Status s = RunMany(first); !s) {
    // A lock cycle with another writer, a lost connection: each row on its
    // own, in arrival order, so each caller gets its own row's answer.
    for (ScheduleOp* op : group) op->result = RunOne(*op->row);
    return;
  }
  for (ScheduleOp* op : first) op->result = Ok();
  for (ScheduleOp* op : later) op->result = RunOne(*op->row);
}

Status ScheduleGroup::RunOne(const TimerRow& row) {
  ONCE_ASSIGN_OR_RETURN(Lease conn, pool_.Checkout());
  ONCE_RETURN_IF_ERROR(conn->Prepared("schedule", ScheduleParams(row)));
  return Ok();
}

Status ScheduleGroup::RunMany(std::span<ScheduleOp* const> ops) {
  std::vector<std::string_view> ids;
  std::vector<std::optional<int64_t>> wakes, attempts, seqs, fences;
  for (const ScheduleOp* op : ops) {
    const TimerRow& row = *op->row;
    ids.push_back(row.execution_id);
    wakes.push_back(row.wake_at_ms);
    attempts.push_back(row.redrive ? std::optional<int64_t>(row.redrive->attempt) : std::nullopt);
    seqs.push_back(row.park ? std::optional(row.park->sequence) : std::nullopt);
    fences.push_back(row.park ? std::optional(row.park->fence) : std::nullopt);
  }
  Params p;
  p.Binary(TextArrayBinary(ids)).Binary(IntArrayBinary(wakes)).Binary(IntArrayBinary(attempts));
  p.Binary(IntArrayBinary(seqs)).Binary(IntArrayBinary(fences));
  ONCE_ASSIGN_OR_RETURN(Lease conn, pool_.Checkout());
  ONCE_RETURN_IF_ERROR(conn->Prepared("schedule_many", p));
  return Ok();
}

}  // namespace pg

PostgresTimerStore::PostgresTimerStore(PostgresTimerOptions options,
                                       std::unique_ptr<pg::ConnectionPool> pool)
    : options_(std::move(options)),
      pool_(std::move(pool)),
      schedules_(std::make_unique<pg::ScheduleGroup>(*pool_)) {}

PostgresTimerStore::~PostgresTimerStore() = default;

Result<std::unique_ptr<PostgresTimerStore>> PostgresTimerStore::Open(
    const PostgresTimerOptions& options) {
  ONCE_ASSIGN_OR_RETURN(auto pool,
                        pg::OpenSidePool(options, "PostgresTimerOptions", Migrate, PrepareAll));
  return std::unique_ptr<PostgresTimerStore>(new PostgresTimerStore(options, std::move(pool)));
}

Status PostgresTimerStore::Schedule(const TimerRow& row) {
  ONCE_RETURN_IF_ERROR(timers::ValidateTimerRow(row));
  pg::ScheduleOp op{.row = &row};
  schedules_->Run(op);
  return op.result;
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
