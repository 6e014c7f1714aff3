#include "once/store_decorators/profiling_store.h"

namespace once::store {

template <class F>
auto ProfilingStore::Timed(const char* method, F&& call) -> decltype(call()) {
  TimePoint start = clock_.Now();
  auto result = call();
  int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  MethodStats& s = stats_[method];
  s.calls += 1;
  s.errors += result ? 0 : 1;
  s.total_us += us;
  s.max_us = std::max(s.max_us, us);
  return result;
}

std::map<std::string, MethodStats> ProfilingStore::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Result<int64_t> ProfilingStore::Append(const AppendRequest& req) {
  return Timed("Append", [&] { return target().Append(req); });
}

Result<int64_t> ProfilingStore::CustomAppendInTransaction(std::string_view id,
                                                          TransactionWorkRef work) {
  return Timed("AppendInTransaction", [&] { return target().AppendInTransaction(id, work); });
}

Result<std::vector<Result<int64_t>>> ProfilingStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  return Timed("AppendBatch", [&] { return target().AppendBatch(requests); });
}

Result<std::vector<Envelope>> ProfilingStore::ReadRange(std::string_view id, int64_t first,
                                                        int64_t last) {
  return Timed("ReadRange", [&] { return target().ReadRange(id, first, last); });
}

Result<int64_t> ProfilingStore::Head(std::string_view id) {
  return Timed("Head", [&] { return target().Head(id); });
}

Result<ExecutionPage> ProfilingStore::ListExecutions(std::string_view after, size_t limit) {
  return Timed("ListExecutions", [&] { return target().ListExecutions(after, limit); });
}

Status ProfilingStore::DeleteExecution(std::string_view id) {
  return Timed("DeleteExecution", [&] { return target().DeleteExecution(id); });
}

Result<EndedPage> ProfilingStore::ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                                            size_t limit) {
  return Timed("ListEnded", [&] { return target().ListEnded(ended_ms_max, after, limit); });
}

Result<std::vector<Status>> ProfilingStore::DeleteEnded(std::span<const std::string> ids,
                                                        int64_t ended_ms_max) {
  return Timed("DeleteEnded", [&] { return target().DeleteEnded(ids, ended_ms_max); });
}

Result<int64_t> ProfilingStore::CustomAcquireFence(std::string_view id) {
  return Timed("AcquireFence", [&] { return target().AcquireFence(id); });
}

Result<int64_t> ProfilingStore::CustomReadFence(std::string_view id) {
  return Timed("ReadFence", [&] { return target().ReadFence(id); });
}

Result<ConditionalAcquire> ProfilingStore::CustomAcquireFenceIf(std::string_view id,
                                                                FenceExpectation e) {
  return Timed("AcquireFenceIf", [&] { return target().AcquireFenceIf(id, e); });
}

Result<AcquireWithTail> ProfilingStore::CustomAcquireFenceIfReadTail(std::string_view id,
                                                                     FenceExpectation e,
                                                                     int64_t read_after) {
  return Timed("AcquireFenceIfReadTail",
               [&] { return target().AcquireFenceIfReadTail(id, e, read_after); });
}

std::vector<Result<AcquireWithTail>> ProfilingStore::AcquireFencesIfReadTail(
    std::span<const AcquireIfRead> requests) {
  std::vector<Result<AcquireWithTail>> out;
  // Timed counts a call's error: the batch has none of its own.
  (void)Timed("AcquireFencesIfReadTail", [&]() -> Status {
    out = target().AcquireFencesIfReadTail(requests);
    return Ok();
  });
  return out;
}

Result<int64_t> ProfilingStore::CustomAppendIfUnchanged(const AppendRequest& req,
                                                        int64_t observed) {
  return Timed("AppendIfUnchanged", [&] { return target().AppendIfUnchanged(req, observed); });
}

Status ProfilingStore::CustomCopyPrefix(std::string_view from, std::string_view to,
                                        int64_t through) {
  return Timed("CopyPrefix", [&] { return target().CopyPrefix(from, to, through); });
}

Status ProfilingStore::CustomTruncatePrefixKeeping(std::string_view id, int64_t first_kept) {
  return Timed("TruncatePrefixKeeping",
               [&] { return target().TruncatePrefixKeeping(id, first_kept); });
}

Result<std::optional<RunOwner>> ProfilingStore::CustomRunOwnerOf(std::string_view id) {
  return Timed("RunOwnerOf", [&] { return target().RunOwnerOf(id); });
}

}  // namespace once::store
