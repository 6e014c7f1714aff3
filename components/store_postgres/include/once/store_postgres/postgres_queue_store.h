// File: postgres_queue_store.h
//
// PostgresQueueStore: the QueueStore (once/queues/queue_store.h) on
// PostgreSQL, in the event store's schema, for many nodes claiming from one
// database. Every time it records or judges by is the server's clock.
//
//   PostgresQueueOptions options;
//   options.conninfo = url;
//   options.schema = "loom";
//   ONCE_ASSIGN_OR_RETURN(auto queues, PostgresQueueStore::Open(options));
//
// Claim is ONE round trip: a pipeline (one implicit transaction) that
// ensures the queue's row, locks it FOR UPDATE (claimers of one queue take
// turns there, on every node), then, in a statement of its own (a fresh
// READ COMMITTED snapshot, after the lock: it sees every claim committed
// before), counts the claimed items, picks the room's worth of pending ones
// by priority and seq FOR UPDATE SKIP LOCKED, claims them and moves the
// rate window. Enqueue is one statement (idempotent by execution id, the
// dedup key's holder named); EnqueueMany inserts the requests without a
// dedup key in one statement and judges the rest one by one. Complete and
// Release are one statement each.
//
// Tables (docs/queues.md): loom_queues, loom_queue_items, loom_schedules,
// created if missing under the event store's migration advisory lock.
//
// Threads: every method may be called from any thread. Errors as
// postgres_event_store.h.

#pragma once

#include <memory>
#include <string>

#include "once/queues/queue_store.h"
#include "once/store_postgres/postgres_event_store.h"

namespace once::store {

struct PostgresQueueOptions {
  std::string conninfo;
  std::string schema = "public";
  size_t connections_max = 4;
  int64_t checkout_timeout_ms = 5'000;
  int64_t migration_lock_timeout_ms = 10'000;
  queues::QueueLimits limits;
};

class PostgresQueueStore final : public queues::QueueStore {
 public:
  static Result<std::unique_ptr<PostgresQueueStore>> Open(const PostgresQueueOptions& options);
  ~PostgresQueueStore() override;

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
  const queues::QueueLimits& limits() const override { return options_.limits; }

 private:
  PostgresQueueStore(PostgresQueueOptions options, std::unique_ptr<pg::ConnectionPool> pool);

  PostgresQueueOptions options_;
  std::unique_ptr<pg::ConnectionPool> pool_;
};

}  // namespace once::store
