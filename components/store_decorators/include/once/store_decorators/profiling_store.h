// File: profiling_store.h
//
// ProfilingStore times every call of the wrapped store, per method: calls,
// errors, total and maximum latency, measured with the injected Clock. It
// changes no behaviour; every capability is forwarded with timing (kCustom).
//
//   ProfilingStore profiled(sqlite, SystemClock());
//   ... run the workload ...
//   for (const auto& [method, s] : profiled.Snapshot())
//     fmt::print("{} {} calls {} us mean\n", method, s.calls, s.total_us / s.calls);
//
// Thread-safe; the counters are updated under a mutex after each call.

#pragma once

#include <map>
#include <mutex>
#include <string>

#include "once/base/clock.h"
#include "once/store/wrapper.h"

namespace once::store {

struct ProfilingDecisions {
  static constexpr Decide kAcquireFence = Decide::kCustom;
  static constexpr Decide kAcquireFenceIf = Decide::kCustom;
  static constexpr Decide kAppendIfUnchanged = Decide::kCustom;
  static constexpr Decide kCopyPrefix = Decide::kCustom;
  static constexpr Decide kTruncatePrefixKeeping = Decide::kCustom;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kCustom;
  static constexpr Decide kOwnership = Decide::kCustom;
  static constexpr Decide kTransaction = Decide::kCustom;
};

struct MethodStats {
  int64_t calls = 0;
  int64_t errors = 0;
  int64_t total_us = 0;
  int64_t max_us = 0;
};

class ProfilingStore final : public EventStoreWrapper<ProfilingStore, ProfilingDecisions> {
 public:
  // `target` and `clock` must outlive the decorator.
  ProfilingStore(EventStore& target, const Clock& clock)
      : EventStoreWrapper(target), clock_(clock) {}

  // Method name -> stats, e.g. "Append", "AcquireFenceIf".
  std::map<std::string, MethodStats> Snapshot() const;

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

  Result<int64_t> CustomAcquireFence(std::string_view id);
  Result<int64_t> CustomReadFence(std::string_view id);
  Result<ConditionalAcquire> CustomAcquireFenceIf(std::string_view id, FenceExpectation e);
  Result<AcquireWithTail> CustomAcquireFenceIfReadTail(std::string_view id, FenceExpectation e,
                                                       int64_t read_after);
  // The batch is timed as one call and forwarded as one (not as the calls
  // one at a time: profiling must not change how the store is used).
  std::vector<Result<AcquireWithTail>> AcquireFencesIfReadTail(
      std::span<const AcquireIfRead> requests) override;
  Result<int64_t> CustomAppendIfUnchanged(const AppendRequest& req, int64_t observed);
  Status CustomCopyPrefix(std::string_view from, std::string_view to, int64_t through);
  Status CustomTruncatePrefixKeeping(std::string_view id, int64_t first_kept);
  Result<std::optional<RunOwner>> CustomRunOwnerOf(std::string_view id);
  Result<int64_t> CustomAppendInTransaction(std::string_view id, TransactionWorkRef work);

 protected:
  std::string_view name() const override { return "ProfilingStore"; }

 private:
  template <class F>
  auto Timed(const char* method, F&& call) -> decltype(call());

  const Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, MethodStats> stats_;  // GUARDED_BY(mu_)
};

}  // namespace once::store
