#include "sql.h"

#include <span>
#include <vector>

#include "once/events/kinds.h"

namespace once::store::sql {
namespace {

// Kinds come from the kernel's constant table (printable ASCII, no quotes),
// never from user input, so they are safe to inline.
std::string QuotedList(std::span<const std::string_view> names) {
  std::string out;
  for (auto name : names) {
    if (!out.empty()) out += ", ";
    out += '\'';
    out += name;
    out += '\'';
  }
  return out;
}

}  // namespace

std::string AnsweringPredicate(std::string_view alias) {
  std::string a(alias);
  return "(" + a + ".kind IN (" + QuotedList(events::AnsweringKernelKindNames()) + ") OR (" + a +
         ".kind NOT IN (" + QuotedList(events::AllKernelKindNames()) + ") AND " + a +
         ".metadata::jsonb -> 'kernel' = 'true'::jsonb))";
}

std::string RunningPredicate(std::string_view alias) {
  std::vector<std::string_view> releasing = {"EXECUTION_SUSPENDED"};
  for (const events::KernelKindInfo& k : events::kKernelKinds) {
    if (k.terminal) releasing.push_back(k.name);
  }
  std::string f(alias);
  return "(" + f + ".owner IS NOT NULL AND (" + f +
         ".run_from IS NULL OR NOT EXISTS (SELECT 1 FROM events rp WHERE rp.execution_id = " + f +
         ".execution_id AND rp.sequence > " + f + ".run_from AND rp.kind IN (" +
         QuotedList(releasing) + "))))";
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
  static constexpr const char* kTypes[6] = {"int8", "int8", "text", "text", "text", "int8"};
  std::string out = "unnest(";
  for (int i = 0; i < 6; ++i) {
    if (i > 0) out += ", ";
    out += '$';
    out += std::to_string(first + i);
    out += "::";
    out += kTypes[i];
    out += "[]";
  }
  out += ")\n    AS x(req, seq, kind, payload, metadata, time_ms)";
  return out;
}
constexpr char kInsertColumns[] =
    "INSERT INTO events (execution_id, sequence, kind, payload, metadata, time_ms)";
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
         kHeadColumn + R"(
  FROM req r
  LEFT JOIN locked l ON l.execution_id = r.execution_id)" +
         kHeadProbe + R"(
), accepted AS (
  SELECT v.ord, v.execution_id, v.suspends, v.expected_next - 1 AS run_from FROM verdict v
  WHERE )" +
         kAccepted +
         R"(
), ins AS (
  )" + kInsertColumns +
         R"(
  SELECT a.execution_id, x.seq, x.kind, x.payload, x.metadata, x.time_ms
  FROM )" +
         EventRows(7) +
         R"(
  JOIN accepted a ON a.ord = x.req
  RETURNING 1
), parks AS (
  INSERT INTO fences (execution_id, token)
  SELECT a.execution_id, 0 FROM accepted a WHERE a.suspends
  ON CONFLICT (execution_id) DO NOTHING
))" + (owned ? RunRowCtes("accepted", 13) : std::string()) +
         "\n" + kResult;
}

namespace {

// The lean guard's predecessor check: the first row from expected_next - 1
// must be the predecessor (at 1: no row at all).
constexpr char kPredecessorFits[] = R"(COALESCE((SELECT e.sequence FROM events e
                  WHERE e.execution_id = x.execution_id AND e.sequence >= x.expected_next - 1
                  ORDER BY e.sequence LIMIT 1),
                 CASE WHEN x.expected_next = 1 THEN 0 END) = x.expected_next - 1)";

}  // namespace

// The common case (no request locks a fence row, parks or compares tokens
// exactly): one pass over the events, each carrying its request's id, fence,
// expected_next (and, in the hinted form, fence-row version hint), that
// inserts the rows whose request passes the guard. Every event of a request reads the same rows
// from the statement's one snapshot, so a request lands whole or not at all.
// Per request it reads the fence row (one hash-index probe) and probes the
// log from expected_next - 1, whose first row must be the predecessor (at 1:
// no row at all, also after a truncated prefix). The hinted form decides in
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
            std::string(kPredecessorFits) +
            R"(
    ELSE false END)";
  } else {
    guard = R"((x.fence IS NULL OR x.fence >= COALESCE(
      (SELECT p.token FROM fences p WHERE p.execution_id = x.execution_id), 0))
    AND )" + std::string(kPredecessorFits);
  }
  return guard;
}

}  // namespace

std::string LeanAppendSql(bool hinted, bool owned) {
  const std::string guard = LeanGuard(hinted);
  return R"(WITH ins AS (
  )" + std::string(kInsertColumns) +
         R"(
  SELECT x.execution_id, x.seq, x.kind, x.payload, x.metadata, x.time_ms
  FROM (SELECT unnest($1::text[]) AS execution_id, unnest($2::int8[]) AS fence,
          unnest($3::int8[]) AS expected_next, unnest($4::int8[]) AS seq,
          unnest($5::text[]) AS kind, unnest($6::text[]) AS payload,
          unnest($7::text[]) AS metadata, unnest($8::int8[]) AS time_ms)" +
         (hinted ? ",\n          unnest($10::xid[]) AS hint_xmin, unnest($11::tid[]) AS hint_ctid"
                 : "") +
         R"() x
  WHERE )" +
         guard +
         R"(
  RETURNING execution_id, sequence
))" +
         (owned ? RunRowCtes("(SELECT i.execution_id, g.ord, min(i.sequence) - 1 AS run_from "
                             "FROM ins i JOIN unnest($9::text[]) WITH ORDINALITY AS "
                             "g(execution_id, ord) ON g.execution_id = i.execution_id "
                             "GROUP BY i.execution_id, g.ord)",
                             hinted ? 13 : 10)
                : std::string()) +
         R"(
SELECT 0::int8, 0::int8, 0::int8, (SELECT count(*) FROM ins), NULL::text
UNION ALL)" +
         (hinted ? R"(
SELECT -g.ord, 0, 0, 0,
  (SELECT p.xmin::text || ' ' || p.ctid::text FROM fences p WHERE p.execution_id = g.execution_id)
FROM unnest($9::text[], $12::bool[]) WITH ORDINALITY AS g(execution_id, learn, ord)
WHERE g.learn
UNION ALL)"
                 : "") +
         R"(
SELECT r.ord,
  COALESCE((SELECT p.token FROM fences p WHERE p.execution_id = r.execution_id), 0),
  COALESCE((SELECT max(e.sequence) FROM events e WHERE e.execution_id = r.execution_id), 0), 0,
  NULL::text
FROM unnest($9::text[]) WITH ORDINALITY AS r(execution_id, ord)
WHERE (SELECT count(*) FROM ins) < cardinality($1::text[])
  AND r.execution_id NOT IN (SELECT i.execution_id FROM ins i))";
}

// Model: models/fence_postgres.pml (the lean append's guard; one request).
std::string LoneInsertSql() {
  return std::string(kInsertColumns) + R"(
  SELECT x.execution_id, x.seq, x.kind, x.payload, x.metadata, x.time_ms
  FROM (SELECT $1::text AS execution_id, $2::int8 AS fence, $3::int8 AS expected_next,
          $4::int8 AS seq, $5::text AS kind, $6::text AS payload, $7::text AS metadata,
          $8::int8 AS time_ms) x
  WHERE )" +
         LeanGuard(false);
}

std::string LoneAppendSql() {
  return "WITH ins AS (\n  " + LoneInsertSql() + R"(
  RETURNING 1
)
SELECT 0::int8, 0::int8, 0::int8, (SELECT count(*) FROM ins), NULL::text
UNION ALL
SELECT 1,
  COALESCE((SELECT p.token FROM fences p WHERE p.execution_id = $1::text), 0),
  COALESCE((SELECT max(e.sequence) FROM events e WHERE e.execution_id = $1::text), 0), 0,
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
         "WHERE f.execution_id = r.id AND f.token = r.fence "
         "AND NOT EXISTS (SELECT 1 FROM events a WHERE a.execution_id = r.id "
         "AND a.sequence > r.park AND " +
         AnsweringPredicate("a") + ") AND (NOT r.check_owner OR " + EffectiveOwner("f") +
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
         "AND token = $2::int8 "
         "AND NOT EXISTS (SELECT 1 FROM events a WHERE a.execution_id = $1::text "
         "AND a.sequence > $3::int8 AND " +
         AnsweringPredicate("a") + ") AND ($5::text IS NULL OR " + EffectiveOwner("fences") +
         " = $5::text) RETURNING token";
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
  std::vector<std::string_view> terminal;
  for (const events::KernelKindInfo& k : events::kKernelKinds) {
    if (k.terminal) terminal.push_back(k.name);
  }
  // The channel is ours ([a-z0-9_]), safe to inline like the kinds.
  return R"(DO $once$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger
                 WHERE tgrelid = 'events'::regclass AND tgname = 'loom_events_ended') THEN
    CREATE OR REPLACE FUNCTION loom_notify_ended() RETURNS trigger LANGUAGE plpgsql AS $f$
      BEGIN PERFORM pg_notify(')" +
         std::string(channel) + R"(', NEW.execution_id); RETURN NULL; END $f$;
    CREATE TRIGGER loom_events_ended AFTER INSERT ON events FOR EACH ROW
      WHEN (NEW.kind IN ()" +
         QuotedList(terminal) + R"())
      EXECUTE FUNCTION loom_notify_ended();
  END IF;
END $once$)";
}

}  // namespace once::store::sql
