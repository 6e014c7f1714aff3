#include "once/runtime/runtime.h"

#include <array>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "fence_protocol.h"
#include "json_access.h"
#include "once/base/decimal.h"
#include "once/events/json_text.h"
#include "once/store/read_log.h"
#include "once/store/validate.h"
#include "run_state.h"

namespace once::runtime {

using internal::Member;
using internal::Refused;

using events::KernelKind;
using internal::RunState;
using store::AppendRequest;
using store::Capability;

namespace {

constexpr int kAuditAppendAttemptsMax = 8;  // sequence races of an unguarded audit append
// Events a start buffers before its first append when the body is one step:
// STARTED, STEP_COMPLETED, COMPLETED (one spare). Reserved up front: the
// vector is handed to the store whole, and growing it 1 -> 2 -> 4 was three
// allocations per execution.
constexpr size_t kStartPendingEvents = 4;

// "a" -> "a~2", "a~2" -> "a~3".
std::string NextGenerationId(std::string_view id) {
  size_t tilde = id.rfind('~');
  if (tilde != std::string_view::npos) {
    // A generation at the largest int64 has no next: it gets a suffix of
    // its own (no overflow).
    std::optional<int64_t> n = ParseDecimal<int64_t>(id.substr(tilde + 1));
    if (n && *n < std::numeric_limits<int64_t>::max()) {
      return std::string(id.substr(0, tilde)) + "~" + std::to_string(*n + 1);
    }
  }
  return std::string(id) + "~2";
}

// Before a run's pending events leave it (an append takes them, or has
// taken a copy of them) while its body runs: the start's lent input is taken
// out of its event and kept where the body reads it. Returns it, or null
// when nothing is lent (a resumed run, a start's body that returned, an
// input kept already). Once the body has returned the event may take the
// input with it (Execute clears lent_input).
const Json* KeepLentInput(RunState& run) {
  if (!run.lent_input || run.lent_input_kept) return nullptr;
  // The EXECUTION_STARTED is the first pending event until an append takes it.
  Json::object_t& started = run.pending.front().payload.get_ref<Json::object_t&>();
  run.lent_input_kept = started.extract("input");
  return run.lent_input;
}

// What End lent to the run's last event (RunEnd::lent), taken back from it
// once its append returned.
void TakeBack(Envelope& last, internal::RunEnd& end) {
  if (end.parked) {
    end.park.payload = std::move(last.payload);
  } else {
    end.outcome.value =
        internal::TakeMember(last.payload, internal::EndValueMember(end.outcome.status));
  }
}

}  // namespace

// What a Context may ask of the runtime running its body.
class Runtime::Host final : public internal::RunHost {
 public:
  explicit Host(Runtime& rt) : rt_(rt) {}
  const Clock& clock() const override { return rt_.clock_; }
  Status CheckDepth(const Json& value, std::string_view what, std::string_view id,
                    bool wrapped) const override {
    return rt_.CheckDepth(value, what, id, wrapped);
  }
  Status Flush(RunState& run) override { return rt_.Flush(run); }
  Result<bool> CreateChild(const RunState& parent, std::string_view workflow, std::string_view key,
                           const std::string& child_id, const Json& input) override {
    return rt_.CreateChild(parent, workflow, key, child_id, input);
  }
  void ScheduleRedrive(std::string id) override { rt_.ScheduleRedrive(std::move(id)); }
  void AbandonRedrive(const std::string& id) override { rt_.AbandonRedrive(id); }
  Status BeforeStep(const RunState& run) override { return rt_.BeforeStep(run); }
  bool SupportsTransaction() const override {
    return rt_.store_.Supports(Capability::kTransaction);
  }
  Result<internal::TransactOutcome> Transact(RunState& run, std::string_view name,
                                             TransactionFnRef fn) override {
    return rt_.Transact(run, name, fn);
  }

 private:
  Runtime& rt_;
};

// The executions whose body runs in this process (with a node): takeover
// of this node's own runs skips them. Sharded, so that bodies on many
// threads rarely share a lock.
class Runtime::RunningSet {
 public:
  void Add(const std::string& id) {
    Shard& s = ShardOf(id);
    std::lock_guard lock(s.mu);
    ++s.ids[id];
  }
  void Remove(const std::string& id) {
    Shard& s = ShardOf(id);
    std::lock_guard lock(s.mu);
    auto it = s.ids.find(id);
    if (it != s.ids.end() && --it->second == 0) s.ids.erase(it);
  }
  size_t Size() const {
    size_t n = 0;
    for (const Shard& s : shards_) {
      std::lock_guard lock(s.mu);
      n += s.ids.size();
    }
    return n;
  }
  int Count(std::string_view id) const {
    const Shard& s = ShardOf(id);
    std::lock_guard lock(s.mu);
    auto it = s.ids.find(std::string(id));
    return it == s.ids.end() ? 0 : it->second;
  }
  bool Contains(std::string_view id) const {
    const Shard& s = ShardOf(id);
    std::lock_guard lock(s.mu);
    return s.ids.contains(std::string(id));
  }

 private:
  static constexpr size_t kShards = 16;
  struct alignas(64) Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, int> ids;  // GUARDED_BY(mu): id -> bodies running
  };
  Shard& ShardOf(std::string_view id) {
    return shards_[std::hash<std::string_view>{}(id) % kShards];
  }
  const Shard& ShardOf(std::string_view id) const {
    return shards_[std::hash<std::string_view>{}(id) % kShards];
  }
  std::array<Shard, kShards> shards_;
};

// The if_absent starts in progress: one holder per id; a second start of
// the id waits for the holder's release (its body ended or parked).
class Runtime::StartHolds {
 public:
  // Returns once this caller holds `id`; the holder releases on destruction.
  std::shared_ptr<void> Hold(const std::string& id) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !held_.contains(id); });
    held_.insert(id);
    return std::shared_ptr<void>(nullptr, [this, id](void*) {
      std::lock_guard lock(mu_);
      held_.erase(id);
      cv_.notify_all();
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_set<std::string> held_;  // GUARDED_BY(mu_)
};

Runtime::Runtime(store::EventStore& store, const Clock& clock, RuntimeOptions options)
    : store_(store), clock_(clock), options_(std::move(options)) {
  ONCE_CHECK(options_.resume_attempts_max > 0);
  host_ = std::make_unique<Host>(*this);
  running_ = std::make_unique<RunningSet>();
  start_holds_ = std::make_unique<StartHolds>();
  memory_ = dynamic_cast<store::MemoryEventStore*>(&store_);
  // Group commit shares a durable write; an in-memory store, wrapped or not,
  // has none to share, and the hand-off would only add contention (a
  // decorator over the memory store with a Committer: 0.14x the park cases'
  // exec/s, BENCHMARKS.md).
  if (options_.group_commit && store_.GroupCommitUseful()) {
    committer_ = std::make_unique<Committer>(store_, options_.committer);
  }
  if (options_.workers > 0) {
    pool_ = std::make_unique<WorkerPool>(options_.workers, options_.queue_tasks_max);
  }
}

Runtime::~Runtime() {
  if (committer_) {
    committer_->Drain();  // pipelined starts' done may queue work
    committer_->CheckDoneQueuesDrained();
  }
  WaitIdle();
}

bool Runtime::RunningHere(std::string_view id) const { return running_->Contains(id); }
bool Runtime::RunningHereBesidesUs(std::string_view id) const { return running_->Count(id) > 1; }
size_t Runtime::RunningCount() const { return running_->Size(); }

Status Runtime::Register(std::string name, WorkflowFn fn) {
  if (name.empty() || !fn) {
    return MakeError(ErrorCode::kInvalidArgument, "a workflow needs a name and a body");
  }
  if (!workflows_.emplace(std::move(name), Def{std::move(fn)}).second) {
    return MakeError(ErrorCode::kInvalidArgument, "workflow already registered");
  }
  return Ok();
}

const Runtime::Def* Runtime::Find(std::string_view workflow) const {
  auto it = workflows_.find(workflow);
  return it == workflows_.end() ? nullptr : &it->second;
}

Result<const Runtime::Def*> Runtime::WorkflowOf(std::string_view id,
                                                const ExecutionState& st) const {
  const Def* def = Find(st.workflow);
  if (!def) {
    return MakeError(ErrorCode::kNotFound, "unknown workflow " + st.workflow, std::string(id));
  }
  return def;
}

Status Runtime::CheckDepth(const Json& value, std::string_view what, std::string_view id,
                           bool wrapped) const {
  size_t depth_max = store_.limits().json_depth_max;
  size_t above = wrapped ? 1 : 0;  // levels of its payload above the value
  if (depth_max >= above && events::JsonDepthWithin(value, depth_max - above)) return Ok();
  // "the input's event nests more than 512 containers deep"
  return store::JsonDepthError(wrapped ? std::string(what) + "'s event" : std::string(what),
                               std::string(id), depth_max);
}

RunOutcome OutcomeOf(std::string execution_id, const ExecutionState& st) {
  // An end's outcome is its payload's member (the one Finish writes); a
  // cancel's or a continuation's is the whole payload.
  const bool ended =
      st.status == ExecutionStatus::kCompleted || st.status == ExecutionStatus::kFailed;
  Json value = ended ? internal::Member(st.result, internal::EndValueMember(st.status)) : st.result;
  return RunOutcome{std::move(execution_id), st.status, std::move(value), st.park_seq};
}

// ---- Start -------------------------------------------------------------------

Result<RunOutcome> Runtime::Start(std::string_view workflow, std::string_view id, Json input,
                                  StartOptions options) {
  Outermost outermost(*this);
  RunState run;
  return StartImpl(workflow, id, std::move(input), std::move(options), run);
}

void Runtime::StartPipelined(std::string_view workflow, std::string_view id, Json input,
                             StartDone done, StartOptions options, DoneQueue* dones) {
  ONCE_CHECK_MSG(static_cast<bool>(done), "StartPipelined needs a done to call");
  Outermost outermost(*this);
  auto run = std::make_unique<RunState>();
  run->defer_end = committer_ != nullptr;  // else End writes it here, as in Start
  Result<RunOutcome> ran = StartImpl(workflow, id, std::move(input), std::move(options), *run);
  if (!run->end) {  // refused, ended without a held-back append, or not deferred
    done(std::move(ran));
    return;
  }
  if (run->pending.empty()) {
    done(EndWritten(*run, RunRowWrite{}, run->head));
    return;
  }
  RunRowWrite row;
  AppendRequest req = TakePending(*run, row);
  committer_->CommitPipelined(
      std::move(req),
      [this, run = std::move(run), row = std::move(row),
       done = std::move(done)](Result<int64_t> head) mutable {
        Outermost outermost(*this);
        done(EndWritten(*run, row, std::move(head)));
      },
      dones);
}

Result<RunOutcome> Runtime::StartImpl(std::string_view workflow, std::string_view id, Json input,
                                      StartOptions options, RunState& run) {
  const Def* def = Find(workflow);
  if (!def) return MakeError(ErrorCode::kNotFound, "unknown workflow", std::string(workflow));
  if (options.if_absent) {
    ONCE_RETURN_IF_ERROR(store::ValidateExecutionId(id, store_.limits()));
    // This id's only start in this runtime, while the run lasts.
    run.start_hold = start_holds_->Hold(std::string(id));
    // Its first event, not Head: on PostgreSQL concurrent reads share one
    // statement (read groups), a Head is a round trip of its own (every
    // queued start asks; BENCHMARKS.md, "Loom nodes and queues").
    ONCE_ASSIGN_OR_RETURN(std::vector<store::Envelope> first, store_.ReadRange(id, 1, 1));
    if (!first.empty()) {
      ONCE_ASSIGN_OR_RETURN(ExecutionState st, Inspect(id));
      return OutcomeOf(std::string(id), st);
    }
  }
  ONCE_RETURN_IF_ERROR(CheckDepth(input, "the input", id));
  run.id = id;
  run.workflow = workflow;
  run.fn = &def->fn;
  run.principal = std::move(options.principal);
  run.parent = std::move(options.parent);
  run.fence = options.fence.value_or(0);
  run.owner = Owner();
  // The input is lent to the event, not copied (RunState::lent_input).
  Json payload = events::JsonObject("workflow", workflow, "input", std::move(input));
  if (!run.parent.is_null()) payload["parent"] = run.parent;
  if (!run.principal.empty()) payload["principal"] = run.principal;
  if (!options.continued_from.is_null()) payload["continued_from"] = options.continued_from;
  run.pending.reserve(kStartPendingEvents);
  run.pending.push_back(run.Kernel(KernelKind::kExecutionStarted, std::move(payload)));
  // The member's block stays where it is when the event moves.
  run.lent_input = &run.pending.back().payload.get_ref<Json::object_t&>().find("input")->second;
  // What the store is certain to refuse (an invalid id, a start event over
  // event_bytes_max, a malformed parent) is refused before the body's first
  // step runs, not at the first append after it.
  ONCE_RETURN_IF_ERROR(store::CheckFirstEvent(run.id, run.pending.back(), store_.limits()));
  return Execute(run);
}

// ---- Running a body ------------------------------------------------------------

Result<RunOutcome> Runtime::Execute(RunState& run) {
  // With a node: the body is known to run here (takeover of this node's
  // own runs skips it), and it runs in the node's current epoch.
  const bool tracked = options_.node != nullptr;
  if (tracked) {
    run.node_epoch = options_.node->epoch();
    running_->Add(run.id);
  }
  Context ctx(*host_, run);
  Result<Json> result = [&]() -> Result<Json> {
    try {
      return (*run.fn)(ctx, run.BodyInput());
    } catch (const std::exception& e) {
      return MakeError(ErrorCode::kInternal, std::string("body threw: ") + e.what(), run.id);
    } catch (...) {
      return MakeError(ErrorCode::kInternal, "body threw", run.id);
    }
  }();
  run.lent_input = nullptr;  // an append may take the event with the input from here on
  std::string id = tracked ? run.id : std::string();
  Result<RunOutcome> out = Finish(run, std::move(result));
  if (run.end) return out;  // its last append is the caller's to write (EndWritten)
  Untrack(id, out.has_value(), run);
  return out;
}

void Runtime::Untrack(const std::string& id, bool ended_ok, const RunState& run) {
  if (!options_.node) return;
  // A row this run recorded and did not release (an error, or an ending
  // append that did not land): this node's own takeover must look.
  if (!ended_ok || run.owner_recorded) MarkOwnRowsUnsure();
  running_->Remove(id);
}

Result<RunOutcome> Runtime::EndWritten(RunState& run, const RunRowWrite& row,
                                       Result<int64_t> head) {
  ONCE_CHECK(run.end.has_value());
  std::string id = options_.node ? run.id : std::string();
  Result<RunOutcome> out = [&]() -> Result<RunOutcome> {
    if (!head) return std::unexpected(head.error());
    Appended(run, row, *head);
    return Ended(run, std::move(*run.end));
  }();
  run.end.reset();
  Untrack(id, out.has_value(), run);
  return out;
}

Result<RunOutcome> Runtime::Finish(RunState& run, Result<Json> body_result) {
  if (run.nondeterministic) return std::unexpected(*run.latched);
  if (run.parked) return FinishParked(run);
  if (run.latched && !run.continue_input) return std::unexpected(*run.latched);
  if (const Envelope* extra = internal::NextBodyEvent(run)) {
    return MakeError(ErrorCode::kNondeterminism,
                     "replay diverged from the log: the body ended before its recorded " +
                         extra->kind + " at sequence " + std::to_string(extra->sequence),
                     run.id);
  }
  if (run.continue_input) return FinishContinued(run, std::move(*run.continue_input));
  const bool completed = body_result.has_value();
  if (completed) ONCE_RETURN_IF_ERROR(CheckDepth(*body_result, "the body's result", run.id));
  internal::RunEnd end{
      .outcome = {"", completed ? ExecutionStatus::kCompleted : ExecutionStatus::kFailed, Json(),
                  std::nullopt},
      .lent = EndLends(run)};
  Json value = completed ? std::move(*body_result) : internal::ErrorToJson(body_result.error());
  if (!end.lent) end.outcome.value = value;
  run.pending.push_back(run.Kernel(
      completed ? KernelKind::kExecutionCompleted : KernelKind::kExecutionFailed,
      events::JsonObject(internal::EndValueMember(end.outcome.status), std::move(value))));
  return End(run, std::move(end));
}

Result<RunOutcome> Runtime::FinishParked(RunState& run) {
  internal::RunEnd end{.parked = true};
  end.new_park = !run.pending.empty() && run.pending.back().Is(KernelKind::kExecutionSuspended);
  if (end.new_park) {
    // The park's payload is lent to its append when End gets it back.
    Envelope& park = run.pending.back();
    end.lent = EndLends(run);
    Json payload = end.lent ? std::move(park.payload) : Json();
    end.park = park;
    if (end.lent) park.payload = std::move(payload);
  } else {
    const Envelope* open = FindOpenPark(run.log);
    ONCE_CHECK(open != nullptr);
    end.park = *open;
  }
  return End(run, std::move(end));
}

// The last append of a run that ends or parks: written now, or (defer_end)
// left in run.end for the caller to write with other runs' (EndWritten).
Result<RunOutcome> Runtime::End(RunState& run, internal::RunEnd&& end) {
  if (run.defer_end) {
    run.end = std::move(end);
    return RunOutcome{};
  }
  std::vector<Envelope> spent;  // the events back, when something was lent to them
  Status flushed = Flush(run, end.lent ? &spent : nullptr);
  if (flushed && end.lent) {
    ONCE_CHECK(!spent.empty());  // no Committer: the events came back (EndLends)
    TakeBack(spent.back(), end);
  }
  events::FreePayloads(spent);
  ONCE_RETURN_IF_ERROR(flushed);
  return Ended(run, std::move(end));
}

bool Runtime::EndLends(const RunState& run) const { return !committer_ && !run.defer_end; }

// What follows a durable end or park.
Result<RunOutcome> Runtime::Ended(RunState& run, internal::RunEnd&& end) {
  if (end.parked) {
    if (end.new_park) end.park.sequence = run.head;
    AfterPark(run.id, end.park.sequence, end.park);
    return RunOutcome{run.id, ExecutionStatus::kSuspended, Json(), end.park.sequence,
                      end.park.fence()};
  }
  RunOutcome out = std::move(end.outcome);
  if (options_.on_terminal) options_.on_terminal(run.id, out.status);
  if (!run.parent.is_null()) {
    Schedule([this, parent = std::move(run.parent)] { NotifyParent(parent); });
  }
  out.execution_id = std::move(run.id);  // the run ends here: Execute's callers return this
  return out;
}

Result<RunOutcome> Runtime::FinishContinued(RunState& run, Json input) {
  // Starting the next generation is an effect: buffered step results first.
  if (run.step_result_pending) ONCE_RETURN_IF_ERROR(Flush(run));
  std::string next = NextGenerationId(run.id);
  Json started =
      events::JsonObject("workflow", run.workflow, "input", input, "continued_from", run.id);
  if (!run.parent.is_null()) started["parent"] = run.parent;
  ONCE_ASSIGN_OR_RETURN(bool run_here, CreateStarted(next, std::move(started)));
  run.pending.push_back(run.Kernel(KernelKind::kExecutionContinued,
                                   events::JsonObject("next", next, "input", std::move(input))));
  if (Status s = Flush(run); !s) {
    if (run_here) AbandonRedrive(next);
    return std::unexpected(s.error());
  }
  if (options_.on_terminal) options_.on_terminal(run.id, ExecutionStatus::kContinued);
  if (run_here) ScheduleRedrive(next);
  return RunOutcome{run.id, ExecutionStatus::kContinued, events::JsonObject("next", next),
                    std::nullopt};
}

// Appends EXECUTION_STARTED as the first event of `id`; an id that already
// has it (a replay after a crash) is fine. Returns whether this runtime
// runs the body now (ScheduleRedrive):
//  * created here: yes. With a node the run row names it from this append,
//    so the id is marked as running here BEFORE the append (takeover of
//    this node's own runs skips it; else a takeover between the append and
//    the scheduled body ran the body too: one step's effect twice in one
//    live process); ScheduleRedrive's task, or AbandonRedrive, unmarks it.
//  * it existed (a replay after a crash): with a node, no: its owner runs
//    it, or takeover does once that owner is dead (running it unfenced here
//    could run it beside a live taker); without a node, yes (as before:
//    nothing else drives it but Recover's ownerless rule).
//  * it existed and someone fenced it since (a takeover claimed it while
//    its parent's CHILD_STARTED was not yet durable): no, its fence holder
//    runs it. The store refuses the token-0 start on the token before the
//    sequence (kStaleFence); taken for an error, it failed every replay of
//    the parent, which then never ended (the PostgreSQL chaos test's
//    "ended open" of 2026-12-03).
Result<bool> Runtime::CreateStarted(const std::string& id, Json payload) {
  const bool node = options_.node != nullptr;
  if (node) running_->Add(id);
  AppendRequest req{.execution_id = id, .expected_next = 1, .owner = Owner()};
  req.events.push_back(events::KernelEvent(KernelKind::kExecutionStarted, std::move(payload)));
  Result<int64_t> r = Commit(std::move(req));
  if (r) return true;
  if (node) running_->Remove(id);
  if (r.error().code == ErrorCode::kSequenceConflict) return !node;
  if (r.error().code == ErrorCode::kStaleFence) {
    ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> first, store_.ReadRange(id, 1, 1));
    if (!first.empty()) return false;
  }
  return std::unexpected(r.error());
}

Result<bool> Runtime::CreateChild(const RunState& parent, std::string_view workflow,
                                  std::string_view key, const std::string& child_id,
                                  const Json& input) {
  if (!Find(workflow)) return MakeError(ErrorCode::kNotFound, "unknown workflow", parent.id);
  Json payload = events::JsonObject("workflow", workflow, "input", input, "parent",
                                    events::JsonObject("execution_id", parent.id, "key", key));
  return CreateStarted(child_id, std::move(payload));
}

AppendRequest Runtime::RunAppend(const RunState& run, std::vector<Envelope> events,
                                 RunRowWrite& row) {
  // The run row: named by the first append that leaves the execution
  // running (unless the acquire named it), deleted by the one that parks
  // or ends it. Appends in between leave it alone (no write).
  row = RunRowWrite{};
  if (!run.owner.empty()) {
    row.change = store::RunRowChangeOf(events);
    if (row.change == store::RunRowChange::kEnd || !run.owner_recorded) row.owner = run.owner;
  }
  return AppendRequest{.execution_id = run.id,
                       .expected_next = run.head + 1,
                       .events = std::move(events),
                       .fence = run.fence,
                       .owner = row.owner};
}

void Runtime::Appended(RunState& run, const RunRowWrite& row, int64_t head) {
  run.head = head;
  run.answer_unconfirmed = false;  // every append takes all that is pending, the answer first
  if (!row.owner.empty()) run.owner_recorded = row.change == store::RunRowChange::kRun;
}

AppendRequest Runtime::TakePending(RunState& run, RunRowWrite& row) {
  if (const Json* kept = KeepLentInput(run)) {
    run.pending.front().payload.get_ref<Json::object_t&>().emplace("input", *kept);  // its copy
  }
  AppendRequest req = RunAppend(run, std::move(run.pending), row);
  run.pending.clear();
  run.step_result_pending = false;
  return req;
}

Status Runtime::Flush(RunState& run, std::vector<Envelope>* spent) {
  if (run.pending.empty()) return Ok();
  RunRowWrite row;
  AppendRequest req = TakePending(run, row);
  ONCE_ASSIGN_OR_RETURN(int64_t head, Commit(std::move(req), spent));
  Appended(run, row, head);
  return Ok();
}

namespace {

// The step's own statements through to the store's handle, remembering the
// first failure: a failed Exec fails the step even if fn swallows it.
class WatchedSql final : public store::SqlTransaction {
 public:
  explicit WatchedSql(store::SqlTransaction& inner) : inner_(inner) {}
  using store::SqlTransaction::Exec;
  Result<store::SqlRows> Exec(std::string_view sql, std::span<const Json> params) override {
    Result<store::SqlRows> out = inner_.Exec(sql, params);
    if (!out && !failed_) failed_ = out.error();
    return out;
  }
  const std::optional<Error>& failed() const { return failed_; }

 private:
  store::SqlTransaction& inner_;
  std::optional<Error> failed_;
};

Result<Json> CallTransactionFn(TransactionFnRef fn, store::SqlTransaction& sql,
                               const std::string& id) {
  try {
    return fn(sql);
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal, std::string("transaction fn threw: ") + e.what(), id);
  } catch (...) {
    return MakeError(ErrorCode::kInternal, "transaction fn threw", id);
  }
}

}  // namespace

// The store runs `work` in its transaction: fn, then the append of the
// run's buffered events and the step's record, committed together.
Result<internal::TransactOutcome> Runtime::Transact(RunState& run, std::string_view name,
                                                    TransactionFnRef fn) {
  std::optional<Result<Json>> fn_result;  // set once fn has run
  RunRowWrite row;
  auto work = [&](store::SqlTransaction& sql) -> Result<AppendRequest> {
    WatchedSql watched(sql);
    fn_result = CallTransactionFn(fn, watched, run.id);
    if (*fn_result && watched.failed()) fn_result = std::unexpected(*watched.failed());
    if (!*fn_result) return std::unexpected(fn_result->error());  // rolls back
    // A value the store would refuse is not recorded (as in Step).
    ONCE_RETURN_IF_ERROR(CheckDepth(**fn_result, "the step's value", run.id, true));
    std::vector<Envelope> events = run.pending;  // a copy: kept if this rolls back
    events.push_back(run.Kernel(KernelKind::kStepCompleted,
                                events::JsonObject("name", name, "value", **fn_result)));
    return RunAppend(run, std::move(events), row);
  };
  direct_commits_.Add();
  Result<int64_t> head = store_.AppendInTransaction(run.id, work);
  if (head) {
    KeepLentInput(run);  // the append took a copy of the events; they leave the run
    run.pending.clear();
    run.step_result_pending = false;
    Appended(run, row, *head);
    return internal::TransactOutcome{.committed = true, .value = std::move(*fn_result)};
  }
  if (fn_result && !*fn_result) {
    return internal::TransactOutcome{.committed = false, .value = std::move(*fn_result)};
  }
  return std::unexpected(head.error());
}

Status Runtime::BeforeStep(const RunState& run) {
  if (!options_.node) return Ok();
  return options_.node->PermitStep(run.node_epoch);
}

std::string_view Runtime::Owner() const {
  if (!options_.node || !store_.Supports(Capability::kOwnership)) return {};
  return options_.node->id();
}

std::vector<Result<int64_t>> Runtime::CommitMany(std::span<AppendRequest> reqs) {
  if (committer_) return committer_->CommitMany(reqs);
  std::vector<Result<int64_t>> out;  // without group commit: one write each
  out.reserve(reqs.size());
  for (AppendRequest& req : reqs) out.push_back(Commit(std::move(req)));
  return out;
}

Result<int64_t> Runtime::Commit(AppendRequest req, std::vector<Envelope>* spent) {
  if (committer_) return committer_->Commit(std::move(req));
  direct_commits_.Add();
  // The bare memory store takes the events' strings; their payloads stay.
  Result<int64_t> head = memory_ ? memory_->Append(std::move(req)) : store_.Append(req);
  if (spent) {
    *spent = std::move(req.events);
  } else {
    events::FreePayloads(req.events);
  }
  return head;
}

// ---- Reading -------------------------------------------------------------------

Result<std::optional<Park>> Runtime::LocatePark(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store_, id));
  ONCE_RETURN_IF_ERROR(Fold(log));  // a park handed out has its kind's shape
  const Envelope* park = FindOpenPark(log);
  if (!park) return std::optional<Park>();
  return std::optional<Park>(Park{park->sequence, *park});
}

Result<std::optional<int64_t>> Runtime::ParkedAtSequence(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::optional<Park> park, LocatePark(id));
  if (!park) return std::optional<int64_t>();
  return std::optional<int64_t>(park->sequence);
}

Result<ExecutionState> Runtime::Inspect(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store_, id));
  return Fold(log);
}

// ---- Audit appends -------------------------------------------------------------

Result<int64_t> Runtime::AppendAudit(std::string_view id, Envelope event) {
  for (int attempt = 0; attempt < kAuditAppendAttemptsMax; ++attempt) {
    ONCE_ASSIGN_OR_RETURN(int64_t head, store_.Head(id));
    if (head == 0) return MakeError(ErrorCode::kNotFound, "unknown execution", std::string(id));
    AppendRequest req{.execution_id = std::string(id),
                      .expected_next = head + 1,
                      .events = {event},
                      .fence = std::nullopt};
    Result<int64_t> r = store_.Append(req);
    if (r || r.error().code != ErrorCode::kSequenceConflict) return r;
  }
  return MakeError(ErrorCode::kBusy, "audit append kept losing its sequence", std::string(id));
}

Result<int64_t> Runtime::RecordExecutionDenied(std::string_view id, std::string_view principal,
                                               std::string_view reason) {
  return AppendAudit(id, events::KernelEvent(KernelKind::kExecutionDenied,
                                             Json{{"principal", principal}, {"reason", reason}}));
}

Result<int64_t> Runtime::RecordOutcome(std::string_view id, Json outcome) {
  ONCE_RETURN_IF_ERROR(CheckDepth(outcome, "the outcome", id));
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, Inspect(id));
  if (!IsTerminal(st.status)) {
    return MakeError(ErrorCode::kInvalidArgument, "an outcome is recorded on a terminal log",
                     std::string(id));
  }
  return AppendAudit(
      id, events::KernelEvent(KernelKind::kOutcomeRecorded, Json{{"outcome", std::move(outcome)}}));
}

// ---- Children and background work ----------------------------------------------

Result<std::optional<Answer>> Runtime::ChildAnswer(std::string_view parent_id,
                                                   const Envelope& park) {
  const Json& call = Member(park.payload, "call");
  if (call != "await_child" && call != "await_children") return std::optional<Answer>();
  Json results = Json::object();
  for (const Json& wait : Member(park.payload, "waits")) {
    const Json& key_json = Member(wait, "key");
    if (!key_json.is_string()) {
      return MakeError(ErrorCode::kCorruption, "a child wait without a key",
                       std::string(parent_id));
    }
    std::string key = key_json.get<std::string>();
    ONCE_ASSIGN_OR_RETURN(ExecutionState child, Inspect(ChildExecutionId(parent_id, key)));
    std::optional<Json> r = ChildResult(child);
    if (!r) return std::optional<Answer>();
    if (call == "await_child") return std::optional<Answer>(Answer{wait, std::move(*r)});
    results[key] = std::move(*r);
  }
  Json wait{{"type", "children"}, {"group", Member(park.payload, "group")}};
  return std::optional<Answer>(Answer{std::move(wait), std::move(results)});
}

void Runtime::AfterPark(const std::string& id, int64_t park_seq, const Envelope& park) {
  if (options_.on_park) options_.on_park(id, park_seq, park);
  Result<std::optional<Answer>> answer = ChildAnswer(id, park);
  if (!answer) return ReportError(answer.error());
  if (!*answer) return;
  // The children finished before the park landed: resume ourselves.
  Schedule([this, id, park_seq, a = std::move(**answer)]() mutable {
    if (Status s = ResumeParked(id, park_seq, std::move(a)); !s) ReportError(s.error());
  });
}

void Runtime::NotifyParent(const Json& parent) {
  if (options_.on_child_settled) return options_.on_child_settled(parent);
  const Json& pid_json = Member(parent, "execution_id");
  if (!pid_json.is_string()) {
    return ReportError(Error{ErrorCode::kCorruption, "a child's parent names no execution", ""});
  }
  std::string pid = pid_json.get<std::string>();
  Result<std::vector<Envelope>> log = store::ReadLog(store_, pid);
  if (!log) return ReportError(log.error());
  if (Result<ExecutionState> st = Fold(*log); !st) return ReportError(st.error());
  const Envelope* park = FindOpenPark(*log);
  if (!park) return;
  Result<std::optional<Answer>> answer = ChildAnswer(pid, *park);
  if (!answer) return ReportError(answer.error());
  if (!*answer) return;
  int64_t park_seq = park->sequence;
  if (Status s = ResumeParked(pid, park_seq, std::move(**answer), &*log); !s) {
    ReportError(s.error());
  }
}

// The body of an execution CreateStarted created here; the task holds the
// running-here mark CreateStarted made (with a node) until the body is
// done, or until the task is dropped unrun.
void Runtime::ScheduleRedrive(std::string id) {
  struct Mark {
    Runtime* rt;
    std::string id;
    bool ran = false;
    ~Mark() {
      if (ran) {
        if (rt->options_.node) rt->running_->Remove(id);
      } else {
        rt->AbandonRedrive(id);
      }
    }
  };
  auto mark = std::make_shared<Mark>(this, id);
  Schedule([this, mark, id = std::move(id)] {
    mark->ran = true;
    if (Result<RunOutcome> r = RedriveUnfenced(id); !r) ReportError(r.error());
  });
}

std::shared_ptr<void> Runtime::HoldRunningHere(const std::string& id) {
  if (!options_.node) return nullptr;
  running_->Add(id);
  return std::shared_ptr<void>(nullptr, [this, id](void*) { running_->Remove(id); });
}

// The start (which names this node in its run row) is durable, and no body
// will run it here.
void Runtime::AbandonRedrive(const std::string& id) {
  if (!options_.node) return;
  MarkOwnRowsUnsure();
  running_->Remove(id);
}

void Runtime::Schedule(std::function<void()> task) {
  if (pool_) {
    if (Status s = pool_->Submit(std::move(task)); !s) ReportError(s.error());
    return;
  }
  std::lock_guard lock(deferred_mu_);
  deferred_.push_back(std::move(task));
  deferred_queued_.store(true, std::memory_order_release);
}

void Runtime::DrainDeferred() {
  for (;;) {
    std::vector<std::function<void()>> tasks;
    {
      // Every outermost call on every thread ends here: with nothing queued
      // (the common case) it takes no lock shared by all of them.
      if (!deferred_queued_.load(std::memory_order_acquire)) return;
      std::lock_guard lock(deferred_mu_);
      tasks.swap(deferred_);
      deferred_queued_.store(false, std::memory_order_relaxed);
    }
    if (tasks.empty()) return;
    for (auto& task : tasks) task();
  }
}

void Runtime::WaitIdle() {
  if (pool_) pool_->WaitIdle();
  Outermost outermost(*this);
}

void Runtime::ReportError(const Error& e) {
  // Background work that failed may have left a run row naming this node.
  if (options_.node) MarkOwnRowsUnsure();
  if (options_.log) {
    options_.log({.level = LogLevel::kWarn,
                  .component = "runtime",
                  .message = e.message,
                  .subject = e.subject,
                  .code = ErrorCodeName(e.code)});
  }
  if (options_.on_error) options_.on_error(e);
}

CommitterStats Runtime::commit_stats() const {
  if (committer_) return committer_->stats();
  uint64_t n = direct_commits_.Sum();
  return CommitterStats{.requests = n, .store_writes = n};
}

// ---- Async ---------------------------------------------------------------------

namespace {
template <class F>
std::future<Result<RunOutcome>> RunOn(WorkerPool* pool, F&& fn) {
  auto promise = std::make_shared<std::promise<Result<RunOutcome>>>();
  std::future<Result<RunOutcome>> future = promise->get_future();
  if (!pool) {
    promise->set_value(fn());
    return future;
  }
  Status s =
      pool->Submit([promise, fn = std::forward<F>(fn)]() mutable { promise->set_value(fn()); });
  if (!s) promise->set_value(std::unexpected(s.error()));
  return future;
}
}  // namespace

std::future<Result<RunOutcome>> Runtime::StartAsync(std::string workflow, std::string id,
                                                    Json input, StartOptions options) {
  return RunOn(pool_.get(), [this, workflow = std::move(workflow), id = std::move(id),
                             input = std::move(input), options = std::move(options)]() mutable {
    return Start(workflow, id, std::move(input), std::move(options));
  });
}

std::future<Result<RunOutcome>> Runtime::ResumeAsync(std::string id, RunOptions options) {
  return RunOn(pool_.get(), [this, id = std::move(id), options = std::move(options)] {
    return Resume(id, options);
  });
}

}  // namespace once::runtime
