// File: node.h
//
// Node: this process as a Loom node. It heartbeats into a NodeRegistry every
// heartbeat_interval_ms (Start() runs a thread; Beat() is one heartbeat) and
// answers the runtime's question "may a body start a step now?" (the step
// gate), from its own side of the lease:
//
//   * Others judge this node dead once node_lease_ms passed since its last
//     heartbeat by the store's clock. The node times its own lease from the
//     moment it SENT the heartbeat that succeeded (by a local clock that
//     never jumps), which is no later than the store stamped it. Steps start
//     only while that moment is less than node_lease_ms - step_margin_ms ago:
//     a node whose heartbeat is late (a long pause, a partition from the
//     database) stops starting steps before anyone can judge it dead.
//   * A closed gate waits for the next heartbeat (up to step_wait_ms_max). A
//     heartbeat that finds the lease lapsed (the store judged the node dead
//     in the meantime: others may have taken its runs over) starts a new
//     epoch: every body that started in an older epoch is refused its next
//     step (kUnavailable) and unwinds without appending; the node's own
//     takeover re-claims whatever nobody else took (conditional acquire).
//   * Drain(): the gate closes for good (kCancelled: "the node is
//     draining"); Release() also stops heartbeats and marks the node stopped
//     in the registry, so others take what it still owns at once.
//
// What remains (docs/nodes.md): a step whose function STARTED before the
// gate closed and runs past the node's death (longer than step_margin_ms
// after the last good heartbeat's lease ran out locally) runs while its
// execution is taken over; its effect may then happen twice (its record is
// refused by the fence). Steps that run that long should be idempotent or a
// Transaction step.
//
//   SteadyClock local;
//   Node node(registry, local, {.info = {.node_id = "node-a", .host = host, .pid = getpid()}});
//   ONCE_RETURN_IF_ERROR(node.Beat());   // registered before anything runs
//   node.Start();                        // heartbeats every heartbeat_interval_ms
//   runtime_options.node = &node;        // owner of what it runs, the step gate
//   ...
//   node.Release();                      // drained: others take what is left at once
//
// Threads: every method may be called from any thread.

#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "once/base/clock.h"
#include "once/nodes/node_registry.h"

namespace once::nodes {

struct NodeOptions {
  NodeInfo info;
  int64_t heartbeat_interval_ms = 1'000;
  int64_t node_lease_ms = 10'000;
  // Steps stop starting this long before the node's lease runs out by its
  // own clock (< node_lease_ms).
  int64_t step_margin_ms = 2'000;
  // How long a step waits at a closed gate for a heartbeat before its run
  // is abandoned (kUnavailable).
  int64_t step_wait_ms_max = 10'000;
  // Heartbeat errors (the thread goes on beating).
  std::function<void(const Error&)> on_error;
};

class Node {
 public:
  // `registry` and `local_clock` must outlive the node. local_clock should
  // never jump (SteadyClock); tests pass a ManualClock.
  Node(NodeRegistry& registry, const Clock& local_clock, NodeOptions options);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& id() const { return options_.info.node_id; }
  const NodeOptions& options() const { return options_; }
  NodeRegistry& registry() { return registry_; }

  // One heartbeat now. On success the gate opens until sent + lease -
  // margin; a lapsed beat starts a new epoch. Errors: the registry's.
  Result<nodes::Beat> Beat();
  // Heartbeats every heartbeat_interval_ms on a thread of its own.
  void Start();
  // Stops the heartbeat thread (the lease then runs out).
  void StopHeartbeats();

  // The current epoch (0 until the first lapse).
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Ok when a body that started in `run_epoch` may start a step now; waits
  // (up to step_wait_ms_max) for a heartbeat while the gate is closed.
  // kUnavailable: the lease lapsed since the body started, or no heartbeat
  // came in time. kCancelled: the node is draining.
  Status PermitStep(uint64_t run_epoch);
  // Whether the gate is open now (no waiting).
  bool GateOpen() const;

  // Closes the gate for good: no step starts from now on.
  void Drain();
  bool draining() const { return draining_.load(std::memory_order_acquire); }
  // Drain, stop heartbeats, and mark the node stopped in the registry.
  Status Release();

 private:
  int64_t LocalNowMs() const { return local_clock_.NowUnixMillis(); }
  void HeartbeatLoop();

  NodeRegistry& registry_;
  const Clock& local_clock_;
  const NodeOptions options_;

  mutable std::mutex mu_;
  std::condition_variable renewed_;  // a heartbeat succeeded, or the node drains
  // Local ms; 0 = never opened. Written under mu_ (renewed_ waits on it),
  // read without it (PermitStep's open gate).
  std::atomic<int64_t> gate_open_until_ms_{0};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> draining_{false};

  std::mutex thread_mu_;
  std::condition_variable thread_cv_;
  bool stopping_ = false;  // GUARDED_BY(thread_mu_)
  std::thread thread_;
};

}  // namespace once::nodes
