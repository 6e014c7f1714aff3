#include "once/nodes/node.h"

#include <algorithm>
#include <chrono>

namespace once::nodes {
namespace {

// A closed gate re-checks at least this often while it waits (a ManualClock
// moved by a test, a heartbeat from another thread).
constexpr int64_t kGatePollMs = 20;

}  // namespace

Node::Node(NodeRegistry& registry, const Clock& local_clock, NodeOptions options)
    : registry_(registry), local_clock_(local_clock), options_(std::move(options)) {
  ONCE_CHECK(options_.heartbeat_interval_ms > 0);
  ONCE_CHECK(options_.node_lease_ms > 0);
  ONCE_CHECK(options_.step_margin_ms >= 0 && options_.step_margin_ms < options_.node_lease_ms);
}

Node::~Node() { StopHeartbeats(); }

Result<Beat> Node::Beat() {
  const int64_t sent_ms = LocalNowMs();
  Result<nodes::Beat> beat = registry_.Heartbeat(options_.info, options_.node_lease_ms);
  if (!beat) return beat;
  {
    std::lock_guard lock(mu_);
    // The lapse is published before the gate opens: a body that passes the
    // gate after this sees the new epoch.
    if (beat->lapsed) epoch_.fetch_add(1, std::memory_order_acq_rel);
    const int64_t until = sent_ms + options_.node_lease_ms - options_.step_margin_ms;
    if (until > gate_open_until_ms_.load(std::memory_order_relaxed)) {
      gate_open_until_ms_.store(until, std::memory_order_release);
    }
  }
  renewed_.notify_all();
  return beat;
}

bool Node::GateOpen() const {
  if (draining()) return false;
  return LocalNowMs() < gate_open_until_ms_.load(std::memory_order_acquire);
}

Status Node::PermitStep(uint64_t run_epoch) {
  // The open gate takes no lock: every step of every body asks, and one
  // mutex shared by all of them cost more than the question. The gate is
  // read before the epoch: a body that sees a renewal sees the lapse that
  // renewal published (Beat bumps the epoch before it opens the gate).
  const int64_t open_until_ms = gate_open_until_ms_.load(std::memory_order_acquire);
  if (!draining() && epoch() == run_epoch && LocalNowMs() < open_until_ms) return Ok();
  // The wait is real time whatever the local clock (a test's ManualClock
  // does not move while a step waits).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.step_wait_ms_max);
  std::unique_lock lock(mu_);
  for (;;) {
    if (draining()) {
      return MakeError(ErrorCode::kCancelled, "node " + id() + " is draining: no new steps");
    }
    if (epoch() != run_epoch) {
      return MakeError(ErrorCode::kUnavailable,
                       "node " + id() + "'s lease lapsed since this run started; it is abandoned");
    }
    if (LocalNowMs() < gate_open_until_ms_.load(std::memory_order_acquire)) return Ok();
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return MakeError(ErrorCode::kUnavailable,
                       "node " + id() + " has no fresh heartbeat; the step is not started");
    }
    renewed_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(kGatePollMs)));
  }
}

void Node::Drain() {
  draining_.store(true, std::memory_order_release);
  renewed_.notify_all();
}

void Node::Start() {
  std::lock_guard lock(thread_mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { HeartbeatLoop(); });
}

void Node::HeartbeatLoop() {
  std::unique_lock lock(thread_mu_);
  while (!stopping_) {
    lock.unlock();
    Result<nodes::Beat> beat = Beat();
    if (!beat && options_.on_error) options_.on_error(beat.error());
    lock.lock();
    thread_cv_.wait_for(lock, std::chrono::milliseconds(options_.heartbeat_interval_ms),
                        [this] { return stopping_; });
  }
}

void Node::StopHeartbeats() {
  {
    std::lock_guard lock(thread_mu_);
    stopping_ = true;
  }
  thread_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Node::Release() {
  Drain();
  StopHeartbeats();
  return registry_.Stop(id());
}

}  // namespace once::nodes
