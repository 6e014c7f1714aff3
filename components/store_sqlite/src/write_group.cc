#include "write_group.h"

#include <vector>

namespace once::store::sqlite_internal {

WriteGroupStats WriteGroup::stats() const {
  return {.commits = commits_.load(std::memory_order_relaxed),
          .operations = operations_.load(std::memory_order_relaxed),
          .largest = largest_.load(std::memory_order_relaxed)};
}

void WriteGroup::Submit(Op& op) {
  std::vector<Op*> group;
  {
    std::unique_lock<std::mutex> lock(queue_mu_);
    queue_.push_back(&op);
    if (!leader_active_) {
      leader_active_ = true;
      op.lead = true;
    }
    if (!op.lead) {
      lock.unlock();
      if (op.wait.Wait() == GroupWait::Woken::kAnswered) return;
      lock.lock();  // asked to lead: only a leader's hand-off asks
      ONCE_CHECK(op.lead);
    }
    // The leader's op is at the front: a new leader found the queue empty, a
    // handed-off one is the oldest waiter.
    ONCE_CHECK(!queue_.empty() && queue_.front() == &op);
    size_t bytes = 0;
    while (!queue_.empty() && group.size() < limits_.ops_max) {
      Op* next = queue_.front();
      if (!group.empty() && bytes + next->bytes > limits_.bytes_max) break;
      bytes += next->bytes;
      group.push_back(next);
      queue_.pop_front();
    }
  }
  {
    std::lock_guard<std::mutex> lock(connection_mu_);
    RunGroup(group);
  }
  // Answered without the queue's lock (once/base/group_wait.h). The next
  // leader is asked last, on purpose: the callers just answered re-enqueue
  // their next write before it takes the queue, so groups are larger
  // (measured: waking it first gave 32 operations a commit instead of 43-51
  // and fewer executions/s; the fsync is the cost).
  for (Op* o : group) {
    if (o != &op) o->wait.AnswerOne();
  }
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (queue_.empty()) {
    leader_active_ = false;
  } else {
    queue_.front()->lead = true;
    queue_.front()->wait.AskToLead();
  }
}

Status WriteGroup::Exec(size_t id) {
  ONCE_ASSIGN_OR_RETURN(Statement s, connection_.Prepare(id));
  return s.Run();
}

void WriteGroup::RollbackAll() {
  // A failed COMMIT or an I/O error may already have ended the transaction.
  if (connection_.InTransaction()) (void)Exec(sql_.rollback);
}

void WriteGroup::RunGroup(std::span<Op* const> group) {
  if (group.empty()) return;
  auto fail_all = [&](const Status& why) {
    RollbackAll();
    for (Op* o : group) o->status = why;
  };
  if (Status s = Exec(sql_.begin); !s) return fail_all(s);
  // A group of one needs no savepoint: its failure rolls back the transaction.
  const bool savepoints = group.size() > 1;
  for (size_t i = 0; i < group.size(); ++i) {
    Op* op = group[i];
    if (savepoints) {
      if (Status s = Exec(sql_.savepoint); !s) return fail_all(s);
    }
    Status own = op->run(op->ctx, connection_);
    if (!connection_.InTransaction()) {
      // SQLite ended the transaction (I/O error, full disk): the operations
      // before this one are lost with it; the ones after get a fresh one.
      Status lost = own ? MakeError(ErrorCode::kInternal, "sqlite: transaction ended") : own;
      for (size_t j = 0; j < i; ++j) group[j]->status = lost;
      if (own) op->status = lost;  // else its own result already says why
      return RunGroup(group.subspan(i + 1));
    }
    if (own) {
      if (savepoints) {
        if (Status s = Exec(sql_.release); !s) return fail_all(s);
      }
      continue;
    }
    if (!savepoints) return RollbackAll();  // failed alone; nothing to commit
    if (Status s = Exec(sql_.rollback_to); !s) return fail_all(s);
    if (Status s = Exec(sql_.release); !s) return fail_all(s);
  }
  if (Status s = Exec(sql_.commit); !s) return fail_all(s);
  commits_.fetch_add(1, std::memory_order_relaxed);
  operations_.fetch_add(group.size(), std::memory_order_relaxed);
  uint64_t largest = largest_.load(std::memory_order_relaxed);
  while (group.size() > largest &&
         !largest_.compare_exchange_weak(largest, group.size(), std::memory_order_relaxed)) {
  }
}

}  // namespace once::store::sqlite_internal
