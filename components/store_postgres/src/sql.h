// Private: the schema and the statements. Values are bound ($n) everywhere.

#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "once/base/clock.h"
#include "once/store_postgres/postgres_event_store.h"

namespace once::store::pg {
class Conn;
}  // namespace once::store::pg

namespace once::store::sql {

// 1: metadata jsonb. 2: metadata text (the client's JSON as written) and the
// hash index on fences. 3: loom_runs and loom_nodes (issue 15, docs/nodes.md).
// 4: the run owner moves into the fences row (owner, since_ms; loom_runs is
// gone) and loom_nodes gains `swept` (docs/nodes.md). 5: fences.run_from,
// and a park or an end no longer clears the owner (RunningPredicate). 6: a
// row holds a run of one append's events (packed_rows.h): last_sequence,
// the end_* columns and rest, NULL in a row of one event (every older row).
inline constexpr int64_t kSchemaVersion = kPostgresSchemaVersion;
inline constexpr std::string_view kVersionRow = "version";
inline constexpr std::string_view kParkFencesMarker = "park_fences_backfilled";
inline constexpr std::string_view kParkIndex = "events_parks_backfill";

// once_schema holds the version and the one-time markers.
inline constexpr std::string_view kCreateSchemaTable =
    "CREATE TABLE IF NOT EXISTS once_schema (name text PRIMARY KEY, value bigint NOT NULL)";

// The current tables. Ids compare in byte order (COLLATE "C") so
// ListExecutions pages ascend by bytes. Payload and metadata hold JSON text
// exactly as the client encoded it: no server-side parse on append or read.
inline constexpr std::string_view kCreateTables = R"(
CREATE TABLE IF NOT EXISTS events (
  execution_id text COLLATE "C" NOT NULL,
  sequence bigint NOT NULL,
  kind text NOT NULL,
  payload text NOT NULL,
  metadata text NOT NULL,
  time_ms bigint NOT NULL,
  last_sequence bigint,
  end_kind text,
  end_payload text,
  end_metadata text,
  end_time_ms bigint,
  rest text,
  PRIMARY KEY (execution_id, sequence)
);
-- A row exists once someone acquires, once the execution parks (token 0),
-- or once a node's append leaves it running (token 0; owner set).
CREATE TABLE IF NOT EXISTS fences (
  execution_id text COLLATE "C" PRIMARY KEY,
  token bigint NOT NULL,
  owner text COLLATE "C",
  since_ms bigint,
  run_from bigint
) WITH (fillfactor = 70))";

// The node registry (docs/nodes.md). The run rows are the fences rows'
// owner and since_ms (written by the event store in the statement of the
// append or acquire that names an owner; NULL: no body runs it): no index
// on them, so that the acquire's token bump and the owner it records stay
// one HOT update. loom_nodes is written by the registry; `swept`: a scan
// found none of this dead node's runs left (OrphanedRuns stops scanning
// fences for it until it beats again). Both stores create it.
inline constexpr std::string_view kCreateNodeTables = R"(
CREATE TABLE IF NOT EXISTS loom_nodes (
  node_id text COLLATE "C" PRIMARY KEY,
  host text NOT NULL,
  pid bigint NOT NULL,
  version text NOT NULL,
  started_at_ms bigint NOT NULL,
  heartbeat_at_ms bigint NOT NULL,
  lease_ms bigint NOT NULL,
  stopped boolean NOT NULL DEFAULT false,
  swept boolean NOT NULL DEFAULT false
))";

// Version 3 -> 4: the owner columns on fences and loom_nodes.swept (false:
// every dead node is scanned for once), then, if loom_runs exists (it does
// at version 3), every row of it carried over (a row for an execution
// without a fence row gets one at token 0) and the table dropped.
inline constexpr std::string_view kMigrateV3ToV4 = R"(
ALTER TABLE fences ADD COLUMN IF NOT EXISTS owner text COLLATE "C",
  ADD COLUMN IF NOT EXISTS since_ms bigint;
ALTER TABLE fences SET (fillfactor = 70);
ALTER TABLE loom_nodes ADD COLUMN IF NOT EXISTS swept boolean NOT NULL DEFAULT false)";
// Version 4 -> 5: the sequence a run began after. A version-4 row names an
// owner only while its run runs, so each such run starts at its log's head.
inline constexpr std::string_view kMigrateV4ToV5 = R"(
ALTER TABLE fences ADD COLUMN IF NOT EXISTS run_from bigint;
UPDATE fences f SET run_from = COALESCE(
    (SELECT max(e.sequence) FROM events e WHERE e.execution_id = f.execution_id), 0)
  WHERE f.owner IS NOT NULL AND f.run_from IS NULL)";
// Version 5 -> 6: the columns of a row of several events (no rewrite: every
// existing row is a row of one event, its new columns NULL).
inline constexpr std::string_view kMigrateV5ToV6 = R"(
ALTER TABLE events ADD COLUMN IF NOT EXISTS last_sequence bigint,
  ADD COLUMN IF NOT EXISTS end_kind text, ADD COLUMN IF NOT EXISTS end_payload text,
  ADD COLUMN IF NOT EXISTS end_metadata text, ADD COLUMN IF NOT EXISTS end_time_ms bigint,
  ADD COLUMN IF NOT EXISTS rest text)";
inline constexpr std::string_view kCarryRunRows = R"(
INSERT INTO fences (execution_id, token, owner, since_ms)
  SELECT execution_id, 0, owner, since_ms FROM loom_runs
  ON CONFLICT (execution_id) DO UPDATE SET owner = EXCLUDED.owner, since_ms = EXCLUDED.since_ms;
DROP TABLE loom_runs)";

// The queue store's tables (docs/queues.md), created by the queue store.
inline constexpr std::string_view kCreateQueueTables = R"(
CREATE TABLE IF NOT EXISTS loom_queues (
  name text COLLATE "C" PRIMARY KEY,
  concurrency_max bigint NOT NULL DEFAULT 0,
  per_node_concurrency_max bigint NOT NULL DEFAULT 0,
  rate_max bigint NOT NULL DEFAULT 0,
  rate_period_ms bigint NOT NULL DEFAULT 1000,
  window_start_ms bigint NOT NULL DEFAULT 0,
  window_count bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS loom_queue_items (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  execution_id text COLLATE "C" NOT NULL UNIQUE,
  queue text COLLATE "C" NOT NULL,
  workflow text NOT NULL,
  input text NOT NULL,
  priority bigint NOT NULL,
  dedup_key text COLLATE "C",
  enqueued_at_ms bigint NOT NULL,
  visible_at_ms bigint NOT NULL,
  claimed_by text COLLATE "C",
  claimed_at_ms bigint
);
CREATE UNIQUE INDEX IF NOT EXISTS loom_queue_dedup ON loom_queue_items (queue, dedup_key)
  WHERE dedup_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS loom_queue_pending ON loom_queue_items (queue, priority DESC, seq)
  WHERE claimed_by IS NULL;
CREATE INDEX IF NOT EXISTS loom_queue_claimed ON loom_queue_items (queue, claimed_by)
  WHERE claimed_by IS NOT NULL;
CREATE TABLE IF NOT EXISTS loom_schedules (
  name text COLLATE "C" PRIMARY KEY,
  cron text NOT NULL,
  workflow text NOT NULL,
  queue text COLLATE "C" NOT NULL,
  input text NOT NULL,
  last_tick_ms bigint NOT NULL DEFAULT 0
))";

// The database's clock in Unix milliseconds: every time a node is judged by
// (heartbeats, leases, run rows) is the server's, never a node's.
inline constexpr std::string_view kDbNowMs = "(extract(epoch FROM clock_timestamp()) * 1000)::int8";

// The append guard reads every request's fence row by id: a hash index
// answers that equality probe without the B-tree's per-level text compares
// (about half a microsecond of server CPU an append). The primary key stays
// for ON CONFLICT and ordered scans; fence rows are written rarely.
inline constexpr std::string_view kCreateFenceHashIndex =
    "CREATE INDEX IF NOT EXISTS fences_id_hash ON fences USING hash (execution_id)";

// Version 1 -> 2: metadata jsonb becomes its JSON text (rewrites the table),
// and fences gets kCreateFenceHashIndex.
inline constexpr std::string_view kMigrateV1ToV2 =
    "ALTER TABLE events ALTER COLUMN metadata TYPE text USING metadata::text";

// The operator's indexes (components/visibility, docs/operations.md): the
// events that place an execution in a status, by kind and time (walked
// backwards for newest first), so that listing the newest executions of one
// status reads a page of index entries. Partial: steps, resumes and audit
// events are not in them. A status event is the first event of its row
// (events_by_first_status) or its last (events_by_last_status, on the end_*
// columns; packed_rows.h), except in a paired row, whose one entry in
// events_by_first_status carries its end's kind (PairedEndSql) and stands
// for both (status_index.h says how each is read). Created at every Open if missing, so an
// installation can build them beforehand CONCURRENTLY; version 7 replaced version 6's two
// (kMigrateV6ToV7).
inline constexpr std::string_view kStatusIndex = "events_by_first_status";
inline constexpr std::string_view kEndStatusIndex = "events_by_last_status";
std::string CreateStatusIndexSql();
std::string CreateEndStatusIndexSql();
// The second key column of events_by_first_status: a paired row's end kind
// (its first event is EXECUTION_STARTED and its last a status event of the
// same time_ms), '' for every other row (not NULL: an equality on it keeps
// the index's time order usable for ORDER BY, where IS NULL would not).
const std::string& PairedEndSql();
// events_by_last_status's test that a row whose last event is a status
// event is not paired (given end_kind is a status kind, exactly when
// PairedEndSql is ''). The texts are the indexes' own: a query that repeats
// them can use the indexes.
const std::string& UnpairedEndSql();
// Version 6 -> 7: version 6's two status indexes, which hold a paired row
// twice, go (EnsureStatusIndexes then creates version 7's two).
inline constexpr std::string_view kMigrateV6ToV7 =
    "DROP INDEX IF EXISTS events_by_status_kind; DROP INDEX IF EXISTS events_by_end_status_kind";

// EventStore::ListEnded's page of one ending kind (inlined, so that a generic
// plan reads the partial status indexes): the executions whose `kind` event
// is at or before $1 and after the cursor ($2 time, $3 id), oldest first, at
// most $4; columns execution_id, time.
std::string ListEndedSql(std::string_view kind);

// The head of the log of execution `id_expr` (an SQL expression): the last
// sequence of its newest row, NULL for an empty log.
std::string HeadSql(std::string_view id_expr);

// The SQL list of the status kinds ('EXECUTION_STARTED', ...).
std::string StatusKindList();

// The event store's migration, after its advisory lock, inside the
// migration transaction (postgres_event_store.cc). The node registry runs it
// too: its statements read the fences rows' owners.
Status MigrateEventSchemaLocked(pg::Conn& conn, const PostgresOptions& options, const Clock& clock);

// Whether the fences row `alias` names a run that still runs. The owner is
// written when a run begins (with run_from, the log's head then) and is not
// cleared when the run parks or ends: that would be a second write of the
// row on every park and every end, the whole cost of being a node on
// PostgreSQL's park/resume path. Instead the row is read as released once
// its log holds a park or an end (store::RunRowChangeOf's kinds) past
// run_from: one probe of the primary key from run_from up. A NULL run_from
// (written by a version-4 build still running beside this one) is a row
// that build clears itself, so its owner alone says it runs.
// Readers: RunOwnerOf, the registry's scans; hygiene clears stale owners
// (the sweep of a dead node, TruncatePrefixKeeping).
std::string RunningPredicate(std::string_view alias);

// The scan for an answering event (events::IsAnswering) over alias `a`:
// its first event or its last answers (a marked event is one of the two,
// packed_rows.h).
std::string AnsweringPredicate(std::string_view alias);

// Whether the log of execution `id_expr` holds an answering event after
// sequence `park_expr` (SQL expressions): the rows from the one that holds
// the park on, each read for an answer past it (a row that starts at or
// before the park can end after it).
std::string AnsweredAfter(std::string_view id_expr, std::string_view park_expr);

// The boot backfill: every execution whose newest answering event is a park.
std::string BackfillAllSql();
// One batch of the offline backfill: $1 after (id), $2 batch size. Returns
// (last id of the batch or NULL, parked executions found).
std::string BackfillBatchSql();

// The append statement for one or many requests. `lock_strength` is "SHARE"
// (the append guard) or "UPDATE" (AppendIfUnchanged). Parameters:
//   $1 ids text[], $2 fences int8[] (NULL: unguarded), $3 exact bool[]
//   (token must equal the fence), $4 lock bool[] (read the row FOR
//   lock_strength), $5 expected_next int8[], $6 suspends bool[],
//   $7 stored row's request index (1-based) int8[], $8-$18 the stored rows'
//   columns (packed_rows.h RowArrays, kPostgresEventRowColumns' order).
// Returns per request, in order: ord, token, head, inserted (total rows).
// `owned`: also $19 owners text[] (per request; an empty owner leaves the
// run row alone): an accepted request with an owner names it in its run row,
// with run_from = expected_next - 1. Only appends that leave the execution
// running are sent owned (a park or an end writes no run row).
std::string AppendSql(std::string_view lock_strength, bool owned = false);

// The conditional bump of AcquireFenceIf ($1 id, $2 expected token, $3 the
// park's sequence, $4 owner text or NULL, $5 expected owner text or NULL:
// '' is "no run row", a row whose run no longer runs included): prepared,
// run as its own statement after the row lock. On success it names the
// owner in the run row, run_from = the park's sequence.
std::string FenceIfBumpSql();

// The same conditional bump for a whole acquire group of distinct
// executions ($1 ids text[], $2 expected tokens int8[], $3 park sequences
// int8[], $4 owners text[] with $5 has_owner bool[], $6 expected owners
// text[] with $7 check_owner bool[], in execution-id order), run after every
// row is locked. Returns
// (ord, token) for each execution it bumped; ord is the 1-based position in
// the arrays.
std::string FenceIfBumpManySql();

// The append statement for requests where none locks (AppendSql's $4 all
// false), none parks ($6 all false) and none is exact ($3 all false): the
// same guard, in one pass over the stored rows. Parameters, one entry per
// stored row (packed_rows.h):
//   $1 execution id text[], $2 its request's fence int8[] (NULL: unguarded),
//   $3 its request's expected_next int8[], $4-$14 the row's columns
//   (RowArrays, kPostgresEventRowColumns' order),
//   when `hinted`: $16 xid[] and $17 tid[], its request's fence-row version
//   hint (xmin, ctid; NULL: none), under which event expected_next - 1 is
//   known to exist (append_hints.h);
// and one per request: $15 ids text[] (a request's 1-based ord is its index),
// when `hinted`: $18 learn bool[] (return the fence row's version).
// Returns a row (0, 0, 0, rows inserted, NULL); when `hinted`, for each
// request that asks to learn, (-ord, 0, 0, 0, "<xmin> (<block>,<offset>)"
// or NULL without a fence row); and for each request that did not land,
// (ord, token, head, 0, NULL). Unlike AppendSql, a request whose row at expected_next exists fails
// the statement with a unique violation (23505), as a concurrent insert of
// that row fails either statement.
// `owned`: also a per-request array after the others ($16 unhinted, $19
// hinted): owners text[], as AppendSql's.
std::string LeanAppendSql(bool hinted, bool owned = false);

// The lone append every low-traffic service pays: one request of one event
// under LeanAppendSql's guard (unhinted, not owned), its parameters scalars:
// $1 execution id text, $2 fence int8 (NULL: unguarded), $3 expected_next
// int8, $4 sequence int8, $5 kind text, $6 payload text, $7 metadata text,
// $8 time_ms int8. No array to encode, decode or unnest.
//
// LoneInsertSql is the bare INSERT under the guard: it inserts the event or
// nothing, and returns no verdict. It is what an append that lands runs
// (about 30 us less server CPU than the form with a verdict on this 2-vCPU
// machine: no CTE around the insert, no result rows). LoneAppendSql wraps
// the exact form of the same INSERT with LeanAppendSql's result rows (ord 1
// for the request when it did not land): an append the bare INSERT refused
// runs it, so its verdict and its second try come from one snapshot.
//
// How the guard reads the log's head (the newest row's last sequence):
enum class LoneHead {
  // The newest row, wherever it starts: the rule as modelled.
  kExact,
  // The newest row only if it starts at or after expected_next -
  // kLoneHeadRowEvents, else the head reads as 0. It accepts exactly where
  // kExact does or refuses: a row found there is the newest row, and none
  // found accepts only expected_next = 1 with no row at all. It refuses
  // what kExact would accept only when the log's newest row holds more than
  // kLoneHeadRowEvents events, and LoneAppendSql then lands the append.
  // What it buys: the probe stops at the first entry below its bound,
  // where a probe bounded by the id alone reads every entry of the log on
  // the index page (PostgreSQL reads a page's matches at once): on a long
  // log about a third of the guard's server instructions (BENCHMARKS.md).
  kNear,
};
inline constexpr int64_t kLoneHeadRowEvents = 16;
std::string LoneInsertSql(LoneHead head);
std::string LoneAppendSql();

// Inserts stored rows of execution $1 with no guard (TruncatePrefixKeeping's
// rewrite of the row that holds its cut): $2... the row columns' arrays
// (packed_rows.h RowArrays).
std::string InsertRowsSql();

// Ends heard by LISTEN (postgres_end_listener.h). The channel of `schema`:
// "loom_ended_" and 16 hex digits of the schema name's 64-bit FNV-1a (a
// channel name has at most 63 bytes; NOTIFY is database-wide, so each
// schema has its own). Two schemas that collide only wake each other's
// waiters for nothing (a waiter re-reads its log).
std::string EndChannel(std::string_view schema);
// Creates (if missing) the AFTER INSERT trigger on events that notifies
// `channel` with the execution id of every terminal kernel event
// (EXECUTION_COMPLETED, _FAILED, _CANCELLED, _CONTINUED): the NOTIFY is part
// of the appending transaction and delivered at its commit. Rows of other
// kinds are filtered by the trigger's WHEN (no function call). Runs under
// the migration lock, with search_path = the schema.
std::string CreateEndTriggerSql(std::string_view channel);

}  // namespace once::store::sql
