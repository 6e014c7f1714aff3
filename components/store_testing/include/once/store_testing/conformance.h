// File: conformance.h
//
// The EventStore conformance kit: ONE parameterised GoogleTest suite that every
// backend (memory, SQLite, PostgreSQL) and every decorator instantiates with a
// factory, so all of them are held to the same cases (event_store.h is the
// spec; the AcquireFenceIf cases are ADR 0118 D1's "Tests" list).
//
// A backend's test file (real ones: components/store_sqlite/tests/conformance_test.cc,
// components/store_postgres/tests/conformance_test.cc):
//
//   #include "once/store_testing/conformance.h"
//
//   namespace {
//   using once::store_testing::BackendFactory;
//   using once::store_testing::StoreConfig;
//   using once::store_testing::StoreHarness;
//
//   BackendFactory SqliteFactory() {
//     return {.name = "Sqlite",
//             .make = [](const StoreConfig& config) -> once::Result<StoreHarness> {
//               auto dir = std::make_shared<TempDir>();          // anything to keep alive
//               ONCE_ASSIGN_OR_RETURN(auto store,
//                   SqliteEventStore::Open(dir->path() / "db", config.limits, *config.clock));
//               StoreHarness h;
//               h.keep_alive = dir;
//               h.store = std::move(store);
//               h.open_another = [dir, config] { /* second connection, same file */ };
//               return h;
//             }};
//   }
//   }  // namespace
//
//   ONCE_INSTANTIATE_STORE_CONFORMANCE(Sqlite, SqliteFactory());
//
// and in its CMakeLists.txt:
//
//   once_test(store_sqlite_conformance SOURCES tests/conformance_test.cc
//             DEPS once::store_sqlite once::store_testing LABELS unit)
//
// Linking. The TEST_P cases live in src/conformance.cc, compiled into an
// OBJECT library (once::store_testing): every binary that links it DIRECTLY
// gets all cases (object files are never dropped by the linker, unlike unused
// members of a static archive). Link it only into test executables, never into
// another library. A binary that links it for the step scheduler but does not
// instantiate the suite is fine (the suite is marked as allowed to be
// uninstantiated).
//
// Decorators run the kit over an inner backend with DecoratedFactory:
//
//   ONCE_INSTANTIATE_STORE_CONFORMANCE(
//       TenantOverMemory,
//       DecoratedFactory("TenantOverMemory", MemoryFactory(),
//                        [](EventStore& inner) { return std::make_unique<TenantStore>(inner); }));
//
// Contract for a factory's `make`:
//   * it returns a FRESH, EMPTY store (no executions, no fence tokens) honouring
//     config.limits and stamping times from *config.clock; each case calls it
//     at least once and never shares a store with another case;
//   * kUnavailable (e.g. no database configured) makes every case SKIP with the
//     message; any other error FAILS the case;
//   * open_another, when set, opens a second independent handle (connection)
//     to the SAME store; the concurrency cases give each thread its own handle.
//     When null, the threads share `store` (it must be thread-safe anyway).
//
// Cases for an optional capability run only when store.Supports(c) and skip
// with the reason otherwise; a store that does not support a capability must
// answer kUnsupported for its methods (checked too).
//
// Threads: a factory may be called from the test's main thread only; the
// handles it returns are used concurrently by the concurrency cases.

#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/store/event_store.h"

namespace once::store_testing {

using store::EventStore;
using store::Limits;

// What a factory builds a store with.
struct StoreConfig {
  Limits limits;                 // the cases shrink these to test each named limit
  const Clock* clock = nullptr;  // never null; outlives the store; stamp time_ms == 0 with it
};

// One store under test and what keeps it alive. Members are destroyed in
// reverse order: open_another and store go before keep_alive.
struct StoreHarness {
  std::shared_ptr<void> keep_alive;  // temp dir, connection pool, inner store...; may be null
  std::unique_ptr<EventStore> store;
  // A second independent handle (connection) to the SAME store; may be null.
  // Every handle it returns must be destroyed before this harness.
  std::function<std::unique_ptr<EventStore>()> open_another;
};

struct BackendFactory {
  std::string name;  // the instantiation's name: letters, digits, '_' only
  std::function<Result<StoreHarness>(const StoreConfig&)> make;
};

// The parameterised suite. Cases are defined in src/conformance.cc.
class EventStoreConformance : public testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override;

  // The case's store (default Limits, the fixture's clock).
  EventStore& store() { return *harness_.store; }
  // Another FRESH store with these limits (kept alive until the case ends).
  // Fails the case (returns null) if the factory fails.
  EventStore* MakeStore(const Limits& limits);
  // A handle for one of several concurrent threads: a new independent handle
  // when the backend has them, else null (use store()).
  std::unique_ptr<EventStore> OpenAnother();
  bool Supports(store::Capability c) { return store().Supports(c); }

  ManualClock clock_;

 private:
  StoreHarness harness_;
  std::vector<StoreHarness> extra_;
};

// GoogleTest prints a parameter by its name.
void PrintTo(const BackendFactory& factory, std::ostream* os);

// The name of an instantiation's parameter (BackendFactory::name).
std::string NameOf(const testing::TestParamInfo<BackendFactory>& info);

// The reference backend: a fresh MemoryEventStore per call. No open_another.
BackendFactory MemoryFactory();

// Builds a decorator over a store; the decorator keeps a reference to `inner`.
using DecorateFn = std::function<std::unique_ptr<EventStore>(EventStore& inner)>;

// Runs the kit over `decorate(inner)`: each harness owns the inner harness;
// open_another decorates a new inner handle when the inner backend has them.
BackendFactory DecoratedFactory(std::string name, BackendFactory inner, DecorateFn decorate);

// `decorate(*inner)`, owning `inner`: destroying the result destroys both.
std::unique_ptr<EventStore> DecorateOwning(std::unique_ptr<EventStore> inner,
                                           const DecorateFn& decorate);

}  // namespace once::store_testing

// Instantiates the suite once, at namespace scope, for one factory:
//   ONCE_INSTANTIATE_STORE_CONFORMANCE(Sqlite, SqliteFactory());
#define ONCE_INSTANTIATE_STORE_CONFORMANCE(prefix, factory)                           \
  namespace once::store_testing {                                                     \
  INSTANTIATE_TEST_SUITE_P(prefix, EventStoreConformance, ::testing::Values(factory), \
                           ::once::store_testing::NameOf);                            \
  }
