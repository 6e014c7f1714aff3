// File: event_store.h
//
// The EventStore contract: event-sourced execution logs with fence tokens.
//
// An execution's log is a dense, 1-based sequence of Envelopes. Writers append
// with the sequence they expect to be next; a store refuses a gap or a
// duplicate (kSequenceConflict) and writes nothing.
//
// Fences. A store that fences keeps a token per execution (0 until someone
// acquires). AcquireFence bumps it and returns the new value; from then on a
// guarded append presenting a lower token fails with kStaleFence (detail:
// StaleFenceDetail{presented, current}) and writes nothing. AcquireFenceIf is
// the conditional acquire: atomically, if the token equals expect.fence AND
// no answering event (events::IsAnswering) has a sequence > expect.park_seq,
// bump and return the new token; otherwise return {stale, current} and change
// nothing. AcquireFenceIfReadTail is the same acquire that also returns, read
// in the same atomic step after it, the events past a sequence the caller
// already holds (so a resumer advances its view under the new token without
// a second round trip). AppendIfUnchanged appends only if the token still
// equals the one the caller observed; it never presents or bumps one.
//
//   MemoryEventStore store;
//   AppendRequest req{.execution_id = "order-7", .expected_next = 1,
//                     .events = {events::KernelEvent(KernelKind::kExecutionStarted, {})}};
//   ONCE_ASSIGN_OR_RETURN(int64_t head, store.Append(req));   // head == 1
//   ONCE_ASSIGN_OR_RETURN(int64_t token, store.AcquireFence("order-7"));
//
// Run ownership (kOwnership). A store that offers it keeps, per execution
// whose body is running, the node that runs it (a "run row": the owner and
// since when), in the same atomic step as the events that change it. An
// append that names an owner (AppendRequest::owner) and whose events leave
// the execution running records (or moves) the row to that owner. Any append
// whose events park or end the execution (EXECUTION_SUSPENDED or a terminal
// kind) releases the row, whoever writes it and whatever owner it names or
// not: a run row names a node only while the log says its run runs. (A store
// may release without a write: PostgreSQL reads a row as released once its
// log holds a park or an end past the run's start; store_postgres/src/sql.h.)
// A conditional acquire that names an owner records it with the new token,
// and one that names an expected owner succeeds only if the run row still
// names it (takeover: claim a dead node's run, and no one else's). Other
// appends and acquires that name no owner leave the row alone. RunOwnerOf
// reads it; DeleteExecution deletes it.
// The runtime and the node registry (components/nodes) build leases and takeover on this.
//
// Transactional appends (kTransaction). AppendInTransaction runs caller's
// SQL (sql_transaction.h) in the store's own write transaction, then the
// append, and commits both or neither: a fenced-out writer's SQL effects
// roll back with its events. The runtime's Context::Transaction (exactly-once
// steps) is built on it. SQL backends offer it; the memory store refuses it.
//
// Optional capabilities. Every implementation decides each of them at compile
// time: a backend implements it or refuses it (kUnsupported) and says which in
// Supports(); a decorator derives from EventStoreWrapper<Self, Decisions>,
// whose Decisions must name every capability (see wrapper.h), or it does not
// build.
//
// Threads: every method may be called from any thread at any time.
// Bad input (invalid id, kind, JSON shape, a size over Limits) is refused with
// kInvalidArgument / kLimitExceeded and writes nothing.

#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"
#include "once/events/envelope.h"
#include "once/store/sql_transaction.h"

namespace once::store {

using events::Envelope;
using events::Json;

inline constexpr size_t kJsonDepthMaxDefault = 512;
// The most executions one DeleteEnded deletes in its one transaction (the
// default of Limits::delete_batch_executions_max).
inline constexpr size_t kRetentionBatchExecutionsMax = 1'000;

// Named limits. Units last.
struct Limits {
  size_t execution_id_bytes_max = 255;
  size_t kind_bytes_max = 128;
  size_t event_bytes_max = 1 << 20;         // payload + metadata, serialized JSON
  size_t batch_bytes_max = 16 << 20;        // all events of one Append / AppendBatch
  size_t batch_events_max = 10'000;         // events in one Append / AppendBatch
  size_t batch_executions_max = 1'024;      // requests in one AppendBatch
  size_t read_events_max = 10'000;          // events one ReadRange returns at most
  size_t list_page_executions_max = 1'000;  // ids one ListExecutions / ListEnded returns at most
  size_t delete_batch_executions_max = kRetentionBatchExecutionsMax;  // ids one DeleteEnded takes
  // Containers nested inside each other in a payload or in metadata
  // (events::JsonDepthWithin: deeper trees crash recursive code). Keep it in
  // the thousands at most: checks walk this deep on the thread's stack.
  size_t json_depth_max = kJsonDepthMaxDefault;
  // kTransaction (sql_transaction.h): one statement's text, its bound
  // parameters, the statements of one transaction, and what one statement
  // returns (rows; bytes of their values in text form).
  size_t sql_statement_bytes_max = 64 << 10;
  size_t sql_params_max = 1'000;
  size_t sql_statements_max = 1'000;
  size_t sql_result_rows_max = 10'000;
  size_t sql_result_bytes_max = 16 << 20;
};

inline constexpr int64_t kToEnd = std::numeric_limits<int64_t>::max();

// One append to one execution. events[i] gets sequence expected_next + i
// (an event whose sequence is already set must carry exactly that value) and,
// when its time_ms is 0, the store's clock.
struct AppendRequest {
  std::string execution_id;
  int64_t expected_next = 1;
  std::vector<Envelope> events;
  // The token this append is made under. A store that fences refuses it with
  // kStaleFence when its token is greater. nullopt: an unguarded audit append
  // (EXECUTION_DENIED is written this way) that no fence refuses.
  std::optional<int64_t> fence = 0;
  // kOwnership: the node this append is made by (see above); empty: the run
  // row is left alone. Must outlive the call (a node's id does).
  std::string_view owner;
};

struct FenceExpectation {
  int64_t fence = 0;     // the token the park was written under (metadata.fence, or 0)
  int64_t park_seq = 0;  // the park's sequence
  // kOwnership: the node taking the fence; on success the run row names it
  // (empty: the row is left alone). Must outlive the call.
  std::string_view owner;
  // kOwnership: succeed only if the run row names this owner now (""
  // names "no run row"); nullopt: whatever the row says. Must outlive the call.
  std::optional<std::string_view> expected_owner;
};

// A run row (kOwnership): who runs the execution's body, since when (the
// store's clock: the database's on PostgreSQL).
struct RunOwner {
  std::string owner;
  int64_t since_ms = 0;
};

struct ConditionalAcquire {
  bool stale = false;  // true: nothing changed
  int64_t fence = 0;   // the new token, or (stale) the current one
};

// AcquireFenceIfReadTail's answer: the acquire, and the events with sequence
// > read_after as of the acquire (ascending, at most limits().read_events_max;
// page on with ReadRange). Read in both outcomes: on success it is the view
// under the new token; on {stale, current} it shows what moved the park.
struct AcquireWithTail {
  ConditionalAcquire acquire;
  std::vector<Envelope> tail;
};

// One conditional acquire of AcquireFencesIfReadTail: the arguments of one
// AcquireFenceIfReadTail call (the views must outlive the call).
struct AcquireIfRead {
  std::string_view execution_id;
  FenceExpectation expect;
  int64_t read_after = 0;
};

// The work of AppendInTransaction, by non-owning reference (no heap):
// Result<AppendRequest>(SqlTransaction&).
class TransactionWorkRef {
 public:
  template <class F>
  TransactionWorkRef(F& f)  // NOLINT: implicit on purpose, like a function_ref
      : obj_(&f), call_([](void* o, SqlTransaction& sql) -> Result<AppendRequest> {
          return (*static_cast<F*>(o))(sql);
        }) {}
  Result<AppendRequest> operator()(SqlTransaction& sql) const { return call_(obj_, sql); }

 private:
  void* obj_;
  Result<AppendRequest> (*call_)(void*, SqlTransaction&);
};

struct ExecutionPage {
  std::vector<std::string> execution_ids;  // ascending byte order
  std::string next_after;                  // pass as `after` for the next page; empty at the end
};

// A place in ListEnded's order: ascending by (kind, ended_ms, execution_id),
// kinds and ids compared by bytes. The default value is before every
// execution (no kind name is empty).
struct EndedCursor {
  std::string kind;  // a terminal kernel kind's name
  int64_t ended_ms = 0;
  std::string execution_id;
  auto operator<=>(const EndedCursor&) const = default;
};

// An execution that ended: its terminal event's kind and time_ms.
struct EndedExecution {
  std::string execution_id;
  std::string kind;
  int64_t ended_ms = 0;
  EndedCursor Place() const { return {kind, ended_ms, execution_id}; }
  bool operator==(const EndedExecution&) const = default;
};

struct EndedPage {
  std::vector<EndedExecution> executions;  // in EndedCursor order
  std::optional<EndedCursor> next_after;   // pass as `after` for the next page; nullopt at the end
};

// The kinds ListEnded and DeleteEnded count as an ending, in byte order:
// the terminal kernel kinds (events::KernelKindInfo::terminal).
std::span<const std::string_view> EndingKindNames();

enum class Capability : uint8_t {
  kAcquireFence,            // AcquireFence, ReadFence, and the append guard
  kAcquireFenceIf,          // the conditional acquire
  kAppendIfUnchanged,       // append only if the observed token is current
  kCopyPrefix,              // copy a log's prefix to a new execution
  kTruncatePrefixKeeping,   // drop a log's prefix, keep the rest
  kAcquireFenceIfReadTail,  // the conditional acquire returning the tail past a sequence
  kOwnership,               // run rows: AppendRequest::owner, FenceExpectation::owner, RunOwnerOf
  kTransaction,             // AppendInTransaction: SQL work committed with an append
  kCount,
};
inline constexpr size_t kCapabilityCount = static_cast<size_t>(Capability::kCount);
std::string_view CapabilityName(Capability c);

class EventStore {
 public:
  virtual ~EventStore() = default;
  EventStore() = default;
  EventStore(const EventStore&) = delete;
  EventStore& operator=(const EventStore&) = delete;

  // ---- Core -----------------------------------------------------------------

  // Appends req.events atomically (all or none). Returns the new head.
  // Errors: kSequenceConflict (expected_next != head + 1), kStaleFence,
  // kInvalidArgument, kLimitExceeded, kUnavailable.
  virtual Result<int64_t> Append(const AppendRequest& req) = 0;

  // Group commit: all requests in ONE transaction, each guarded on its own.
  // A request refused by its guard or its sequence fails alone (its Status in
  // the result) and writes nothing; the others commit. Each execution may
  // appear at most once (else the whole batch is kInvalidArgument). The outer
  // error means nothing was written. Element i is the new head or the error.
  virtual Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const AppendRequest> requests) = 0;

  // Events with first <= sequence <= last, ascending, at most
  // limits().read_events_max of them (page by calling again). An unknown
  // execution reads as empty.
  virtual Result<std::vector<Envelope>> ReadRange(std::string_view execution_id, int64_t first,
                                                  int64_t last = kToEnd) = 0;

  // The highest sequence, 0 for an empty or unknown execution.
  virtual Result<int64_t> Head(std::string_view execution_id) = 0;

  // Ids of executions with at least one event, ascending, strictly after
  // `after`, at most `limit` (capped by limits().list_page_executions_max).
  // A limit of 0 is kInvalidArgument.
  virtual Result<ExecutionPage> ListExecutions(std::string_view after, size_t limit) = 0;

  // Removes the execution's events. Its fence token survives when it was ever
  // acquired (so a zombie writer of a re-created id stays fenced out); a
  // token-0 row is removed. Deleting an unknown execution is Ok.
  virtual Status DeleteExecution(std::string_view execution_id) = 0;

  // ---- Retention ------------------------------------------------------------

  // Executions with an ending event (EndingKindNames) whose time_ms <=
  // ended_ms_max, strictly after `after` in EndedCursor order, at most
  // `limit` (capped by limits().list_page_executions_max); one entry per
  // ending event (an execution that ended twice is listed twice). A page
  // costs its own rows, not the store's size: the SQL stores read their
  // indexes of status events (docs/event-store.md). A caller that fixes
  // ended_ms_max at the start of a pass sees an end: executions that end
  // later are never listed, however many keep arriving. Pages are not one
  // snapshot: an execution deleted or ended meanwhile may or may not show.
  // A limit of 0 is kInvalidArgument.
  virtual Result<EndedPage> ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                                      size_t limit) = 0;

  // Deletes, as DeleteExecution does (the acquired token survives, the run
  // row goes), every listed execution that has an ending event with time_ms
  // <= ended_ms_max, all in ONE transaction (a SQL store's write lock is
  // held for one batch: keep batches small where other writers wait on it).
  // Element i answers execution_ids[i]: Ok (deleted); kInvalidArgument (a
  // malformed id, as DeleteExecution refuses it); kNotFound (no ending event
  // at or before ended_ms_max: unknown, already deleted, still running, or
  // deleted and started again under the same id). A refused execution is
  // left as it is; the others are deleted. The whole call is refused, and
  // nothing deleted, when it names more than
  // limits().delete_batch_executions_max ids (kLimitExceeded) or one id
  // twice (kInvalidArgument), or with the outer error of a failed
  // transaction (kUnavailable, kBusy, ...). The memory store and the sharded
  // decorator are atomic per execution only.
  virtual Result<std::vector<Status>> DeleteEnded(std::span<const std::string> execution_ids,
                                                  int64_t ended_ms_max) = 0;

  virtual const Limits& limits() const = 0;

  // How many AppendBatch calls running at once give more throughput than
  // one: the group commit's default flushes in flight
  // (CommitterOptions::flushes_in_flight_max). 1 for a store with one writer
  // (SQLite, memory); PostgreSQL runs each batch on its own connection and
  // its commits share the WAL's flushes (PostgresOptions). >= 1.
  virtual size_t AppendBatchesInFlightUseful() const { return 1; }

  // Whether concurrent appends gain from sharing one store write (the
  // runtime's group commit, Committer): true for a store whose append is a
  // durable write, which appends grouped together pay once (SQLite,
  // PostgreSQL); false for one with no durable write to share (the memory
  // store), where handing appends to a flush only adds waits and wake-ups.
  // Decorators answer what the store they wrap answers.
  virtual bool GroupCommitUseful() const { return true; }

  // ---- Optional capabilities (kUnsupported when refused) -------------------

  virtual bool Supports(Capability c) const = 0;

  // Bumps and returns the execution's token (the first acquire returns 1).
  virtual Result<int64_t> AcquireFence(std::string_view execution_id) = 0;
  // The current token, 0 if never acquired. Part of kAcquireFence.
  virtual Result<int64_t> ReadFence(std::string_view execution_id) = 0;

  // The conditional acquire described above. One atomic step.
  virtual Result<ConditionalAcquire> AcquireFenceIf(std::string_view execution_id,
                                                    FenceExpectation expect) = 0;

  // AcquireFenceIf(id, expect) and ReadRange(id, read_after + 1) as ONE
  // atomic step: no append lands between the acquire and the read. A store
  // supports it only if it supports kAcquireFenceIf. Errors: those of
  // AcquireFenceIf; read_after < 0 is kInvalidArgument.
  virtual Result<AcquireWithTail> AcquireFenceIfReadTail(std::string_view execution_id,
                                                         FenceExpectation expect,
                                                         int64_t read_after) = 0;

  // AcquireFenceIfReadTail for each request, answered in request order: a
  // batch of resumes (a timer poll's fired rows) takes its tokens in one
  // call. Each answer is the one its own call would give in some serial
  // order of the requests (two requests of one execution: the later sees
  // the earlier's bump), and each request fails alone on its own arguments
  // (kInvalidArgument). A store may run the batch as one round trip and one
  // commit (PostgreSQL, SQLite); then an error of that commit (kUnavailable,
  // kBusy, ...) is every request's answer. Part of kAcquireFenceIfReadTail:
  // a store without it answers each request kUnsupported. The default makes
  // the calls one at a time.
  virtual std::vector<Result<AcquireWithTail>> AcquireFencesIfReadTail(
      std::span<const AcquireIfRead> requests);

  // Appends only if the token is still `observed_fence`; otherwise
  // kStaleFence and nothing is written. req.fence is ignored.
  virtual Result<int64_t> AppendIfUnchanged(const AppendRequest& req, int64_t observed_fence) = 0;

  // Copies events 1..through of `from` to the empty execution `to` (same
  // sequences, kinds, payloads, metadata, times). kSequenceConflict if `to`
  // has events; kInvalidArgument if `from` has fewer than `through` events.
  virtual Status CopyPrefix(std::string_view from, std::string_view to, int64_t through) = 0;

  // Deletes the events with sequence < first_kept; later sequences keep their
  // numbers and the head does not move. The newest event always stays:
  // first_kept is clamped to the head, so a first_kept past the head leaves
  // exactly the head event (the log is never emptied this way; only
  // DeleteExecution removes a log). An unknown execution is Ok.
  virtual Status TruncatePrefixKeeping(std::string_view execution_id, int64_t first_kept) = 0;

  // kOwnership: the execution's run row, or nullopt when it has none (its
  // body is not known to run anywhere).
  virtual Result<std::optional<RunOwner>> RunOwnerOf(std::string_view execution_id) = 0;

  // kTransaction: opens a write transaction on the store's own database,
  // runs work(sql) (its statements read and write that database:
  // sql_transaction.h), then appends the request work returns exactly as
  // Append would (validation, limits, fence guard, sequence, run row), and
  // commits both at once. Nothing is committed, neither work's writes nor
  // the events, when work returns an error (returned as it is), when the
  // append is refused (kStaleFence, kSequenceConflict, kInvalidArgument,
  // ...) or when anything else fails. The request must name execution_id
  // (else kInvalidArgument). Work runs on the calling thread while the
  // store's writer is held: keep it short, and never call the store from it.
  virtual Result<int64_t> AppendInTransaction(std::string_view execution_id,
                                              TransactionWorkRef work) = 0;
};

// What an accepted request does to its run row: kEnd (its events park or
// end the execution: the row is released, whoever appends) or kRun (the row
// names the request's owner, if it names one; else it stays as it is).
enum class RunRowChange : uint8_t { kRun, kEnd };
RunRowChange RunRowChangeOf(std::span<const Envelope> events);
// Whether an event of this kernel kind parks or ends its execution (the
// kinds RunRowChangeOf releases on).
bool EndsRun(events::KernelKind kind);

// The error an implementation returns for a capability it refuses.
std::unexpected<Error> Unsupported(Capability c, std::string_view store_name);

}  // namespace once::store
