// Internal: store-level group commit. Every write of a SqliteEventStore is an
// operation submitted here; concurrent operations share one transaction and
// so one COMMIT (one WAL fsync under synchronous=FULL).
//
// Leader/follower. A caller enqueues its operation and waits. If no group is
// running it becomes the leader: it takes the queue (FIFO, at most
// ops_max operations and about bytes_max bytes, its own operation first),
// opens one BEGIN IMMEDIATE, runs each operation under its own SAVEPOINT
// (RELEASE on success, ROLLBACK TO on the operation's own failure, so it
// fails alone and writes nothing), COMMITs once, completes every operation of
// the group, and hands leadership to the oldest waiting caller. Operations run
// in queue order on one connection, so each sees the effects of those before
// it: every check-then-write of an operation stays atomic exactly as in a
// transaction of its own; only the commit is shared.
//
// Failures of the group as a whole: BEGIN or COMMIT failing gives every
// operation of the group that error (none of them was durable); an error that
// ends the transaction mid-group (SQLite rolls back on I/O errors, a full
// disk) gives the operations that already ran that error, and the operations
// after it run in a fresh transaction.

#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <type_traits>

#include "connection.h"
#include "once/base/group_wait.h"

namespace once::store::sqlite_internal {

// Ids of the transaction statements in the connection's statement list.
struct TransactionSql {
  size_t begin;        // BEGIN IMMEDIATE
  size_t commit;       // COMMIT
  size_t rollback;     // ROLLBACK
  size_t savepoint;    // SAVEPOINT <name>
  size_t release;      // RELEASE <name>
  size_t rollback_to;  // ROLLBACK TO <name>
};

struct WriteGroupLimits {
  size_t ops_max = 1'024;        // operations in one group (one transaction)
  size_t bytes_max = 16u << 20;  // encoded bytes of one group; the first op always fits
};

struct WriteGroupStats {
  uint64_t commits = 0;     // groups committed
  uint64_t operations = 0;  // operations run in those groups
  uint64_t largest = 0;     // operations in the largest committed group
};

class WriteGroup {
 public:
  // `connection` is used only while `connection_mu` is held.
  WriteGroup(Connection& connection, std::mutex& connection_mu, TransactionSql sql,
             WriteGroupLimits limits)
      : connection_(connection), connection_mu_(connection_mu), sql_(sql), limits_(limits) {}

  // Runs body(connection) inside a group transaction and returns its result
  // once the group has committed (or the group's error). A body's error rolls
  // back its own writes only. `bytes`: what the operation writes, roughly.
  template <class F>
  auto Run(size_t bytes, F&& body) -> std::invoke_result_t<F&, Connection&> {
    using R = std::invoke_result_t<F&, Connection&>;
    std::optional<R> result;
    auto thunk = [&](Connection& c) -> Status {
      result.emplace(body(c));
      if (*result) return Ok();
      return std::unexpected(result->error());
    };
    Op op;
    op.bytes = bytes;
    op.ctx = &thunk;
    op.run = [](void* ctx, Connection& c) { return (*static_cast<decltype(thunk)*>(ctx))(c); };
    Submit(op);
    if (!op.status) return std::unexpected(op.status.error());
    return std::move(*result);
  }

  WriteGroupStats stats() const;

 private:
  struct Op {
    Status (*run)(void*, Connection&) = nullptr;
    void* ctx = nullptr;
    size_t bytes = 0;
    // The group's verdict: Ok when the group committed (the body's own result
    // is then the answer, success or refusal), else why nothing was durable.
    Status status;
    bool lead = false;  // GUARDED_BY(queue_mu_)
    GroupWait wait{1};  // answered when the group is done, or asked to lead
  };

  void Submit(Op& op);
  // Runs and commits `group` on the connection; sets every op's status.
  void RunGroup(std::span<Op* const> group);
  Status Exec(size_t id);
  void RollbackAll();

  Connection& connection_;
  std::mutex& connection_mu_;
  const TransactionSql sql_;
  const WriteGroupLimits limits_;

  std::mutex queue_mu_;
  std::deque<Op*> queue_;       // GUARDED_BY(queue_mu_)
  bool leader_active_ = false;  // GUARDED_BY(queue_mu_); false implies queue_ empty

  std::atomic<uint64_t> commits_{0};
  std::atomic<uint64_t> operations_{0};
  std::atomic<uint64_t> largest_{0};
};

}  // namespace once::store::sqlite_internal
