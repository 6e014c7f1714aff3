// File: sqlite_timer_store.h
//
// SqliteTimerStore: the TimerStore contract (once/timers/timer_store.h) on a
// SQLite file in WAL mode. It may share the event store's file (its table is
// `timers`; it does not use PRAGMA user_version, which belongs to the event
// store's schema) or have a file of its own.
//
//   SqliteTimerOptions options;                  // durable: synchronous=FULL
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<SqliteTimerStore> timers,
//                         SqliteTimerStore::Open("/var/lib/once/loom.db", options));
//   ONCE_RETURN_IF_ERROR(timers->Schedule({.execution_id = "order-7", .wake_at_ms = t}));
//   ONCE_ASSIGN_OR_RETURN(auto due, timers->Claim({.now_ms = now, .owner = "node-a"}));
//
// Table. timers(execution_id TEXT, wake_at_ms INTEGER, redrive TEXT NULL
// (JSON {"attempt":n}), lease_owner TEXT NULL, lease_until_ms INTEGER NULL,
// PRIMARY KEY (execution_id, wake_at_ms)), and the index timers_by_wake on
// (wake_at_ms, execution_id) that the due scan walks, oldest first.
//
// Migration. A table of an older shape (no redrive, lease_owner or
// lease_until_ms column) gains the missing columns on Open: PRAGMA
// table_info(timers) and every ALTER TABLE ... ADD COLUMN run in ONE
// BEGIN IMMEDIATE, and a "duplicate column name" is tolerated, so several
// processes opening an old file at the same moment all boot. Existing rows
// read as plain (no re-drive) and unleased.
//
// Atomicity. Schedule is one upsert (INSERT ... ON CONFLICT DO UPDATE SET
// redrive = COALESCE(excluded.redrive, timers.redrive)); it keeps a row's
// lease. Claim selects the due, unleased rows and leases them in one
// BEGIN IMMEDIATE, so two processes (or threads) never hold a live lease on
// the same row. Re-drive rows are excluded in the WHERE clause, before the
// LIMIT, when include_redrive is false. CompleteMany deletes all its rows or
// none: one commit (one WAL fsync) for the batch.
//
// Group commit. Every write (Schedule, Claim, Complete, CompleteMany, Defer)
// is an operation of the event store's leader/follower write group
// (write_group.h): writes that arrive while a commit is in flight share the
// next transaction and its one fsync, each under its own savepoint, so each
// stays atomic and fails alone. Parks on many threads (ParkTimers::OnPark)
// then do not queue one fsync each.
//
// Threads: every method may be called from any thread; the store uses one
// connection under a mutex. Errors: as SqliteEventStore's (kBusy past
// busy_timeout, kUnavailable for I/O, kCorruption for a damaged file or a
// redrive cell that is not {"attempt":n}, kInternal otherwise).

#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "once/store_sqlite/sqlite_event_store.h"
#include "once/timers/timer_store.h"

namespace once::store {

struct SqliteTimerOptions {
  Durability durability = Durability::kFull;
  std::chrono::milliseconds busy_timeout{5000};
  timers::TimerLimits limits;
  // A registered SQLite VFS name; empty: the default.
  std::string vfs;
};

class SqliteTimerStore final : public timers::TimerStore {
 public:
  // Opens (creating if needed) the file and its timers table, migrating an
  // older shape. Errors: kInvalidArgument (empty or in-memory path),
  // kUnavailable, kBusy, kCorruption.
  static Result<std::unique_ptr<SqliteTimerStore>> Open(const std::string& path,
                                                        SqliteTimerOptions options = {});
  ~SqliteTimerStore() override;

  Status Schedule(const timers::TimerRow& row) override;
  Result<std::vector<timers::TimerRow>> Due(int64_t now_ms, size_t limit,
                                            bool include_redrive) override;
  Result<std::vector<timers::TimerRow>> Claim(const timers::ClaimRequest& req) override;
  Status Complete(const timers::TimerKey& key) override;
  Status CompleteMany(std::span<const timers::TimerKey> keys) override;
  Status Defer(const timers::TimerKey& key, std::string_view owner, int64_t until_ms) override;
  Result<std::vector<timers::TimerRow>> RowsOf(std::string_view execution_id) override;
  const timers::TimerLimits& limits() const override;

 private:
  struct Impl;
  explicit SqliteTimerStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace once::store
