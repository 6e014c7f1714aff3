// Private: group commit of the fence acquires (AcquireFence, AcquireFenceIf,
// AcquireFenceIfReadTail) of one PostgresEventStore.
//
// Leader/follower (group_runner.h): a leader takes up to kAcquireGroupMax
// queued acquires, checks out one pooled connection and sends every
// acquire's statements in ONE libpq pipeline, one implicit READ COMMITTED transaction (the
// pooled connections' session default), one commit
// (one WAL flush). Inside the pipeline the acquires run in execution-id order (bytewise, as COLLATE
// "C"; FIFO among equal ids), so groups, and the store's other ordered lockers, take fence rows in
// one global order and do not deadlock each other. Each acquire's statements are those of a
// transaction of its own (lock the row FOR UPDATE, bump; the conditional bump and the tail are new
// statements, so they see what committed before the lock was granted), and two
// acquires of one execution in a group run one after the other, the second seeing the first's bump:
// every verdict is the one some serial order of the acquires would give.
// A group of two or more conditional acquires of distinct executions (the
// common case: resumes of different executions) runs as three group-wide
// statements instead of three an acquire: lock every row in execution-id
// order, the conditional bump of all, the tails; with distinct executions no
// acquire could see another's bump, so the verdicts are the same.
//
// Rows that do not exist. An acquire that names a park (park_seq > 0: a
// resume, a takeover's claim) finds the row its park wrote at token 0, or
// an earlier acquire or owned append wrote, so it locks first. One whose
// lock found no row locked and bumped nothing; after the group commits,
// those acquires run again in a second transaction that first makes their
// rows (INSERT ... ON CONFLICT DO NOTHING, which waits for an uncommitted
// insert of the same row), as every acquire did before: the order
// models/fence_postgres.pml checks. An acquire that names no park
// (park_seq 0) makes its row first in its own group (a group-wide run then
// makes every row first). A pipeline holds at most four statements an
// acquire.
//
// Failures. A statement that fails aborts the pipeline's transaction, so
// nothing of the group was written; the leader then replays the group in one
// explicit transaction, each acquire under its own SAVEPOINT: an acquire that
// fails again (a deadlock with an unordered locker: kBusy, retryable; a lock
// or statement timeout: kTimeout) is rolled back and fails alone, the others
// commit. A lost connection or a failed COMMIT fails every acquire of the
// group with that error (kUnavailable / kBusy: none of them is known to be
// durable, as for a lone acquire).

#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "group_runner.h"
#include "once/store/event_store.h"
#include "once/store_postgres/postgres_event_store.h"
#include "pg_conn.h"

namespace once::store::pg {

using AcquireGroupStats = PostgresAcquireStats;

// One acquire. `expect` nullopt: the unconditional AcquireFence.
struct AcquireOp {
  std::string id;
  // The owner fields of `expect` point into these (they outlive the caller's views).
  std::optional<FenceExpectation> expect;
  std::string owner;                          // "" : the run row is left alone
  std::optional<std::string> expected_owner;  // the run row must name it ("" : no row)
  void SetOwners(const FenceExpectation& e) {
    owner = std::string(e.owner);
    if (e.expected_owner) expected_owner = std::string(*e.expected_owner);
  }
  std::optional<int64_t> read_after;  // the tail past this sequence (conditional only)
  int64_t tail_max = 0;               // rows of the tail at most
  // The answer: the new token (or {stale, current}) and the tail.
  Result<AcquireWithTail> result = AcquireWithTail{};
  // Whether the row is made before the lock (RunGroup: a conditional
  // acquire naming no park, or one run again after its lock found no row:
  // `missing`).
  bool ensure = false;
  bool missing = false;
};

class AcquireGroup final : public GroupRunner<AcquireOp> {
 public:
  // At most groups_in_flight_max groups run at once (each on its own
  // connection); callers that arrive meanwhile queue for the next group.
  AcquireGroup(ConnectionPool& pool, size_t groups_in_flight_max)
      : GroupRunner(kAcquireGroupMax, groups_in_flight_max), pool_(pool) {}

  AcquireGroupStats stats() const;

 private:
  // Runs and commits `group` on one connection; sets every op's result.
  void RunGroup(std::span<AcquireOp* const> group) override;
  // One transaction of `group` (the pipeline, or its replay under
  // savepoints); false: every op failed (their results say why).
  bool Commit(Conn& conn, std::span<AcquireOp* const> group);

  ConnectionPool& pool_;
  std::atomic<uint64_t> commits_{0};
  std::atomic<uint64_t> acquires_{0};
  std::atomic<uint64_t> largest_{0};
  std::atomic<uint64_t> replays_{0};
  std::atomic<uint64_t> group_wide_{0};
  std::atomic<uint64_t> ensure_rounds_{0};
};

}  // namespace once::store::pg
