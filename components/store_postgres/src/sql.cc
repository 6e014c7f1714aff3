#include "sql.h"

#include <span>

#include "once/events/kinds.h"

namespace once::store::sql {
namespace {

// Kinds come from the kernel's constant table (printable ASCII, no quotes),
// never from user input, so they are safe to inline.
std::string QuotedList(std::span<const std::string_view> names) {
  std::string out;
  for (auto name : names) {
    if (!out.empty()) out += ", ";
    out += "'" + std::string(name) + "'";
  }
  return out;
}

}  // namespace

std::string AnsweringPredicate(std::string_view alias) {
  std::string a(alias);
  return "(" + a + ".kind IN (" + QuotedList(events::AnsweringKernelKindNames()) + ") OR (" + a +
         ".kind NOT IN (" + QuotedList(events::AllKernelKindNames()) + ") AND " + a +
         ".metadata->'kernel' = 'true'::jsonb))";
}

std::string BackfillAllSql() {
  return "INSERT INTO fences (execution_id, token) "
         "SELECT DISTINCT p.execution_id, 0 FROM events p "
         "WHERE p.kind = 'EXECUTION_SUSPENDED' AND NOT EXISTS ("
         "SELECT 1 FROM events a WHERE a.execution_id = p.execution_id "
         "AND a.sequence > p.sequence AND " +
         AnsweringPredicate("a") + ") ON CONFLICT (execution_id) DO NOTHING";
}

std::string BackfillBatchSql() {
  return "WITH batch AS (SELECT DISTINCT execution_id FROM events "
         "WHERE kind = 'EXECUTION_SUSPENDED' AND execution_id > $1::text "
         "ORDER BY execution_id LIMIT $2::int8), "
         "parked AS (SELECT b.execution_id FROM batch b WHERE (SELECT a.kind FROM events a "
         "WHERE a.execution_id = b.execution_id AND " +
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
// The head check never walks the log: the probe reads the execution's rows
// from expected_next - 1 up, at most 2, and an append that fits finds exactly
// its predecessor (or, at 1, nothing), so head = expected_next - 1. Only a
// request that does not fit pays for max(sequence), the head its
// SequenceConflict reports. (A backward scan for the newest row reads the
// whole leaf page of the execution's keys before returning the first one:
// that cost more than the insert on long logs.)
namespace {

// The head column of a verdict over requests `r` and the LATERAL probe `h`
// it reads (see the comment above AppendSql).
constexpr char kHeadColumn[] = R"(
    CASE WHEN (h.n = 1 AND h.top = r.expected_next - 1) OR (h.n = 0 AND r.expected_next = 1)
      THEN r.expected_next - 1
      ELSE COALESCE((SELECT max(e.sequence) FROM events e WHERE e.execution_id = r.execution_id), 0)
    END AS head)";
constexpr char kHeadProbe[] = R"(
  CROSS JOIN LATERAL (
    SELECT count(*) AS n, max(t.sequence) AS top FROM (
      SELECT e.sequence FROM events e
      WHERE e.execution_id = r.execution_id AND e.sequence >= r.expected_next - 1
      ORDER BY e.sequence LIMIT 2) t
  ) h)";
// A verdict row `v` the guard and the sequence accept.
constexpr char kAccepted[] = R"(v.expected_next = v.head + 1
    AND (v.fence IS NULL OR (v.exact AND v.fence = v.token) OR (NOT v.exact AND v.fence >= v.token)))";
// The event rows of the accepted requests; `first` is the first of the six
// event array parameters.
std::string EventRows(int first) {
  std::string p[6];
  for (int i = 0; i < 6; ++i) p[i] = "$" + std::to_string(first + i);
  return "unnest(" + p[0] + "::int8[], " + p[1] + "::int8[], " + p[2] + "::text[], " + p[3] +
         "::text[], " + p[4] + "::text[], " + p[5] +
         "::int8[])\n    AS x(req, seq, kind, payload, metadata, time_ms)";
}
constexpr char kInsertColumns[] =
    "INSERT INTO events (execution_id, sequence, kind, payload, metadata, time_ms)";
constexpr char kResult[] =
    "SELECT v.ord, v.token, v.head, (SELECT count(*) FROM ins) FROM verdict v ORDER BY v.ord";

}  // namespace

std::string AppendSql(std::string_view lock_strength) {
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
         kHeadColumn + R"(
  FROM req r
  LEFT JOIN locked l ON l.execution_id = r.execution_id)" +
         kHeadProbe + R"(
), accepted AS (
  SELECT v.ord, v.execution_id, v.suspends FROM verdict v
  WHERE )" +
         kAccepted +
         R"(
), ins AS (
  )" + kInsertColumns +
         R"(
  SELECT a.execution_id, x.seq, x.kind, x.payload, x.metadata::jsonb, x.time_ms
  FROM )" +
         EventRows(7) +
         R"(
  JOIN accepted a ON a.ord = x.req
  RETURNING 1
), parks AS (
  INSERT INTO fences (execution_id, token)
  SELECT a.execution_id, 0 FROM accepted a WHERE a.suspends
  ON CONFLICT (execution_id) DO NOTHING
)
)" + kResult;
}

// The common case (no request locks a fence row or parks): AppendSql
// without the locked CTE, the park-fence insert and the request flags they
// read. The verdict is computed exactly as there.
std::string LeanAppendSql() {
  return R"(WITH verdict AS (
  SELECT r.ord, r.execution_id, r.fence, r.exact, r.expected_next,
    COALESCE((SELECT p.token FROM fences p WHERE p.execution_id = r.execution_id), 0) AS token,)" +
         std::string(kHeadColumn) + R"(
  FROM unnest($1::text[], $2::int8[], $3::bool[], $4::int8[])
    WITH ORDINALITY AS r(execution_id, fence, exact, expected_next, ord))" +
         kHeadProbe + R"(
), ins AS (
  )" + kInsertColumns +
         R"(
  SELECT v.execution_id, x.seq, x.kind, x.payload, x.metadata::jsonb, x.time_ms
  FROM )" +
         EventRows(5) +
         R"(
  JOIN verdict v ON v.ord = x.req
  WHERE )" +
         kAccepted +
         R"(
  RETURNING 1
)
)" + kResult;
}

std::string FenceIfBumpSql() {
  return "UPDATE fences SET token = token + 1 WHERE execution_id = $1::text AND token = $2::int8 "
         "AND NOT EXISTS (SELECT 1 FROM events a WHERE a.execution_id = $1::text "
         "AND a.sequence > $3::int8 AND " +
         AnsweringPredicate("a") + ") RETURNING token";
}

}  // namespace once::store::sql
