// The kit over the reference backend, and over decorators (proof that
// decorators run the same cases): one that forwards everything and one that
// refuses every optional capability.

#include <memory>

#include "once/store/wrapper.h"
#include "once/store_testing/conformance.h"

namespace {

using once::store::Decide;
using once::store::EventStore;
using once::store::EventStoreWrapper;
using once::store::ForwardEverything;
using once::store_testing::DecoratedFactory;
using once::store_testing::MemoryFactory;

class PassThroughStore final : public EventStoreWrapper<PassThroughStore, ForwardEverything> {
 public:
  using EventStoreWrapper::EventStoreWrapper;

 protected:
  std::string_view name() const override { return "pass-through"; }
};

struct RefuseEverything {
  static constexpr Decide kAcquireFence = Decide::kRefuse;
  static constexpr Decide kAcquireFenceIf = Decide::kRefuse;
  static constexpr Decide kAppendIfUnchanged = Decide::kRefuse;
  static constexpr Decide kCopyPrefix = Decide::kRefuse;
  static constexpr Decide kTruncatePrefixKeeping = Decide::kRefuse;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kRefuse;
  static constexpr Decide kOwnership = Decide::kRefuse;
  static constexpr Decide kTransaction = Decide::kRefuse;
};

class CoreOnlyStore final : public EventStoreWrapper<CoreOnlyStore, RefuseEverything> {
 public:
  using EventStoreWrapper::EventStoreWrapper;

 protected:
  std::string_view name() const override { return "core-only"; }
};

template <class Decorator>
std::unique_ptr<EventStore> Wrap(EventStore& inner) {
  return std::make_unique<Decorator>(inner);
}

}  // namespace

ONCE_INSTANTIATE_STORE_CONFORMANCE(Memory, MemoryFactory());
ONCE_INSTANTIATE_STORE_CONFORMANCE(PassThrough,
                                   DecoratedFactory("PassThroughOverMemory", MemoryFactory(),
                                                    Wrap<PassThroughStore>));
ONCE_INSTANTIATE_STORE_CONFORMANCE(CoreOnly, DecoratedFactory("CoreOnlyOverMemory", MemoryFactory(),
                                                              Wrap<CoreOnlyStore>));
