// The InboxStore conformance kit over MemoryInboxStore (not durable: the
// reopen case skips: each Open is a new, empty store).
#include "once/inbox/memory_inbox_store.h"
#include "once/inbox_testing/inbox_conformance.h"

namespace once::inbox_testing {
namespace {

Result<InboxOpener> MakeMemoryDatabase() {
  return InboxOpener(
      [](const inbox::InboxLimits& limits) -> Result<std::shared_ptr<inbox::InboxStore>> {
        return std::make_shared<inbox::MemoryInboxStore>(limits);
      });
}

INSTANTIATE_TEST_SUITE_P(Memory, InboxStoreConformance,
                         testing::Values(InboxBackend{"memory", false, MakeMemoryDatabase}),
                         InboxBackendName);

}  // namespace
}  // namespace once::inbox_testing
