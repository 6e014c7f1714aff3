#include <utility>

#include "once/store/memory_store.h"
#include "once/store/wrapper.h"
#include "once/store_testing/conformance.h"

namespace once::store_testing {
namespace {

// Forwards everything to `outer`, owning both `outer` and the `inner` store
// it decorates (destroyed in that order).
class OwningStore final : public store::EventStoreWrapper<OwningStore, store::ForwardEverything> {
 public:
  OwningStore(std::unique_ptr<EventStore> inner, std::unique_ptr<EventStore> outer)
      : EventStoreWrapper(*outer), inner_(std::move(inner)), outer_(std::move(outer)) {}

 private:
  std::unique_ptr<EventStore> inner_;
  std::unique_ptr<EventStore> outer_;
};

}  // namespace

BackendFactory MemoryFactory() {
  return {.name = "Memory", .make = [](const StoreConfig& config) -> Result<StoreHarness> {
            StoreHarness h;
            h.store = std::make_unique<store::MemoryEventStore>(config.limits, *config.clock);
            return h;
          }};
}

std::unique_ptr<EventStore> DecorateOwning(std::unique_ptr<EventStore> inner,
                                           const DecorateFn& decorate) {
  std::unique_ptr<EventStore> outer = decorate(*inner);
  return std::make_unique<OwningStore>(std::move(inner), std::move(outer));
}

BackendFactory DecoratedFactory(std::string name, BackendFactory inner, DecorateFn decorate) {
  auto make = [inner_make = std::move(inner.make),
               decorate = std::move(decorate)](const StoreConfig& config) -> Result<StoreHarness> {
    ONCE_ASSIGN_OR_RETURN(StoreHarness inner_harness, inner_make(config));
    auto shared = std::make_shared<StoreHarness>(std::move(inner_harness));
    StoreHarness h;
    h.keep_alive = shared;
    h.store = decorate(*shared->store);
    if (shared->open_another) {
      h.open_another = [shared, decorate]() -> std::unique_ptr<EventStore> {
        std::unique_ptr<EventStore> handle = shared->open_another();
        if (!handle) return nullptr;
        return DecorateOwning(std::move(handle), decorate);
      };
    }
    return h;
  };
  return {.name = std::move(name), .make = std::move(make)};
}

}  // namespace once::store_testing
