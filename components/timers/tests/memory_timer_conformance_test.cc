#include "once/timers/memory_timer_store.h"
#include "once/timers_testing/timer_conformance.h"

namespace once::timers_testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Memory, TimerStoreConformance,
                         testing::Values(TimerBackend{
                             "memory",
                             []() -> Result<std::shared_ptr<timers::TimerStore>> {
                               return std::make_shared<timers::MemoryTimerStore>();
                             }}),
                         TimerBackendName);

}  // namespace
}  // namespace once::timers_testing
