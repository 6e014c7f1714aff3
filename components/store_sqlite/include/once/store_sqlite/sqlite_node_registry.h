// File: sqlite_node_registry.h
//
// SqliteNodeRegistry: the NodeRegistry (once/nodes/node_registry.h) on the
// SQLite file the event store uses (it reads the loom_runs rows the event
// store writes). Several processes on one machine sharing the file are the
// nodes; time is the injected clock (one machine, one clock).
//
//   ONCE_ASSIGN_OR_RETURN(auto registry, SqliteNodeRegistry::Open("/var/lib/once/loom.db"));
//   nodes::Node node(*registry, steady_clock, {.info = {.node_id = "worker-1"}});
//
// Tables (docs/nodes.md): loom_nodes(node_id, host, pid, version,
// started_at_ms, heartbeat_at_ms, lease_ms, stopped) and loom_runs
// (execution_id, owner, since_ms), created if missing (the event store's
// migration 3 creates the same tables). Heartbeat runs in one BEGIN
// IMMEDIATE (read the previous beat, upsert).
//
// Threads: every method may be called from any thread (one connection under
// a mutex). Errors: as SqliteEventStore's.

#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "once/base/clock.h"
#include "once/nodes/node_registry.h"
#include "once/store_sqlite/sqlite_event_store.h"

namespace once::store {

struct SqliteNodeOptions {
  Durability durability = Durability::kFull;
  std::chrono::milliseconds busy_timeout{5000};
  nodes::NodeLimits limits;
  const Clock* clock = nullptr;  // nullptr: the system clock; must outlive the registry
  std::string vfs;
};

class SqliteNodeRegistry final : public nodes::NodeRegistry {
 public:
  static Result<std::unique_ptr<SqliteNodeRegistry>> Open(const std::string& path,
                                                          SqliteNodeOptions options = {});
  ~SqliteNodeRegistry() override;

  Result<nodes::Beat> Heartbeat(const nodes::NodeInfo& node, int64_t lease_ms) override;
  Status Stop(std::string_view node_id) override;
  Result<std::vector<nodes::NodeRecord>> Nodes() override;
  Result<std::vector<nodes::RunRow>> OrphanedRuns(std::string_view self, std::string_view after,
                                                  size_t limit,
                                                  int64_t unknown_owner_lease_ms) override;
  Result<std::vector<nodes::RunRow>> RunsOf(std::string_view owner, std::string_view after,
                                            size_t limit) override;
  Status ForgetRun(std::string_view execution_id, std::string_view owner) override;
  Result<size_t> ForgetNodes(int64_t dead_for_ms) override;
  Result<int64_t> NowMs() override;
  const nodes::NodeLimits& limits() const override;

 private:
  struct Impl;
  explicit SqliteNodeRegistry(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace once::store
