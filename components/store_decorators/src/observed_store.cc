#include "once/store_decorators/observed_store.h"

namespace once::store {

int64_t ObservedStore::SinceUs(TimePoint start) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - start).count();
}

Result<int64_t> ObservedStore::Append(const AppendRequest& req) {
  TimePoint start = clock_.Now();
  auto out = target().Append(req);
  observer_.OnCommit(1, out ? 1 : 0, SinceUs(start));
  if (out) observer_.OnAppended(req);
  return out;
}

Result<std::vector<Result<int64_t>>> ObservedStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  TimePoint start = clock_.Now();
  auto out = target().AppendBatch(requests);
  if (!out) {
    observer_.OnCommit(requests.size(), 0, SinceUs(start));
    return out;
  }
  size_t landed = 0;
  for (const auto& r : *out) landed += r ? 1 : 0;
  observer_.OnCommit(requests.size(), landed, SinceUs(start));
  for (size_t i = 0; i < requests.size() && i < out->size(); ++i) {
    if ((*out)[i]) observer_.OnAppended(requests[i]);
  }
  return out;
}

Result<ConditionalAcquire> ObservedStore::CustomAcquireFenceIf(std::string_view id,
                                                               FenceExpectation e) {
  auto out = target().AcquireFenceIf(id, e);
  if (out)
    observer_.OnConditionalAcquire(out->stale ? AcquireOutcome::kStale : AcquireOutcome::kWon);
  return out;
}

Result<AcquireWithTail> ObservedStore::CustomAcquireFenceIfReadTail(std::string_view id,
                                                                    FenceExpectation e,
                                                                    int64_t read_after) {
  auto out = target().AcquireFenceIfReadTail(id, e, read_after);
  if (!out) return out;
  AcquireOutcome outcome = AcquireOutcome::kWon;
  if (out->acquire.stale) {
    outcome = AcquireOutcome::kContended;
    for (const Envelope& ev : out->tail) {
      if (ev.sequence > e.park_seq && ev.answering()) outcome = AcquireOutcome::kStale;
    }
  }
  observer_.OnConditionalAcquire(outcome);
  return out;
}

Result<int64_t> ObservedStore::CustomAppendIfUnchanged(const AppendRequest& req, int64_t observed) {
  TimePoint start = clock_.Now();
  auto out = target().AppendIfUnchanged(req, observed);
  observer_.OnCommit(1, out ? 1 : 0, SinceUs(start));
  if (out) observer_.OnAppended(req);
  return out;
}

Result<int64_t> ObservedStore::CustomAppendInTransaction(std::string_view id,
                                                         TransactionWorkRef work) {
  std::optional<AppendRequest> made;  // what the work returned, observed once committed
  auto observed_work = [&](SqlTransaction& sql) -> Result<AppendRequest> {
    Result<AppendRequest> req = work(sql);
    if (req) made = *req;
    return req;
  };
  TimePoint start = clock_.Now();
  auto out = target().AppendInTransaction(id, observed_work);
  observer_.OnCommit(1, out ? 1 : 0, SinceUs(start));
  if (out && made) observer_.OnAppended(*made);
  return out;
}

}  // namespace once::store
