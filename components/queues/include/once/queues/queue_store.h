// File: queue_store.h
//
// QueueStore: durable queues of start requests, and cron schedules' state,
// shared by every node of one database (issue 15; docs/queues.md).
//
// A queue item asks for ONE execution: (workflow, execution id, input).
// Enqueue stores it (idempotent by execution id: enqueuing an id whose item
// is still there returns that item); any node's workers Claim items of the
// queues they serve; the node that ends the execution Completes its item.
// Per queue (Configure): a global concurrency limit (claimed items, on
// every node), a per-node concurrency limit, a rate limit (claims per
// fixed window of rate_period_ms), priorities (higher first) and FIFO among
// equal priorities (the enqueue order, `seq`). A dedup key refuses a second
// enqueue into the queue while the first item is there (kAlreadyExists,
// AlreadyExistsDetail naming the execution that holds the key).
//
//   ONCE_RETURN_IF_ERROR(queues.Configure({.name = "mail", .concurrency_max = 8}));
//   ONCE_ASSIGN_OR_RETURN(Enqueued e, queues.Enqueue({.queue = "mail", .workflow = "send",
//                                                      .execution_id = "mail-7", .input = in}));
//   ONCE_ASSIGN_OR_RETURN(auto items, queues.Claim({.queue = "mail", .node = "n1", .limit = 64}));
//   ... start each; when each is terminal:  queues.Complete(ids);
//
// Atomicity: Claim is one transaction that reads the queue's limits under
// its row lock (PostgreSQL: SELECT ... FOR UPDATE, then the pick FOR UPDATE
// SKIP LOCKED; SQLite: BEGIN IMMEDIATE), so concurrent claimers on every
// node never exceed a limit between them. Times (delay, claims, rate
// windows) are the store's clock: the database server's on PostgreSQL.
//
// Cron schedules (PutSchedule, Schedules, AdvanceSchedule): the shared
// state of App::Schedule, the last tick each schedule enqueued, moved
// forward with a compare-and-set.
//
// Threads: every method may be called from any thread.

#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"
#include "once/events/envelope.h"

namespace once::queues {

using events::Json;

struct QueueConfig {
  std::string name;
  size_t concurrency_max = 0;           // claimed items at once, every node; 0: no limit
  size_t per_node_concurrency_max = 0;  // claimed items at once, one node; 0: no limit
  size_t rate_max = 0;                  // claims per window; 0: no limit
  int64_t rate_period_ms = 1'000;       // the window (fixed, aligned to multiples of it)
  friend bool operator==(const QueueConfig&, const QueueConfig&) = default;
};

struct EnqueueRequest {
  std::string queue;
  std::string workflow;
  std::string execution_id;
  Json input;
  int64_t priority = 0;   // higher is claimed first
  std::string dedup_key;  // empty: none
  int64_t delay_ms = 0;   // claimable from now + delay_ms (store clock)
};

struct Enqueued {
  int64_t seq = 0;        // the item's place in its queue (FIFO among equal priorities)
  bool existing = false;  // an item of this execution id was there already: that one
};

struct QueueItem {
  std::string queue;
  std::string workflow;
  std::string execution_id;
  Json input;
  int64_t priority = 0;
  std::string dedup_key;
  int64_t seq = 0;
  int64_t enqueued_at_ms = 0;
  int64_t visible_at_ms = 0;
  std::string claimed_by;  // "" while pending
  int64_t claimed_at_ms = 0;
};

struct ClaimRequest {
  std::string queue;
  std::string node;  // the claimer (a node id)
  size_t limit = 64;
};

struct QueueCounts {
  size_t pending = 0;  // not claimed (delayed ones included)
  size_t claimed = 0;  // every node
  size_t claimed_by_node = 0;
};

struct ScheduleRow {
  std::string name;
  std::string cron;  // the expression (cron.h)
  std::string workflow;
  std::string queue;
  Json input;
  int64_t last_tick_ms = 0;  // the last tick enqueued (0: none yet)
};

// Named limits. Units last.
struct QueueLimits {
  size_t queue_name_bytes_max = 255;
  size_t workflow_bytes_max = 255;
  size_t execution_id_bytes_max = 255;
  size_t dedup_key_bytes_max = 255;
  size_t input_bytes_max = 1 << 20;       // the input's compact JSON
  size_t json_depth_max = 511;            // the input sits one level down in its start event
  int64_t delay_ms_max = 31'536'000'000;  // one year
  size_t claim_items_max = 1'000;         // items one Claim returns at most
  size_t batch_items_max = 1'000;  // items one EnqueueMany / Complete / Release takes at most
  size_t items_page_max = 1'000;   // items one Items / Claimed page returns at most
  size_t schedules_max = 10'000;
};

class QueueStore {
 public:
  virtual ~QueueStore() = default;

  // Creates or replaces the queue's limits. An enqueue into a queue never
  // configured uses the defaults (no limits).
  virtual Status Configure(const QueueConfig& config) = 0;
  virtual Result<std::vector<QueueConfig>> Queues() = 0;

  // Stores the request (see the file comment). kAlreadyExists
  // (AlreadyExistsDetail) when the dedup key is held by another execution's
  // item; kInvalidArgument / kLimitExceeded for bad input.
  virtual Result<Enqueued> Enqueue(const EnqueueRequest& request) = 0;
  // Many requests in ONE transaction; each succeeds or fails alone.
  virtual Result<std::vector<Result<Enqueued>>> EnqueueMany(
      std::span<const EnqueueRequest> requests) = 0;

  // Pending, visible items of the queue, by priority then seq, at most
  // min(limit, room under every limit), claimed by req.node. Atomic.
  virtual Result<std::vector<QueueItem>> Claim(const ClaimRequest& req) = 0;
  // Deletes the items of these executions (done: their execution is
  // terminal, or found existing). Unknown ids are skipped.
  virtual Status Complete(std::span<const std::string> execution_ids) = 0;
  // Claimed items back to pending (a drained node's items it never
  // started; a dead node's that never started). Unknown ids are skipped.
  virtual Status Release(std::span<const std::string> execution_ids) = 0;

  // Claimed items (every queue), by execution id after `after`: for audits.
  virtual Result<std::vector<QueueItem>> Claimed(std::string_view after, size_t limit) = 0;
  // One queue's items (pending and claimed), by execution id after `after`.
  virtual Result<std::vector<QueueItem>> Items(std::string_view queue, std::string_view after,
                                               size_t limit) = 0;
  virtual Result<QueueCounts> Counts(std::string_view queue, std::string_view node) = 0;

  // Creates or updates a schedule (cron, workflow, queue, input); its
  // last_tick_ms is kept when it exists (the row's own value is ignored).
  virtual Status PutSchedule(const ScheduleRow& row) = 0;
  virtual Result<std::vector<ScheduleRow>> Schedules() = 0;
  // Moves last_tick_ms from `from_ms` to `to_ms` (> from_ms): false (and no
  // change) when another node moved it first.
  virtual Result<bool> AdvanceSchedule(std::string_view name, int64_t from_ms, int64_t to_ms) = 0;

  // The store's clock (Unix ms).
  virtual Result<int64_t> NowMs() = 0;
  virtual const QueueLimits& limits() const = 0;
};

// Checks every backend applies.
Status ValidateQueueConfig(const QueueConfig& config, const QueueLimits& limits);
Status ValidateQueueName(std::string_view name, const QueueLimits& limits);
// Also returns the input's compact JSON (what SQL backends store).
Result<std::string> ValidateEnqueue(const EnqueueRequest& request, const QueueLimits& limits);
Status ValidateClaim(const ClaimRequest& req, const QueueLimits& limits);
Status ValidateBatch(size_t items, const QueueLimits& limits);
Status ValidateSchedule(const ScheduleRow& row, const QueueLimits& limits);
// kAlreadyExists for a dedup key held by `holder`.
std::unexpected<Error> DedupTaken(std::string_view queue, std::string_view key, std::string holder);

// The rate window of `now_ms` (its start) and the claims left in it, given
// the window a queue last claimed in and how many it claimed there.
struct RateRoom {
  int64_t window_start_ms = 0;
  size_t left = 0;
};
RateRoom RateRoomAt(const QueueConfig& config, int64_t now_ms, int64_t last_window_start_ms,
                    size_t last_window_count);
// How many items a claim may take now: min(limit, each limit's room).
size_t ClaimRoom(const QueueConfig& config, size_t limit, size_t claimed, size_t claimed_by_node,
                 const RateRoom& rate);

}  // namespace once::queues
