#include "once/store/memory_store.h"

#include <algorithm>

#include "once/store/validate.h"

namespace once::store {

MemoryEventStore::MemoryEventStore()
    : owned_clock_(std::make_unique<SystemClock>()), clock_(*owned_clock_) {}

MemoryEventStore::MemoryEventStore(Limits limits, const Clock& clock)
    : limits_(limits), clock_(clock) {}

MemoryEventStore::~MemoryEventStore() = default;

int64_t MemoryEventStore::FenceLocked(std::string_view id) const {
  auto it = fences_.find(id);
  return it == fences_.end() ? 0 : it->second;
}

Result<int64_t> MemoryEventStore::AppendLocked(const AppendRequest& req,
                                               const CheckedAppend& checked, GuardKind guard,
                                               int64_t token, bool movable) {
  int64_t current = FenceLocked(req.execution_id);
  if (guard == GuardKind::kIfUnchanged) {
    if (current != token) return StaleFence(req.execution_id, token, current);
  } else if (req.fence && *req.fence < current) {
    return StaleFence(req.execution_id, *req.fence, current);
  }
  auto it = logs_.find(req.execution_id);
  int64_t head = it == logs_.end() ? 0 : it->second.head;
  if (req.expected_next != head + 1) {
    return SequenceConflict(req.execution_id, head + 1, req.expected_next);
  }
  if (it == logs_.end()) {
    std::string key =
        movable ? std::move(const_cast<std::string&>(req.execution_id)) : req.execution_id;
    it = logs_.emplace(std::move(key), Log{}).first;
    sorted_ids_stale_ = true;
  }
  Log& log = it->second;
  log.events.reserve(log.events.size() + req.events.size());
  for (size_t i = 0; i < req.events.size(); ++i) {
    auto& source = const_cast<Envelope&>(req.events[i]);
    Envelope& e =
        movable ? log.events.emplace_back(std::move(source)) : log.events.emplace_back(source);
    e.execution_id.clear();  // kept once, as the map's key; ReadLocked fills it in
    e.sequence = req.expected_next + static_cast<int64_t>(i);
    if (e.time_ms == 0) e.time_ms = checked.now_ms;
    if (e.metadata.is_null()) e.metadata = Json::object();
  }
  log.head = req.expected_next + static_cast<int64_t>(req.events.size()) - 1;
  return log.head;
}

Result<int64_t> MemoryEventStore::Append(const AppendRequest& req) {
  ONCE_ASSIGN_OR_RETURN(CheckedAppend checked, CheckAppend(req, limits_, clock_));
  std::lock_guard<std::mutex> lock(mu_);
  return AppendLocked(req, checked, GuardKind::kFence, 0);
}

Result<int64_t> MemoryEventStore::Append(AppendRequest&& req) {
  ONCE_ASSIGN_OR_RETURN(CheckedAppend checked, CheckAppend(req, limits_, clock_));
  std::lock_guard<std::mutex> lock(mu_);
  return AppendLocked(req, checked, GuardKind::kFence, 0, /*movable=*/true);
}

Result<std::vector<Result<int64_t>>> MemoryEventStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  ONCE_RETURN_IF_ERROR(ValidateBatchShape(requests, limits_));
  // Check outside the lock; a request that fails its own checks fails alone.
  std::vector<Result<CheckedAppend>> checked;
  checked.reserve(requests.size());
  size_t bytes = 0;
  for (const auto& r : requests) {
    checked.push_back(CheckAppend(r, limits_, clock_));
    if (checked.back()) bytes += checked.back()->bytes;
  }
  ONCE_RETURN_IF_ERROR(CheckBatchBytes(bytes, limits_));
  std::vector<Result<int64_t>> out;
  out.reserve(requests.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!checked[i]) {
      out.push_back(std::unexpected(checked[i].error()));
    } else {
      out.push_back(AppendLocked(requests[i], *checked[i], GuardKind::kFence, 0));
    }
  }
  return out;
}

Result<std::vector<Envelope>> MemoryEventStore::ReadRange(std::string_view id, int64_t first,
                                                          int64_t last) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  std::lock_guard<std::mutex> lock(mu_);
  return ReadLocked(id, first, last);
}

Result<int64_t> MemoryEventStore::Head(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = logs_.find(id);
  return it == logs_.end() ? 0 : it->second.head;
}

Result<ExecutionPage> MemoryEventStore::ListExecutions(std::string_view after, size_t limit) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits_.list_page_executions_max);
  ExecutionPage page;
  std::lock_guard<std::mutex> lock(mu_);
  if (sorted_ids_stale_) {
    sorted_ids_.clear();
    sorted_ids_.reserve(logs_.size());
    for (const auto& [id, log] : logs_) sorted_ids_.push_back(id);
    std::sort(sorted_ids_.begin(), sorted_ids_.end());
    sorted_ids_stale_ = false;
  }
  for (auto it = std::upper_bound(sorted_ids_.begin(), sorted_ids_.end(), after);
       it != sorted_ids_.end(); ++it) {
    if (page.execution_ids.size() == limit) {
      page.next_after = page.execution_ids.back();
      break;
    }
    page.execution_ids.emplace_back(*it);
  }
  return page;
}

Status MemoryEventStore::DeleteExecution(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = logs_.find(id); it != logs_.end()) {
    logs_.erase(it);
    sorted_ids_stale_ = true;
  }
  if (auto it = fences_.find(id); it != fences_.end() && it->second == 0) fences_.erase(it);
  return Ok();
}

Result<int64_t> MemoryEventStore::AcquireFence(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fences_.find(id);
  if (it == fences_.end()) it = fences_.emplace(std::string(id), 0).first;
  return ++it->second;
}

Result<int64_t> MemoryEventStore::ReadFence(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  std::lock_guard<std::mutex> lock(mu_);
  return FenceLocked(id);
}

ConditionalAcquire MemoryEventStore::AcquireIfLocked(std::string_view id, FenceExpectation expect) {
  int64_t current = FenceLocked(id);
  if (current != expect.fence) return ConditionalAcquire{.stale = true, .fence = current};
  if (auto it = logs_.find(id); it != logs_.end()) {
    const auto& events = it->second.events;
    auto tail = std::upper_bound(events.begin(), events.end(), expect.park_seq,
                                 [](int64_t seq, const Envelope& e) { return seq < e.sequence; });
    for (; tail != events.end(); ++tail) {
      if (tail->answering()) return ConditionalAcquire{.stale = true, .fence = current};
    }
  }
  int64_t next = current + 1;
  if (auto it = fences_.find(id); it != fences_.end()) {
    it->second = next;
  } else {
    fences_.emplace(std::string(id), next);
  }
  return ConditionalAcquire{.stale = false, .fence = next};
}

std::vector<Envelope> MemoryEventStore::ReadLocked(std::string_view id, int64_t first,
                                                   int64_t last) const {
  std::vector<Envelope> out;
  auto it = logs_.find(id);
  if (it == logs_.end() || it->second.events.empty()) return out;
  const auto& events = it->second.events;
  int64_t base = events.front().sequence;
  int64_t from = std::max(first, base);
  int64_t to = std::min(last, it->second.head);
  if (from > to) return out;
  auto count = std::min(static_cast<size_t>(to - from + 1), limits_.read_events_max);
  auto begin = events.begin() + (from - base);
  out.assign(begin, begin + static_cast<std::ptrdiff_t>(count));
  for (Envelope& e : out) e.execution_id = it->first;
  return out;
}

Result<ConditionalAcquire> MemoryEventStore::AcquireFenceIf(std::string_view id,
                                                            FenceExpectation expect) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, expect, limits_));
  std::lock_guard<std::mutex> lock(mu_);
  return AcquireIfLocked(id, expect);
}

Result<AcquireWithTail> MemoryEventStore::AcquireFenceIfReadTail(std::string_view id,
                                                                 FenceExpectation expect,
                                                                 int64_t read_after) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, expect, limits_, read_after));
  std::lock_guard<std::mutex> lock(mu_);
  AcquireWithTail out{.acquire = AcquireIfLocked(id, expect)};
  out.tail = ReadLocked(id, read_after + 1, kToEnd);
  return out;
}

Result<int64_t> MemoryEventStore::AppendIfUnchanged(const AppendRequest& req, int64_t observed) {
  ONCE_ASSIGN_OR_RETURN(CheckedAppend checked, CheckAppend(req, limits_, clock_));
  std::lock_guard<std::mutex> lock(mu_);
  return AppendLocked(req, checked, GuardKind::kIfUnchanged, observed);
}

Status MemoryEventStore::CopyPrefix(std::string_view from, std::string_view to, int64_t through) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(from, limits_));
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(to, limits_));
  if (through < 1) return MakeError(ErrorCode::kInvalidArgument, "through must be >= 1");
  std::lock_guard<std::mutex> lock(mu_);
  auto src = logs_.find(from);
  if (src == logs_.end() || src->second.head < through || src->second.events.empty() ||
      src->second.events.front().sequence != 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "source has no complete prefix through " + std::to_string(through),
                     std::string(from));
  }
  if (auto dst = logs_.find(to); dst != logs_.end() && dst->second.head > 0) {
    return SequenceConflict(to, dst->second.head + 1, 1);
  }
  Log copy;
  copy.events.assign(src->second.events.begin(), src->second.events.begin() + through);
  copy.head = through;
  bool added = logs_.insert_or_assign(std::string(to), std::move(copy)).second;
  if (added) sorted_ids_stale_ = true;
  return Ok();
}

Status MemoryEventStore::TruncatePrefixKeeping(std::string_view id, int64_t first_kept) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  if (first_kept < 1) return MakeError(ErrorCode::kInvalidArgument, "first_kept must be >= 1");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = logs_.find(id);
  if (it == logs_.end()) return Ok();
  auto& events = it->second.events;
  first_kept = std::min(first_kept, it->second.head);  // the newest event stays
  auto keep = std::lower_bound(events.begin(), events.end(), first_kept,
                               [](const Envelope& e, int64_t seq) { return e.sequence < seq; });
  events.erase(events.begin(), keep);
  return Ok();
}

}  // namespace once::store
