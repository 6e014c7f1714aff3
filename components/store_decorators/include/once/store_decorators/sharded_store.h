// File: sharded_store.h
//
// ShardedStore routes every execution, by a stable hash of its id, to one of
// N stores, so executions spread over several databases. Everything about one
// execution (its log, its fence, its conditional acquire) happens in one
// shard, so every per-execution guarantee of the contract holds unchanged.
//
//   std::vector<EventStore*> shards = {&pg_a, &pg_b};
//   ShardedStore store(shards);
//   store.Append(req);   // lands on shards[ShardOf(req.execution_id)]
//
// Differences from one store, by design:
//  - AppendBatch commits one transaction PER SHARD. Each request still
//    commits or fails alone, which is all the batch contract promises; a
//    crash may land one shard's part of a batch and not another's.
//  - ListExecutions merges the shards' pages (ascending byte order holds);
//    so does ListEnded (every shard lists in EndedCursor order).
//  - DeleteEnded runs one transaction per shard: a crash may delete one
//    shard's part of a batch and not another's (each execution alone is
//    deleted whole or not at all, as on its shard).
//  - CopyPrefix between executions on different shards reads the prefix and
//    appends it to the destination (which must be empty); not atomic with the
//    source, which CopyPrefix never was across executions anyway.
//  - Supports(c) is true only if every shard supports c.
//  - AppendInTransaction runs on the execution's shard: its SQL sees that
//    shard's database only (the step's tables must exist on every shard).
// The shards must outlive the store; the shard list must never be reordered
// for a given database (the routing is positional). Thread-safe.

#pragma once

#include <cstdint>
#include <vector>

#include "once/store/event_store.h"

namespace once::store {

class ShardedStore final : public EventStore {
 public:
  // `shards` must be non-empty.
  explicit ShardedStore(std::vector<EventStore*> shards);

  // The shard index of an id (FNV-1a 64 of its bytes, modulo N).
  size_t ShardOf(std::string_view execution_id) const;

  Result<int64_t> Append(const AppendRequest& req) override;
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const AppendRequest> requests) override;
  Result<std::vector<Envelope>> ReadRange(std::string_view id, int64_t first,
                                          int64_t last) override;
  Result<int64_t> Head(std::string_view id) override;
  Result<ExecutionPage> ListExecutions(std::string_view after, size_t limit) override;
  Status DeleteExecution(std::string_view id) override;
  Result<EndedPage> ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                              size_t limit) override;
  Result<std::vector<Status>> DeleteEnded(std::span<const std::string> execution_ids,
                                          int64_t ended_ms_max) override;
  const Limits& limits() const override { return shards_.front()->limits(); }
  // A batch here is a batch on each shard it names: the most any shard
  // takes.
  size_t AppendBatchesInFlightUseful() const override;
  // True if any shard's is (a shard with durable writes gains from it).
  bool GroupCommitUseful() const override;

  bool Supports(Capability c) const override;
  Result<int64_t> AcquireFence(std::string_view id) override;
  Result<int64_t> ReadFence(std::string_view id) override;
  Result<ConditionalAcquire> AcquireFenceIf(std::string_view id, FenceExpectation expect) override;
  Result<AcquireWithTail> AcquireFenceIfReadTail(std::string_view id, FenceExpectation expect,
                                                 int64_t read_after) override;
  // Each shard's requests go to that shard as one batch.
  std::vector<Result<AcquireWithTail>> AcquireFencesIfReadTail(
      std::span<const AcquireIfRead> requests) override;
  Result<int64_t> AppendIfUnchanged(const AppendRequest& req, int64_t observed) override;
  Status CopyPrefix(std::string_view from, std::string_view to, int64_t through) override;
  Status TruncatePrefixKeeping(std::string_view id, int64_t first_kept) override;
  Result<std::optional<RunOwner>> RunOwnerOf(std::string_view id) override;
  // On the execution's shard: its SQL runs on that shard's database.
  Result<int64_t> AppendInTransaction(std::string_view id, TransactionWorkRef work) override;

 private:
  EventStore& For(std::string_view id) const { return *shards_[ShardOf(id)]; }
  std::vector<EventStore*> shards_;
};

}  // namespace once::store
