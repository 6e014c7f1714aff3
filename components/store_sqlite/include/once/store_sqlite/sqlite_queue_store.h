// File: sqlite_queue_store.h
//
// SqliteQueueStore: the QueueStore (once/queues/queue_store.h) on a SQLite
// file (the event store's, naturally): several processes on one machine
// share its queues. Every write is one BEGIN IMMEDIATE transaction: a Claim
// reads the queue's limits and counts and takes its items with no other
// writer in between, so processes claiming together never pass a limit.
// Time is the injected clock.
//
//   ONCE_ASSIGN_OR_RETURN(auto queues, SqliteQueueStore::Open("/var/lib/once/loom.db"));
//
// Tables (docs/queues.md): loom_queues, loom_queue_items, loom_schedules,
// created if missing.
//
// Threads: every method may be called from any thread (one connection under
// a mutex). Errors: as SqliteEventStore's, plus the contract's.

#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "once/base/clock.h"
#include "once/queues/queue_store.h"
#include "once/store_sqlite/sqlite_event_store.h"

namespace once::store {

struct SqliteQueueOptions {
  Durability durability = Durability::kFull;
  std::chrono::milliseconds busy_timeout{5000};
  queues::QueueLimits limits;
  const Clock* clock = nullptr;  // nullptr: the system clock; must outlive the store
  std::string vfs;
};

class SqliteQueueStore final : public queues::QueueStore {
 public:
  static Result<std::unique_ptr<SqliteQueueStore>> Open(const std::string& path,
                                                        SqliteQueueOptions options = {});
  ~SqliteQueueStore() override;

  Status Configure(const queues::QueueConfig& config) override;
  Result<std::vector<queues::QueueConfig>> Queues() override;
  Result<queues::Enqueued> Enqueue(const queues::EnqueueRequest& request) override;
  Result<std::vector<Result<queues::Enqueued>>> EnqueueMany(
      std::span<const queues::EnqueueRequest> requests) override;
  Result<std::vector<queues::QueueItem>> Claim(const queues::ClaimRequest& req) override;
  Status Complete(std::span<const std::string> execution_ids) override;
  Status Release(std::span<const std::string> execution_ids) override;
  Result<std::vector<queues::QueueItem>> Claimed(std::string_view after, size_t limit) override;
  Result<std::vector<queues::QueueItem>> Items(std::string_view queue, std::string_view after,
                                               size_t limit) override;
  Result<queues::QueueCounts> Counts(std::string_view queue, std::string_view node) override;
  Status PutSchedule(const queues::ScheduleRow& row) override;
  Result<std::vector<queues::ScheduleRow>> Schedules() override;
  Result<bool> AdvanceSchedule(std::string_view name, int64_t from_ms, int64_t to_ms) override;
  Result<int64_t> NowMs() override;
  const queues::QueueLimits& limits() const override;

 private:
  struct Impl;
  explicit SqliteQueueStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace once::store
