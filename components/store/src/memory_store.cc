#include "once/store/memory_store.h"

#include <algorithm>
#include <iterator>
#include <tuple>

#include "once/store/validate.h"
#include "packed_json.h"

namespace once::store {

MemoryEventStore::MemoryEventStore()
    : owned_clock_(std::make_unique<SystemClock>()), clock_(*owned_clock_) {}

MemoryEventStore::MemoryEventStore(Limits limits, const Clock& clock)
    : limits_(limits), clock_(clock) {}

MemoryEventStore::~MemoryEventStore() = default;

size_t MemoryEventStore::ShardIndex(const Key& key) {
  // The high bits: the shard's own tables place ids by the low ones.
  return (key.hash >> 40) % kShards;
}

std::string_view MemoryEventStore::Log::KindOf(const StoredEvent& e) const {
  const std::string* named = NamedKind(e);
  return named ? std::string_view(*named) : events::Name(e.kernel_kind);
}

bool MemoryEventStore::Log::Answering(const StoredEvent& e) const {
  return events::IsAnswering(NamedKind(e) ? std::nullopt : std::optional(e.kernel_kind), e.kernel);
}

int64_t MemoryEventStore::FenceLocked(const Shard& shard, const Key& key) {
  auto it = shard.fences.find_hashed(key.hash, key.id);
  return it == shard.fences.end() ? 0 : it->second;
}

Status MemoryEventStore::Prepare(const AppendRequest& req, bool movable, Prepared& into) const {
  // A staged log that did not land (its append was refused) is dropped
  // whole: its buffers may be far larger than the next log's.
  if (into.has_fresh) into.fresh = Log{};
  into.has_fresh = false;
  ONCE_ASSIGN_OR_RETURN(into.checked,
                        CheckAndPackAppend(req, limits_, clock_, into.packed, into.payload_end));
  if (req.expected_next != 1) return Ok();
  into.has_fresh = true;
  Log& log = into.fresh;  // moved from when it landed: emptied here
  log.events.clear();
  if (into.reused) {
    log.payloads.assign(into.packed);  // its own block, sized to fit
  } else {
    log.payloads = std::move(into.packed);
  }
  log.events.reserve(req.events.size());
  log.rare.clear();
  StageEvents(req, into, 0, movable, log);
  return Ok();
}

Result<MemoryEventStore::Prepared*> MemoryEventStore::PrepareInScratch(const AppendRequest& req,
                                                                       bool movable) const {
  // A buffer grown by one large append is not kept for the thread's life.
  constexpr size_t kScratchKeptBytesMax = size_t{1} << 20;
  thread_local Prepared scratch{.reused = true};
  if (scratch.packed.capacity() > kScratchKeptBytesMax) scratch = Prepared{.reused = true};
  ONCE_RETURN_IF_ERROR(Prepare(req, movable, scratch));
  return &scratch;
}

void MemoryEventStore::StageEvents(const AppendRequest& req, const Prepared& prepared, size_t base,
                                   bool movable, Log& log) {
  for (size_t i = 0; i < req.events.size(); ++i) {
    Envelope& e = const_cast<Envelope&>(req.events[i]);
    StoredEvent& stored = log.events.emplace_back();
    stored.sequence = req.expected_next + static_cast<int64_t>(i);
    std::optional<events::KernelKind> kernel_kind = e.kind.interned();
    if (!kernel_kind) kernel_kind = events::ParseKernelKind(e.kind.view());
    if (!kernel_kind || !e.metadata.extra.is_null()) {
      ONCE_CHECK(log.rare.size() < StoredEvent::kNoRare);
      stored.rare = static_cast<uint32_t>(log.rare.size());
      RareParts& rare = log.rare.emplace_back();
      if (!kernel_kind) rare.kind = e.kind.str();
      rare.extra = movable ? std::move(e.metadata.extra) : e.metadata.extra;
    }
    stored.kernel_kind = kernel_kind.value_or(events::KernelKind{});
    stored.fence = e.metadata.fence;
    stored.kernel = e.metadata.kernel;
    stored.time_ms = e.time_ms == 0 ? prepared.checked.now_ms : e.time_ms;
    stored.payload_at = base + (i == 0 ? 0 : prepared.payload_end[i - 1]);
    stored.payload_bytes = base + prepared.payload_end[i] - stored.payload_at;
  }
}

// Model: models/fence_atomic.pml (issue 19; spin checks it, scripts/models).
Result<int64_t> MemoryEventStore::AppendLocked(Shard& shard, const Key& key,
                                               const AppendRequest& req, Prepared& prepared,
                                               GuardKind guard, int64_t token, bool movable) {
  const CheckedAppend& checked = prepared.checked;
  // On a store of millions the log's slot is a cache miss, as the fence's
  // is: asked for now, the two overlap.
  shard.logs.Prefetch(key.hash);
  int64_t current = FenceLocked(shard, key);
  if (guard == GuardKind::kIfUnchanged) {
    if (current != token) return StaleFence(req.execution_id, token, current);
  } else if (req.fence && *req.fence < current) {
    return StaleFence(req.execution_id, *req.fence, current);
  }
  // One hash lookup: a first append creates the log as it looks it up.
  auto it = shard.logs.end();
  if (req.expected_next == 1) {
    auto& id = const_cast<std::string&>(req.execution_id);
    bool added = false;
    std::tie(it, added) = movable ? shard.logs.try_emplace_hashed(key.hash, std::move(id))
                                  : shard.logs.try_emplace_hashed(key.hash, id);
    if (added) MarkIdsChanged();
  } else {
    it = shard.logs.find_hashed(key.hash, key.id);
  }
  const std::string& id = it == shard.logs.end() ? req.execution_id : it->first;
  int64_t head = it == shard.logs.end() ? 0 : it->second.head;
  if (req.expected_next != head + 1) return SequenceConflict(id, head + 1, req.expected_next);
  Log& log = it->second;
  if (prepared.has_fresh) {  // a first append: head was 0, so the log holds nothing
    ONCE_CHECK(log.events.empty() && log.payloads.empty());
    log = std::move(prepared.fresh);
    prepared.has_fresh = false;
  } else {
    const size_t base = log.payloads.size();
    log.payloads.append(prepared.packed);
    StageEvents(req, prepared, base, movable, log);
  }
  log.head = req.expected_next + static_cast<int64_t>(req.events.size()) - 1;
  if (checked.run_row == RunRowChange::kEnd || !req.owner.empty()) {
    // The log's own id: the request's may have moved into it.
    SetRunLocked(shard, Key(it->first, key.hash), req.owner, checked.run_row);
  }
  return log.head;
}

void MemoryEventStore::SetRunLocked(Shard& shard, const Key& key, std::string_view owner,
                                    RunRowChange change) {
  if (change == RunRowChange::kEnd) {  // releases the row, whoever it names
    if (auto it = shard.runs.find_hashed(key.hash, key.id); it != shard.runs.end())
      shard.runs.erase(it);
    return;
  }
  shard.runs.insert_or_assign_hashed(key.hash, key.id,
                                     RunOwner{std::string(owner), clock_.NowUnixMillis()});
}

void MemoryEventStore::ForgetDeletedLocked(Shard& shard, const Key& key) {
  if (auto it = shard.fences.find_hashed(key.hash, key.id);
      it != shard.fences.end() && it->second == 0) {
    shard.fences.erase(it);
  }
  if (auto it = shard.runs.find_hashed(key.hash, key.id); it != shard.runs.end())
    shard.runs.erase(it);
}

bool MemoryEventStore::OwnerIsLocked(const Shard& shard, const Key& key,
                                     std::string_view expected) {
  auto it = shard.runs.find_hashed(key.hash, key.id);
  if (it == shard.runs.end()) return expected.empty();
  return it->second.owner == expected;
}

Result<std::optional<RunOwner>> MemoryEventStore::RunOwnerOf(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.runs.find_hashed(key.hash, key.id);
  if (it == shard.runs.end()) return std::optional<RunOwner>();
  return std::optional<RunOwner>(it->second);
}

std::vector<std::pair<std::string, RunOwner>> MemoryEventStore::RunRows() {
  std::vector<std::pair<std::string, RunOwner>> out;
  for (Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [id, row] : shard.runs) out.emplace_back(id, row);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

Status MemoryEventStore::ForgetRun(std::string_view id, std::string_view owner) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (auto it = shard.runs.find_hashed(key.hash, key.id);
      it != shard.runs.end() && it->second.owner == owner) {
    shard.runs.erase(it);
  }
  return Ok();
}

Result<int64_t> MemoryEventStore::Append(const AppendRequest& req) {
  ONCE_ASSIGN_OR_RETURN(Prepared * prepared, PrepareInScratch(req, /*movable=*/false));
  const Key key(req.execution_id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  return AppendLocked(shard, key, req, *prepared, GuardKind::kFence, 0);
}

Result<int64_t> MemoryEventStore::Append(AppendRequest&& req) {
  ONCE_ASSIGN_OR_RETURN(Prepared * prepared, PrepareInScratch(req, /*movable=*/true));
  const Key key(req.execution_id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  return AppendLocked(shard, key, req, *prepared, GuardKind::kFence, 0, /*movable=*/true);
}

Result<std::vector<Result<int64_t>>> MemoryEventStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  ONCE_RETURN_IF_ERROR(ValidateBatchShape(requests, limits_));
  // Check and pack outside the lock; a request that fails its own checks
  // fails alone.
  std::vector<Prepared> prepared(requests.size());
  std::vector<Status> checked;
  checked.reserve(requests.size());
  size_t bytes = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    checked.push_back(Prepare(requests[i], /*movable=*/false, prepared[i]));
    if (checked.back()) bytes += prepared[i].checked.bytes;
  }
  ONCE_RETURN_IF_ERROR(CheckBatchBytes(bytes, limits_));
  // One transaction: every shard the batch touches is locked (in index
  // order, so two batches never wait on each other crosswise) before any
  // request is applied, so no reader sees part of the batch.
  std::vector<Key> keys;
  keys.reserve(requests.size());
  std::array<bool, kShards> touched{};
  for (const AppendRequest& r : requests) {
    keys.emplace_back(r.execution_id);
    touched[ShardIndex(keys.back())] = true;
  }
  std::vector<std::unique_lock<std::mutex>> locks;
  for (size_t s = 0; s < kShards; ++s) {
    if (touched[s]) locks.emplace_back(shards_[s].mu);
  }
  std::vector<Result<int64_t>> out;
  out.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!checked[i]) {
      out.push_back(std::unexpected(checked[i].error()));
    } else {
      out.push_back(
          AppendLocked(ShardOf(keys[i]), keys[i], requests[i], prepared[i], GuardKind::kFence, 0));
    }
  }
  return out;
}

Result<std::vector<Envelope>> MemoryEventStore::ReadRange(std::string_view id, int64_t first,
                                                          int64_t last) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  return ReadLocked(shard, key, first, last);
}

Result<int64_t> MemoryEventStore::Head(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.logs.find_hashed(key.hash, key.id);
  return it == shard.logs.end() ? 0 : it->second.head;
}

Result<ExecutionPage> MemoryEventStore::ListExecutions(std::string_view after, size_t limit) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits_.list_page_executions_max);
  ExecutionPage page;
  std::lock_guard<std::mutex> list_lock(list_mu_);
  std::vector<std::unique_lock<std::mutex>> locks;
  for (Shard& shard : shards_) locks.emplace_back(shard.mu);
  if (ids_changed_.exchange(false, std::memory_order_relaxed)) {
    sorted_ids_.clear();
    for (const Shard& shard : shards_) {
      for (const auto& [id, log] : shard.logs) sorted_ids_.push_back(id);
    }
    std::sort(sorted_ids_.begin(), sorted_ids_.end());
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
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (auto it = shard.logs.find_hashed(key.hash, key.id); it != shard.logs.end()) {
    shard.logs.erase(it);
    MarkIdsChanged();
  }
  ForgetDeletedLocked(shard, key);
  return Ok();
}

// Every ending event past `after` and at or before the cutoff: a walk of
// every log (the reference store keeps no index).
Result<EndedPage> MemoryEventStore::ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                                              size_t limit) {
  ONCE_ASSIGN_OR_RETURN(limit, EndedPageLimit(limit, limits_));
  std::vector<EndedExecution> found;
  for (Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [id, log] : shard.logs) {
      for (const StoredEvent& e : log.events) {
        if (e.time_ms > ended_ms_max || !IsEndingKind(log.KindOf(e))) continue;
        EndedExecution ended{
            .execution_id = id, .kind = std::string(log.KindOf(e)), .ended_ms = e.time_ms};
        if (ended.Place() > after) found.push_back(std::move(ended));
      }
    }
  }
  auto by_place = [](const EndedExecution& a, const EndedExecution& b) {
    return a.Place() < b.Place();
  };
  std::sort(found.begin(), found.end(), by_place);
  return EndedPageOf(std::move(found), limit);
}

// Requires shard.mu.
bool MemoryEventStore::EndedByLocked(const Shard& shard, const Key& key, int64_t ended_ms_max) {
  auto it = shard.logs.find_hashed(key.hash, key.id);
  if (it == shard.logs.end()) return false;
  const Log& log = it->second;
  return std::any_of(log.events.begin(), log.events.end(), [&](const StoredEvent& e) {
    return e.time_ms <= ended_ms_max && IsEndingKind(log.KindOf(e));
  });
}

Result<std::vector<Status>> MemoryEventStore::DeleteEnded(std::span<const std::string> ids,
                                                          int64_t ended_ms_max) {
  ONCE_RETURN_IF_ERROR(CheckDeleteEnded(ids, limits_));
  std::vector<Status> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) {
    if (Status valid = ValidateExecutionId(id, limits_); !valid) {
      out.push_back(std::move(valid));
      continue;
    }
    const Key key(id);
    Shard& shard = ShardOf(key);
    std::lock_guard<std::mutex> lock(shard.mu);
    if (!EndedByLocked(shard, key, ended_ms_max)) {
      out.push_back(NotEndedBy(id, ended_ms_max));
      continue;
    }
    shard.logs.erase(shard.logs.find_hashed(key.hash, key.id));
    MarkIdsChanged();
    ForgetDeletedLocked(shard, key);
    out.push_back(Ok());
  }
  return out;
}

Result<int64_t> MemoryEventStore::AcquireFence(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  return ++shard.fences.try_emplace_hashed(key.hash, key.id, 0).first->second;
}

Result<int64_t> MemoryEventStore::ReadFence(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  return FenceLocked(shard, key);
}

// Model: models/fence_atomic.pml (issue 19; spin checks it, scripts/models).
ConditionalAcquire MemoryEventStore::AcquireIfLocked(Shard& shard, const Key& key,
                                                     FenceExpectation expect) {
  shard.logs.Prefetch(key.hash);
  int64_t current = FenceLocked(shard, key);
  if (current != expect.fence) return ConditionalAcquire{.stale = true, .fence = current};
  if (expect.expected_owner && !OwnerIsLocked(shard, key, *expect.expected_owner)) {
    return ConditionalAcquire{.stale = true, .fence = current};
  }
  if (auto it = shard.logs.find_hashed(key.hash, key.id); it != shard.logs.end()) {
    const auto& events = it->second.events;
    auto tail =
        std::upper_bound(events.begin(), events.end(), expect.park_seq,
                         [](int64_t seq, const StoredEvent& e) { return seq < e.sequence; });
    for (; tail != events.end(); ++tail) {
      if (it->second.Answering(*tail)) return ConditionalAcquire{.stale = true, .fence = current};
    }
  }
  int64_t next = current + 1;
  shard.fences.insert_or_assign_hashed(key.hash, key.id, next);
  if (!expect.owner.empty()) SetRunLocked(shard, key, expect.owner, RunRowChange::kRun);
  return ConditionalAcquire{.stale = false, .fence = next};
}

std::vector<Envelope> MemoryEventStore::ReadLocked(const Shard& shard, const Key& key,
                                                   int64_t first, int64_t last) const {
  std::vector<Envelope> out;
  auto it = shard.logs.find_hashed(key.hash, key.id);
  if (it == shard.logs.end() || it->second.events.empty()) return out;
  const auto& events = it->second.events;
  int64_t base = events.front().sequence;
  int64_t from = std::max(first, base);
  int64_t to = std::min(last, it->second.head);
  if (from > to) return out;
  auto count = std::min(static_cast<size_t>(to - from + 1), limits_.read_events_max);
  auto begin = events.begin() + (from - base);
  out.reserve(count);
  for (auto e = begin; e != begin + static_cast<std::ptrdiff_t>(count); ++e) {
    out.push_back(EnvelopeOf(it->first, it->second, *e));
  }
  return out;
}

Envelope MemoryEventStore::EnvelopeOf(std::string_view id, const Log& log,
                                      const StoredEvent& e) const {
  Result<Json> payload = internal::UnpackJson(
      std::string_view(log.payloads).substr(e.payload_at, e.payload_bytes), limits_.json_depth_max);
  // The store packed these bytes itself, from a payload it had checked.
  ONCE_CHECK_MSG(payload.has_value(), "a packed payload of the memory store does not unpack");
  const RareParts* rare = log.RareOf(e);
  return Envelope{
      .execution_id = std::string(id),
      .sequence = e.sequence,
      .kind = log.NamedKind(e) ? events::Kind(*log.NamedKind(e)) : events::Kind(e.kernel_kind),
      .payload = std::move(*payload),
      .metadata = {.fence = e.fence, .kernel = e.kernel, .extra = rare ? rare->extra : Json()},
      .time_ms = e.time_ms};
}

Result<ConditionalAcquire> MemoryEventStore::AcquireFenceIf(std::string_view id,
                                                            FenceExpectation expect) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, expect, limits_));
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  return AcquireIfLocked(shard, key, expect);
}

Result<AcquireWithTail> MemoryEventStore::AcquireFenceIfReadTail(std::string_view id,
                                                                 FenceExpectation expect,
                                                                 int64_t read_after) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, expect, limits_, read_after));
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  AcquireWithTail out{.acquire = AcquireIfLocked(shard, key, expect)};
  out.tail = ReadLocked(shard, key, read_after + 1, kToEnd);
  return out;
}

Result<int64_t> MemoryEventStore::AppendIfUnchanged(const AppendRequest& req, int64_t observed) {
  ONCE_ASSIGN_OR_RETURN(Prepared * prepared, PrepareInScratch(req, /*movable=*/false));
  const Key key(req.execution_id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  return AppendLocked(shard, key, req, *prepared, GuardKind::kIfUnchanged, observed);
}

Status MemoryEventStore::CopyPrefix(std::string_view from, std::string_view to, int64_t through) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(from, limits_));
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(to, limits_));
  if (through < 1) return MakeError(ErrorCode::kInvalidArgument, "through must be >= 1");
  const Key src_key(from);
  const Key dst_key(to);
  Shard& src_shard = ShardOf(src_key);
  Shard& dst_shard = ShardOf(dst_key);
  // Both locks, deadlock-free in any order; one when both ids share a shard.
  std::unique_lock<std::mutex> src_lock(src_shard.mu, std::defer_lock);
  std::unique_lock<std::mutex> dst_lock(dst_shard.mu, std::defer_lock);
  if (&src_shard == &dst_shard) {
    src_lock.lock();
  } else {
    std::lock(src_lock, dst_lock);
  }
  auto src = src_shard.logs.find_hashed(src_key.hash, src_key.id);
  if (src == src_shard.logs.end() || src->second.head < through || src->second.events.empty() ||
      src->second.events.front().sequence != 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "source has no complete prefix through " + std::to_string(through),
                     std::string(from));
  }
  if (auto dst = dst_shard.logs.find_hashed(dst_key.hash, dst_key.id);
      dst != dst_shard.logs.end() && dst->second.head > 0) {
    return SequenceConflict(to, dst->second.head + 1, 1);
  }
  Log copy;
  const auto& events = src->second.events;
  copy.events.assign(events.begin(), events.begin() + through);
  const StoredEvent& last = copy.events.back();  // the first is at 0: nothing was truncated
  copy.payloads = src->second.payloads.substr(0, last.payload_at + last.payload_bytes);
  copy.rare = src->second.rare;  // indexed by the copied events as by the source's
  copy.head = through;
  if (dst_shard.logs.insert_or_assign_hashed(dst_key.hash, dst_key.id, std::move(copy)).second) {
    MarkIdsChanged();
  }
  return Ok();
}

Status MemoryEventStore::TruncatePrefixKeeping(std::string_view id, int64_t first_kept) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  if (first_kept < 1) return MakeError(ErrorCode::kInvalidArgument, "first_kept must be >= 1");
  const Key key(id);
  Shard& shard = ShardOf(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.logs.find_hashed(key.hash, key.id);
  if (it == shard.logs.end()) return Ok();
  auto& events = it->second.events;
  first_kept = std::min(first_kept, it->second.head);  // the newest event stays
  auto keep = std::lower_bound(events.begin(), events.end(), first_kept,
                               [](const StoredEvent& e, int64_t seq) { return e.sequence < seq; });
  if (keep == events.begin()) return Ok();
  // The payloads of the kept events move to the front of the block.
  const size_t cut = keep == events.end() ? it->second.payloads.size() : keep->payload_at;
  events.erase(events.begin(), keep);
  it->second.payloads.erase(0, cut);
  std::vector<RareParts> kept_rare;
  for (StoredEvent& e : events) {
    e.payload_at -= cut;
    if (e.rare == StoredEvent::kNoRare) continue;
    kept_rare.push_back(std::move(it->second.rare[e.rare]));
    e.rare = static_cast<uint32_t>(kept_rare.size() - 1);
  }
  it->second.rare = std::move(kept_rare);
  return Ok();
}

}  // namespace once::store
