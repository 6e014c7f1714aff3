// File: node_registry.h
//
// NodeRegistry: which Loom nodes share a store, which are alive, and which
// running executions a dead node left behind (issue 15; docs/nodes.md).
//
// A node registers itself and renews its lease with Heartbeat(); it is DEAD
// when its lease (lease_ms, recorded with every heartbeat) has passed since
// its last heartbeat, judged by the store's clock (the database server's on
// PostgreSQL: never by comparing two machines' clocks), or when it stopped
// (Stop(), a drained node). The event store keeps a run row per execution
// whose body is running, naming its owner (EventStore kOwnership, written in
// the same step as the append or acquire that starts or ends the run);
// OrphanedRuns() lists the rows whose owner is dead, which is what takeover
// claims (with the conditional acquire, expecting that owner).
//
//   SqliteNodeRegistry registry = ...;           // same file as the event store
//   ONCE_ASSIGN_OR_RETURN(Beat beat, registry.Heartbeat(
//       {.node_id = "node-a", .host = "db1", .pid = getpid(), .version = "1.4"}, 10'000));
//   if (beat.lapsed) { /* others may have taken this node's runs: abandon them */ }
//   ONCE_ASSIGN_OR_RETURN(auto orphans, registry.OrphanedRuns("node-a", "", 100, 10'000));
//
// Limits: node ids follow the execution id rules (non-empty, at most 255
// bytes, UTF-8, no control characters: kInvalidArgument otherwise); host and
// version at most node_text_bytes_max (255) bytes; a page at most
// runs_page_max (1,000) rows. lease_ms must be > 0.
//
// Threads: every method may be called from any thread.

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"

namespace once::nodes {

struct NodeInfo {
  std::string node_id;
  std::string host;
  int64_t pid = 0;
  std::string version;
};

struct NodeLimits {
  size_t node_id_bytes_max = 255;
  size_t node_text_bytes_max = 255;  // host, version
  size_t runs_page_max = 1'000;      // rows one OrphanedRuns / RunsOf returns at most
  size_t nodes_max = 10'000;         // rows Nodes() returns at most
};

// One heartbeat's answer. Times are the store's clock.
struct Beat {
  int64_t at_ms = 0;
  bool first = false;  // the node was not registered
  // The node's previous heartbeat was older than its lease at this beat, or
  // it had stopped: it was dead in the meantime, and others may have taken
  // its runs over. The node must abandon the bodies it was running.
  bool lapsed = false;
};

struct NodeRecord {
  NodeInfo info;
  int64_t started_at_ms = 0;
  int64_t heartbeat_at_ms = 0;
  int64_t lease_ms = 0;
  bool stopped = false;
  bool alive = false;  // judged by the store's clock when read
};

// A run row: an execution whose body `owner` runs (or ran, if it is dead).
struct RunRow {
  std::string execution_id;
  std::string owner;
  int64_t since_ms = 0;
};

class NodeRegistry {
 public:
  virtual ~NodeRegistry() = default;

  // Registers `node` (first beat: started_at = now) or renews it:
  // heartbeat_at = now, lease_ms recorded, stopped cleared, host / pid /
  // version updated.
  virtual Result<Beat> Heartbeat(const NodeInfo& node, int64_t lease_ms) = 0;

  // Marks the node stopped: it is dead at once (its run rows are orphaned
  // without waiting for the lease). A heartbeat revives it (lapsed). An
  // unknown node is Ok.
  virtual Status Stop(std::string_view node_id) = 0;

  // Every registered node, by id, at most limits().nodes_max.
  virtual Result<std::vector<NodeRecord>> Nodes() = 0;

  // Run rows whose owner is not `self` and is dead: its lease passed, it
  // stopped, or it never registered and the row is older than
  // unknown_owner_lease_ms. By execution id, strictly after `after`, at most
  // `limit` (capped by limits().runs_page_max).
  virtual Result<std::vector<RunRow>> OrphanedRuns(std::string_view self, std::string_view after,
                                                   size_t limit,
                                                   int64_t unknown_owner_lease_ms) = 0;

  // Run rows naming `owner`, by execution id, strictly after `after`.
  virtual Result<std::vector<RunRow>> RunsOf(std::string_view owner, std::string_view after,
                                             size_t limit) = 0;

  // Deletes the run row of `execution_id` if it still names `owner` (a row a
  // run left when it ended without an owned append). Ok if it does not.
  virtual Status ForgetRun(std::string_view execution_id, std::string_view owner) = 0;

  // Deletes the rows of nodes dead (stopped, or lease passed) for more than
  // dead_for_ms that own no run row. Returns how many.
  virtual Result<size_t> ForgetNodes(int64_t dead_for_ms) = 0;

  // The store's clock (Unix ms): the database server's on PostgreSQL.
  virtual Result<int64_t> NowMs() = 0;

  virtual const NodeLimits& limits() const = 0;
};

// Checks shared by every backend.
Status ValidateNodeInfo(const NodeInfo& node, const NodeLimits& limits);
Status ValidateNodeId(std::string_view node_id, const NodeLimits& limits);
Status ValidateLease(int64_t lease_ms);

}  // namespace once::nodes
