#include "once/queues/memory_queue_store.h"

#include <algorithm>

namespace once::queues {

MemoryQueueStore::MemoryQueueStore(const Clock& clock, QueueLimits limits)
    : clock_(clock), limits_(limits) {}

MemoryQueueStore::Queue& MemoryQueueStore::QueueLocked(std::string_view name) {
  auto it = queues_.find(name);
  if (it == queues_.end()) {
    it = queues_.emplace(std::string(name), Queue{.config = {.name = std::string(name)}}).first;
  }
  return it->second;
}

Status MemoryQueueStore::Configure(const QueueConfig& config) {
  ONCE_RETURN_IF_ERROR(ValidateQueueConfig(config, limits_));
  std::lock_guard lock(mu_);
  QueueLocked(config.name).config = config;
  return Ok();
}

Result<std::vector<QueueConfig>> MemoryQueueStore::Queues() {
  std::lock_guard lock(mu_);
  std::vector<QueueConfig> out;
  for (const auto& [name, q] : queues_) out.push_back(q.config);
  return out;
}

Result<Enqueued> MemoryQueueStore::EnqueueLocked(const EnqueueRequest& r, int64_t now_ms) {
  ONCE_RETURN_IF_ERROR(ValidateEnqueue(r, limits_));
  if (auto it = items_.find(r.execution_id); it != items_.end()) {
    return Enqueued{.seq = it->second.seq, .existing = true};
  }
  if (!r.dedup_key.empty()) {
    for (const auto& [id, item] : items_) {
      if (item.queue == r.queue && item.dedup_key == r.dedup_key) {
        return DedupTaken(r.queue, r.dedup_key, id);
      }
    }
  }
  QueueLocked(r.queue);
  QueueItem item{.queue = r.queue,
                 .workflow = r.workflow,
                 .execution_id = r.execution_id,
                 .input = r.input,
                 .priority = r.priority,
                 .dedup_key = r.dedup_key,
                 .seq = next_seq_++,
                 .enqueued_at_ms = now_ms,
                 .visible_at_ms = now_ms + r.delay_ms};
  int64_t seq = item.seq;
  items_.emplace(r.execution_id, std::move(item));
  return Enqueued{.seq = seq};
}

Result<Enqueued> MemoryQueueStore::Enqueue(const EnqueueRequest& request) {
  int64_t now = clock_.NowUnixMillis();
  std::lock_guard lock(mu_);
  return EnqueueLocked(request, now);
}

Result<std::vector<Result<Enqueued>>> MemoryQueueStore::EnqueueMany(
    std::span<const EnqueueRequest> requests) {
  ONCE_RETURN_IF_ERROR(ValidateBatch(requests.size(), limits_));
  int64_t now = clock_.NowUnixMillis();
  std::lock_guard lock(mu_);
  std::vector<Result<Enqueued>> out;
  for (const EnqueueRequest& r : requests) out.push_back(EnqueueLocked(r, now));
  return out;
}

Result<std::vector<QueueItem>> MemoryQueueStore::Claim(const ClaimRequest& req) {
  ONCE_RETURN_IF_ERROR(ValidateClaim(req, limits_));
  int64_t now = clock_.NowUnixMillis();
  std::lock_guard lock(mu_);
  Queue& q = QueueLocked(req.queue);
  size_t claimed = 0, mine = 0;
  std::vector<QueueItem*> pending;
  for (auto& [id, item] : items_) {
    if (item.queue != req.queue) continue;
    if (!item.claimed_by.empty()) {
      ++claimed;
      mine += item.claimed_by == req.node;
    } else if (item.visible_at_ms <= now) {
      pending.push_back(&item);
    }
  }
  RateRoom rate = RateRoomAt(q.config, now, q.window_start_ms, q.window_count);
  size_t room =
      ClaimRoom(q.config, std::min(req.limit, limits_.claim_items_max), claimed, mine, rate);
  std::sort(pending.begin(), pending.end(), [](const QueueItem* a, const QueueItem* b) {
    return a->priority != b->priority ? a->priority > b->priority : a->seq < b->seq;
  });
  std::vector<QueueItem> out;
  for (size_t i = 0; i < pending.size() && out.size() < room; ++i) {
    pending[i]->claimed_by = req.node;
    pending[i]->claimed_at_ms = now;
    out.push_back(*pending[i]);
  }
  if (q.config.rate_max > 0) {
    size_t used = q.window_start_ms == rate.window_start_ms ? q.window_count : 0;
    q.window_start_ms = rate.window_start_ms;
    q.window_count = used + out.size();
  }
  return out;
}

Status MemoryQueueStore::Complete(std::span<const std::string> execution_ids) {
  ONCE_RETURN_IF_ERROR(ValidateBatch(execution_ids.size(), limits_));
  std::lock_guard lock(mu_);
  for (const std::string& id : execution_ids) items_.erase(id);
  return Ok();
}

Status MemoryQueueStore::Release(std::span<const std::string> execution_ids) {
  ONCE_RETURN_IF_ERROR(ValidateBatch(execution_ids.size(), limits_));
  std::lock_guard lock(mu_);
  for (const std::string& id : execution_ids) {
    if (auto it = items_.find(id); it != items_.end()) {
      it->second.claimed_by.clear();
      it->second.claimed_at_ms = 0;
    }
  }
  return Ok();
}

Result<std::vector<QueueItem>> MemoryQueueStore::Claimed(std::string_view after, size_t limit) {
  limit = std::min(limit, limits_.items_page_max);
  std::lock_guard lock(mu_);
  std::vector<QueueItem> out;
  for (auto it = items_.upper_bound(after); it != items_.end() && out.size() < limit; ++it) {
    if (!it->second.claimed_by.empty()) out.push_back(it->second);
  }
  return out;
}

Result<std::vector<QueueItem>> MemoryQueueStore::Items(std::string_view queue,
                                                       std::string_view after, size_t limit) {
  ONCE_RETURN_IF_ERROR(ValidateQueueName(queue, limits_));
  limit = std::min(limit, limits_.items_page_max);
  std::lock_guard lock(mu_);
  std::vector<QueueItem> out;
  for (auto it = items_.upper_bound(after); it != items_.end() && out.size() < limit; ++it) {
    if (it->second.queue == queue) out.push_back(it->second);
  }
  return out;
}

Result<QueueCounts> MemoryQueueStore::Counts(std::string_view queue, std::string_view node) {
  std::lock_guard lock(mu_);
  QueueCounts c;
  for (const auto& [id, item] : items_) {
    if (item.queue != queue) continue;
    if (item.claimed_by.empty()) {
      ++c.pending;
    } else {
      ++c.claimed;
      c.claimed_by_node += item.claimed_by == node;
    }
  }
  return c;
}

Status MemoryQueueStore::PutSchedule(const ScheduleRow& row) {
  ONCE_RETURN_IF_ERROR(ValidateSchedule(row, limits_));
  std::lock_guard lock(mu_);
  auto it = schedules_.find(row.name);
  if (it == schedules_.end()) {
    if (schedules_.size() >= limits_.schedules_max) {
      return LimitError("schedules_max", static_cast<int64_t>(schedules_.size() + 1),
                        static_cast<int64_t>(limits_.schedules_max), row.name);
    }
    ScheduleRow fresh = row;
    fresh.last_tick_ms = 0;
    schedules_.emplace(row.name, std::move(fresh));
    return Ok();
  }
  int64_t last = it->second.last_tick_ms;
  it->second = row;
  it->second.last_tick_ms = last;
  return Ok();
}

Result<std::vector<ScheduleRow>> MemoryQueueStore::Schedules() {
  std::lock_guard lock(mu_);
  std::vector<ScheduleRow> out;
  for (const auto& [name, row] : schedules_) out.push_back(row);
  return out;
}

Result<bool> MemoryQueueStore::AdvanceSchedule(std::string_view name, int64_t from_ms,
                                               int64_t to_ms) {
  if (to_ms <= from_ms) return MakeError(ErrorCode::kInvalidArgument, "to_ms must be > from_ms");
  std::lock_guard lock(mu_);
  auto it = schedules_.find(name);
  if (it == schedules_.end() || it->second.last_tick_ms != from_ms) return false;
  it->second.last_tick_ms = to_ms;
  return true;
}

}  // namespace once::queues
