// File: observed_store.h
//
// ObservedStore: hands what happens at the store to a StoreObserver, so a
// program can count it (once::telemetry adapts it to Prometheus) without
// the libraries knowing any metrics format. It sees every append that
// landed (starts, parks, resumes, ends, per workflow), every group commit
// (its size and latency) and every conditional acquire's outcome.
//
//   telemetry::LoomMetrics metrics(registry, clock);   // a StoreObserver
//   ObservedStore observed(*store, metrics, clock);
//   AppConfig config{.store = &observed, ...};         // the App runs through it
//
// Conditional acquire outcomes: won (the token was bumped); stale (refused
// and the park was answered: someone else resumed it); contended (refused
// while the park is still open: another resumer holds a newer token). A
// plain AcquireFenceIf returns no tail, so its refusals count as stale.
//
// Threads: as the target; the observer is called on the caller's thread,
// after the call returned, and must be thread-safe.
#pragma once

#include <cstdint>

#include "once/base/clock.h"
#include "once/store/wrapper.h"

namespace once::store {

enum class AcquireOutcome { kWon, kStale, kContended };

class StoreObserver {
 public:
  virtual ~StoreObserver() = default;
  // A request whose events landed (their time_ms may still be 0: the
  // store's clock stamped the stored copies).
  virtual void OnAppended(const AppendRequest& request) = 0;
  // One commit: the requests it held, how many landed, its latency.
  virtual void OnCommit(size_t requests, size_t landed, int64_t latency_us) = 0;
  virtual void OnConditionalAcquire(AcquireOutcome outcome) = 0;
};

struct ObservedDecisions {
  static constexpr Decide kAcquireFence = Decide::kForward;
  static constexpr Decide kAcquireFenceIf = Decide::kCustom;
  static constexpr Decide kAppendIfUnchanged = Decide::kCustom;
  static constexpr Decide kCopyPrefix = Decide::kForward;
  static constexpr Decide kTruncatePrefixKeeping = Decide::kForward;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kCustom;
  static constexpr Decide kOwnership = Decide::kForward;   // owners pass through unchanged
  static constexpr Decide kTransaction = Decide::kCustom;  // observes the append it commits
};

class ObservedStore final : public EventStoreWrapper<ObservedStore, ObservedDecisions> {
 public:
  // `target`, `observer` and `clock` must outlive the decorator.
  ObservedStore(EventStore& target, StoreObserver& observer, const Clock& clock)
      : EventStoreWrapper(target), observer_(observer), clock_(clock) {}

  Result<int64_t> Append(const AppendRequest& req) override;
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const AppendRequest> requests) override;

  Result<ConditionalAcquire> CustomAcquireFenceIf(std::string_view id, FenceExpectation e);
  Result<AcquireWithTail> CustomAcquireFenceIfReadTail(std::string_view id, FenceExpectation e,
                                                       int64_t read_after);
  Result<int64_t> CustomAppendIfUnchanged(const AppendRequest& req, int64_t observed);
  Result<int64_t> CustomAppendInTransaction(std::string_view id, TransactionWorkRef work);

 protected:
  std::string_view name() const override { return "ObservedStore"; }

 private:
  int64_t SinceUs(TimePoint start) const;

  StoreObserver& observer_;
  const Clock& clock_;
};

}  // namespace once::store
