#include "once/queues/memory_queue_store.h"
#include "once/queues_testing/queue_conformance.h"

namespace once::queues_testing {
namespace {

Result<std::shared_ptr<queues::QueueStore>> MakeMemory() {
  static const SystemClock clock;
  return std::shared_ptr<queues::QueueStore>(std::make_shared<queues::MemoryQueueStore>(clock));
}

INSTANTIATE_TEST_SUITE_P(Memory, QueueStoreConformance,
                         testing::Values(QueueBackend{"Memory", MakeMemory}), QueueBackendName);

}  // namespace
}  // namespace once::queues_testing
