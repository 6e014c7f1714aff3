#include "once/timers/memory_timer_store.h"

#include <algorithm>

namespace once::timers {

Status MemoryTimerStore::Schedule(const TimerRow& row) {
  ONCE_RETURN_IF_ERROR(ValidateTimerRow(row));
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = rows_[{row.wake_at_ms, row.execution_id}];
  if (row.redrive) slot.redrive = row.redrive;  // COALESCE(new, old)
  if (row.park && (!slot.park || row.park->sequence >= slot.park->sequence)) {
    if (!slot.park || row.park->sequence > slot.park->sequence) slot.lease_until_ms = 0;
    slot.park = row.park;  // the newest park wins; a new one is a new, unleased wake
  }
  return Ok();
}

Result<std::vector<TimerRow>> MemoryTimerStore::Due(int64_t now_ms, size_t limit,
                                                    bool include_redrive) {
  limit = std::min(limit, limits_.claim_rows_max);
  std::vector<TimerRow> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = rows_.begin(); it != rows_.end() && out.size() < limit; ++it) {
    if (it->first.first > now_ms) break;
    if (!include_redrive && it->second.redrive) continue;
    out.push_back({it->first.second, it->first.first, it->second.redrive, it->second.park});
  }
  return out;
}

Result<std::vector<TimerRow>> MemoryTimerStore::Claim(const ClaimRequest& req) {
  ONCE_RETURN_IF_ERROR(ValidateClaim(req));
  size_t limit = std::min(req.limit, limits_.claim_rows_max);
  std::vector<TimerRow> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = rows_.begin(); it != rows_.end() && out.size() < limit; ++it) {
    if (it->first.first > req.now_ms + req.ahead_ms) break;
    Slot& slot = it->second;
    if (!req.include_redrive && slot.redrive) continue;
    if (slot.lease_until_ms > req.now_ms) continue;  // leased, even to this owner
    slot.lease_owner = req.owner;
    slot.lease_until_ms = req.now_ms + req.lease_ms;
    out.push_back({it->first.second, it->first.first, slot.redrive, slot.park});
  }
  return out;
}

void MemoryTimerStore::RetireLocked(const TimerKey& key) {
  auto it = rows_.find({key.wake_at_ms, key.execution_id});
  if (it == rows_.end()) return;
  const std::optional<TimerPark>& park = it->second.park;
  if (key.park_seq && park && park->sequence > *key.park_seq) return;  // a newer park
  rows_.erase(it);
}

Status MemoryTimerStore::Complete(const TimerKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  RetireLocked(key);
  return Ok();
}

Status MemoryTimerStore::CompleteMany(std::span<const TimerKey> keys) {
  ONCE_RETURN_IF_ERROR(ValidateCompleteMany(keys, limits_));
  std::lock_guard<std::mutex> lock(mu_);
  for (const TimerKey& key : keys) RetireLocked(key);
  return Ok();
}

Status MemoryTimerStore::Defer(const TimerKey& key, std::string_view owner, int64_t until_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rows_.find({key.wake_at_ms, key.execution_id});
  if (it != rows_.end() && it->second.lease_owner == owner) it->second.lease_until_ms = until_ms;
  return Ok();
}

Result<std::vector<TimerRow>> MemoryTimerStore::RowsOf(std::string_view execution_id) {
  std::vector<TimerRow> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, slot] : rows_) {
    if (key.second == execution_id) {
      out.push_back({key.second, key.first, slot.redrive, slot.park});
    }
  }
  return out;
}

}  // namespace once::timers
