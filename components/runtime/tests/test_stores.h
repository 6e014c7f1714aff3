// Test decorators over an EventStore: hooks, counting, faults, refusals.
#pragma once

#include <atomic>
#include <functional>

#include "once/store/wrapper.h"

namespace once::runtime::testing {

using store::Decide;
using store::EventStore;
using store::EventStoreWrapper;

struct HookDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFenceIf = Decide::kCustom;
};

// Counts writes, can fail writes after a budget (a crash), and runs a hook
// before every AcquireFenceIf (call number 1, 2, ...).
class HookStore final : public EventStoreWrapper<HookStore, HookDecisions> {
 public:
  explicit HookStore(EventStore& target) : EventStoreWrapper(target) {}

  std::function<void(int call)> before_acquire_if;
  std::atomic<int> acquire_if_calls{0};
  std::atomic<int> appends{0};
  std::atomic<int> batches{0};
  std::atomic<int> batched_requests{0};
  std::atomic<int> writes_left{-1};  // -1: unlimited; 0: every write fails

  Result<int64_t> Append(const store::AppendRequest& req) override {
    ++appends;
    if (!Spend()) return MakeError(ErrorCode::kUnavailable, "injected crash");
    return target().Append(req);
  }
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const store::AppendRequest> requests) override {
    ++batches;
    batched_requests += static_cast<int>(requests.size());
    if (!Spend()) return MakeError(ErrorCode::kUnavailable, "injected crash");
    return target().AppendBatch(requests);
  }
  Result<store::ConditionalAcquire> CustomAcquireFenceIf(std::string_view id,
                                                         store::FenceExpectation expect) {
    int call = ++acquire_if_calls;
    if (before_acquire_if) before_acquire_if(call);
    return target().AcquireFenceIf(id, expect);
  }

 private:
  bool Spend() {
    int left = writes_left.load();
    if (left < 0) return true;
    if (left == 0) return false;
    --writes_left;
    return true;
  }
};

struct NoFenceIfDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFenceIf = Decide::kRefuse;
};
// A store without the conditional acquire.
class NoFenceIfStore final : public EventStoreWrapper<NoFenceIfStore, NoFenceIfDecisions> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
};

struct NoFencingDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFence = Decide::kRefuse;
  static constexpr Decide kAcquireFenceIf = Decide::kRefuse;
  static constexpr Decide kAppendIfUnchanged = Decide::kRefuse;
};
// A store that does not fence at all (as SQLite).
class NonFencingStore final : public EventStoreWrapper<NonFencingStore, NoFencingDecisions> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
};

}  // namespace once::runtime::testing
