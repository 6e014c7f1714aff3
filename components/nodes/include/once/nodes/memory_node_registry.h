// File: memory_node_registry.h
//
// MemoryNodeRegistry: the NodeRegistry in process memory, over a
// MemoryEventStore's run rows (for tests, and several runtimes of one
// process playing nodes). Times are the injected clock's.
//
//   MemoryEventStore store(limits, clock);
//   MemoryNodeRegistry registry(store, clock);
//   registry.Heartbeat({.node_id = "node-a"}, 10'000);
//
// Threads: every method may be called from any thread.

#pragma once

#include <map>
#include <mutex>

#include "once/base/clock.h"
#include "once/nodes/node_registry.h"
#include "once/store/memory_store.h"

namespace once::nodes {

class MemoryNodeRegistry final : public NodeRegistry {
 public:
  // `store` and `clock` must outlive the registry.
  MemoryNodeRegistry(store::MemoryEventStore& store, const Clock& clock, NodeLimits limits = {});

  Result<Beat> Heartbeat(const NodeInfo& node, int64_t lease_ms) override;
  Status Stop(std::string_view node_id) override;
  Result<std::vector<NodeRecord>> Nodes() override;
  Result<std::vector<RunRow>> OrphanedRuns(std::string_view self, std::string_view after,
                                           size_t limit, int64_t unknown_owner_lease_ms) override;
  Result<std::vector<RunRow>> RunsOf(std::string_view owner, std::string_view after,
                                     size_t limit) override;
  Status ForgetRun(std::string_view execution_id, std::string_view owner) override;
  Result<size_t> ForgetNodes(int64_t dead_for_ms) override;
  Result<int64_t> NowMs() override { return clock_.NowUnixMillis(); }
  const NodeLimits& limits() const override { return limits_; }

 private:
  // Requires mu_: whether `owner` is dead at now_ms (unknown: by the row's age).
  bool DeadLocked(const std::string& owner, int64_t since_ms, int64_t now_ms,
                  int64_t unknown_owner_lease_ms) const;
  Result<std::vector<RunRow>> Select(size_t limit, std::string_view after,
                                     const std::function<bool(const RunRow&)>& keep);

  store::MemoryEventStore& store_;
  const Clock& clock_;
  const NodeLimits limits_;
  mutable std::mutex mu_;
  std::map<std::string, NodeRecord, std::less<>> nodes_;  // GUARDED_BY(mu_)
};

// Whether a node whose record is `n` is alive at now_ms (the rule every
// backend applies, in SQL or here).
inline bool IsAlive(const NodeRecord& n, int64_t now_ms) {
  return !n.stopped && n.heartbeat_at_ms + n.lease_ms >= now_ms;
}

}  // namespace once::nodes
