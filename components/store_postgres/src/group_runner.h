// Private: leader/follower grouping of one kind of store call, shared by the
// fence acquire groups (acquire_group.h) and the read groups (read_group.h).
//
// A caller enqueues its op and waits. The oldest waiter becomes a leader when
// fewer than groups_in_flight_max groups run: it takes the queue (FIFO, at
// most group_max ops, its own first), runs them with RunGroup (one round trip
// on one pooled connection, in the subclasses), and wakes the others. A new
// leader is promoted as soon as a group has been taken, so with capacity left
// an op never waits for another group to finish; a lone caller on an idle
// store runs at once, alone.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <vector>

#include "once/base/group_wait.h"
#include "once/base/result.h"

namespace once::store::pg {

// Raises `max` to `value` if it is lower (the groups' "largest" statistics).
inline void RaiseToAtLeast(std::atomic<uint64_t>& max, uint64_t value) {
  uint64_t seen = max.load(std::memory_order_relaxed);
  while (value > seen && !max.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

template <class Op>
class GroupRunner {
 public:
  // group_max >= 1 ops a group; groups_in_flight_max >= 1 groups at once.
  GroupRunner(size_t group_max, size_t groups_in_flight_max)
      : group_max_(group_max), groups_in_flight_max_(groups_in_flight_max) {
    ONCE_CHECK(group_max_ > 0 && groups_in_flight_max_ > 0);
  }
  virtual ~GroupRunner() = default;
  GroupRunner(const GroupRunner&) = delete;
  GroupRunner& operator=(const GroupRunner&) = delete;

  // Runs `op` in a group; returns once RunGroup has answered it. Any thread.
  void Run(Op& op) {
    GroupWait wait(1);
    Waiter self{.op = &op, .wait = &wait};
    RunWaiters(std::span<Waiter>(&self, 1), wait);
  }

  // Runs every op of `ops` (queued together, in order, so that they share
  // groups); returns once all are answered. The caller leads each group
  // whose oldest op is one of its own. Any thread.
  void RunMany(std::span<Op* const> ops) {
    if (ops.empty()) return;
    GroupWait wait(ops.size());
    std::vector<Waiter> mine(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) mine[i] = Waiter{.op = ops[i], .wait = &wait};
    RunWaiters(mine, wait);
  }

 protected:
  // Runs every op of `group` (arrival order) and sets each one's answer.
  // Called without the runner's lock, from the leader's thread.
  virtual void RunGroup(std::span<Op* const> group) = 0;

 private:
  struct Waiter {
    Op* op = nullptr;
    bool lead = false;          // GUARDED_BY(mu_): promoted to lead the next group
    GroupWait* wait = nullptr;  // its caller's, shared by a RunMany's waiters
  };

  // Queues `mine` (one caller's, sharing `wait`) and returns once all are
  // answered, leading the groups it is promoted to lead.
  void RunWaiters(std::span<Waiter> mine, GroupWait& wait) {
    std::unique_lock<std::mutex> lock(mu_);
    for (Waiter& w : mine) queue_.push_back(&w);
    PromoteLocked();
    for (;;) {
      Waiter* leader = nullptr;
      for (Waiter& w : mine) {
        if (w.lead) leader = &w;
      }
      if (leader) {
        Lead(lock, *leader);
        if (wait.Answered()) return;
        continue;
      }
      lock.unlock();
      if (wait.Wait() == GroupWait::Woken::kAnswered) return;
      lock.lock();
    }
  }

  // Requires mu_ held (released while the group runs) and self.lead: takes
  // the group (self at the front), runs it and answers every op in it.
  void Lead(std::unique_lock<std::mutex>& lock, Waiter& self) {
    std::vector<Waiter*> waiters;
    std::vector<Op*> group;
    // Only the pending leader takes from the queue, and it was the front
    // when promoted: it still is.
    while (!queue_.empty() && waiters.size() < group_max_) {
      waiters.push_back(queue_.front());
      group.push_back(queue_.front()->op);
      queue_.pop_front();
    }
    self.lead = false;
    leader_pending_ = false;
    ++in_flight_;
    PromoteLocked();  // the next group may form while this one runs
    lock.unlock();
    RunGroup(group);
    // Answered without the runner's lock (once/base/group_wait.h), before
    // the next leader is promoted, so that the callers just answered can
    // queue their next op first.
    for (Waiter* w : waiters) w->wait->AnswerOne();
    lock.lock();
    --in_flight_;
    PromoteLocked();
  }

  // Makes the oldest waiter the leader of the next group, if none is pending
  // and fewer than groups_in_flight_max_ groups run.
  void PromoteLocked() {
    if (leader_pending_ || queue_.empty() || in_flight_ >= groups_in_flight_max_) return;
    leader_pending_ = true;
    queue_.front()->lead = true;
    queue_.front()->wait->AskToLead();
  }

  const size_t group_max_;
  const size_t groups_in_flight_max_;
  std::mutex mu_;
  std::deque<Waiter*> queue_;    // GUARDED_BY(mu_)
  bool leader_pending_ = false;  // GUARDED_BY(mu_): a promoted leader has not taken its group
  size_t in_flight_ = 0;         // GUARDED_BY(mu_): groups taken and not yet answered
};

}  // namespace once::store::pg
