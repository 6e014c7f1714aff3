// Resume: D2 of the design record (acquire-if-parked, the fence taken last),
// and AnswerPark, the one way every component answers a park.
#include "fence_protocol.h"
#include "json_access.h"
#include "once/runtime/runtime.h"
#include "once/store/read_log.h"
#include "run_state.h"

namespace once::runtime {

using internal::FenceProtocol;
using internal::FindWait;
using internal::Member;
using internal::Refused;
using internal::ResumeTarget;

using events::KernelKind;
using internal::RunState;
using store::AppendRequest;
using store::Capability;

namespace {

ResumeTarget TargetOf(const RunOptions& options, std::optional<int64_t> expect_park,
                      const std::optional<std::string>& topic) {
  return ResumeTarget{
      .park_seq = options.fence_if_parked_at ? options.fence_if_parked_at : expect_park,
      .topic = topic};
}

}  // namespace

Result<RunOutcome> Runtime::Resume(std::string_view id, RunOptions options) {
  Outermost outermost(*this);
  return ResumeImpl(id, "", options, {});
}

Result<RunOutcome> Runtime::ResumeAs(std::string_view id, std::string_view principal,
                                     RunOptions options) {
  Outermost outermost(*this);
  return ResumeImpl(id, principal, options, {});
}

Result<RunOutcome> Runtime::ResumeWithLog(std::string_view id, std::vector<Envelope> log,
                                          RunOptions options) {
  ONCE_RETURN_IF_ERROR(CheckLogInHand(id, log));
  Outermost outermost(*this);
  return ResumeImpl(id, "", options, {.log_in_hand = &log});
}

Result<RunOutcome> Runtime::Deliver(std::string_view id, std::string_view topic, Json message,
                                    RunOptions options) {
  Outermost outermost(*this);
  ONCE_RETURN_IF_ERROR(CheckDepth(message, "the message", id));
  ResumeExtras extras{.topic = std::string(topic), .message = std::move(message)};
  return ResumeImpl(id, "", options, extras);
}

std::optional<int64_t> Runtime::FirstAcquireToken(const RunOptions& options,
                                                  const ResumeExtras& extras) const {
  if (!options.fence_if_parked_at || extras.log_in_hand ||
      !store_.Supports(Capability::kAcquireFenceIfReadTail)) {
    return std::nullopt;
  }
  return extras.acquire_first && extras.expect_fence ? extras.expect_fence : options.park_fence;
}

// A caller's log: ascending, contiguous, this execution's.
Status Runtime::CheckLogInHand(std::string_view id, std::span<const Envelope> log) {
  for (size_t i = 0; i < log.size(); ++i) {
    const Envelope& e = log[i];
    if (!e.execution_id.empty() && e.execution_id != id) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "the log in hand holds an event of " + e.execution_id, std::string(id));
    }
    if (i > 0 && e.sequence != log[i - 1].sequence + 1) {
      return MakeError(
          ErrorCode::kInvalidArgument,
          "the log in hand is not contiguous at sequence " + std::to_string(e.sequence),
          std::string(id));
    }
  }
  return Ok();
}

// A resume given the park's token answers first (RunOptions::park_fence);
// when its answer is refused with the park still open, or the token given
// is not the park's (a rival's, reported by a stale answer), the
// conditional acquire goes next, on the log read.
Result<RunOutcome> Runtime::ResumeImpl(std::string_view id, std::string_view principal,
                                       const RunOptions& options, const ResumeExtras& extras) {
  const std::optional<int64_t> given = FirstAcquireToken(options, extras);
  if (!options_.resume_answers_first || !given) {
    return ResumeAcquiring(id, principal, options, extras);
  }
  std::vector<Envelope> log;
  std::optional<int64_t> expect = given;
  ONCE_ASSIGN_OR_RETURN(std::optional<RunOutcome> answered,
                        ResumeAnsweringFirst(id, principal, options, extras, log, expect));
  if (answered) return std::move(*answered);
  ResumeExtras acquiring = extras;
  acquiring.log_in_hand = &log;
  acquiring.acquire_first = false;
  acquiring.expect_fence = expect;
  return ResumeAcquiring(id, principal, options, acquiring);
}

// The run's first append is the conditional step: under the park's own
// token (the store refuses it once anyone acquired since the park) at the
// park's sequence + 1 (refused once anything was appended after it), and
// made before the body's first effect (RunState::answer_unconfirmed). So
// the run's answer lands exactly when the acquire-if-parked would have
// succeeded, and a run whose answer did not land did nothing.
// Model: models/fence_resumer.pmh (the answer-first checks).
Result<std::optional<RunOutcome>> Runtime::ResumeAnsweringFirst(
    std::string_view id, std::string_view principal, const RunOptions& options,
    const ResumeExtras& extras, std::vector<Envelope>& log, std::optional<int64_t>& expect) {
  const ResumeTarget target = TargetOf(options, extras.expect_park, extras.topic);
  std::shared_ptr<void> running = HoldRunningHere(std::string(id));
  ONCE_ASSIGN_OR_RETURN(log, store::ReadLog(store_, id));
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, internal::CheckResumable(id, log, target));
  const int64_t park_token = FindOpenPark(log)->fence();
  if (park_token != expect) return std::optional<RunOutcome>();  // the token moved: acquire
  ONCE_ASSIGN_OR_RETURN(const Def* def, WorkflowOf(id, st));
  RunState run;
  ONCE_RETURN_IF_ERROR(PrepareResumedRun(run, id, std::move(st), *def, std::string(principal),
                                         std::move(log), internal::Fenced{.token = park_token},
                                         options, extras));
  Result<RunOutcome> out = Execute(run);
  const bool refused = !out && (out.error().code == ErrorCode::kStaleFence ||
                                out.error().code == ErrorCode::kSequenceConflict);
  if (!refused || !run.answer_unconfirmed) return out;  // an outcome, or the run's own error
  // Refused before anything of this run landed: a rival's answer makes the
  // park not-suspended; a park still open (a dead acquirer moved the token,
  // an ignorable append the head) is the conditional acquire's to take.
  const StaleFenceDetail* stale = out.error().As<StaleFenceDetail>();
  expect = stale ? std::optional<int64_t>(stale->current) : std::nullopt;
  ONCE_ASSIGN_OR_RETURN(log, store::ReadLog(store_, id));
  ONCE_RETURN_IF_ERROR(internal::CheckResumable(id, log, target));
  return std::optional<RunOutcome>();
}

Result<RunOutcome> Runtime::ResumeAcquiring(std::string_view id, std::string_view principal,
                                            const RunOptions& options, const ResumeExtras& extras) {
  const ResumeTarget target = TargetOf(options, extras.expect_park, extras.topic);
  // Running here from before the acquire (which names this node in the run
  // row) until the body ends: this node's own takeover must not claim the
  // run between the acquire and the body (it did: a second body ran the
  // next step beside the first, in one live process).
  std::shared_ptr<void> running = HoldRunningHere(std::string(id));
  int own_budget = options_.resume_attempts_max;
  int* budget = extras.budget ? extras.budget : &own_budget;
  FenceProtocol fence(store_);
  std::vector<Envelope> log;
  // Acquire-first: the token comes before any read, with the whole log.
  std::optional<internal::Fenced> fenced_first;
  std::optional<OwnRowWatch> watch;
  if (std::optional<int64_t> first = FirstAcquireToken(options, extras)) {
    ONCE_ASSIGN_OR_RETURN(fenced_first, fence.ForResume(id, log, options, Owner(), budget, first));
    watch.emplace(*this, fenced_first->owner_recorded);
  } else if (extras.log_in_hand) {
    log = std::move(*extras.log_in_hand);
  } else {
    ONCE_ASSIGN_OR_RETURN(log, store::ReadLog(store_, id));
  }
  Result<ExecutionState> resumable = internal::CheckResumable(id, log, target);
  if (!resumable && extras.log_in_hand) {
    // A log read earlier may be stale: refuse only on the current one.
    ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
    resumable = internal::CheckResumable(id, log, target);
  }
  ONCE_RETURN_IF_ERROR(resumable);
  ExecutionState st = std::move(*resumable);
  ONCE_ASSIGN_OR_RETURN(const Def* def, WorkflowOf(id, st));
  std::string actor(principal);  // fixed before the acquire: the fence is the last step
  const bool acquires = options.fence_if_parked_at && store_.Supports(Capability::kAcquireFence);
  internal::Fenced fenced;
  if (fenced_first) {
    fenced = *fenced_first;  // the log came with the token: checked above
  } else {
    ONCE_ASSIGN_OR_RETURN(fenced,
                          fence.ForResume(id, log, options, Owner(), budget, extras.expect_fence));
  }
  // The acquire may have named this node: until the body runs, an error
  // leaves that row with no body here.
  if (!watch) watch.emplace(*this, fenced.owner_recorded);
  if (!fenced_first && (acquires || extras.log_in_hand)) {
    // Under the new token (or on a view read earlier): advance the view by
    // the tail and re-check on it, so the run appends after whatever
    // (ignorable) landed since the first read. A held token or none was
    // taken before the read above: that view is already fresh. The
    // combined acquire has advanced it already.
    if (!fenced.fresh) ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
    ONCE_RETURN_IF_ERROR(internal::CheckResumable(id, log, target));
  }
  RunState run;
  ONCE_RETURN_IF_ERROR(PrepareResumedRun(run, id, std::move(st), *def, std::move(actor),
                                         std::move(log), fenced, options, extras));
  watch->Disarm();  // the body releases the row, or marks it unsure
  return Execute(run);
}

Status Runtime::PrepareResumedRun(RunState& run, std::string_view id, ExecutionState st,
                                  const Def& def, std::string actor, std::vector<Envelope> log,
                                  const internal::Fenced& fenced, const RunOptions& options,
                                  const ResumeExtras& extras) {
  // A reference into the log: moving the log into the run below keeps its
  // elements where they are, and nothing is added to it before the last use.
  const Envelope& park = *FindOpenPark(log);
  Answer answer;
  if (extras.topic) {
    answer = Answer{*FindWait(park, "message", "topic", *extras.topic), extras.message};
  } else if (options.answer) {
    answer = *options.answer;
  } else {
    ONCE_ASSIGN_OR_RETURN(answer, DefaultAnswer(id, park));
  }
  run.id = id;
  run.workflow = std::move(st.workflow);
  run.fn = &def.fn;
  run.input = std::move(st.input);
  run.parent = std::move(st.parent);
  run.principal = std::move(actor);
  run.head = log.back().sequence;
  run.fence = fenced.token;
  run.owner = Owner();
  run.owner_recorded = fenced.owner_recorded;
  run.log = std::move(log);
  if (extras.topic) {
    run.pending.push_back(
        run.Kernel(KernelKind::kMessageConsumed,
                   events::JsonObject("topic", *extras.topic, "message", extras.message)));
  }
  Json payload = events::JsonObject("park_seq", park.sequence, "wait", std::move(answer.wait),
                                    "value", std::move(answer.value));
  if (!run.principal.empty()) payload["by"] = run.principal;
  Envelope resumed = run.Kernel(KernelKind::kExecutionResumed, std::move(payload));
  resumed.sequence = run.head + 1 + static_cast<int64_t>(run.pending.size());
  run.log.push_back(resumed);  // the replay sees the answer; appended with the first flush
  resumed.sequence = 0;
  run.pending.push_back(std::move(resumed));
  run.answer_unconfirmed = true;
  return Ok();
}

Result<Answer> Runtime::DefaultAnswer(std::string_view id, const Envelope& park) {
  if (const Json* timer = FindWait(park, "timer")) return Answer{*timer, Json()};
  ONCE_ASSIGN_OR_RETURN(std::optional<Answer> children, ChildAnswer(id, park));
  if (children) return std::move(*children);
  return Answer{};  // nothing answered: the body parks again
}

// ---- AnswerPark ------------------------------------------------------------------

Result<ParkAnswered> Runtime::AnswerPark(std::string_view id, ParkAnswer request) {
  Outermost outermost(*this);
  ParkAnswered out;
  const int budget_max =
      request.attempts_max > 0 ? request.attempts_max : options_.resume_attempts_max;
  int budget = budget_max;
  RunOptions options{.answer = request.answer};
  ResumeExtras extras{
      .topic = request.topic, .message = request.message, .log_in_hand = request.log_in_hand};
  int64_t park_seq = request.park_seq;
  std::vector<Envelope> read;  // the log, when the open park is read here
  if (park_seq == 0) {
    if (!request.log_in_hand) {
      ONCE_ASSIGN_OR_RETURN(read, store::ReadLog(store_, id));
      extras.log_in_hand = &read;  // handed on to the resume
    }
    ONCE_RETURN_IF_ERROR(Fold(*extras.log_in_hand));
    const Envelope* park = FindOpenPark(*extras.log_in_hand);
    if (!park) return out;  // noop: nothing to answer
    park_seq = park->sequence;
  }
  auto done = [&](Result<RunOutcome> r, ParkVerdict v) -> Result<ParkAnswered> {
    out.verdict = v;
    out.attempts = budget_max - budget;
    if (r) out.outcome = std::move(*r);
    return out;
  };
  // 1. Unfenced, when asked: an execution nobody fenced stays unfenced.
  if (request.unfenced_first) {
    extras.expect_park = park_seq;
    Result<RunOutcome> r = ResumeImpl(id, "", options, extras);
    extras.log_in_hand = nullptr;  // taken by the try
    if (std::optional<ParkVerdict> v = internal::VerdictOf(r); v && *v != ParkVerdict::kContended) {
      return done(std::move(r), *v);
    }
    if (!r && r.error().code != ErrorCode::kStaleFence &&
        r.error().code != ErrorCode::kSequenceConflict) {
      return std::unexpected(r.error());
    }
    if (const StaleFenceDetail* stale = r ? nullptr : r.error().As<StaleFenceDetail>()) {
      extras.expect_fence = stale->current;  // the token to expect, not the park's
    }
  }
  // 2. Under the conditional acquire, within ONE budget of acquires: a
  // resume whose append lost after its acquire won (a rival fenced or
  // appended in between) is re-tried on a re-read of the park. The park's
  // own token, when the caller knows it, lets the first try acquire first.
  extras.budget = &budget;
  extras.expect_park.reset();
  if (request.park_fence && request.park_seq != 0 && !extras.log_in_hand &&
      !request.unfenced_first) {
    extras.expect_fence = request.park_fence;
    extras.acquire_first = true;
  }
  while (budget > 0) {
    options.fence_if_parked_at = park_seq;
    ++out.conditional_resumes;
    Result<RunOutcome> r = ResumeImpl(id, "", options, extras);
    extras.log_in_hand = nullptr;
    extras.acquire_first = false;
    if (std::optional<ParkVerdict> v = internal::VerdictOf(r)) return done(std::move(r), *v);
    if (r.error().code != ErrorCode::kStaleFence &&
        r.error().code != ErrorCode::kSequenceConflict) {
      return std::unexpected(r.error());
    }
    // A rival fenced behind our acquire: expect its token next (the park's
    // own is stale forever); one that appended first moved no token.
    const StaleFenceDetail* stale = r.error().As<StaleFenceDetail>();
    extras.expect_fence = stale ? std::optional<int64_t>(stale->current) : std::nullopt;
    // Only the same park is tried again: a park answered by a rival (and
    // perhaps a new one opened since) is not ours to answer, and an answer
    // such as a message was meant for this park alone.
    ONCE_ASSIGN_OR_RETURN(std::optional<Park> park, LocatePark(id));
    if (!park || park->sequence != park_seq) {
      return done(std::unexpected(r.error()), ParkVerdict::kNoop);
    }
  }
  return done(MakeError(ErrorCode::kResumeContended, "contended"), ParkVerdict::kContended);
}

// The runtime's own answer to a parent whose children are done: an unfenced
// try first, then the conditional acquire; a lost race is not an error, a
// contended one goes to on_error (App hands it to the supervisor's re-drive).
Status Runtime::ResumeParked(const std::string& id, int64_t park_seq, Answer answer,
                             std::vector<Envelope>* log_in_hand) {
  ONCE_ASSIGN_OR_RETURN(ParkAnswered answered,
                        AnswerPark(id, ParkAnswer{.park_seq = park_seq,
                                                  .answer = std::move(answer),
                                                  .unfenced_first = true,
                                                  .log_in_hand = log_in_hand}));
  if (answered.verdict == ParkVerdict::kContended) {
    return MakeError(ErrorCode::kResumeContended, "parent resume contended", id,
                     ResumeContendedDetail{answered.attempts});
  }
  return Ok();
}

// ---- Cancel ----------------------------------------------------------------------

Result<RunOutcome> Runtime::Cancel(std::string_view id, std::string_view reason,
                                   RunOptions options) {
  Outermost outermost(*this);
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store_, id));
  if (log.empty()) return Refused(id, "unknown-execution");
  ONCE_ASSIGN_OR_RETURN(ExecutionState before, Fold(log));
  if (IsTerminal(before.status)) return Refused(id, "terminal");
  if (options.fence_if_parked_at) {
    ONCE_RETURN_IF_ERROR(internal::CheckResumable(id, log, TargetOf(options, {}, {})));
  }
  int budget = options_.resume_attempts_max;
  FenceProtocol fence(store_);
  ONCE_ASSIGN_OR_RETURN(internal::Fenced fenced, fence.ForResume(id, log, options, {}, &budget));
  if (!fenced.fresh) ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
  const int64_t token = fenced.token;
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, Fold(log));
  if (IsTerminal(st.status)) return Refused(id, "terminal");
  // Owned: the end deletes whatever run row the execution has.
  AppendRequest req{.execution_id = std::string(id), .expected_next = st.head + 1};
  req.events.push_back(
      events::KernelEvent(KernelKind::kExecutionCancelled, Json{{"reason", reason}}, token));
  req.fence = token;
  req.owner = Owner();
  ONCE_RETURN_IF_ERROR(Commit(std::move(req)));
  if (options_.on_terminal) options_.on_terminal(std::string(id), ExecutionStatus::kCancelled);
  if (!st.parent.is_null()) {
    Schedule([this, parent = st.parent] { NotifyParent(parent); });
  }
  return RunOutcome{std::string(id), ExecutionStatus::kCancelled, Json{{"reason", reason}},
                    std::nullopt};
}

}  // namespace once::runtime
