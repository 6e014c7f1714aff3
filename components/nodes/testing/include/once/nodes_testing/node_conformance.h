// File: node_conformance.h
//
// The NodeRegistry conformance kit: one parameterised suite every backend
// (memory, SQLite, PostgreSQL) runs. A backend gives an event store with
// kOwnership and a registry over the SAME data (the registry reads the run
// rows the store writes), both on the real clock: leases in the cases are a
// few hundred milliseconds and the cases sleep past them (the PostgreSQL
// registry judges by the server's clock, which a test cannot move).
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, NodeRegistryConformance,
//                            testing::Values(nodes_testing::NodeBackend{"sqlite", MakeSqlite}),
//                            nodes_testing::NodeBackendName);
//
// Link once::nodes_testing (an OBJECT library, so every case is kept).

#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "once/nodes/node_registry.h"
#include "once/store/event_store.h"

namespace once::nodes_testing {

struct NodeHarness {
  std::shared_ptr<void> keep_alive;  // destroyed last
  std::unique_ptr<store::EventStore> store;
  std::unique_ptr<nodes::NodeRegistry> registry;
};

struct NodeBackend {
  std::string name;
  // A fresh, empty store and its registry; kUnavailable skips the case.
  std::function<Result<NodeHarness>()> make;
};

inline std::string NodeBackendName(const testing::TestParamInfo<NodeBackend>& info) {
  return info.param.name;
}

class NodeRegistryConformance : public testing::TestWithParam<NodeBackend> {
 protected:
  void SetUp() override;
  void TearDown() override;
  store::EventStore& store() { return *h_.store; }
  nodes::NodeRegistry& registry() { return *h_.registry; }
  NodeHarness h_;
};

}  // namespace once::nodes_testing
