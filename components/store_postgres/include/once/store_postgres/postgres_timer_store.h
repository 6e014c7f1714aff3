// File: postgres_timer_store.h
//
// PostgresTimerStore: the TimerStore (once/timers/timer_store.h) on
// PostgreSQL, for many nodes polling one database. libpq, raw SQL, prepared
// statements.
//
//   PostgresTimerOptions options;
//   options.conninfo = "postgresql://postgres@127.0.0.1:5432/loom";
//   options.schema = "loom";  // the event store's schema; created if missing
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<PostgresTimerStore> timers,
//                         PostgresTimerStore::Open(options));
//   timers->Schedule({.execution_id = "order-7", .wake_at_ms = now + 5000});
//   auto due = timers->Claim({.now_ms = now, .limit = 100, .owner = "node-a"});
//
// Table (in options.schema): timers(execution_id, wake_at_ms, redrive jsonb
// NULL ({"attempt": n}), lease_owner, lease_until_ms; PRIMARY KEY
// (execution_id, wake_at_ms)), indexed on wake_at_ms.
//
// Connections. The store opens its own small pool (connections_max), apart
// from the PostgresEventStore's: timer polling then never waits behind
// appends for a connection, and either store can be used alone.
//
// Statements. Schedule is INSERT ... ON CONFLICT (execution_id, wake_at_ms)
// DO UPDATE SET redrive = COALESCE(EXCLUDED.redrive, timers.redrive) (the
// contract's merge rule); concurrent Schedule calls share one such
// statement over arrays (src/schedule_group.h), so a burst of parks shares
// commits. Due and Claim filter re-drive rows in the WHERE,
// before the LIMIT. Claim is one statement: it picks due rows whose lease has
// ended with SELECT ... ORDER BY wake_at_ms LIMIT n FOR UPDATE SKIP LOCKED
// and leases them in the same UPDATE ... RETURNING, so two nodes never get
// the same row at once (a row another claimer is leasing right now is
// skipped, and one it has leased fails lease_until_ms <= now on the recheck).
// CompleteMany is one DELETE joining the timers to the unnest of its keys:
// one statement, one commit, all keys or none. Every statement is index
// probes, and the pool's connections plan them so (generic plans, no
// sequential scans; src/pg_conn.h kIndexPlanSettings): a retire of 1,000 keys
// planned for its array's length hashed the whole table instead.
//
// Migration. Open() runs under the event store's advisory migration lock
// (kMigrationLockKey) with lock_timeout = migration_lock_timeout_ms. An older
// timers table (without redrive or the lease columns) gains the missing
// columns: information_schema.columns is consulted first and ALTER TABLE
// (ACCESS EXCLUSIVE) runs only for a column that is missing, so a migrated
// table never makes a boot queue behind open transactions on timers. A lock
// wait that times out fails that Open() with kTimeout and changes nothing;
// the next Open() retries.
//
// Errors as in postgres_event_store.h: kUnavailable (connection lost), kBusy
// (no pooled connection in time, serialization failure), kTimeout (lock or
// statement timeout), kInvalidArgument (bad input), kInternal otherwise.
//
// Threads: every method may be called from any thread.

#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "once/base/result.h"
#include "once/store_postgres/postgres_event_store.h"
#include "once/timers/timer_store.h"

namespace once::store {
namespace pg {
class ScheduleGroup;
}  // namespace pg

struct PostgresTimerOptions {
  // A libpq connection string or URL.
  std::string conninfo;
  // The schema that holds the table; created if missing.
  std::string schema = "public";
  size_t connections_max = 4;
  int64_t checkout_timeout_ms = 5'000;
  // How long Open() waits for the migration lock and the table lock.
  int64_t migration_lock_timeout_ms = 10'000;
  timers::TimerLimits limits;
};

class PostgresTimerStore final : public timers::TimerStore {
 public:
  // Connects and migrates (see above).
  static Result<std::unique_ptr<PostgresTimerStore>> Open(const PostgresTimerOptions& options);
  ~PostgresTimerStore() override;

  Status Schedule(const timers::TimerRow& row) override;
  Result<std::vector<timers::TimerRow>> Due(int64_t now_ms, size_t limit,
                                            bool include_redrive) override;
  // Rows come back oldest first (wake_at_ms, then execution id).
  Result<std::vector<timers::TimerRow>> Claim(const timers::ClaimRequest& req) override;
  Status Complete(const timers::TimerKey& key) override;
  Status CompleteMany(std::span<const timers::TimerKey> keys) override;
  Status Defer(const timers::TimerKey& key, std::string_view owner, int64_t until_ms) override;
  Result<std::vector<timers::TimerRow>> RowsOf(std::string_view execution_id) override;
  const timers::TimerLimits& limits() const override { return options_.limits; }

 private:
  PostgresTimerStore(PostgresTimerOptions options, std::unique_ptr<pg::ConnectionPool> pool);

  PostgresTimerOptions options_;
  std::unique_ptr<pg::ConnectionPool> pool_;
  std::unique_ptr<pg::ScheduleGroup> schedules_;  // concurrent Schedule calls share statements
};

}  // namespace once::store
