#include "once/store_decorators/sharded_store.h"

#include <algorithm>

#include "once/store/validate.h"

namespace once::store {

ShardedStore::ShardedStore(std::vector<EventStore*> shards) : shards_(std::move(shards)) {
  ONCE_CHECK(!shards_.empty());
}

size_t ShardedStore::ShardOf(std::string_view execution_id) const {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : execution_id) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return static_cast<size_t>(h % shards_.size());
}

Result<int64_t> ShardedStore::AppendInTransaction(std::string_view id, TransactionWorkRef work) {
  return For(id).AppendInTransaction(id, work);
}

Result<int64_t> ShardedStore::Append(const AppendRequest& req) {
  return For(req.execution_id).Append(req);
}

size_t ShardedStore::AppendBatchesInFlightUseful() const {
  size_t most = 1;
  for (const EventStore* shard : shards_) {
    most = std::max(most, shard->AppendBatchesInFlightUseful());
  }
  return most;
}

bool ShardedStore::GroupCommitUseful() const {
  return std::any_of(shards_.begin(), shards_.end(),
                     [](const EventStore* shard) { return shard->GroupCommitUseful(); });
}

Result<std::vector<Result<int64_t>>> ShardedStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  ONCE_RETURN_IF_ERROR(ValidateBatchShape(requests, limits()));
  // The batch's byte limit holds for the whole batch, not per shard.
  // A request that fails its own checks fails alone, here: it is not copied
  // into its shard's batch (a copy of a tree nested past json_depth_max
  // would recurse past the stack), and its shard would refuse it the same way.
  SystemClock clock;
  size_t bytes = 0;
  std::vector<Result<int64_t>> out(requests.size(), 0);  // an error: refused here
  for (size_t i = 0; i < requests.size(); ++i) {
    auto checked = CheckAppend(requests[i], limits(), clock);
    if (checked) {
      bytes += checked->bytes;
    } else {
      out[i] = std::unexpected(checked.error());
    }
  }
  ONCE_RETURN_IF_ERROR(CheckBatchBytes(bytes, limits()));
  std::vector<std::vector<AppendRequest>> per_shard(shards_.size());
  std::vector<std::vector<size_t>> positions(shards_.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!out[i]) continue;
    size_t s = ShardOf(requests[i].execution_id);
    per_shard[s].push_back(requests[i]);
    positions[s].push_back(i);
  }
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (per_shard[s].empty()) continue;
    auto results = shards_[s]->AppendBatch(per_shard[s]);
    for (size_t k = 0; k < positions[s].size(); ++k) {
      out[positions[s][k]] =
          results ? std::move((*results)[k]) : Result<int64_t>(std::unexpected(results.error()));
    }
  }
  return out;
}

Result<std::vector<Envelope>> ShardedStore::ReadRange(std::string_view id, int64_t first,
                                                      int64_t last) {
  return For(id).ReadRange(id, first, last);
}

Result<int64_t> ShardedStore::Head(std::string_view id) { return For(id).Head(id); }

Result<ExecutionPage> ShardedStore::ListExecutions(std::string_view after, size_t limit) {
  limit = std::min(limit, limits().list_page_executions_max);
  std::vector<std::string> merged;
  bool any_more = false;
  for (EventStore* shard : shards_) {
    ONCE_ASSIGN_OR_RETURN(ExecutionPage page, shard->ListExecutions(after, limit));
    any_more |= !page.next_after.empty();
    merged.insert(merged.end(), std::make_move_iterator(page.execution_ids.begin()),
                  std::make_move_iterator(page.execution_ids.end()));
  }
  std::sort(merged.begin(), merged.end());
  ExecutionPage out;
  if (merged.size() > limit || (any_more && merged.size() == limit)) {
    merged.resize(limit);
    out.next_after = merged.back();
  } else if (any_more) {
    out.next_after = merged.back();
  }
  out.execution_ids = std::move(merged);
  return out;
}

Status ShardedStore::DeleteExecution(std::string_view id) { return For(id).DeleteExecution(id); }

// Every shard lists in the same order: their pages merge.
Result<EndedPage> ShardedStore::ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                                          size_t limit) {
  ONCE_ASSIGN_OR_RETURN(limit, EndedPageLimit(limit, limits()));
  std::vector<EndedExecution> merged;
  bool any_more = false;
  for (EventStore* shard : shards_) {
    ONCE_ASSIGN_OR_RETURN(EndedPage page, shard->ListEnded(ended_ms_max, after, limit));
    any_more |= page.next_after.has_value();
    merged.insert(merged.end(), std::make_move_iterator(page.executions.begin()),
                  std::make_move_iterator(page.executions.end()));
  }
  std::sort(merged.begin(), merged.end(),
            [](const EndedExecution& a, const EndedExecution& b) { return a.Place() < b.Place(); });
  EndedPage out;
  if (merged.size() > limit) merged.resize(limit);
  if (!merged.empty() && (any_more || merged.size() == limit)) {
    out.next_after = merged.back().Place();
  }
  out.executions = std::move(merged);
  return out;
}

// One transaction per shard.
Result<std::vector<Status>> ShardedStore::DeleteEnded(std::span<const std::string> ids,
                                                      int64_t ended_ms_max) {
  ONCE_RETURN_IF_ERROR(CheckDeleteEnded(ids, limits()));
  std::vector<Status> out(ids.size(), Ok());
  std::vector<std::vector<std::string>> per_shard(shards_.size());
  std::vector<std::vector<size_t>> positions(shards_.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    size_t s = ShardOf(ids[i]);
    per_shard[s].push_back(ids[i]);
    positions[s].push_back(i);
  }
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (per_shard[s].empty()) continue;
    auto results = shards_[s]->DeleteEnded(per_shard[s], ended_ms_max);
    for (size_t k = 0; k < positions[s].size(); ++k) {
      out[positions[s][k]] =
          results ? std::move((*results)[k]) : Status(std::unexpected(results.error()));
    }
  }
  return out;
}

bool ShardedStore::Supports(Capability c) const {
  return std::all_of(shards_.begin(), shards_.end(), [c](EventStore* s) { return s->Supports(c); });
}

Result<int64_t> ShardedStore::AcquireFence(std::string_view id) { return For(id).AcquireFence(id); }

Result<int64_t> ShardedStore::ReadFence(std::string_view id) { return For(id).ReadFence(id); }

Result<ConditionalAcquire> ShardedStore::AcquireFenceIf(std::string_view id,
                                                        FenceExpectation expect) {
  return For(id).AcquireFenceIf(id, expect);
}

Result<AcquireWithTail> ShardedStore::AcquireFenceIfReadTail(std::string_view id,
                                                             FenceExpectation expect,
                                                             int64_t read_after) {
  return For(id).AcquireFenceIfReadTail(id, expect, read_after);
}

std::vector<Result<AcquireWithTail>> ShardedStore::AcquireFencesIfReadTail(
    std::span<const AcquireIfRead> requests) {
  std::vector<std::vector<AcquireIfRead>> per_shard(shards_.size());
  std::vector<std::vector<size_t>> positions(shards_.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    size_t s = ShardOf(requests[i].execution_id);
    per_shard[s].push_back(requests[i]);
    positions[s].push_back(i);
  }
  std::vector<Result<AcquireWithTail>> out(requests.size());
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (per_shard[s].empty()) continue;
    std::vector<Result<AcquireWithTail>> answers =
        shards_[s]->AcquireFencesIfReadTail(per_shard[s]);
    for (size_t k = 0; k < positions[s].size(); ++k) out[positions[s][k]] = std::move(answers[k]);
  }
  return out;
}

Result<int64_t> ShardedStore::AppendIfUnchanged(const AppendRequest& req, int64_t observed) {
  return For(req.execution_id).AppendIfUnchanged(req, observed);
}

Status ShardedStore::CopyPrefix(std::string_view from, std::string_view to, int64_t through) {
  if (!Supports(Capability::kCopyPrefix)) return Unsupported(Capability::kCopyPrefix, "sharded");
  if (ShardOf(from) == ShardOf(to)) return For(from).CopyPrefix(from, to, through);
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(from, limits()));
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(to, limits()));
  if (through < 1) return MakeError(ErrorCode::kInvalidArgument, "through must be >= 1");
  ONCE_ASSIGN_OR_RETURN(int64_t to_head, For(to).Head(to));
  if (to_head > 0) return SequenceConflict(to, to_head + 1, 1);
  std::vector<Envelope> prefix;
  for (int64_t next = 1; next <= through;) {
    ONCE_ASSIGN_OR_RETURN(auto page, For(from).ReadRange(from, next, through));
    if (page.empty() || page.front().sequence != next) break;
    next = page.back().sequence + 1;
    prefix.insert(prefix.end(), std::make_move_iterator(page.begin()),
                  std::make_move_iterator(page.end()));
  }
  if (static_cast<int64_t>(prefix.size()) != through) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "source has no complete prefix through " + std::to_string(through),
                     std::string(from));
  }
  AppendRequest req{
      .execution_id = std::string(to), .expected_next = 1, .events = {}, .fence = std::nullopt};
  req.events = std::move(prefix);
  for (auto& e : req.events) e.execution_id = std::string(to);
  ONCE_RETURN_IF_ERROR(For(to).Append(req));
  return Ok();
}

Status ShardedStore::TruncatePrefixKeeping(std::string_view id, int64_t first_kept) {
  return For(id).TruncatePrefixKeeping(id, first_kept);
}

Result<std::optional<RunOwner>> ShardedStore::RunOwnerOf(std::string_view id) {
  return For(id).RunOwnerOf(id);
}

}  // namespace once::store
