#include "once/runtime/context.h"

#include "json_access.h"
#include "run_state.h"

namespace once::runtime {

using events::JsonArray;
using events::JsonObject;
using internal::IsString;
using internal::Member;
using internal::Refused;

using events::KernelKind;
using internal::ErrorFromJson;
using internal::ErrorToJson;
using internal::IsBodyEvent;
using internal::NextBodyEvent;

namespace {

// True if every member of `want` is equal in `got` (got may carry more).
bool Matches(const Json& got, const Json& want) {
  if (!got.is_object()) return false;
  for (auto it = want.begin(); it != want.end(); ++it) {
    if (Member(got, it.key().c_str()) != it.value()) return false;
  }
  return true;
}

std::string Describe(const Envelope& e) {
  std::string out = e.kind.str();
  if (const Json& name = Member(e.payload, "name"); name.is_string()) {
    out += " '" + name.get<std::string>() + "'";
  } else if (const Json& call = Member(e.payload, "call"); call.is_string()) {
    out += " (" + call.get<std::string>() + ")";
  }
  return out + " at sequence " + std::to_string(e.sequence);
}

std::string_view CallName(int call) {
  static constexpr std::string_view kNames[] = {"sleep", "await_child", "await_children",
                                                "receive"};
  return kNames[call];
}

}  // namespace

Context::Context(internal::RunHost& host, internal::RunState& run) : host_(host), run_(run) {}

const std::string& Context::execution_id() const { return run_.id; }
const std::string& Context::principal() const { return run_.principal; }
bool Context::parked() const { return run_.parked; }

std::unexpected<Error> Context::Latched() const { return std::unexpected(*run_.latched); }

std::unexpected<Error> Context::Fail(Error e) {
  run_.latched = std::move(e);
  return std::unexpected(*run_.latched);
}

std::unexpected<Error> Context::Diverged(std::string what) {
  run_.nondeterministic = true;
  return Fail(
      Error{ErrorCode::kNondeterminism, "replay diverged from the log: " + what, run_.id, {}});
}

Status Context::FlushBeforeEffect(bool everything) {
  everything = everything || run_.answer_unconfirmed;
  if (run_.pending.empty() || (!everything && !run_.step_result_pending)) return Ok();
  if (Status s = host_.Flush(run_); !s) return Fail(s.error());
  return Ok();
}

Result<Json> Context::ReplayStep(std::string_view name, const Envelope& e) {
  bool done = e.Is(KernelKind::kStepCompleted);
  if ((!done && !e.Is(KernelKind::kStepFailed)) || !IsString(Member(e.payload, "name"), name)) {
    return Diverged("step '" + std::string(name) + "' but the log has " + Describe(e));
  }
  if (done) return Member(e.payload, "value");
  return std::unexpected(ErrorFromJson(Member(e.payload, "error"), run_.id));
}

void Context::RecordStepFailure(std::string_view name, const Error& error) {
  run_.pending.push_back(run_.Kernel(
      KernelKind::kStepFailed, events::JsonObject("name", name, "error", ErrorToJson(error))));
  run_.step_result_pending = true;  // appended with the next boundary
}

Result<Json> Context::StepImpl(std::string_view name, StepFnRef fn) {
  if (run_.latched) return Latched();
  if (const Envelope* e = NextBodyEvent(run_)) return ReplayStep(name, *e);
  // The previous step's result is made durable before this fn runs; the
  // run's own EXECUTION_STARTED / EXECUTION_RESUMED need not be (a crash
  // here re-runs the fn, the same window as a crash inside it), except a
  // resume's answer (RunState::answer_unconfirmed). Then a
  // node whose lease is not fresh starts no step (nodes/node.h): the flush
  // is guarded by the fence, the step's effect is not.
  ONCE_RETURN_IF_ERROR(FlushBeforeEffect(/*everything=*/false));
  if (Status gate = host_.BeforeStep(run_); !gate) return Fail(gate.error());
  Result<Json> r = fn();
  if (r) {
    if (Status s = host_.CheckDepth(*r, "the step's value", run_.id, true); !s) {
      return Fail(s.error());  // not recorded: like a value the store refuses
    }
    run_.pending.push_back(
        run_.Kernel(KernelKind::kStepCompleted, events::JsonObject("name", name, "value", *r)));
    run_.step_result_pending = true;  // appended with the next boundary
  } else {
    RecordStepFailure(name, r.error());
  }
  return r;
}

Result<Json> Context::TransactionImpl(std::string_view name, TransactionFnRef fn) {
  if (run_.latched) return Latched();
  if (const Envelope* e = NextBodyEvent(run_)) return ReplayStep(name, *e);
  // Nothing is flushed first: what the run buffered commits in the step's
  // own transaction, with fn's writes and its record.
  if (!host_.SupportsTransaction()) {
    return MakeError(ErrorCode::kUnsupported,
                     "ctx.Transaction needs a store with kTransaction (SQLite, PostgreSQL)",
                     run_.id);
  }
  if (Status gate = host_.BeforeStep(run_); !gate) return Fail(gate.error());
  Result<internal::TransactOutcome> out = host_.Transact(run_, name, fn);
  if (!out) return Fail(out.error());  // refused or failed: nothing committed
  if (!out->committed) RecordStepFailure(name, out->value.error());
  return std::move(out->value);
}

Status Context::Emit(std::string_view kind, Json payload) {
  if (run_.latched) return Latched();
  ONCE_RETURN_IF_ERROR(
      host_.CheckDepth(payload, "the emitted payload", run_.id, /*wrapped=*/false));
  if (events::ParseKernelKind(kind)) {
    return MakeError(ErrorCode::kInvalidArgument, "Emit takes an application kind", run_.id);
  }
  if (const Envelope* e = NextBodyEvent(run_)) {
    if (e->kind != kind) {
      return Diverged("emit '" + std::string(kind) + "' but the log has " + Describe(*e));
    }
    return Ok();
  }
  Envelope ev = events::AppEvent(std::string(kind), std::move(payload));
  ev.metadata.extra["emit"] = true;
  ev.metadata.fence = run_.fence;
  run_.pending.push_back(std::move(ev));
  return Ok();
}

std::unexpected<Error> Context::Park(Call call, Json waits, Json extra) {
  Json payload = extra.is_object() ? std::move(extra) : Json::object();
  payload["call"] = CallName(static_cast<int>(call));
  payload["waits"] = std::move(waits);
  run_.pending.push_back(run_.Kernel(KernelKind::kExecutionSuspended, std::move(payload)));
  run_.parked = true;
  return Fail(Error{ErrorCode::kCancelled, "parked: return this error from the body", run_.id, {}});
}

// Replays a wait call: [SUSPENDED (call, waits), RESUMED (wait, value)]*
// until a resume answers `answer_wait`; parks when the log ends first.
Result<Json> Context::AwaitImpl(Call call, Json park, const Json& answer_wait, bool match_waits) {
  if (run_.latched) return Latched();
  std::string_view name = CallName(static_cast<int>(call));
  // Without match_waits, the last recorded park (its wake time), parked on
  // again if the log ends before an answer; copied only then (the log does
  // not change in this loop).
  const Json* recorded = nullptr;
  for (;;) {
    const Envelope* e = NextBodyEvent(run_);
    if (!e) {
      if (recorded) park = *recorded;
      Json waits = std::move(park["waits"]);
      park.erase("waits");
      return Park(call, std::move(waits), std::move(park));
    }
    if (!e->Is(KernelKind::kExecutionSuspended) || !IsString(Member(e->payload, "call"), name) ||
        (match_waits && Member(e->payload, "waits") != park["waits"])) {
      return Diverged(std::string(name) + " but the log has " + Describe(*e));
    }
    if (!match_waits) recorded = &e->payload;  // re-park on the recorded wait (wake time)
    const Envelope* r = NextBodyEvent(run_);
    if (!r) {  // the park is still open: stay parked, append nothing
      run_.parked = true;
      return Fail(Error{ErrorCode::kCancelled, "parked: the park is still open", run_.id, {}});
    }
    if (!r->Is(KernelKind::kExecutionResumed)) {
      return Diverged("a resume after the park but the log has " + Describe(*r));
    }
    if (Matches(Member(r->payload, "wait"), answer_wait)) return Member(r->payload, "value");
  }
}

Status Context::Sleep(Duration duration) { return SleepUntil(host_.clock().Now() + duration); }

Status Context::SleepUntil(TimePoint wake_at) {
  static const Json kAnswer = JsonObject("type", "timer");
  // Built only when this call parks anew: a replay re-parks on the recorded
  // wait (its wake time), so AwaitImpl never reads this one then.
  Json park;
  if (!internal::HasNextBodyEvent(run_)) {
    park = JsonObject("waits",
                      JsonArray(JsonObject("type", "timer", "wake_at_ms", ToUnixMillis(wake_at))));
  }
  ONCE_RETURN_IF_ERROR(AwaitImpl(Call::kSleep, std::move(park), kAnswer, false));
  return Ok();
}

Status Context::StartChild(std::string_view workflow, std::string_view key, Json input,
                           std::string_view group) {
  if (run_.latched) return Latched();
  if (Status s = host_.CheckDepth(input, "the child's input", run_.id, true); !s) {
    return Fail(s.error());
  }
  if (!group.empty()) groups_[std::string(group)].emplace_back(key);
  if (const Envelope* e = NextBodyEvent(run_)) {
    if (!e->Is(KernelKind::kChildStarted) || !IsString(Member(e->payload, "key"), key)) {
      return Diverged("child '" + std::string(key) + "' but the log has " + Describe(*e));
    }
    return Ok();
  }
  // The child's log names this execution as its parent: everything
  // buffered (the start included) is durable before the child exists.
  ONCE_RETURN_IF_ERROR(FlushBeforeEffect(/*everything=*/true));
  std::string child_id = ChildExecutionId(run_.id, key);
  Result<bool> run_here = host_.CreateChild(run_, workflow, key, child_id, input);
  if (!run_here) return Fail(run_here.error());
  Json payload =
      JsonObject("key", key, "workflow", workflow, "child_id", child_id, "input", std::move(input));
  if (!group.empty()) payload["group"] = group;
  run_.pending.push_back(run_.Kernel(KernelKind::kChildStarted, std::move(payload)));
  if (Status s = host_.Flush(run_); !s) {
    if (*run_here) host_.AbandonRedrive(child_id);
    return Fail(s.error());
  }
  if (*run_here) host_.ScheduleRedrive(std::move(child_id));
  return Ok();
}

Result<Json> Context::AwaitChild(std::string_view key) {
  Json wait = JsonObject("type", "child", "key", key);
  Json park = JsonObject("waits", JsonArray(wait));
  ONCE_ASSIGN_OR_RETURN(Json result, AwaitImpl(Call::kAwaitChild, std::move(park), wait, true));
  const Json& status = Member(result, "status");
  if (IsString(status, "completed")) return Member(result, "value");
  if (IsString(status, "failed")) {
    return std::unexpected(ErrorFromJson(Member(result, "error"), run_.id));
  }
  if (IsString(status, "cancelled")) {
    return MakeError(ErrorCode::kCancelled, "child '" + std::string(key) + "' was cancelled",
                     run_.id);
  }
  return result;  // continued: {"status":"continued","next":id}
}

Result<Json> Context::AwaitChildren(std::string_view group) {
  if (run_.latched) return Latched();
  Json waits = Json::array();
  if (auto it = groups_.find(group); it != groups_.end()) {
    for (const std::string& key : it->second)
      waits.push_back(JsonObject("type", "child", "key", key));
  }
  if (waits.empty()) return Json::object();
  Json park = JsonObject("group", group, "waits", std::move(waits));
  return AwaitImpl(Call::kAwaitChildren, std::move(park),
                   JsonObject("type", "children", "group", group), true);
}

Result<Json> Context::Receive(std::string_view topic) {
  Json wait = JsonObject("type", "message", "topic", topic);
  Json park = JsonObject("waits", JsonArray(wait));
  return AwaitImpl(Call::kReceive, std::move(park), wait, true);
}

Status Context::ContinueAsNew(Json input) {
  if (run_.latched) return Latched();
  if (Status s = host_.CheckDepth(input, "the next input", run_.id, true); !s) {
    return Fail(s.error());
  }
  run_.continue_input = std::move(input);
  run_.latched =
      Error{ErrorCode::kCancelled, "continued as new: return from the body", run_.id, {}};
  return Ok();
}

}  // namespace once::runtime
