#include "once/lifecycle/log_lifecycle.h"

#include <algorithm>

#include "once/events/kinds.h"
#include "once/store/read_log.h"

namespace once::lifecycle {

using store::Envelope;

namespace {

// The time of the event that ended the execution, or nullopt if it has not.
std::optional<int64_t> TerminalTimeMs(const std::vector<Envelope>& log) {
  for (auto it = log.rbegin(); it != log.rend(); ++it) {
    std::optional<events::KernelKind> k = events::ParseKernelKind(it->kind);
    if (!k || !it->is_kernel()) continue;
    if (events::Info(*k).terminal) return it->time_ms;
    if (events::Info(*k).effect == events::ParkEffect::kAnswering) return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

PinPredicate AnyPin(PinPredicate a, PinPredicate b) {
  if (!a) return b;
  if (!b) return a;
  return [a = std::move(a), b = std::move(b)](std::string_view id) -> Result<bool> {
    ONCE_ASSIGN_OR_RETURN(bool pa, a(id));
    if (pa) return true;
    return b(id);
  };
}

LogLifecycle::LogLifecycle(store::EventStore& store, const Clock& clock,
                           LogLifecycleOptions options)
    : store_(store), clock_(clock), options_(std::move(options)) {}

Result<RetentionReport> LogLifecycle::ApplyRetention() {
  if (options_.policy.mode == RetentionMode::kArchive && options_.archive == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "archive retention needs an archive store");
  }
  if (options_.policy.page_executions == 0) {
    return MakeError(ErrorCode::kInvalidArgument, "page_executions must be positive");
  }
  RetentionReport report;
  size_t page_max =
      std::min(options_.policy.page_executions, store_.limits().list_page_executions_max);
  std::string after;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(store::ExecutionPage page, store_.ListExecutions(after, page_max));
    for (const std::string& id : page.execution_ids) {
      ++report.examined;
      ONCE_RETURN_IF_ERROR(Handle(id, report));
    }
    if (page.next_after.empty()) break;
    after = page.next_after;
  }
  return report;
}

Status LogLifecycle::Handle(const std::string& id, RetentionReport& report) {
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store_, id));
  std::optional<int64_t> ended_ms = TerminalTimeMs(log);
  if (!ended_ms) return Ok();
  if (clock_.NowUnixMillis() - *ended_ms < options_.policy.age_ms_min) return Ok();
  ++report.eligible;
  if (options_.pinned) {
    ONCE_ASSIGN_OR_RETURN(bool pinned, options_.pinned(id));
    if (pinned) {
      ++report.pinned;
      return Ok();
    }
  }
  if (options_.policy.mode == RetentionMode::kArchive) {
    ONCE_RETURN_IF_ERROR(Archive(id, log));
    ONCE_RETURN_IF_ERROR(store_.DeleteExecution(id));
    ++report.archived;
  } else {
    ONCE_RETURN_IF_ERROR(store_.DeleteExecution(id));
    ++report.deleted;
  }
  return Ok();
}

Status LogLifecycle::Archive(const std::string& id, const std::vector<Envelope>& log) {
  store::EventStore& archive = *options_.archive;
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> there, store::ReadLog(archive, id));
  if (!there.empty()) {
    // A previous run copied it and failed before the delete.
    if (there == log) return Ok();
    return MakeError(ErrorCode::kCorruption, "the archive holds a different log of this id", id);
  }
  size_t per_append = std::max<size_t>(1, archive.limits().batch_events_max);
  for (size_t i = 0; i < log.size(); i += per_append) {
    store::AppendRequest req{
        .execution_id = id, .expected_next = log[i].sequence, .fence = std::nullopt};
    size_t end = std::min(log.size(), i + per_append);
    req.events.assign(log.begin() + static_cast<std::ptrdiff_t>(i),
                      log.begin() + static_cast<std::ptrdiff_t>(end));
    ONCE_RETURN_IF_ERROR(archive.Append(req));
  }
  return Ok();
}

}  // namespace once::lifecycle
