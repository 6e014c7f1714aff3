// Private: grouped TimerStore::Schedule calls of one PostgresTimerStore.
//
// Every park of a sleeping execution writes its timer row; one commit each
// made a burst of parks pay a commit per row. Leader/follower
// (group_runner.h): a leader takes up to kScheduleGroupMax queued rows and
// writes them with ONE statement ("schedule_many": INSERT ... SELECT FROM
// unnest, in key order, with the one-row statement's merge), so concurrent
// parks share a commit; a lone caller runs at once, alone, as before.
// Rows are validated before they are queued. A key's later rows in one
// group (ON CONFLICT may touch a row only once a statement) follow the
// statement one by one, in arrival order. A group whose statement failed (a
// lock cycle with another writer, a lost connection) writes its rows one by
// one, so each caller gets its own row's answer and a group's failure is
// never another caller's.

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "group_runner.h"
#include "once/timers/timer_store.h"
#include "pg_conn.h"

namespace once::store::pg {

inline constexpr size_t kScheduleGroupMax = 512;      // rows one statement writes at most
inline constexpr size_t kScheduleGroupsInFlight = 2;  // statements at once (pooled connections)

struct ScheduleOp {
  const timers::TimerRow* row = nullptr;  // validated
  Status result = Ok();
};

class ScheduleGroup final : public GroupRunner<ScheduleOp> {
 public:
  explicit ScheduleGroup(ConnectionPool& pool)
      : GroupRunner(kScheduleGroupMax, kScheduleGroupsInFlight), pool_(pool) {}

 private:
  void RunGroup(std::span<ScheduleOp* const> group) override;
  Status RunOne(const timers::TimerRow& row);
  Status RunMany(std::span<ScheduleOp* const> ops);  // >= 1 rows of distinct keys

  ConnectionPool& pool_;
};

}  // namespace once::store::pg
