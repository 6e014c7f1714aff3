// Resume: D2 of the design record (acquire-if-parked, the fence taken last).
#include <algorithm>

#include "json_access.h"
#include "once/runtime/runtime.h"
#include "once/store/read_log.h"
#include "run_state.h"

namespace once::runtime {

using internal::Member;
using internal::Refused;

using events::KernelKind;
using internal::RunState;
using store::AppendRequest;
using store::Capability;

namespace {

const Json* FindWait(const Envelope& park, std::string_view type, const char* key = nullptr,
                     std::string_view value = {}) {
  for (const Json& wait : Member(park.payload, "waits")) {
    if (Member(wait, "type") != type) continue;
    if (!key || Member(wait, key) == value) return &wait;
  }
  return nullptr;
}

// The envelope at `seq` in the (ascending) events in hand, or null.
const Envelope* InHand(std::span<const Envelope> log, int64_t seq) {
  auto it = std::lower_bound(log.begin(), log.end(), seq,
                             [](const Envelope& e, int64_t s) { return e.sequence < s; });
  return it != log.end() && it->sequence == seq ? &*it : nullptr;
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

// Refusals that need no token: unknown, terminal, not parked, not parked at
// the expected sequence, not waiting on the delivered topic.
Status Runtime::CheckResumable(std::string_view id, std::span<const Envelope> log,
                               const RunOptions& options, const ResumeExtras& extras) const {
  if (log.empty()) return Refused(id, "unknown-execution");
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, Fold(log));
  if (IsTerminal(st.status)) return Refused(id, "terminal");
  const Envelope* park = FindOpenPark(log);
  if (!park) return Refused(id, "not-suspended");
  std::optional<int64_t> expected =
      options.fence_if_parked_at ? options.fence_if_parked_at : extras.expect_park;
  if (expected && park->sequence != *expected) return Refused(id, "not-suspended");
  if (extras.topic && !FindWait(*park, "message", "topic", *extras.topic)) {
    return Refused(id, "not-suspended");
  }
  return Ok();
}

Result<RunOutcome> Runtime::ResumeImpl(std::string_view id, std::string_view principal,
                                       const RunOptions& options, const ResumeExtras& extras) {
  std::vector<Envelope> log;
  if (extras.log_in_hand) {
    log = std::move(*extras.log_in_hand);
  } else {
    ONCE_ASSIGN_OR_RETURN(log, store::ReadLog(store_, id));
  }
  Status resumable = CheckResumable(id, log, options, extras);
  if (!resumable && extras.log_in_hand) {
    // A log read earlier may be stale: refuse only on the current one.
    ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
    resumable = CheckResumable(id, log, options, extras);
  }
  ONCE_RETURN_IF_ERROR(resumable);
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, Fold(log));
  const Def* def = Find(st.workflow);
  if (!def)
    return MakeError(ErrorCode::kNotFound, "unknown workflow " + st.workflow, std::string(id));
  std::string actor(principal);  // fixed before the acquire: the fence is the last step
  const bool acquires = options.fence_if_parked_at && store_.Supports(Capability::kAcquireFence);
  ONCE_ASSIGN_OR_RETURN(Fenced fenced, TakeFence(id, log, options));
  if (acquires || extras.log_in_hand) {
    // Under the new token (or on a view read earlier): advance the view by
    // the tail and re-check on it, so the run appends after whatever
    // (ignorable) landed since the first read. A held token or none was
    // taken before the read above: that view is already fresh. The
    // combined acquire has advanced it already.
    if (!fenced.fresh) ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
    ONCE_RETURN_IF_ERROR(CheckResumable(id, log, options, extras));
  }
  const int64_t token = fenced.token;
  const Envelope park = *FindOpenPark(log);

  Answer answer;
  if (extras.topic) {
    answer = Answer{*FindWait(park, "message", "topic", *extras.topic), extras.message};
  } else if (options.answer) {
    answer = *options.answer;
  } else {
    ONCE_ASSIGN_OR_RETURN(answer, DefaultAnswer(id, park));
  }

  RunState run;
  run.id = id;
  run.workflow = std::move(st.workflow);
  run.fn = &def->fn;
  run.input = std::move(st.input);
  run.parent = std::move(st.parent);
  run.principal = std::move(actor);
  run.head = log.back().sequence;
  run.fence = token;
  run.log = std::move(log);
  if (extras.topic) {
    run.pending.push_back(run.Kernel(KernelKind::kMessageConsumed,
                                     Json{{"topic", *extras.topic}, {"message", extras.message}}));
  }
  Json payload{{"park_seq", park.sequence}, {"wait", answer.wait}, {"value", answer.value}};
  if (!run.principal.empty()) payload["by"] = run.principal;
  Envelope resumed = run.Kernel(KernelKind::kExecutionResumed, std::move(payload));
  resumed.sequence = run.head + 1 + static_cast<int64_t>(run.pending.size());
  run.log.push_back(resumed);  // the replay sees the answer; appended with the first flush
  resumed.sequence = 0;
  run.pending.push_back(std::move(resumed));
  return Execute(run);
}

Result<Answer> Runtime::DefaultAnswer(std::string_view id, const Envelope& park) {
  if (const Json* timer = FindWait(park, "timer")) return Answer{*timer, Json()};
  ONCE_ASSIGN_OR_RETURN(std::optional<Answer> children, ChildAnswer(id, park));
  if (children) return std::move(*children);
  return Answer{};  // nothing answered: the body parks again
}

Result<Runtime::Fenced> Runtime::TakeFence(std::string_view id, std::vector<Envelope>& log,
                                           const RunOptions& options) {
  if (!store_.Supports(Capability::kAcquireFence)) return Fenced{};  // a store that does not fence
  if (options.fence_if_parked_at) return AcquireIfParked(id, log, *options.fence_if_parked_at);
  if (options.fence) return Fenced{.token = *options.fence};
  return Fenced{};
}

Result<store::ConditionalAcquire> Runtime::AcquireOnce(std::string_view id,
                                                       std::vector<Envelope>& log,
                                                       store::FenceExpectation expect,
                                                       bool* fresh) {
  *fresh = false;
  if (!store_.Supports(Capability::kAcquireFenceIfReadTail)) {
    return store_.AcquireFenceIf(id, expect);
  }
  int64_t read_after = log.empty() ? 0 : log.back().sequence;
  ONCE_ASSIGN_OR_RETURN(store::AcquireWithTail got,
                        store_.AcquireFenceIfReadTail(id, expect, read_after));
  const bool complete = got.tail.size() < store_.limits().read_events_max;
  log.insert(log.end(), std::make_move_iterator(got.tail.begin()),
             std::make_move_iterator(got.tail.end()));
  if (!complete)
    ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));  // a long tail: page on
  *fresh = true;
  return got.acquire;
}

Result<Runtime::Fenced> Runtime::AcquireIfParked(std::string_view id, std::vector<Envelope>& log,
                                                 int64_t park_seq) {
  Envelope read;
  const Envelope* park = InHand(log, park_seq);
  if (!park) {
    ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> one, store_.ReadRange(id, park_seq, park_seq));
    if (one.empty()) return Refused(id, "not-suspended");
    read = std::move(one.front());
    park = &read;
  }
  if (!park->Is(KernelKind::kExecutionSuspended)) return Refused(id, "not-suspended");
  if (!store_.Supports(Capability::kAcquireFenceIf)) {
    ONCE_ASSIGN_OR_RETURN(int64_t token, store_.AcquireFence(id));
    return Fenced{.token = token};
  }
  store::FenceExpectation expect{park->fence(), park_seq};
  for (int attempt = 1; attempt <= options_.resume_attempts_max; ++attempt) {
    bool fresh = false;
    ONCE_ASSIGN_OR_RETURN(store::ConditionalAcquire got, AcquireOnce(id, log, expect, &fresh));
    if (!got.stale) return Fenced{.token = got.fence, .fresh = fresh};
    // Re-read the park (the combined acquire brought the tail along): still
    // the same unanswered one means the token moved only because someone
    // acquired and never appended; retry on the store's current token (the
    // envelope's is stale forever).
    if (!fresh) ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
    const Envelope* open = FindOpenPark(log);
    if (!open || open->sequence != park_seq) return Refused(id, "not-suspended");
    expect.fence = got.fence;
  }
  return MakeError(ErrorCode::kResumeContended,
                   "conditional acquire lost every attempt; retry later", std::string(id),
                   ResumeContendedDetail{options_.resume_attempts_max});
}

Result<RunOutcome> Runtime::Cancel(std::string_view id, std::string_view reason,
                                   RunOptions options) {
  Outermost outermost(*this);
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store_, id));
  if (log.empty()) return Refused(id, "unknown-execution");
  ONCE_ASSIGN_OR_RETURN(ExecutionState before, Fold(log));
  if (IsTerminal(before.status)) return Refused(id, "terminal");
  if (options.fence_if_parked_at) {
    ONCE_RETURN_IF_ERROR(CheckResumable(id, log, options, {}));
  }
  ONCE_ASSIGN_OR_RETURN(Fenced fenced, TakeFence(id, log, options));
  if (!fenced.fresh) ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
  const int64_t token = fenced.token;
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, Fold(log));
  if (IsTerminal(st.status)) return Refused(id, "terminal");
  AppendRequest req{.execution_id = std::string(id), .expected_next = st.head + 1};
  req.events.push_back(
      events::KernelEvent(KernelKind::kExecutionCancelled, Json{{"reason", reason}}, token));
  req.fence = token;
  ONCE_RETURN_IF_ERROR(Commit(std::move(req)));
  if (!st.parent.is_null()) {
    Schedule([this, parent = st.parent] { NotifyParent(parent); });
  }
  return RunOutcome{std::string(id), ExecutionStatus::kCancelled, Json{{"reason", reason}},
                    std::nullopt};
}

}  // namespace once::runtime
