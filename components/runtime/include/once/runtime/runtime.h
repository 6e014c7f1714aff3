// File: runtime.h
//
// Runtime: durable workflows over any EventStore. A workflow is a named body
// (see context.h); an execution is one run of it with an id, recorded as an
// event-sourced log. The runtime starts executions, replays them from their
// logs, parks and resumes them, and takes fence tokens so that at most one
// writer resumes a park (design record D2).
//
//   MemoryEventStore store;
//   SystemClock clock;
//   Runtime rt(store, clock, {.workers = 8});
//   rt.Register("order", [](Context& ctx, const Json& in) -> Result<Json> {
//     ONCE_ASSIGN_OR_RETURN(Json r, ctx.Step("charge", [&]() -> Result<Json> { return in; }));
//     return r;
//   });
//   Result<RunOutcome> out = rt.Start("order", "order-7", Json{{"amount", 3}});
//   // later, when a timer / child / message answers the park:
//   rt.Resume("order-7", RunOptions{.fence_if_parked_at = out->park_seq});
//
// Resume under fences (RunOptions):
//   * fence_if_parked_at (the park's sequence, from LocatePark /
//     ParkedAtSequence) takes precedence: the park envelope is read (from the
//     events in hand, else one range read), its metadata.fence (or 0) is the
//     expected token, the acting principal is fixed, and the fence is taken
//     LAST with AcquireFenceIf(id, {fence, park_seq}). On {stale, current} the
//     park is re-read; if it is still the same unanswered park the acquire is
//     retried with {current, park_seq}; after resume_attempts_max (3) stale
//     answers the result is kResumeContended (retryable, detail attempts).
//     A park that is gone, answered or not a park: kResumeRefused reason
//     "not-suspended", nothing appended and no token taken. Under the token
//     the tail is read, the resumable check re-run on the advanced view, and
//     the body executes on that view. On a store with
//     AcquireFenceIfReadTail the tail comes back with the token (the same
//     atomic step, one round trip); otherwise it is one more range read. A store without
//     AcquireFenceIf: plain AcquireFence. A store that does not fence: the options are ignored.
//     With park_fence (the park's token, from the outcome that parked) the
//     resume answers first (RuntimeOptions::resume_answers_first): it reads
//     the log, checks the park, and runs the body under the park's own token
//     (its metadata.fence) with no acquire. The body's first append, which
//     is made before its first effect (a step, a child, a continuation) and
//     carries the answer (EXECUTION_RESUMED), lands only if the token is
//     still the park's and the log still ends at the park: the condition
//     the acquire would have checked, in the append the resume makes
//     anyway, so a resume costs one commit less. Refused (a rival answered,
//     acquired, or a dead acquirer moved the token), nothing of this resume
//     is durable and no effect ran: an answered park is kResumeRefused
//     "not-suspended", a park still open goes on with the conditional
//     acquire above. The token is not bumped, so a resume that parks again
//     parks under the same token (models/fence_resumer.pmh, the
//     answer-first checks). With resume_answers_first off the acquire goes
//     first and the log comes back with it: no read before it.
//   * fence: resume under a token already held (no acquire).
//   * neither: the run presents token 0 (an execution someone fenced refuses
//     it with kStaleFence, which a caller may answer with fence_if_parked_at).
//
// Nodes (RuntimeOptions::node; docs/nodes.md). With a node, what this
// runtime starts or resumes is owned by it: the run row names the node in
// the same store step as the first append that leaves the execution running
// or the conditional acquire of a resume, and is deleted by the append that
// parks or ends it. Every Step waits for the node's step gate (a node whose
// heartbeat is late starts no step). Takeover() re-drives what dead nodes
// left running (and this node's own runs no body here is running), claiming
// each with the conditional acquire that expects the dead owner, so it is
// safe from every node at once. This node's own runs are looked for (a scan
// of the run rows naming it) only when some may be left: at its first
// Takeover, after its lease lapsed (a new epoch), and after a body or a
// resume or claim ended without releasing a run row it recorded (an error,
// a task dropped unrun, any error reported to on_error); Recover's full pass
// finds whatever else. Recover() is the full pass (every log): it
// leaves alone a run whose owner is alive and an ownerless run younger than
// ownerless_lease_ms, takes over the rest, and answers parks whose children
// are done. Without a node Recover judges by run rows alone: a run another
// node owns is left to that node's peers, an ownerless one is re-driven only
// when its newest event is older than ownerless_lease_ms.
//
// AnswerPark is the one way to answer a park (the timer waker, the child
// supervisor, the inbox and the runtime's own parent notification use it):
// optionally an unfenced try first, then resumes under the conditional
// acquire, all within ONE budget of acquires (attempts_max), on the same
// park only (a park a rival answered is noop: the answer was meant for it);
// the verdict is resumed | noop (a rival answered, or the park is gone) |
// contended.
//
// Start refuses what the store is certain to refuse (an invalid id, a start
// event over event_bytes_max or nested past json_depth_max, a malformed
// parent: kInvalidArgument / kLimitExceeded) before the body's first step
// runs. A log the runtime cannot read (runtime::Fold's kCorruption) is an
// error of that execution only; Recover quarantines it and goes on.
//
// Errors: kNotFound (unknown workflow), kResumeRefused{reason:
// "unknown-execution" | "terminal" | "not-suspended"}, kResumeContended,
// kNondeterminism, kStaleFence, kSequenceConflict, and the store's errors.
// A body's own failure is not an error of the call: it is RunOutcome kFailed.
//
// Threads: Register before running anything; every other method may be
// called from any thread. With workers == 0 the runtime is inline and
// deterministic: children, parent notifications and continuations run on
// the calling thread after the outermost call's own run, before it returns.

#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/clock.h"
#include "once/base/log_sink.h"
#include "once/base/result.h"
#include "once/base/striped_counter.h"
#include "once/nodes/node.h"
#include "once/runtime/committer.h"
#include "once/runtime/context.h"
#include "once/runtime/log_view.h"
#include "once/runtime/worker_pool.h"
#include "once/store/event_store.h"
#include "once/store/memory_store.h"

namespace once::runtime {

using WorkflowFn = std::function<Result<Json>(Context&, const Json&)>;

struct RuntimeOptions {
  size_t workers = 0;                  // 0: inline (deterministic tests)
  size_t queue_tasks_max = 1'000'000;  // tasks waiting for a worker
  // Appends go through a Committer. Ignored (off) when the store has no
  // durable write to share (EventStore::GroupCommitUseful: a
  // MemoryEventStore, or a decorator over one): each append is then the
  // caller's own store call, and on a bare MemoryEventStore the runtime
  // moves its events straight into the store on the calling thread.
  bool group_commit = true;
  CommitterOptions committer;
  int resume_attempts_max = 3;  // conditional acquires per resume
  // A resume given the park's token (RunOptions::park_fence) answers first:
  // its first append is the conditional step, no acquire before it (see
  // "Resume under fences" above). false: it acquires first, as before.
  bool resume_answers_first = true;
  bool recover_acquires_fence = true;  // Recover takes a token per re-drive
  // Quarantined executions (Recover found their log unreadable) remembered,
  // so that each is reported to on_error once per process; past this many,
  // more are still skipped and listed in the report, but reported each time.
  size_t quarantined_executions_max = 10'000;
  // Failures of background work (child starts, parent notifications).
  std::function<void(const Error&)> on_error;
  // This process as a Loom node (see above); must outlive the runtime. Null:
  // no ownership, no step gate, no Takeover.
  nodes::Node* node = nullptr;
  // Recover re-drives a running execution with no run row only when its
  // newest event is older than this (ms, by this runtime's clock).
  int64_t ownerless_lease_ms = 10'000;
  // Run rows Takeover reads per page.
  size_t takeover_page_max = 1'000;
  // Optional: where the runtime's events worth a log line go (it writes no
  // logs itself): every error it reports to on_error, at warn, component
  // "runtime" (once/base/log_sink.h).
  LogSink log;
  // Optional listeners (orchestration wires them; unset = no-op / built-in).
  // on_park: after a park is durable, with its sequence and envelope, on the
  // thread that ran the body (timer rows, inbox messages that came early).
  std::function<void(const std::string& id, int64_t park_seq, const Envelope& park)> on_park;
  // on_child_settled: a child became terminal; called (as background work)
  // with its EXECUTION_STARTED.parent {execution_id, key} INSTEAD of the
  // runtime's own parent notification, so a ChildSupervisor takes it over.
  std::function<void(const Json& parent)> on_child_settled;
  // on_terminal: an execution became terminal on this runtime (its end is
  // durable): completed, failed, cancelled or continued. On the thread that
  // ended it. (The App completes queue items and wakes Await with it.)
  std::function<void(const std::string& id, ExecutionStatus status)> on_terminal;
};

// What answered a park: one of its waits (or {"type":"children","group":g})
// and the value the waiting call returns.
struct Answer {
  Json wait;
  Json value;
};

struct RunOptions {
  std::optional<int64_t> fence;               // a token already held
  std::optional<int64_t> fence_if_parked_at;  // the park's sequence
  // What answers the park. When absent: the park's timer wait if it has one,
  // else the children's results if they are all terminal, else nothing (the
  // body re-parks).
  std::optional<Answer> answer;
  // With fence_if_parked_at: the token the park was written under, when the
  // caller knows it (RunOutcome::park_fence of the run that parked). On a
  // store with AcquireFenceIfReadTail the resume then answers first (one
  // read, then the run's appends, the first of them conditional: see
  // "Resume under fences") when this is the park envelope's own token; any
  // other value is a token to expect in the conditional acquire, which then
  // goes on with the log read (a wrong one costs one stale acquire). With
  // RuntimeOptions::resume_answers_first off, the conditional acquire goes
  // first and brings the whole log back: no read before it, and on an id
  // with no events it takes a token (which then refuses an unfenced start
  // of that id, as any acquire would). Ignored without fence_if_parked_at,
  // with ResumeWithLog, and on other stores.
  std::optional<int64_t> park_fence;
};

struct StartOptions {
  std::string principal;
  Json parent;  // {"execution_id", "key"} for a child
  std::optional<int64_t> fence;
  Json continued_from;  // the execution this one continues, or null
  // Idempotent start: when `id` already has events, no body runs and the
  // outcome is that execution's state (its status, result or park). One
  // more read (Head) before the body; without it, a Start of an existing id
  // runs the body's first step and is then refused (kSequenceConflict).
  // Two if_absent starts of one id at once in one Runtime run one body: the
  // later waits until the earlier's body has ended or parked, then answers
  // with that state. (Across processes the store's first append decides:
  // the other body may run its first step, and is refused at its record.)
  bool if_absent = false;
};

struct RunOutcome {
  std::string execution_id;
  ExecutionStatus status = ExecutionStatus::kUnknown;  // completed|failed|suspended|...
  Json value;  // completed: the value; failed: {code, message}; continued: {next}
  std::optional<int64_t> park_seq;  // suspended: the park's sequence
  // suspended, by a run of this runtime: the token the park was written
  // under (its metadata.fence), for RunOptions::park_fence
  std::optional<int64_t> park_fence;
};

// The outcome a finished or parked execution's folded state stands for, in
// RunOutcome's terms (a completed execution's value, not its event payload),
// as a body that ran to that point would have returned it.
RunOutcome OutcomeOf(std::string execution_id, const ExecutionState& st);

struct TakeoverReport {
  size_t orphaned = 0;   // run rows of dead owners (and this node's own idle ones) seen
  size_t redriven = 0;   // claimed and run again
  size_t lost = 0;       // another node claimed it first, or its owner moved
  size_t forgotten = 0;  // rows of runs that were no longer running, deleted
  std::vector<Error> errors;
  std::vector<Error> quarantined;  // unreadable logs (see RecoverReport)
};

// AnswerPark's request.
struct ParkAnswer {
  int64_t park_seq = 0;              // the park answered; 0: the open one (read from the log)
  std::optional<Answer> answer;      // nullopt: the park's timer wait, else its children's results
  std::optional<std::string> topic;  // a message delivery: the topic, and
  Json message;                      // the message ([MESSAGE_CONSUMED, EXECUTION_RESUMED])
  // Try an unfenced resume first (the child supervisor's rule: an
  // execution nobody fenced stays unfenced); only a stale fence or a lost
  // sequence goes on to the conditional acquire.
  bool unfenced_first = false;
  int attempts_max = 0;                          // conditional acquires; 0: resume_attempts_max
  std::vector<Envelope>* log_in_hand = nullptr;  // a read of the log (taken over)
  // The token park_seq was written under (its metadata.fence), when the
  // caller knows it without reading the log (a timer row carries it). With
  // park_seq set, no log in hand and no unfenced try, on a store with
  // AcquireFenceIfReadTail the first try answers first (RunOptions::
  // park_fence: one read, then the run's appends, the first of them the
  // conditional step; no token taken); a refused answer with the park still
  // open goes on with the conditional acquire, an answered park is noop.
  // With RuntimeOptions::resume_answers_first off, the first conditional
  // acquire is made BEFORE any read and brings the whole log back under the
  // new token (one round trip, then the run's append); a token it takes for
  // a park it then cannot resume (an unknown workflow) is spent without an
  // append, like a resumer that crashed after its acquire. Otherwise ignored.
  std::optional<int64_t> park_fence;
};

// One park of AnswerParks: a park waiting on a timer, and the token it was
// written under (a timer row carries both).
struct ParkWake {
  std::string execution_id;
  int64_t park_seq = 0;
  int64_t park_fence = 0;
};

enum class ParkVerdict { kResumed, kNoop, kContended };

struct ParkAnswered {
  ParkVerdict verdict = ParkVerdict::kNoop;
  std::optional<RunOutcome> outcome;  // kResumed: the run's outcome
  int conditional_resumes = 0;        // resumes made under the conditional acquire
  int attempts = 0;                   // acquires spent
};

struct Park {
  int64_t sequence = 0;
  Envelope envelope;
};

struct RecoverReport {
  size_t examined = 0;
  size_t redriven = 0;    // running executions claimed and run again
  size_t notified = 0;    // parked parents whose children were all done
  size_t left_alive = 0;  // running, owned by a live node (or ownerless and young)
  size_t lost = 0;        // running, but the claim lost (another node took it)
  std::vector<Error> errors;
  // Executions whose log cannot be read (kCorruption: a row the store cannot
  // decode or a kernel payload of the wrong shape; kPayloadShredded), one
  // error each (subject: the id). They are left alone; the pass goes on.
  std::vector<Error> quarantined;
};

class Runtime {
 public:
  // store and clock must outlive the runtime.
  Runtime(store::EventStore& store, const Clock& clock, RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // kInvalidArgument for an empty or duplicate name.
  Status Register(std::string name, WorkflowFn fn);

  Result<RunOutcome> Start(std::string_view workflow, std::string_view id, Json input,
                           StartOptions options = {});

  // What a pipelined start returns, once its last append is written.
  using StartDone = std::move_only_function<void(Result<RunOutcome>)>;
  // Start without waiting for the commit: the body runs on the calling
  // thread as in Start, to its end or its park (a boundary before that, a
  // step's result before the next step, waits here as in Start), and that
  // last append goes to the group commit (Committer::CommitPipelined) while
  // this returns. `done` gets what Start would have returned, once the
  // append is written, on a thread of the group commit: it must not block
  // (hand the outcome to a thread of your own). One thread can so keep many
  // executions in flight, where Start needs a thread asleep for each.
  // Without group commit (a store with no durable write to share, such as
  // the memory store, wrapped or not; or group_commit off), and for a
  // start refused before its body or an if_absent start of an existing id,
  // `done` runs on this thread before this returns. Like Start, a start is
  // durable only once `done` has its outcome. The runtime's destructor
  // waits for every `done`. An empty `done` is a programming error (checked).
  // With `dones` (committer.h, "Dones on the caller's thread"), a `done` that
  // would run on a thread of the group commit runs instead, with the end of
  // the execution's bookkeeping, on the thread that drains that queue: the
  // execution's memory is freed by the thread that made it, a flush wakes
  // the drainer once, and the drainer leads the next flush itself instead of
  // waking a flusher. Drain the queue before the runtime is destroyed
  // (checked).
  void StartPipelined(std::string_view workflow, std::string_view id, Json input, StartDone done,
                      StartOptions options = {}, DoneQueue* dones = nullptr);
  Result<RunOutcome> Resume(std::string_view id, RunOptions options = {});
  Result<RunOutcome> ResumeAs(std::string_view id, std::string_view principal,
                              RunOptions options = {});
  // Resume with the log the caller has already read (a timer waker that
  // read it to find the park): the resume reads nothing before the acquire.
  // Contract: `log` is what reads of `id` returned, possibly stale: its
  // events ascending and contiguous, each naming `id` (or no id). It is taken
  // as a prefix of the current log and decides nothing on its own:
  //   * a refusal seen on it (unknown, terminal, not parked at the expected
  //     park) is re-checked on the current log (one more read): a stale log
  //     costs that read, never a wrong refusal;
  //   * otherwise the resume goes on exactly as Resume's: the park's token
  //     comes from the park in hand, fence_if_parked_at takes the fence with
  //     the conditional acquire, the tail is read under the new token (with
  //     the acquire on a store with AcquireFenceIfReadTail) and the
  //     resumable check re-run on that advanced view; without a fence option
  //     the tail is read all the same before the run.
  // kInvalidArgument (nothing read, nothing written) when the events are not
  // ascending and contiguous or name another execution. Otherwise the
  // errors of Resume. Reads saved against Resume: one range read.
  Result<RunOutcome> ResumeWithLog(std::string_view id, std::vector<Envelope> log,
                                   RunOptions options = {});
  // Answers a Receive(topic) park with `message` ([MESSAGE_CONSUMED,
  // EXECUTION_RESUMED] in one append). kResumeRefused "not-suspended" when
  // the open park does not wait on the topic (no inbox yet).
  Result<RunOutcome> Deliver(std::string_view id, std::string_view topic, Json message,
                             RunOptions options = {});
  // Appends EXECUTION_CANCELLED {reason} under options.fence (or 0).
  Result<RunOutcome> Cancel(std::string_view id, std::string_view reason, RunOptions options = {});
  // Re-drives every execution that is running (a crashed run), taking a
  // fence first when the store fences and recover_acquires_fence; notifies
  // parked parents whose awaited children are all terminal.
  Result<RecoverReport> Recover();
  // The executions Recover has quarantined in this process (unordered).
  std::vector<std::string> Quarantined() const;

  // See the file comment. kUnsupported without a node.
  Result<TakeoverReport> Takeover();
  // Whether a body of `id` runs in this process now (tracked with a node).
  bool RunningHere(std::string_view id) const;
  // How many bodies run in this process now (tracked with a node; 0 without).
  size_t RunningCount() const;

  // Answers a park (see the file comment). Errors other than those the
  // verdict stands for (kResumeRefused: noop; kResumeContended, and a stale
  // fence or lost sequence after the acquire: contended) are returned.
  Result<ParkAnswered> AnswerPark(std::string_view id, ParkAnswer answer);

  // AnswerPark(id, {.park_seq, .park_fence}) for each wake (the park's
  // timer wait is the answer), answered in order, in two store round trips
  // for the whole batch instead of two a park: on a store with
  // AcquireFenceIfReadTail the conditional acquires of all the parks are
  // one AcquireFencesIfReadTail call, the bodies then run one after another
  // on the calling thread, and the appends that end or park them are
  // written together (one shared flush of the Committer, or one
  // AppendBatch). A body's other appends (an effect's, a continuation's)
  // are written as they come, as in AnswerPark. A wake whose acquire or
  // ending append lost to a rival goes on alone, as AnswerPark would go on
  // (the same park still open: tried again on the current token; answered:
  // noop). Verdicts, outcomes and errors are AnswerPark's. Wakes of one
  // execution should not share a batch (the later one's acquire loses to
  // the earlier's). Without the combined acquire, or for a single wake: one
  // AnswerPark after another.
  std::vector<Result<ParkAnswered>> AnswerParks(std::span<const ParkWake> wakes);

  // Appends EXECUTION_DENIED {principal, reason} WITHOUT a fence (an
  // unguarded audit append: it never refuses, and never answers a park).
  Result<int64_t> RecordExecutionDenied(std::string_view id, std::string_view principal,
                                        std::string_view reason);
  // Appends OUTCOME_RECORDED {outcome} to a terminal log (unguarded audit).
  Result<int64_t> RecordOutcome(std::string_view id, Json outcome);

  // The newest unanswered park, or nullopt.
  Result<std::optional<Park>> LocatePark(std::string_view id);
  Result<std::optional<int64_t>> ParkedAtSequence(std::string_view id);
  Result<ExecutionState> Inspect(std::string_view id);

  // Run on the pool (inline when workers == 0: the future is ready).
  std::future<Result<RunOutcome>> StartAsync(std::string workflow, std::string id, Json input,
                                             StartOptions options = {});
  std::future<Result<RunOutcome>> ResumeAsync(std::string id, RunOptions options = {});

  // Waits until no background task is queued or running.
  void WaitIdle();
  // The Committer's figures; without one, every append is its own write.
  CommitterStats commit_stats() const;
  store::EventStore& store() { return store_; }

 private:
  struct Def {
    WorkflowFn fn;
  };
  class Outermost;
  class Host;  // implements internal::RunHost: what a Context may ask
  class RunningSet;
  class StartHolds;
  // Armed: dropping it marks this node's own run rows unsure (Takeover then
  // scans for them). Disarmed once a body has taken over the release.
  class OwnRowWatch {
   public:
    OwnRowWatch(Runtime& rt, bool armed) : rt_(rt), armed_(armed) {}
    ~OwnRowWatch() {
      if (armed_) rt_.MarkOwnRowsUnsure();
    }
    OwnRowWatch(const OwnRowWatch&) = delete;
    OwnRowWatch& operator=(const OwnRowWatch&) = delete;
    void Disarm() { armed_ = false; }

   private:
    Runtime& rt_;
    bool armed_;
  };

  struct ResumeExtras {
    std::optional<std::string> topic;              // Deliver: the message's topic
    Json message;                                  // Deliver: the message
    std::optional<int64_t> expect_park;            // refuse unless this park is the open one
    std::vector<Envelope>* log_in_hand = nullptr;  // a read of the log (taken over)
    int* budget = nullptr;                         // conditional acquires left (shared)
    std::optional<int64_t> expect_fence;           // the token to expect first
    // expect_fence is the park's own token, known without a read
    // (ParkAnswer::park_fence): the resume answers first, or (answering
    // first off) the conditional acquire goes first and returns the log.
    bool acquire_first = false;
  };

  Result<RunOutcome> StartImpl(std::string_view workflow, std::string_view id, Json input,
                               StartOptions options, internal::RunState& run);
  Result<RunOutcome> ResumeImpl(std::string_view id, std::string_view principal,
                                const RunOptions& options, const ResumeExtras& extras);
  // The resume that takes its token with the conditional acquire (read
  // first, or acquire first with the park's token).
  Result<RunOutcome> ResumeAcquiring(std::string_view id, std::string_view principal,
                                     const RunOptions& options, const ResumeExtras& extras);
  // An answer-first resume (RunOptions::park_fence, given in `expect`): its
  // outcome, or nullopt with the log read in `log` and the token to expect
  // in `expect` when the acquire must go on: the park's token is not the
  // one given (nothing ran), or its answer was refused while the park is
  // still open (nothing of it is durable and no effect ran; `expect` is
  // then the token a stale answer reported, or nullopt).
  Result<std::optional<RunOutcome>> ResumeAnsweringFirst(
      std::string_view id, std::string_view principal, const RunOptions& options,
      const ResumeExtras& extras, std::vector<Envelope>& log, std::optional<int64_t>& expect);
  static Status CheckLogInHand(std::string_view id, std::span<const Envelope> log);
  // The park's token when the caller gave it (acquire_first,
  // RunOptions::park_fence): the resume answers first, or acquires before
  // reading; nullopt: it reads first, then acquires.
  std::optional<int64_t> FirstAcquireToken(const RunOptions& options,
                                           const ResumeExtras& extras) const;
  Result<RunOutcome> Redrive(std::string_view id, int64_t token, bool owner_recorded,
                             std::vector<Envelope> log);
  Result<RunOutcome> RedriveUnfenced(std::string_view id);
  // Takeover's claim of one running execution (see TakeoverReport).
  enum class Claimed { kRedriven, kLost, kNotRunning };
  // Claims a running execution with the conditional acquire and re-drives
  // it: on the workers when there are any (kRedriven once claimed; the
  // body's errors go to on_error), else inline.
  Result<Claimed> Claim(const std::string& id, std::optional<std::string_view> expected_owner);
  // Marks `id` as running here (with a node) until the result is dropped.
  std::shared_ptr<void> HoldRunningHere(const std::string& id);
  // Another mark than the caller's own (HoldRunningHere) is on `id`.
  bool RunningHereBesidesUs(std::string_view id) const;
  Status TakeoverPage(bool own, TakeoverReport& report, std::string& after, bool& more);
  void RecoverOne(const std::string& id, RecoverReport& report,
                  const std::set<std::string, std::less<>>& alive);
  void ClaimInto(const std::string& id, std::optional<std::string_view> expected_owner,
                 RecoverReport& report);
  void Quarantine(Error e, std::vector<Error>& into);
  // The run answering the open park of `log` (resumable, and advanced to
  // the store's head under `fenced`): the answer, the buffered
  // EXECUTION_RESUMED, and the rest of the run's state.
  Status PrepareResumedRun(internal::RunState& run, std::string_view id, ExecutionState st,
                           const Def& def, std::string actor, std::vector<Envelope> log,
                           const internal::Fenced& fenced, const RunOptions& options,
                           const ResumeExtras& extras);
  // One wake of AnswerParks after its acquire answered `got`: the run,
  // ready to execute with its end deferred, or the wake's verdict.
  struct BatchedWake;
  void BeginBatchedWake(BatchedWake& wake, Result<store::AcquireWithTail> got);
  // Writes the deferred ends of `wakes` together and finishes their runs.
  void WriteBatchedEnds(std::span<BatchedWake> wakes);
  void SettleBatchedWake(BatchedWake& wake, Result<RunOutcome> ran);
  // AnswerPark for one wake, expecting `expect_fence` first (acquire-first)
  // when set; `after_batch`: the batch's acquire was spent on it already.
  Result<ParkAnswered> AnswerAlone(const ParkWake& wake, std::optional<int64_t> expect_fence,
                                   bool after_batch);
  Result<RunOutcome> Execute(internal::RunState& run);
  // Drops the run's mark as running here (with a node); an end that did not
  // land, or a row the run recorded, marks the own rows unsure.
  void Untrack(const std::string& id, bool ended_ok, const internal::RunState& run);
  Result<RunOutcome> Finish(internal::RunState& run, Result<Json> body_result);
  Result<RunOutcome> FinishParked(internal::RunState& run);
  // End and Ended take the run's end from the caller (a RunEnd holds an
  // outcome and an envelope: moving it costs more than passing it).
  Result<RunOutcome> End(internal::RunState& run, internal::RunEnd&& end);
  // Whether End gets the run's last append's events back (no Committer, not
  // deferred): its value or park payload can be lent to them (RunEnd::lent).
  bool EndLends(const internal::RunState& run) const;
  Result<RunOutcome> Ended(internal::RunState& run, internal::RunEnd&& end);
  Result<RunOutcome> FinishContinued(internal::RunState& run, Json input);
  // Both return whether this runtime should run the new execution's body
  // now (CreateStarted's rule); when true, ScheduleRedrive or
  // AbandonRedrive must follow.
  Result<bool> CreateChild(const internal::RunState& parent, std::string_view workflow,
                           std::string_view key, const std::string& child_id, const Json& input);
  Result<bool> CreateStarted(const std::string& id, Json payload);
  // `spent`: see Commit.
  Status Flush(internal::RunState& run, std::vector<Envelope>* spent = nullptr);
  // The run row an append writes (see Flush): the owner it names (empty:
  // none) and what it does to the row.
  struct RunRowWrite {
    std::string_view owner;
    store::RunRowChange change = store::RunRowChange::kRun;
  };
  store::AppendRequest RunAppend(const internal::RunState& run, std::vector<Envelope> events,
                                 RunRowWrite& row);
  // The run's pending events as its next append (cleared from the run).
  store::AppendRequest TakePending(internal::RunState& run, RunRowWrite& row);
  void Appended(internal::RunState& run, const RunRowWrite& row, int64_t head);
  // A deferred end (run.end) after its append was written (`head`, or its
  // error): what follows it, and the run's tracking dropped.
  Result<RunOutcome> EndWritten(internal::RunState& run, const RunRowWrite& row,
                                Result<int64_t> head);
  Result<internal::TransactOutcome> Transact(internal::RunState& run, std::string_view name,
                                             TransactionFnRef fn);
  Status BeforeStep(const internal::RunState& run);
  // Appends req (through the Committer when there is one). Without one the
  // events come back after the append, landed or not: in `spent` when it is
  // given (an end takes its lent value back from them), else freed here.
  Result<int64_t> Commit(store::AppendRequest req, std::vector<Envelope>* spent = nullptr);
  // Commit for each request, written together (moved from).
  std::vector<Result<int64_t>> CommitMany(std::span<store::AppendRequest> reqs);
  Result<int64_t> AppendAudit(std::string_view id, Envelope event);
  Result<std::optional<Answer>> ChildAnswer(std::string_view parent_id, const Envelope& park);
  Result<Answer> DefaultAnswer(std::string_view id, const Envelope& park);
  void AfterPark(const std::string& id, int64_t park_seq, const Envelope& park);
  void NotifyParent(const Json& parent);
  // AnswerPark on the runtime's own behalf (children done): an unfenced try
  // first; a contended verdict goes to on_error as kResumeContended.
  Status ResumeParked(const std::string& id, int64_t park_seq, Answer answer,
                      std::vector<Envelope>* log_in_hand = nullptr);
  void ScheduleRedrive(std::string id);
  void AbandonRedrive(const std::string& id);
  void Schedule(std::function<void()> task);
  void DrainDeferred();
  void ReportError(const Error& e);
  // A run row naming this node may be left with no body here running it.
  void MarkOwnRowsUnsure() { own_rows_unsure_.store(true, std::memory_order_release); }
  // Whether Takeover must scan for this node's own run rows now (see the
  // file comment); clears the mark.
  bool OwnScanDue();
  const Def* Find(std::string_view workflow) const;
  // The workflow an execution's log names (kNotFound when none is registered).
  Result<const Def*> WorkflowOf(std::string_view id, const ExecutionState& st) const;
  std::string_view Owner() const;
  // kLimitExceeded "json_depth_max" when `value` (`what`: "the input", ...)
  // would nest its event's payload deeper than the store's json_depth_max:
  // a `wrapped` value sits one level down in its payload ({"input": value}),
  // so it may nest one level less. Checked where a caller's JSON enters,
  // before its first copy: a copy of a tree recurses as deep as the tree
  // goes, and past the stack that is a crash.
  Status CheckDepth(const Json& value, std::string_view what, std::string_view id,
                    bool wrapped = true) const;

  store::EventStore& store_;
  const Clock& clock_;
  const RuntimeOptions options_;
  std::map<std::string, Def, std::less<>> workflows_;  // written only before running
  store::MemoryEventStore* memory_ = nullptr;          // store_, when it is one
  std::unique_ptr<Committer> committer_;
  StripedCounter direct_commits_;  // appends made without the Committer
  std::unique_ptr<WorkerPool> pool_;
  std::mutex deferred_mu_;
  std::vector<std::function<void()>> deferred_;  // GUARDED_BY(deferred_mu_); inline mode
  std::atomic<bool> deferred_queued_{false};     // deferred_ may be non-empty
  mutable std::mutex quarantine_mu_;
  std::set<std::string> quarantined_;        // GUARDED_BY(quarantine_mu_)
  std::unique_ptr<Host> host_;               // what a Context asks of this runtime
  std::unique_ptr<RunningSet> running_;      // bodies running here (with a node)
  std::unique_ptr<StartHolds> start_holds_;  // if_absent starts in progress, by id
  // Own run rows may be left (see OwnScanDue): true until the first scan.
  std::atomic<bool> own_rows_unsure_{true};
  std::atomic<uint64_t> own_scan_epoch_{0};  // the node's epoch at the last own scan
};

}  // namespace once::runtime
