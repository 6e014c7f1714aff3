// File: memory_queue_store.h
//
// MemoryQueueStore: the QueueStore in process memory (tests, and several
// Apps of one process playing nodes). One mutex; the injected clock.
//
//   MemoryQueueStore queues(clock);
//   queues.Enqueue({.queue = "q", .workflow = "w", .execution_id = "e-1"});

#pragma once

#include <map>
#include <mutex>

#include "once/base/clock.h"
#include "once/queues/queue_store.h"

namespace once::queues {

class MemoryQueueStore final : public QueueStore {
 public:
  // `clock` must outlive the store.
  explicit MemoryQueueStore(const Clock& clock, QueueLimits limits = {});

  Status Configure(const QueueConfig& config) override;
  Result<std::vector<QueueConfig>> Queues() override;
  Result<Enqueued> Enqueue(const EnqueueRequest& request) override;
  Result<std::vector<Result<Enqueued>>> EnqueueMany(
      std::span<const EnqueueRequest> requests) override;
  Result<std::vector<QueueItem>> Claim(const ClaimRequest& req) override;
  Status Complete(std::span<const std::string> execution_ids) override;
  Status Release(std::span<const std::string> execution_ids) override;
  Result<std::vector<QueueItem>> Claimed(std::string_view after, size_t limit) override;
  Result<std::vector<QueueItem>> Items(std::string_view queue, std::string_view after,
                                       size_t limit) override;
  Result<QueueCounts> Counts(std::string_view queue, std::string_view node) override;
  Status PutSchedule(const ScheduleRow& row) override;
  Result<std::vector<ScheduleRow>> Schedules() override;
  Result<bool> AdvanceSchedule(std::string_view name, int64_t from_ms, int64_t to_ms) override;
  Result<int64_t> NowMs() override { return clock_.NowUnixMillis(); }
  const QueueLimits& limits() const override { return limits_; }

 private:
  struct Queue {
    QueueConfig config;
    int64_t window_start_ms = 0;
    size_t window_count = 0;
  };
  Result<Enqueued> EnqueueLocked(const EnqueueRequest& request, int64_t now_ms);
  Queue& QueueLocked(std::string_view name);

  const Clock& clock_;
  const QueueLimits limits_;
  std::mutex mu_;
  std::map<std::string, Queue, std::less<>> queues_;           // GUARDED_BY(mu_)
  std::map<std::string, QueueItem, std::less<>> items_;        // GUARDED_BY(mu_): by execution id
  std::map<std::string, ScheduleRow, std::less<>> schedules_;  // GUARDED_BY(mu_)
  int64_t next_seq_ = 1;                                       // GUARDED_BY(mu_)
};

}  // namespace once::queues
