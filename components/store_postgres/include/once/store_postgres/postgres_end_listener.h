// File: postgres_end_listener.h
//
// PostgresEndListener: the EndListener (once/store/end_listener.h) on
// PostgreSQL. Open installs, once per schema, an AFTER INSERT trigger on the
// event store's events table that NOTIFYs the schema's channel with the id of
// every terminal event, inside the appending transaction (delivered at its
// commit, never for a rolled-back append); Start LISTENs on a connection of
// its own, on a thread of its own.
//
//   PostgresEndListenerOptions options{.conninfo = url, .schema = "loom"};
//   ONCE_ASSIGN_OR_RETURN(auto listener, PostgresEndListener::Open(options));
//   config.end_listener = listener.get();   // App::Await wakes on it
//
// Every end path notifies (the runtime on any node, `loom cancel`, a tool):
// the trigger sits on the table, not in one caller. A schema whose listener
// was never opened has no trigger and pays nothing; once installed it stays
// (a listener opened later on another node needs it) and costs each ended
// execution a trigger call and a NOTIFY: about 6-12% of PostgreSQL's
// unfenced rate, paired (BENCHMARKS.md, "Loom nodes and queues").
//
// The connection: search_path = the schema, then LISTEN. The thread waits on
// the socket; every check_interval_ms without traffic it sends `SELECT 1`,
// so a connection that died silently is noticed within that. A failure
// (the server closed it, pg_terminate_backend, a network error) reports
// on_up(false) and reconnects every reconnect_interval_ms; a reconnection
// reports on_up(true) (the ends in between were not heard).
//
// Threads: Start, Stop and up() from any thread; callbacks on the
// listener's thread. Stop waits for a connection attempt in progress (the
// conninfo's connect_timeout bounds it; libpq's default is none).

#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "once/base/result.h"
#include "once/store/end_listener.h"

namespace once::store {

struct PostgresEndListenerOptions {
  std::string conninfo;
  std::string schema = "public";          // the event store's schema (its events table must exist)
  int64_t reconnect_interval_ms = 1'000;  // after a lost connection, between attempts
  int64_t check_interval_ms = 5'000;      // a quiet connection is checked this often
  int64_t migration_lock_timeout_ms = 10'000;
};

class PostgresEndListener final : public EndListener {
 public:
  // Installs the trigger (if missing) and checks that a connection opens.
  // kInvalidArgument for bad options; kUnavailable / the server's error when
  // the database or the events table is not there.
  static Result<std::unique_ptr<PostgresEndListener>> Open(PostgresEndListenerOptions options);
  ~PostgresEndListener() override;

  void Start(EndHandlers handlers) override;
  void Stop() override;
  bool up() const override { return up_.load(); }

  // The channel this listener LISTENs on (sql::EndChannel of the schema).
  const std::string& channel() const { return channel_; }
  // The server process of the listening connection (0 while down): what an
  // operator (or a test) passes to pg_terminate_backend.
  int backend_pid() const { return backend_pid_.load(); }

 private:
  explicit PostgresEndListener(PostgresEndListenerOptions options);
  void Run();
  // One connection's life: connect, LISTEN, hear until it fails or Stop.
  void ListenOnce();
  // Sleeps up to ms, or less when Stop is called; true when stopping.
  bool Pause(int64_t ms);
  void SetUp(bool up);

  PostgresEndListenerOptions options_;
  std::string channel_;
  EndHandlers handlers_;
  std::atomic<bool> up_{false};
  std::atomic<int> backend_pid_{0};
  std::atomic<bool> stopping_{false};
  int wake_fd_ = -1;  // an eventfd: Stop writes it, the thread polls it
  std::mutex start_mu_;
  std::thread thread_;  // GUARDED_BY(start_mu_)
};

}  // namespace once::store
