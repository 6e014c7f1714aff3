// Test decorators over an EventStore: hooks, counting, faults, refusals.
#pragma once

#include <atomic>
#include <functional>
#include <utility>

#include "once/store/wrapper.h"

namespace once::runtime::testing {

using store::Decide;
using store::EventStore;
using store::EventStoreWrapper;

struct HookDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFenceIf = Decide::kCustom;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kCustom;
};
// The same without the combined acquire: the runtime reads the tail itself.
struct HookSeparateTailDecisions : HookDecisions {
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kRefuse;
};

// Counts writes, can fail writes after a budget (a crash), and runs a hook
// before every conditional acquire, combined or not (call number 1, 2, ...).
template <class Decisions>
class BasicHookStore final : public EventStoreWrapper<BasicHookStore<Decisions>, Decisions> {
  using Base = EventStoreWrapper<BasicHookStore<Decisions>, Decisions>;
  using Base::target;

 public:
  explicit BasicHookStore(EventStore& target) : Base(target) {}

  std::function<void(int call)> before_acquire_if;
  // Runs once, before the next ReadRange (then it is cleared).
  std::function<void()> before_next_read;
  // Runs once, before the next Append or AppendBatch (then it is cleared).
  std::function<void()> before_next_append;
  std::atomic<int> acquire_if_calls{0};
  std::atomic<int> reads{0};  // ReadRange calls
  std::atomic<int> appends{0};
  std::atomic<int> batches{0};
  std::atomic<int> batched_requests{0};
  std::atomic<int> writes_left{-1};  // -1: unlimited; 0: every write fails

  Result<int64_t> Append(const store::AppendRequest& req) override {
    ++appends;
    if (auto hook = std::exchange(before_next_append, nullptr)) hook();
    if (!Spend()) return MakeError(ErrorCode::kUnavailable, "injected crash");
    return target().Append(req);
  }
  Result<std::vector<store::Envelope>> ReadRange(std::string_view id, int64_t first,
                                                 int64_t last) override {
    ++reads;
    if (auto hook = std::exchange(before_next_read, nullptr)) hook();
    return target().ReadRange(id, first, last);
  }
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const store::AppendRequest> requests) override {
    ++batches;
    batched_requests += static_cast<int>(requests.size());
    if (auto hook = std::exchange(before_next_append, nullptr)) hook();
    if (!Spend()) return MakeError(ErrorCode::kUnavailable, "injected crash");
    return target().AppendBatch(requests);
  }
  Result<store::ConditionalAcquire> CustomAcquireFenceIf(std::string_view id,
                                                         store::FenceExpectation expect) {
    int call = ++acquire_if_calls;
    if (before_acquire_if) before_acquire_if(call);
    return target().AcquireFenceIf(id, expect);
  }
  Result<store::AcquireWithTail> CustomAcquireFenceIfReadTail(std::string_view id,
                                                              store::FenceExpectation expect,
                                                              int64_t read_after) {
    int call = ++acquire_if_calls;
    if (before_acquire_if) before_acquire_if(call);
    return target().AcquireFenceIfReadTail(id, expect, read_after);
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

using HookStore = BasicHookStore<HookDecisions>;
using HookSeparateTailStore = BasicHookStore<HookSeparateTailDecisions>;

// Says its appends share durable writes (GroupCommitUseful), whatever it
// wraps: a memory store behind it stands in for SQLite or PostgreSQL, and a
// runtime over it groups its appends through a Committer, as over those.
class DurableLikeStore final
    : public EventStoreWrapper<DurableLikeStore, store::ForwardEverything> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
  bool GroupCommitUseful() const override { return true; }
};

struct NoFenceIfDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFenceIf = Decide::kRefuse;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kRefuse;
};
// A store without the conditional acquire.
class NoFenceIfStore final : public EventStoreWrapper<NoFenceIfStore, NoFenceIfDecisions> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
};

struct SeparateTailDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kRefuse;
};
// A store with the conditional acquire but not the combined one: the
// runtime reads the tail in a call of its own.
class SeparateTailStore final : public EventStoreWrapper<SeparateTailStore, SeparateTailDecisions> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
};

struct NoFencingDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFence = Decide::kRefuse;
  static constexpr Decide kAcquireFenceIf = Decide::kRefuse;
  static constexpr Decide kAppendIfUnchanged = Decide::kRefuse;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kRefuse;
};
// A store that does not fence at all (as SQLite).
class NonFencingStore final : public EventStoreWrapper<NonFencingStore, NoFencingDecisions> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
};

}  // namespace once::runtime::testing
