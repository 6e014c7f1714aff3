#include "once/nodes/memory_node_registry.h"
#include "once/nodes_testing/node_conformance.h"

namespace once::nodes_testing {
namespace {

Result<NodeHarness> MakeMemory() {
  static const SystemClock clock;
  auto store = std::make_unique<store::MemoryEventStore>(store::Limits{}, clock);
  NodeHarness h;
  h.registry = std::make_unique<nodes::MemoryNodeRegistry>(*store, clock);
  h.store = std::move(store);
  return h;
}

INSTANTIATE_TEST_SUITE_P(Memory, NodeRegistryConformance,
                         testing::Values(NodeBackend{"Memory", MakeMemory}), NodeBackendName);

}  // namespace
}  // namespace once::nodes_testing
