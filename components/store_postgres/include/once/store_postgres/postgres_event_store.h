// File: postgres_event_store.h
//
// PostgresEventStore: the scale-out EventStore. Many nodes share one
// PostgreSQL database; the fence tokens in it make that safe. It offers every
// optional capability. libpq, raw SQL, prepared statements.
//
//   PostgresOptions options;
//   options.conninfo = "postgresql://postgres@127.0.0.1:5432/loom";
//   options.schema = "loom";                    // created if missing
//   SystemClock clock;
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<PostgresEventStore> store,
//                         PostgresEventStore::Open(options, clock));
//   ONCE_ASSIGN_OR_RETURN(int64_t head, store->Append(req));
//
// Tables (in options.schema): events(execution_id, sequence, kind, payload
// text, metadata text, time_ms), fences(execution_id, token, owner,
// since_ms: the run row, NULL when no body runs it; no index on the owner)
// and loom_nodes (run ownership and the node registry, docs/nodes.md;
// since_ms is the server's clock) and
// once_schema(name, value), the schema version and one-time markers. Payload
// and metadata are the client's JSON text, stored as written (the client
// validated it), so a read returns exactly the JSON that was appended. Open()
// migrates under pg_advisory_xact_lock(kMigrationLockKey), idempotently;
// schema version 2 turned version 1's metadata jsonb column into text.
//
// Concurrency. Every method may be called from any thread; each checks a
// connection out of a bounded pool (connections_max; a checkout that waits
// longer than checkout_timeout_ms is kBusy). The fence row orders everything
// that must not interleave: an append whose events answer a park
// (events::IsAnswering) reads it FOR SHARE, AcquireFenceIf /
// AppendIfUnchanged take it FOR UPDATE, DeleteExecution updates it (a new
// version of the row, token unchanged; see Plans), and a park
// (EXECUTION_SUSPENDED) creates the execution's token-0 row so that there is
// a row to lock before anyone answers or acquires.
//
// Plans. The pool's connections run with plan_cache_mode =
// force_generic_plan and enable_seqscan = off: every statement is index probes
// keyed by its parameters, planned once per connection. The append binds its
// arrays in binary form; its head check probes from expected_next - 1 and
// reads max(sequence) only for a request that does not fit. An append that
// neither answers a park, parks nor compares tokens exactly (the common
// case) runs one pass over its events and leaves the duplicate check (a row
// at expected_next) to the primary key: such a batch is then replayed request
// by request in one transaction, so that only the duplicate fails. In a
// batch of at least 8 requests that pass also skips the predecessor probe of
// an execution whose last append this store made (append_hints_max), as
// long as the execution's fence row is
// still the version read then: rows leave a log only through
// DeleteExecution, which writes a new version of the fence row, and
// TruncatePrefixKeeping, which keeps the newest row. (An operator who deletes
// events by hand must renew the fence row the same way, or restart stores.)
//
// Errors. A lost connection is kUnavailable and the connection is discarded;
// serialization failures and deadlocks (40001, 40P01) are kBusy; lock and
// statement timeouts (55P03, 57014) are kTimeout; data the server refuses
// (class 22) is kInvalidArgument; anything else is
// kInternal with the SQLSTATE in the message.

#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/store/event_store.h"
#include "once/store/validate.h"

namespace once::store {

struct PostgresOptions {
  // A libpq connection string or URL.
  std::string conninfo;
  // The schema that holds the tables; created if missing. Every connection
  // sets search_path to it (tests use one random schema each).
  std::string schema = "public";
  size_t connections_max = 16;
  // Fence acquire groups (see AcquireFence) running at once, each on its own
  // pooled connection; >= 1. Callers arriving while this many run queue for
  // the next group. One is the default: a group's cost is mostly per
  // statement and per commit, so while one group runs the next one grows
  // (64 concurrent park/resume executions on 2 cores: 1 in flight 6,200/s,
  // 4 in flight 4,115/s; BENCHMARKS.md). Raise it when the server has cores
  // to spare and the commit latency, not CPU, bounds the rate.
  size_t acquire_groups_in_flight_max = 1;
  // Read groups (see ReadRange) running at once, each on its own pooled
  // connection; >= 1. One by default, for the same reason.
  size_t read_groups_in_flight_max = 1;
  // What AppendBatchesInFlightUseful() answers, at most connections_max:
  // the group commit's default flushes in flight on this store; >= 1. Unlike an
  // acquire group, an append batch is one statement and one commit, and two
  // of them overlap one's commit with the other's statement (the WAL
  // flushes one for both when they meet). 64 unfenced executions in flight
  // on 2 cores: 1 in flight 28,800-34,700/s, 2 in flight 33,500-40,700/s, 3
  // and 4 no better than 2 (BENCHMARKS.md, "Two flushes in flight").
  size_t append_batches_in_flight = 2;
  int64_t checkout_timeout_ms = 5'000;
  // How long Open() waits for the migration lock and the table locks.
  int64_t migration_lock_timeout_ms = 10'000;
  // Open() inserts, once, the token-0 fence row of every execution that is
  // parked and unanswered (logs written before parks created their row).
  // Large installations set false and run BackfillParkFences() offline.
  bool backfill_park_fences = true;
  // Executions whose newest appended row the store remembers, with the
  // version of their fence row it was appended under; >= 0, 0 turns it off.
  // The next lean append of such an execution in an AppendBatch of at least
  // 8 requests skips the probe of its predecessor when the fence row is
  // still that version (see Plans; smaller appends do not use hints). A
  // full table is cleared (those executions probe once and are learned
  // again); an entry is about 100 bytes plus the id.
  size_t append_hints_max = 16'384;
  Limits limits;
  // TEST ONLY: answering appends skip the FOR SHARE read of the fence row.
  // This reopens the append-vs-AcquireFenceIf race; the race tests use it to
  // show that they catch it. Never set it in production.
  bool testing_disable_for_share = false;
};

// Schema version 6 stores a run of one append's events as one row of the
// events table (docs/event-store.md): its first event in (sequence, kind,
// payload, metadata, time_ms), its last in (last_sequence, end_kind,
// end_payload, end_metadata, end_time_ms) and the ones between in `rest`.
// The columns in that order, after execution_id, for a COPY of whole rows:
inline constexpr std::string_view kPostgresEventRowColumns =
    "sequence, kind, payload, metadata, time_ms, last_sequence, end_kind, end_payload, "
    "end_metadata, end_time_ms, rest";
// The `rest` text of a stored row whose events are `row` (first to last);
// nullopt (NULL) for a row of one or two events.
std::optional<std::string> PostgresRestColumn(std::span<const EncodedEvent> row);

// The schema version this build writes (once_schema row 'version'); a
// database with a higher one is refused with kUnsupported. Version 7 kept
// version 6's rows and gave a paired row one status-index entry
// (status_index.h).
inline constexpr int64_t kPostgresSchemaVersion = 7;

// From this schema version a park or an end leaves the owner in its fences
// row and the log releases it: a row names a running owner only under
// PostgresRunningOwnerSql. Read-only tools that query the schema themselves
// (visibility) must use it; before it, `owner IS NOT NULL` was the rule.
inline constexpr int64_t kPostgresLazyReleaseVersion = 5;

// The SQL condition (over the fences row aliased `alias`, with `events` in
// the search path) under which that row names a run that still runs.
std::string PostgresRunningOwnerSql(std::string_view alias);

// The key of the migration's pg_advisory_xact_lock.
inline constexpr int64_t kMigrationLockKey = 0x6f6e63655f6d6967;  // "once_mig"

namespace pg {
class ConnectionPool;
class AcquireGroup;
struct AcquireOp;
class ReadGroup;
class AppendHints;
}  // namespace pg

// Fence acquire group commit counters of one store; for diagnostics and tests.
struct PostgresAcquireStats {
  uint64_t commits = 0;     // group transactions committed (one that found none of its
                            // rows, all then made by an ensure round, wrote nothing: not counted)
  uint64_t acquires = 0;    // acquires answered by those commits
  uint64_t largest = 0;     // acquires in the largest group (at most kAcquireGroupMax)
  uint64_t replays = 0;     // groups replayed under savepoints after a statement failed
  uint64_t group_wide = 0;  // groups run as group-wide statements (distinct conditional acquires)
  // Second transactions for conditional acquires whose fence row did not
  // exist yet (never parked, never acquired): made, then acquired.
  uint64_t ensure_rounds = 0;
};

// Acquires (AcquireFence, AcquireFenceIf, AcquireFenceIfReadTail) in one
// group transaction at most. 128 is two of a timer service's batches of
// wakes (TimerServiceOptions::wake_batch_max, 64): while one group runs, the
// batches of two firing threads gather into the next, one pipeline and one
// commit (64 before 2026-12-03: a burst of 100,000 timers on PostgreSQL woke
// with a lower p99 and less CPU at 128, BENCHMARKS.md "Timers in bursts").
// It is more than the runtime throughput harness's 64 executions in flight
// (one wave of resumes fits one commit), and bounds a group's pipeline (at
// most 4 statements per acquire) and the time its rows stay locked; larger
// waves take several groups, one after another.
inline constexpr size_t kAcquireGroupMax = 128;

// ReadRange calls answered by one grouped statement at most: one wave of the
// harness's 64 executions; the rows of a group are at most kReadGroupMax *
// Limits::read_events_max.
inline constexpr size_t kReadGroupMax = 64;

// Read group counters of one store; for diagnostics and tests.
struct PostgresReadStats {
  uint64_t groups = 0;   // grouped statements run
  uint64_t reads = 0;    // ReadRange calls they answered
  uint64_t largest = 0;  // reads in the largest group (at most kReadGroupMax)
};

// Append hint counters of one store (append_hints_max); for diagnostics and
// tests.
struct PostgresAppendStats {
  uint64_t hinted = 0;        // lean requests sent with a fence row version
  uint64_t learned = 0;       // fence row versions learned from append statements
  uint64_t hint_entries = 0;  // executions remembered now (at most append_hints_max)
  uint64_t hint_clears = 0;   // times the full table was cleared
  // Lone appends (one request of one event, no run row) of Append and
  // AppendBatch: landed by a bare INSERT under the guard (one statement, no
  // verdict read), or refused by it and then answered by the statement that
  // reads the verdict (a second statement, only when the first inserted
  // nothing).
  uint64_t lone_landed = 0;
  uint64_t lone_refused = 0;
};

class PostgresEventStore final : public EventStore {
 public:
  // Connects, migrates (and backfills, unless disabled). `clock` stamps
  // events whose time_ms is 0 and must outlive the store.
  static Result<std::unique_ptr<PostgresEventStore>> Open(const PostgresOptions& options,
                                                          const Clock& clock);
  ~PostgresEventStore() override;

  Result<int64_t> Append(const AppendRequest& req) override;
  // One statement, one round trip: per-execution verdicts (fence, sequence)
  // are computed and only the accepted rows inserted. A race that the
  // primary key catches (23505) replays the batch request by request under
  // savepoints in one transaction.
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const AppendRequest> requests) override;
  // Reads share round trips. Concurrent calls of one store are grouped
  // (leader/follower, at most kReadGroupMax a group, at most
  // read_groups_in_flight_max groups at once) into one statement on one
  // pooled connection; a call on an idle store runs at once, alone. Each call
  // sees every append committed before it began. A failed statement or a
  // lost connection fails every call of its group with that error.
  Result<std::vector<Envelope>> ReadRange(std::string_view id, int64_t first,
                                          int64_t last) override;
  Result<int64_t> Head(std::string_view id) override;
  Result<ExecutionPage> ListExecutions(std::string_view after, size_t limit) override;
  Status DeleteExecution(std::string_view id) override;
  Result<EndedPage> ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                              size_t limit) override;
  Result<std::vector<Status>> DeleteEnded(std::span<const std::string> execution_ids,
                                          int64_t ended_ms_max) override;
  const Limits& limits() const override { return options_.limits; }
  size_t AppendBatchesInFlightUseful() const override;

  bool Supports(Capability) const override { return true; }
  // Acquires share commits. Concurrent AcquireFence, AcquireFenceIf and
  // AcquireFenceIfReadTail calls of one store are grouped (leader/follower,
  // at most kAcquireGroupMax a group, at most acquire_groups_in_flight_max
  // groups at once): one pooled connection, one libpq
  // pipeline, one READ COMMITTED transaction and one commit for the group,
  // fence rows locked in execution-id order (no deadlock between groups).
  // Each call's verdict is the one a transaction of its own would give in
  // some serial order; a call that fails (e.g. kBusy after a deadlock with an
  // unordered locker) is rolled back under its own SAVEPOINT and fails alone,
  // the others commit. A lost connection or a failed COMMIT fails every call
  // of the group (kUnavailable / kBusy), as it would a lone call.
  Result<int64_t> AcquireFence(std::string_view id) override;
  Result<int64_t> ReadFence(std::string_view id) override;
  // One round trip for the group: per call, prepared statements in the
  // group's pipeline (after SET TRANSACTION ISOLATION LEVEL READ COMMITTED):
  // SELECT ... FOR UPDATE; a conditional UPDATE whose NOT EXISTS scan runs on
  // a fresh snapshot taken after the row lock was granted. A row the SELECT
  // does not find (never parked, never acquired) is made (INSERT ... ON
  // CONFLICT DO NOTHING) and acquired in a second transaction of the group;
  // an acquire naming no park (park_seq 0) makes its row first.
  Result<ConditionalAcquire> AcquireFenceIf(std::string_view id, FenceExpectation expect) override;
  // The same statements with one more, the tail SELECT: still the group's
  // round trip and transaction, read inside the row lock.
  Result<AcquireWithTail> AcquireFenceIfReadTail(std::string_view id, FenceExpectation expect,
                                                 int64_t read_after) override;
  // The batch's acquires queue together in the acquire groups (above): up
  // to kAcquireGroupMax share a pipeline and a commit.
  std::vector<Result<AcquireWithTail>> AcquireFencesIfReadTail(
      std::span<const AcquireIfRead> requests) override;
  Result<int64_t> AppendIfUnchanged(const AppendRequest& req, int64_t observed) override;
  Status CopyPrefix(std::string_view from, std::string_view to, int64_t through) override;
  // Deletes sequences < first_kept but always keeps the newest event, so
  // that the head (max(sequence)) does not move.
  Status TruncatePrefixKeeping(std::string_view id, int64_t first_kept) override;
  // BEGIN on a pooled connection; the work's statements with the extended
  // protocol (one statement each, parameters bound as text); then the
  // append with its fence row locked FOR SHARE; COMMIT. The work's SQL runs
  // in the store's schema (search_path) with sequential scans allowed.
  Result<int64_t> AppendInTransaction(std::string_view id, TransactionWorkRef work) override;
  Result<std::optional<RunOwner>> RunOwnerOf(std::string_view id) override;

  PostgresAcquireStats AcquireStats() const;
  PostgresReadStats ReadStats() const;
  PostgresAppendStats AppendStats() const;

 private:
  PostgresEventStore(PostgresOptions options, const Clock& clock,
                     std::unique_ptr<pg::ConnectionPool> pool);
  // One AcquireFenceIfReadTail's op for the acquire groups, its arguments
  // checked (kInvalidArgument) and the execution's append hint dropped.
  Result<pg::AcquireOp> TailAcquireOp(const AcquireIfRead& request);

  PostgresOptions options_;
  const Clock& clock_;
  std::unique_ptr<pg::ConnectionPool> pool_;
  std::unique_ptr<pg::AcquireGroup> acquire_group_;  // uses pool_
  std::unique_ptr<pg::ReadGroup> read_group_;        // uses pool_
  std::unique_ptr<pg::AppendHints> append_hints_;
};

// The offline park-fence backfill for installations that opened with
// backfill_park_fences = false: builds a partial index on parks with CREATE
// INDEX CONCURRENTLY, walks executions in id order, batch_executions at a
// time, inserting token-0 fence rows ON CONFLICT DO NOTHING (resumable,
// idempotent), writes the marker and drops the index. Returns how many
// executions it found parked and unanswered.
Result<int64_t> BackfillParkFences(const PostgresOptions& options,
                                   int64_t batch_executions = 1'000);

}  // namespace once::store
