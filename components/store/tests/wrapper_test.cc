#include "once/store/wrapper.h"

#include <gtest/gtest.h>

#include "once/store/memory_store.h"

namespace once::store {
namespace {

struct Mixed {
  static constexpr Decide kAcquireFence = Decide::kForward;
  static constexpr Decide kAcquireFenceIf = Decide::kCustom;
  static constexpr Decide kAppendIfUnchanged = Decide::kRefuse;
  static constexpr Decide kCopyPrefix = Decide::kRefuse;
  static constexpr Decide kTruncatePrefixKeeping = Decide::kForward;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kRefuse;
  static constexpr Decide kOwnership = Decide::kRefuse;
  static constexpr Decide kTransaction = Decide::kRefuse;
};

class CountingStore final : public EventStoreWrapper<CountingStore, Mixed> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
  Result<ConditionalAcquire> CustomAcquireFenceIf(std::string_view id, FenceExpectation e) {
    ++conditional_calls;
    return target().AcquireFenceIf(id, e);
  }
  int conditional_calls = 0;
};

// A Decisions struct that forgets one capability is not accepted.
struct Forgetful {
  static constexpr Decide kAcquireFence = Decide::kForward;
  static constexpr Decide kAcquireFenceIf = Decide::kForward;
  static constexpr Decide kAppendIfUnchanged = Decide::kForward;
  static constexpr Decide kCopyPrefix = Decide::kForward;
};
static_assert(!DecidesEveryCapability<Forgetful>);
static_assert(DecidesEveryCapability<Mixed>);
static_assert(DecidesEveryCapability<ForwardEverything>);

// The combined acquire follows the conditional acquire: refusing the acquire
// and forwarding the combined one, or customizing the acquire and forwarding
// the combined one (around the customization), does not compile.
struct RefusesAcquireForwardsTail : ForwardEverything {
  static constexpr Decide kAcquireFenceIf = Decide::kRefuse;
};
struct CustomAcquireForwardsTail : ForwardEverything {
  static constexpr Decide kAcquireFenceIf = Decide::kCustom;
};
struct CustomAcquireCustomTail : CustomAcquireForwardsTail {
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kCustom;
};
static_assert(!DecidesEveryCapability<RefusesAcquireForwardsTail>);
static_assert(!DecidesEveryCapability<CustomAcquireForwardsTail>);
static_assert(DecidesEveryCapability<CustomAcquireCustomTail>);

TEST(WrapperTest, ForwardsRefusesAndCallsCustom) {
  MemoryEventStore inner;
  CountingStore store(inner);
  EXPECT_TRUE(store.Supports(Capability::kAcquireFence));
  EXPECT_TRUE(store.Supports(Capability::kAcquireFenceIf));
  EXPECT_FALSE(store.Supports(Capability::kAppendIfUnchanged));
  EXPECT_FALSE(store.Supports(Capability::kCopyPrefix));

  AppendRequest req{.execution_id = "e",
                    .expected_next = 1,
                    .events = {events::KernelEvent(events::KernelKind::kExecutionStarted,
                                                   nlohmann::json::object())}};
  ASSERT_EQ(store.Append(req).value(), 1);
  EXPECT_EQ(inner.Head("e").value(), 1);
  EXPECT_EQ(store.AcquireFence("e").value(), 1);
  auto c = store.AcquireFenceIf("e", {.fence = 1, .park_seq = 1});
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->stale);
  EXPECT_EQ(store.conditional_calls, 1);
  EXPECT_EQ(store.AppendIfUnchanged(req, 2).error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(store.CopyPrefix("e", "f", 1).error().code, ErrorCode::kUnsupported);
  EXPECT_FALSE(store.Supports(Capability::kOwnership));
  EXPECT_EQ(store.RunOwnerOf("e").error().code, ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace once::store
