#include "once/nodes/memory_node_registry.h"

#include <algorithm>

namespace once::nodes {

MemoryNodeRegistry::MemoryNodeRegistry(store::MemoryEventStore& store, const Clock& clock,
                                       NodeLimits limits)
    : store_(store), clock_(clock), limits_(limits) {}

Result<Beat> MemoryNodeRegistry::Heartbeat(const NodeInfo& node, int64_t lease_ms) {
  ONCE_RETURN_IF_ERROR(ValidateNodeInfo(node, limits_));
  ONCE_RETURN_IF_ERROR(ValidateLease(lease_ms));
  int64_t now = clock_.NowUnixMillis();
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node.node_id);
  Beat beat{.at_ms = now};
  if (it == nodes_.end()) {
    beat.first = true;
    it = nodes_.emplace(node.node_id, NodeRecord{.started_at_ms = now}).first;
  } else {
    beat.lapsed = !IsAlive(it->second, now);
  }
  NodeRecord& r = it->second;
  r.info = node;
  r.heartbeat_at_ms = now;
  r.lease_ms = lease_ms;
  r.stopped = false;
  return beat;
}

Status MemoryNodeRegistry::Stop(std::string_view node_id) {
  ONCE_RETURN_IF_ERROR(ValidateNodeId(node_id, limits_));
  std::lock_guard lock(mu_);
  if (auto it = nodes_.find(node_id); it != nodes_.end()) it->second.stopped = true;
  return Ok();
}

Result<std::vector<NodeRecord>> MemoryNodeRegistry::Nodes() {
  int64_t now = clock_.NowUnixMillis();
  std::lock_guard lock(mu_);
  std::vector<NodeRecord> out;
  for (const auto& [id, r] : nodes_) {
    if (out.size() == limits_.nodes_max) break;
    out.push_back(r);
    out.back().alive = IsAlive(r, now);
  }
  return out;
}

bool MemoryNodeRegistry::DeadLocked(const std::string& owner, int64_t since_ms, int64_t now_ms,
                                    int64_t unknown_owner_lease_ms) const {
  auto it = nodes_.find(owner);
  if (it == nodes_.end()) return since_ms + unknown_owner_lease_ms < now_ms;
  return !IsAlive(it->second, now_ms);
}

Result<std::vector<RunRow>> MemoryNodeRegistry::Select(
    size_t limit, std::string_view after, const std::function<bool(const RunRow&)>& keep) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits_.runs_page_max);
  std::vector<RunRow> out;
  for (auto& [id, row] : store_.RunRows()) {  // by execution id
    if (id <= after) continue;
    RunRow r{id, row.owner, row.since_ms};
    if (!keep(r)) continue;
    out.push_back(std::move(r));
    if (out.size() == limit) break;
  }
  return out;
}

Result<std::vector<RunRow>> MemoryNodeRegistry::OrphanedRuns(std::string_view self,
                                                             std::string_view after, size_t limit,
                                                             int64_t unknown_owner_lease_ms) {
  int64_t now = clock_.NowUnixMillis();
  std::lock_guard lock(mu_);
  return Select(limit, after, [&](const RunRow& r) {
    return r.owner != self && DeadLocked(r.owner, r.since_ms, now, unknown_owner_lease_ms);
  });
}

Result<std::vector<RunRow>> MemoryNodeRegistry::RunsOf(std::string_view owner,
                                                       std::string_view after, size_t limit) {
  return Select(limit, after, [&](const RunRow& r) { return r.owner == owner; });
}

Status MemoryNodeRegistry::ForgetRun(std::string_view execution_id, std::string_view owner) {
  return store_.ForgetRun(execution_id, owner);
}

Result<size_t> MemoryNodeRegistry::ForgetNodes(int64_t dead_for_ms) {
  int64_t now = clock_.NowUnixMillis();
  auto runs = store_.RunRows();
  std::lock_guard lock(mu_);
  size_t forgotten = 0;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    const NodeRecord& r = it->second;
    bool long_dead =
        (r.stopped || !IsAlive(r, now)) && r.heartbeat_at_ms + r.lease_ms + dead_for_ms < now;
    bool owns = std::any_of(runs.begin(), runs.end(),
                            [&](const auto& row) { return row.second.owner == it->first; });
    if (long_dead && !owns) {
      it = nodes_.erase(it);
      ++forgotten;
    } else {
      ++it;
    }
  }
  return forgotten;
}

}  // namespace once::nodes
