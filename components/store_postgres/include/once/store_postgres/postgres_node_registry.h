// File: postgres_node_registry.h
//
// PostgresNodeRegistry: the NodeRegistry (once/nodes/node_registry.h) on
// PostgreSQL, in the event store's schema (it reads the run owners the event
// store writes into the fences rows). Every time it records or judges by is the SERVER's
// clock (clock_timestamp()): a node's heartbeat is stamped by the database
// and its death judged by it, never by comparing two machines' clocks.
//
//   PostgresNodeOptions options;
//   options.conninfo = url;
//   options.schema = "loom";                 // the event store's schema
//   ONCE_ASSIGN_OR_RETURN(auto registry, PostgresNodeRegistry::Open(options));
//
// Tables (docs/nodes.md): loom_nodes, and the owner columns of fences, both
// created if missing by the event store's migration, which Open runs under
// its advisory lock. Heartbeat is one statement (the previous beat read FOR
// UPDATE, the upsert, the server's time). No index names the owner: the
// orphan scan reads fences only while a dead node is not yet swept (one
// statement finds the orphans and, when there are none, marks the dead
// nodes swept; a heartbeat clears the mark); RunsOf and ForgetNodes scan
// fences. Its own small pool (connections_max), apart from the event store's.
//
// Threads: every method may be called from any thread. Errors as
// postgres_event_store.h.

#pragma once

#include <memory>
#include <string>

#include "once/nodes/node_registry.h"
#include "once/store_postgres/postgres_event_store.h"

namespace once::store {

struct PostgresNodeOptions {
  std::string conninfo;
  std::string schema = "public";
  size_t connections_max = 2;
  int64_t checkout_timeout_ms = 5'000;
  int64_t migration_lock_timeout_ms = 10'000;
  nodes::NodeLimits limits;
};

class PostgresNodeRegistry final : public nodes::NodeRegistry {
 public:
  static Result<std::unique_ptr<PostgresNodeRegistry>> Open(const PostgresNodeOptions& options);
  ~PostgresNodeRegistry() override;

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
  const nodes::NodeLimits& limits() const override { return options_.limits; }

 private:
  PostgresNodeRegistry(PostgresNodeOptions options, std::unique_ptr<pg::ConnectionPool> pool);

  PostgresNodeOptions options_;
  std::unique_ptr<pg::ConnectionPool> pool_;
};

}  // namespace once::store
