#include "once/runtime/log_view.h"

#include <algorithm>

#include "json_access.h"
#include "once/events/kernel_payload.h"
#include "run_state.h"

namespace once::runtime {

using events::KernelKind;

std::string_view StatusName(ExecutionStatus s) {
  switch (s) {
    case ExecutionStatus::kUnknown:
      return "unknown";
    case ExecutionStatus::kRunning:
      return "running";
    case ExecutionStatus::kSuspended:
      return "suspended";
    case ExecutionStatus::kCompleted:
      return "completed";
    case ExecutionStatus::kFailed:
      return "failed";
    case ExecutionStatus::kCancelled:
      return "cancelled";
    case ExecutionStatus::kContinued:
      return "continued";
  }
  return "unknown";
}

bool IsTerminal(ExecutionStatus s) {
  return s == ExecutionStatus::kCompleted || s == ExecutionStatus::kFailed ||
         s == ExecutionStatus::kCancelled || s == ExecutionStatus::kContinued;
}

namespace {

using internal::Member;

void Apply(ExecutionState& st, const Envelope& e, KernelKind kind) {
  switch (kind) {
    case KernelKind::kExecutionStarted: {
      st.status = ExecutionStatus::kRunning;
      const Json& workflow = Member(e.payload, "workflow");
      st.workflow = workflow.is_string() ? workflow.get<std::string>() : std::string();
      st.input = Member(e.payload, "input");
      st.parent = Member(e.payload, "parent");
      break;
    }
    case KernelKind::kExecutionSuspended:
      st.status = ExecutionStatus::kSuspended;
      st.park_seq = e.sequence;
      return;
    case KernelKind::kExecutionResumed:
      st.status = ExecutionStatus::kRunning;
      break;
    case KernelKind::kExecutionCompleted:
      st.status = ExecutionStatus::kCompleted;
      st.result = e.payload;
      break;
    case KernelKind::kExecutionFailed:
      st.status = ExecutionStatus::kFailed;
      st.result = e.payload;
      break;
    case KernelKind::kExecutionCancelled:
      st.status = ExecutionStatus::kCancelled;
      st.result = e.payload;
      break;
    case KernelKind::kExecutionContinued:
      st.status = ExecutionStatus::kContinued;
      st.result = e.payload;
      break;
    default:
      return;
  }
  st.park_seq.reset();
}

std::optional<KernelKind> KernelKindOf(const Envelope& e) {
  if (std::optional<KernelKind> k = e.kind.interned()) return k;
  return events::ParseKernelKind(e.kind.view());
}

}  // namespace

Result<ExecutionState> Fold(std::span<const Envelope> events) {
  ExecutionState st;
  for (const Envelope& e : events) {
    if (st.status == ExecutionStatus::kUnknown && !e.Is(KernelKind::kExecutionStarted)) {
      st.status = ExecutionStatus::kRunning;  // a truncated prefix
    }
    std::optional<KernelKind> kind = KernelKindOf(e);
    if (kind) {
      if (std::optional<std::string> problem = events::KernelPayloadProblem(*kind, e.payload)) {
        return MakeError(
            ErrorCode::kCorruption,
            "the log cannot be read: event " + std::to_string(e.sequence) + ": " + *problem,
            e.execution_id);
      }
      if (!IsTerminal(st.status) || !e.answering()) Apply(st, e, *kind);
    }
    st.head = e.sequence;
  }
  return st;
}

const Envelope* FindOpenPark(std::span<const Envelope> events) {
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    if (!it->answering()) continue;
    return it->Is(KernelKind::kExecutionSuspended) ? &*it : nullptr;
  }
  return nullptr;
}

bool AnsweredAfter(std::span<const Envelope> events, int64_t seq) {
  for (auto it = events.rbegin(); it != events.rend() && it->sequence > seq; ++it) {
    if (it->answering()) return true;
  }
  return false;
}

std::string ChildExecutionId(std::string_view parent_id, std::string_view key) {
  std::string out(parent_id);
  out += '/';
  out += key;
  return out;
}

std::optional<Json> ChildResult(const ExecutionState& child) {
  switch (child.status) {
    case ExecutionStatus::kCompleted:
      return events::JsonObject("status", "completed", "value", Member(child.result, "value"));
    case ExecutionStatus::kFailed:
      return events::JsonObject("status", "failed", "error", Member(child.result, "error"));
    case ExecutionStatus::kCancelled:
      return events::JsonObject("status", "cancelled");
    case ExecutionStatus::kContinued:
      return events::JsonObject("status", "continued", "next", Member(child.result, "next"));
    default:
      return std::nullopt;
  }
}

namespace internal {

const Envelope* NextBodyEvent(RunState& run) {
  while (!run.live && run.cursor < run.log.size()) {
    const Envelope& e = run.log[run.cursor++];
    if (IsBodyEvent(e)) return &e;
  }
  run.live = true;
  return nullptr;
}

bool HasNextBodyEvent(const RunState& run) {
  if (run.live) return false;
  return std::any_of(run.log.begin() + static_cast<std::ptrdiff_t>(run.cursor), run.log.end(),
                     IsBodyEvent);
}

bool IsBodyEvent(const Envelope& e) {
  auto kind = events::ParseKernelKind(e.kind);
  if (!kind) {
    if (e.is_kernel()) return false;  // a newer node's kernel kind
    const Json& extra = e.metadata.extra;
    auto it = extra.is_object() ? extra.find("emit") : extra.end();
    return it != extra.end() && it->is_boolean() && it->get<bool>();
  }
  switch (*kind) {
    case KernelKind::kStepCompleted:
    case KernelKind::kStepFailed:
    case KernelKind::kChildStarted:
    case KernelKind::kExecutionSuspended:
    case KernelKind::kExecutionResumed:
      return true;
    default:
      return false;
  }
}

Error ErrorFromJson(const Json& j, std::string subject) {
  ErrorCode code = ErrorCode::kInternal;
  const Json& name_json = Member(j, "code");
  const Json& message_json = Member(j, "message");
  std::string name = name_json.is_string() ? name_json.get<std::string>() : "";
  for (int c = 0; c <= static_cast<int>(ErrorCode::kAlreadyExists); ++c) {
    if (ErrorCodeName(static_cast<ErrorCode>(c)) == name) code = static_cast<ErrorCode>(c);
  }
  std::string message = message_json.is_string() ? message_json.get<std::string>() : "";
  return Error{code, std::move(message), std::move(subject), {}};
}

Json ErrorToJson(const Error& e) {
  return Json{{"code", std::string(ErrorCodeName(e.code))}, {"message", e.message}};
}

}  // namespace internal
}  // namespace once::runtime
