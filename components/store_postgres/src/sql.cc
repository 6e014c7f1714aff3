#include "sql.h"

#include <span>
#include <vector>

#include "once/events/kinds.h"
#include "once/store/validate.h"
#include "once/store_postgres/status_index.h"
#include "packed_rows.h"

namespace once::store::sql {
namespace {

// Whether the event whose kind and metadata are columns `kind` and
// `metadata` answers a park (events::IsAnswering's three rules).
std::string AnsweringEvent(const std::string& kind, const std::string& metadata) {
  return "(" + kind + " IN (" + SqlQuotedList(events::AnsweringKernelKindNames()) + ") OR (" +
         kind + " NOT IN (" + SqlQuotedList(events::AllKernelKindNames()) + ") AND " + metadata +
         "::jsonb -> 'kernel' = 'true'::jsonb))";
}

// The kinds that release a run (store::RunRowChangeOf): a park, an end.
std::string ReleasingKindList() { return SqlQuotedList(pg::ReleasingKindNames()); }

}  // namespace

// A marked event is the first or the last event of its row (packed_rows.h).
std::string AnsweringPredicate(std::string_view alias) {
  std::string a(alias);
  return "(" + AnsweringEvent(a + ".kind", a + ".metadata") + " OR (" + a +
         ".end_kind IS NOT NULL AND " + AnsweringEvent(a + ".end_kind", a + ".end_metadata") + "))";
}

// The last sequence of a row read by RowHoldingSql.
constexpr std::string_view kLastOfRow = "COALESCE(rh.last_sequence, rh.sequence)";

std::string AnsweredAfter(std::string_view id_expr, std::string_view park_expr) {
  const std::string id(id_expr), park(park_expr);
  return "EXISTS (SELECT 1 FROM events a WHERE a.execution_id = " + id +
         " AND a.sequence >= COALESCE(" + pg::RowHoldingSql("rh.sequence", id, park) +
         ", 0) AND ((a.sequence > " + park + " AND " + AnsweringEvent("a.kind", "a.metadata") +
         ") OR (a.last_sequence > " + park + " AND " +
         AnsweringEvent("a.end_kind", "a.end_metadata") + ")))";
}

std::string StatusKindList() { return SqlQuotedList(events::StatusKernelKindNames()); }

const std::string& PairedEndSql() {
  static const std::string sql = "(CASE WHEN kind = 'EXECUTION_STARTED' AND end_kind IN (" +
                                 StatusKindList() +
                                 ") AND end_time_ms = time_ms THEN end_kind ELSE '' END)";
  return sql;
}

const std::string& UnpairedEndSql() {
  static const std::string sql =
      "(kind <> 'EXECUTION_STARTED' OR end_time_ms IS DISTINCT FROM time_ms)";
  return sql;
}

std::string CreateStatusIndexSql() {
  return "CREATE INDEX IF NOT EXISTS " + std::string(kStatusIndex) + " ON events (kind, " +
         PairedEndSql() + ", time_ms, execution_id, sequence) WHERE kind IN (" + StatusKindList() +
         ")";
}

std::string CreateEndStatusIndexSql() {
  return "CREATE INDEX IF NOT EXISTS " + std::string(kEndStatusIndex) +
         " ON events (end_kind, end_time_ms, execution_id, sequence) WHERE end_kind IN (" +
         StatusKindList() + ") AND " + UnpairedEndSql();
}

std::string ListEndedSql(std::string_view kind) {
  // Every range of the kind's entries (status_index.h), merged in order.
  std::string sql;
  for (const StatusRange& r : PostgresStatusRanges(kind, kSchemaVersion)) {
    sql += std::string(sql.empty() ? "" : " UNION ALL ") + "(SELECT execution_id, " + r.time +
           " FROM events WHERE " + r.where + " AND " + r.time + " <= $1::int8 AND (" + r.time +
           ", execution_id) > ($2::int8, $3::text) ORDER BY " + r.time +
           ", execution_id LIMIT $4::int8)";
  }
  return sql + " ORDER BY 2, 1 LIMIT $4::int8";
}

std::string HeadSql(std::string_view id_expr) { return pg::RowHoldingSql(kLastOfRow, id_expr, ""); }

// A park or an end is the last event of its row (packed_rows.h): the rows
// from the one that holds run_from on, each read for one that ends past it.
std::string RunningPredicate(std::string_view alias) {
  std::string f(alias);
  const std::string releasing = ReleasingKindList();
  return "(" + f + ".owner IS NOT NULL AND (" + f +
         ".run_from IS NULL OR NOT EXISTS (SELECT 1 FROM events rp WHERE rp.execution_id = " + f +
         ".execution_id AND rp.sequence >= COALESCE(" +
         pg::RowHoldingSql("rh.sequence", f + ".execution_id", f + ".run_from") +
         ", 0) AND COALESCE(rp.last_sequence, rp.sequence) > " + f + ".run_from AND (rp.kind IN (" +
         releasing + ") OR rp.end_kind IN (" + releasing + ")))))";
}

std::string BackfillAllSql() {
  return "INSERT INTO fences (execution_id, token) "
         "SELECT DISTINCT p.execution_id, 0 FROM events p "
         "WHERE (p.kind = 'EXECUTION_SUSPENDED' OR p.end_kind = 'EXECUTION_SUSPENDED') "
         "AND NOT EXISTS (SELECT 1 FROM events a WHERE a.execution_id = p.execution_id "
         "AND a.sequence > p.sequence AND " +
         AnsweringPredicate("a") + ") ON CONFLICT (execution_id) DO NOTHING";
}

std::string BackfillBatchSql() {
  // The newest answering event of a row is its last when that answers.
  return "WITH batch AS (SELECT DISTINCT execution_id FROM events "
         "WHERE (kind = 'EXECUTION_SUSPENDED' OR end_kind = 'EXECUTION_SUSPENDED') "
         "AND execution_id > $1::text ORDER BY execution_id LIMIT $2::int8), "
         "parked AS (SELECT b.execution_id FROM batch b WHERE (SELECT CASE WHEN a.end_kind IS "
         "NOT NULL AND " +
         AnsweringEvent("a.end_kind", "a.end_metadata") +
         " THEN a.end_kind ELSE a.kind END FROM events a WHERE a.execution_id = b.execution_id "
         "AND " +
         AnsweringPredicate("a") +
         " ORDER BY a.sequence DESC LIMIT 1) = 'EXECUTION_SUSPENDED'), "
         "ins AS (INSERT INTO fences (execution_id, token) SELECT execution_id, 0 FROM parked "
         "ON CONFLICT (execution_id) DO NOTHING) "
         "SELECT (SELECT max(execution_id) FROM batch), (SELECT count(*) FROM parked)";
}

// The guard reads the fence rows of the requests that ask for a lock through
// a MATERIALIZED CTE with FOR <strength> OF f: a LEFT JOIN cannot lock its
// nullable side, and the locked read returns the row version current after
// the wait (a plain read in this statement would use its older snapshot).
// Requests that do not lock read the row plainly. Both reads are index
// probes per request (= ANY, correlated subqueries), whatever the statistics.
//
// The head is the last sequence of the log's newest row (packed_rows.h: a
// row holds a run of one append's events): one backward probe of the
// primary key. A row holds an append, so a log has as many rows as
// appends, not events.
namespace {

// Whether the log of `alias`.execution_id fits an append at
// `alias`.expected_next: the log's head (the last sequence of its newest row,
// packed_rows.h; 0 when it has no row, also after a truncated prefix, whose
// rows start past 1) is expected_next - 1. One subplan, one backward probe of
// the primary key from the newest row: the form with a branch for the first
// append (a head probe for it, a probe bounded by expected_next - 1 for the
// rest) planned two subplans, and each costs a lone append 3-6 us of
// server CPU to start (BENCHMARKS.md, "Issue 20: the lone append's guard as
// one probe"). A row at expected_next that the snapshot does not see (an
// append in flight) is left to the primary key: the insert waits for it and
// meets a unique violation if it commits. Not NOT EXISTS for the empty log:
// a generic plan made while the table is small turns that into a hashed
// subplan that reads every row of events per statement (BENCHMARKS.md,
// "Issue 20: first appends in the lean statement"); a probe ordered by
// sequence stays on the primary key whatever the table's size.
std::string PredecessorFits(std::string_view alias) {
  const std::string x(alias);
  return "COALESCE(" + HeadSql(x + ".execution_id") + ", 0) = " + x + ".expected_next - 1";
}
// The head column of a verdict over requests `r`: the last sequence of the
// newest row, one backward probe.
std::string HeadColumn() { return "\n    COALESCE(" + HeadSql("r.execution_id") + ", 0) AS head"; }
// A verdict row `v` the guard and the sequence accept.
constexpr char kAccepted[] = R"(v.expected_next = v.head + 1
    AND (v.fence IS NULL OR (v.exact AND v.fence = v.token) OR (NOT v.exact AND v.fence >= v.token)))";
// The array types of the row columns (RowColumnNames' order).
constexpr const char* kRowColumnTypes[pg::kRowColumnCount] = {
    "int8", "text", "text", "text", "int8", "int8", "text", "text", "text", "int8", "text"};
// The row columns as a comma list, each `alias.` qualified (bare for "").
std::string RowList(std::string_view alias) {
  return alias.empty() ? std::string(kPostgresEventRowColumns) : pg::StoredRowColumns(alias);
}
// unnest($first::int8[], ...) of the row columns, as `alias`'s columns.
std::string UnnestRows(int first) {
  const std::vector<std::string_view> names = pg::RowColumnNames();
  ONCE_CHECK_MSG(names.size() == std::size(kRowColumnTypes), "a type for every row column");
  std::string out;
  for (int i = 0; i < pg::kRowColumnCount; ++i) {
    if (i > 0) out += ", ";
    out += "unnest($" + std::to_string(first + i) + "::" + kRowColumnTypes[i] + "[]) AS " +
           std::string(names[i]);
  }
  return out;
}
// The stored rows of the accepted requests; $first is the row's request
// (1-based) and the row columns follow it.
std::string StoredRows(int first) {
  std::string out = "unnest($" + std::to_string(first) + "::int8[]";
  for (int i = 0; i < pg::kRowColumnCount; ++i) {
    out += ", $" + std::to_string(first + 1 + i) + "::" + kRowColumnTypes[i] + "[]";
  }
  return out + ")\n    AS x(req, " + std::string(kPostgresEventRowColumns) + ")";
}
std::string InsertColumns() { return "INSERT INTO events (execution_id, " + RowList("") + ")"; }
constexpr char kResult[] =
    "SELECT v.ord, v.token, v.head, (SELECT count(*) FROM ins) FROM verdict v ORDER BY v.ord";

}  // namespace

// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
namespace {

// The run-row CTE of an owned append: `accepted` rows (execution_id, ord,
// run_from) of the requests that landed, `owners` per request. A request
// that leaves the execution running names its owner in the fences row (a
// new log gets its row at token 0) with run_from, the head before its
// events. A park or an end writes nothing: RunningPredicate reads the row as
// released once the log holds one past run_from. The caller locks, in
// execution-id order, the rows of requests past their first event
// (AppendSql's `locked`), so this write takes no lock out of that order.
std::string RunRowCtes(std::string_view accepted, int owners_param) {
  std::string o =
      "unnest($" + std::to_string(owners_param) + "::text[]) WITH ORDINALITY AS o(owner, ord)";
  return R"(, runs_up AS (
  INSERT INTO fences (execution_id, token, owner, since_ms, run_from)
  SELECT a.execution_id, 0, o.owner, )" +
         std::string(kDbNowMs) + R"(, a.run_from FROM )" + std::string(accepted) + R"( a
  JOIN )" +
         o + R"( ON o.ord = a.ord
  WHERE o.owner <> ''
  ON CONFLICT (execution_id) DO UPDATE SET owner = EXCLUDED.owner, since_ms = EXCLUDED.since_ms,
    run_from = EXCLUDED.run_from
))";
}

}  // namespace

std::string AppendSql(std::string_view lock_strength, bool owned) {
  return R"(WITH req AS (
  SELECT * FROM unnest($1::text[], $2::int8[], $3::bool[], $4::bool[], $5::int8[], $6::bool[])
    WITH ORDINALITY AS r(execution_id, fence, exact, lock, expected_next, suspends, ord)
), locked AS MATERIALIZED (
  SELECT f.execution_id, f.token FROM fences f
  WHERE f.execution_id = ANY (ARRAY(SELECT q.execution_id FROM req q WHERE q.lock))
  ORDER BY f.execution_id
  FOR )" +
         std::string(lock_strength) + R"( OF f
), verdict AS (
  SELECT r.ord, r.execution_id, r.suspends, r.fence, r.exact, r.expected_next,
    COALESCE(l.token, (SELECT p.token FROM fences p WHERE p.execution_id = r.execution_id), 0)
      AS token,)" +
         HeadColumn() + R"(
  FROM req r
  LEFT JOIN locked l ON l.execution_id = r.execution_id
), accepted AS (
  SELECT v.ord, v.execution_id, v.suspends, v.expected_next - 1 AS run_from FROM verdict v
  WHERE )" +
         kAccepted + R"(
), ins AS (
  )" + InsertColumns() +
         R"(
  SELECT a.execution_id, )" +
         RowList("x") + R"(
  FROM )" +
         StoredRows(7) +
         R"(
  JOIN accepted a ON a.ord = x.req
  RETURNING 1
), parks AS (
  INSERT INTO fences (execution_id, token)
  SELECT a.execution_id, 0 FROM accepted a WHERE a.suspends
  ON CONFLICT (execution_id) DO NOTHING
))" + (owned ? RunRowCtes("accepted", 19) : std::string()) +
         "\n" + kResult;
}

// The common case (no request locks a fence row, parks or compares tokens
// exactly): one pass over the stored rows, each carrying its request's id,
// fence, expected_next (and, in the hinted form, fence-row version hint),
// that inserts the rows whose request passes the guard. Every row of a
// request reads the same rows from the statement's one snapshot, so a
// request lands whole or not at all. Per request it reads the fence row (one
// hash-index probe) and probes the log for the row that holds expected_next
// - 1, which must end there (at 1: no row at all, also after a truncated
// prefix). The hinted form decides in
// the fence row's subplan: stale (0), fits with the predecessor known (2:
// the row is the hinted version, see append_hints.h) or fits (1); only 1
// probes the log. A row already at expected_next is left to the primary key
// (the unique violation the caller replays), which spares the probe
// AppendSql's head check makes for it. The arrays are unnested in the select
// list (lockstep, no tuplestore per array). Fence-row versions are read only
// for the requests that ask ($12), and verdicts (token, head) only for the
// requests that did not land, from the same snapshot, and only when some did
// not (a one-time filter).
// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
namespace {

// Whether row `alias`'s fence (NULL: unguarded) is at least its execution's
// token (0 without a fence row).
std::string FenceFits(std::string_view alias) {
  const std::string x(alias);
  return "(" + x + ".fence IS NULL OR " + x + R"(.fence >= COALESCE(
      (SELECT p.token FROM fences p WHERE p.execution_id = )" +
         x + ".execution_id), 0))";
}

// LoneHead::kNear's PredecessorFits: the newest row read only if it starts
// at or after expected_next - kLoneHeadRowEvents, else 0.
std::string NearPredecessorFits(std::string_view alias) {
  const std::string x(alias);
  return "COALESCE(" +
         pg::NewestRowFromSql(kLastOfRow, x + ".execution_id",
                              x + ".expected_next - " + std::to_string(kLoneHeadRowEvents)) +
         ", 0) = " + x + ".expected_next - 1";
}

// The unhinted guard over an event row `x`: the fence read, then
// `head_fits` (PredecessorFits or NearPredecessorFits of x).
std::string PlainGuard(const std::string& head_fits) {
  return FenceFits("x") + "\n    AND " + head_fits;
}

// The lean statements' WHERE over an event row `x` (execution_id, fence,
// expected_next; when hinted, hint_xmin and hint_ctid).
std::string LeanGuard(bool hinted) {
  std::string guard;
  if (hinted) {
    guard = R"(CASE COALESCE(
      (SELECT CASE WHEN x.fence < p.token THEN 0
                   WHEN p.xmin = x.hint_xmin AND p.ctid = x.hint_ctid THEN 2 ELSE 1 END
       FROM fences p WHERE p.execution_id = x.execution_id),
      CASE WHEN x.fence < 0 THEN 0 ELSE 1 END)
    WHEN 2 THEN true
    WHEN 1 THEN )" +
            PredecessorFits("x") +
            R"(
    ELSE false END)";
  } else {
    guard = PlainGuard(PredecessorFits("x"));
  }
  return guard;
}

}  // namespace

std::string LeanAppendSql(bool hinted, bool owned) {
  const std::string guard = LeanGuard(hinted);
  return R"(WITH ins AS (
  )" + InsertColumns() +
         R"(
  SELECT x.execution_id, )" +
         RowList("x") + R"(
  FROM (SELECT unnest($1::text[]) AS execution_id, unnest($2::int8[]) AS fence,
          unnest($3::int8[]) AS expected_next, )" +
         UnnestRows(4) +
         (hinted ? ",\n          unnest($16::xid[]) AS hint_xmin, unnest($17::tid[]) AS hint_ctid"
                 : "") +
         R"() x
  WHERE )" +
         guard +
         R"(
  RETURNING execution_id, sequence
))" +
         (owned ? RunRowCtes("(SELECT i.execution_id, g.ord, min(i.sequence) - 1 AS run_from "
                             "FROM ins i JOIN unnest($15::text[]) WITH ORDINALITY AS "
                             "g(execution_id, ord) ON g.execution_id = i.execution_id "
                             "GROUP BY i.execution_id, g.ord)",
                             hinted ? 19 : 16)
                : std::string()) +
         R"(
SELECT 0::int8, 0::int8, 0::int8, (SELECT count(*) FROM ins), NULL::text
UNION ALL)" +
         (hinted ? R"(
SELECT -g.ord, 0, 0, 0,
  (SELECT p.xmin::text || ' ' || p.ctid::text FROM fences p WHERE p.execution_id = g.execution_id)
FROM unnest($15::text[], $18::bool[]) WITH ORDINALITY AS g(execution_id, learn, ord)
WHERE g.learn
UNION ALL)"
                 : "") +
         R"(
SELECT r.ord,
  COALESCE((SELECT p.token FROM fences p WHERE p.execution_id = r.execution_id), 0),
  COALESCE()" +
         HeadSql("r.execution_id") + R"(, 0), 0,
  NULL::text
FROM unnest($15::text[]) WITH ORDINALITY AS r(execution_id, ord)
WHERE (SELECT count(*) FROM ins) < cardinality($1::text[])
  AND r.execution_id NOT IN (SELECT i.execution_id FROM ins i))";
}

std::string InsertRowsSql() {
  return InsertColumns() + "\n  SELECT $1::text, " + RowList("x") + " FROM (SELECT " +
         UnnestRows(2) + ") x";
}

// Model: models/fence_postgres.pml (the lean append's guard; one request).
// One event is a row of one event: the columns of several stay NULL.
std::string LoneInsertSql(LoneHead head) {
  return R"(INSERT INTO events (execution_id, sequence, kind, payload, metadata, time_ms)
  SELECT x.execution_id, x.seq, x.kind, x.payload, x.metadata, x.time_ms
  FROM (SELECT $1::text AS execution_id, $2::int8 AS fence, $3::int8 AS expected_next,
          $4::int8 AS seq, $5::text AS kind, $6::text AS payload, $7::text AS metadata,
          $8::int8 AS time_ms) x
  WHERE )" +
         PlainGuard(head == LoneHead::kExact ? PredecessorFits("x") : NearPredecessorFits("x"));
}

std::string LoneAppendSql() {
  return "WITH ins AS (\n  " + LoneInsertSql(LoneHead::kExact) + R"(
  RETURNING 1
)
SELECT 0::int8, 0::int8, 0::int8, (SELECT count(*) FROM ins), NULL::text
UNION ALL
SELECT 1,
  COALESCE((SELECT p.token FROM fences p WHERE p.execution_id = $1::text), 0),
  COALESCE()" +
         HeadSql("$1::text") + R"(, 0), 0,
  NULL::text
WHERE NOT EXISTS (SELECT 1 FROM ins))";
}

namespace {

// The owner a fences row `alias` names while its run runs, else ''.
std::string EffectiveOwner(std::string_view alias) {
  return "(CASE WHEN " + RunningPredicate(alias) + " THEN " + std::string(alias) +
         ".owner ELSE '' END)";
}

}  // namespace

// The bump names the owner in the row it updates (no other row, no index
// on the owner: the update stays HOT); the expected owner is the row's own.
std::string FenceIfBumpManySql() {
  return "UPDATE fences f SET token = f.token + 1, "
         "owner = CASE WHEN r.has_owner THEN r.owner ELSE f.owner END, "
         "since_ms = CASE WHEN r.has_owner THEN " +
         std::string(kDbNowMs) +
         " ELSE f.since_ms END, "
         "run_from = CASE WHEN r.has_owner THEN r.park ELSE f.run_from END "
         "FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $5::bool[], $6::text[], "
         "$7::bool[]) WITH ORDINALITY AS r(id, fence, park, owner, has_owner, expected, "
         "check_owner, ord) "
         "WHERE f.execution_id = r.id AND f.token = r.fence AND NOT " +
         AnsweredAfter("r.id", "r.park") + " AND (NOT r.check_owner OR " + EffectiveOwner("f") +
         " = r.expected) "
         "RETURNING r.ord, f.token";
}

// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
std::string FenceIfBumpSql() {
  return "UPDATE fences SET token = token + 1, owner = COALESCE($4::text, owner), "
         "since_ms = CASE WHEN $4::text IS NULL THEN since_ms ELSE " +
         std::string(kDbNowMs) +
         " END, run_from = CASE WHEN $4::text IS NULL THEN run_from ELSE $3::int8 END "
         "WHERE execution_id = $1::text "
         "AND token = $2::int8 AND NOT " +
         AnsweredAfter("$1::text", "$3::int8") + " AND ($5::text IS NULL OR " +
         EffectiveOwner("fences") + " = $5::text) RETURNING token";
}

std::string EndChannel(std::string_view schema) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : schema) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "loom_ended_";
  for (int shift = 60; shift >= 0; shift -= 4) out += kHex[(h >> shift) & 0xf];
  return out;
}

std::string CreateEndTriggerSql(std::string_view channel) {
  // The channel is ours ([a-z0-9_]), safe to inline like the kinds. An end
  // is a row's first event or its last (packed_rows.h); the trigger of
  // schema version 5 (loom_events_ended) read the first only and is replaced.
  const std::string ends = SqlQuotedList(EndingKindNames());
  return R"(DO $once$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger
                 WHERE tgrelid = 'events'::regclass AND tgname = 'loom_events_ended_rows') THEN
    CREATE OR REPLACE FUNCTION loom_notify_ended() RETURNS trigger LANGUAGE plpgsql AS $f$
      BEGIN PERFORM pg_notify(')" +
         std::string(channel) + R"(', NEW.execution_id); RETURN NULL; END $f$;
    DROP TRIGGER IF EXISTS loom_events_ended ON events;
    CREATE TRIGGER loom_events_ended_rows AFTER INSERT ON events FOR EACH ROW
      WHEN (NEW.kind IN ()" +
         ends + R"() OR NEW.end_kind IN ()" + ends + R"())
      EXECUTE FUNCTION loom_notify_ended();
  END IF;
END $once$)";
}

}  // namespace once::store::sql
