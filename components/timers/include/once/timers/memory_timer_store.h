// File: memory_timer_store.h
//
// MemoryTimerStore: the reference TimerStore, in process memory.
//
//   MemoryTimerStore timers;
//   timers.Schedule({.execution_id = "x", .wake_at_ms = 1000});

#pragma once

#include <map>
#include <mutex>

#include "once/timers/timer_store.h"

namespace once::timers {

class MemoryTimerStore final : public TimerStore {
 public:
  explicit MemoryTimerStore(TimerLimits limits = {}) : limits_(limits) {}

  Status Schedule(const TimerRow& row) override;
  Result<std::vector<TimerRow>> Due(int64_t now_ms, size_t limit, bool include_redrive) override;
  Result<std::vector<TimerRow>> Claim(const ClaimRequest& req) override;
  Status Complete(const TimerKey& key) override;
  Status CompleteMany(std::span<const TimerKey> keys) override;
  Status Defer(const TimerKey& key, std::string_view owner, int64_t until_ms) override;
  Result<std::vector<TimerRow>> RowsOf(std::string_view execution_id) override;
  const TimerLimits& limits() const override { return limits_; }

 private:
  struct Slot {
    std::optional<Redrive> redrive;
    std::optional<TimerPark> park;
    std::string lease_owner;
    int64_t lease_until_ms = 0;
  };
  // Ordered by (wake_at_ms, execution_id): the due scan walks from the front.
  using Key = std::pair<int64_t, std::string>;

  void RetireLocked(const TimerKey& key);  // REQUIRES(mu_)

  TimerLimits limits_;
  std::mutex mu_;
  std::map<Key, Slot> rows_;  // GUARDED_BY(mu_)
};

}  // namespace once::timers
