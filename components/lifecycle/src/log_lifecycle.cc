#include "once/lifecycle/log_lifecycle.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "once/store/read_log.h"

namespace once::lifecycle {

using store::Envelope;

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
  const RetentionPolicy& policy = options_.policy;
  if (policy.mode == RetentionMode::kArchive && options_.archive == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "archive retention needs an archive store");
  }
  if (policy.page_executions == 0 || policy.batch_executions == 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "page_executions and batch_executions must be positive");
  }
  RetentionReport report;
  cutoff_ms_ = clock_.NowUnixMillis() - policy.age_ms_min;
  batch_.clear();
  size_t page_max = std::min(policy.page_executions, store_.limits().list_page_executions_max);
  store::EndedCursor after;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(store::EndedPage page, store_.ListEnded(cutoff_ms_, after, page_max));
    for (const store::EndedExecution& ended : page.executions) {
      ++report.examined;
      ONCE_RETURN_IF_ERROR(Handle(ended, report));
    }
    if (!page.next_after) break;
    after = std::move(*page.next_after);
  }
  ONCE_RETURN_IF_ERROR(FlushBatch(report));
  return report;
}

size_t LogLifecycle::BatchMax() const {
  return std::max<size_t>(
      1, std::min(options_.policy.batch_executions, store_.limits().delete_batch_executions_max));
}

Status LogLifecycle::Handle(const store::EndedExecution& ended, RetentionReport& report) {
  const std::string& id = ended.execution_id;
  // Listed twice (it ended twice): handled once.
  if (std::find(batch_.begin(), batch_.end(), id) != batch_.end()) return Ok();
  ++report.eligible;
  if (options_.pinned) {
    ONCE_ASSIGN_OR_RETURN(bool pinned, options_.pinned(id));
    if (pinned) {
      ++report.pinned;
      return Ok();
    }
  }
  if (options_.policy.mode == RetentionMode::kArchive) return ArchiveOne(id, report);
  batch_.push_back(id);
  if (batch_.size() >= BatchMax()) return FlushBatch(report);
  return Ok();
}

// Deletes the batch in one transaction. A refusal of the re-check
// (kNotFound) leaves that execution alone; any other refusal ends the pass.
Status LogLifecycle::FlushBatch(RetentionReport& report) {
  if (batch_.empty()) return Ok();
  std::vector<std::string> ids = std::move(batch_);
  batch_.clear();
  ONCE_ASSIGN_OR_RETURN(std::vector<Status> done, store_.DeleteEnded(ids, cutoff_ms_));
  ++report.batches;
  for (Status& one : done) {
    if (one) {
      ++report.deleted;
    } else if (one.error().code == ErrorCode::kNotFound) {
      ++report.gone;
    } else {
      return std::unexpected(std::move(one.error()));
    }
  }
  if (options_.policy.batch_pause_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.policy.batch_pause_ms));
  }
  return Ok();
}

// Archive mode, one execution at a time: copy, then delete under the same
// re-check as a batch.
Status LogLifecycle::ArchiveOne(const std::string& id, RetentionReport& report) {
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store_, id));
  if (log.empty()) {
    ++report.gone;
    return Ok();
  }
  ONCE_RETURN_IF_ERROR(Archive(id, log));
  std::string one[] = {id};
  ONCE_ASSIGN_OR_RETURN(std::vector<Status> done, store_.DeleteEnded(one, cutoff_ms_));
  ++report.batches;
  if (done.at(0)) {
    ++report.archived;
  } else if (done[0].error().code == ErrorCode::kNotFound) {
    ++report.gone;
  } else {
    return std::unexpected(std::move(done[0].error()));
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
