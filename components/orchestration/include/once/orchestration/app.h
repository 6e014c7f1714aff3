// File: app.h
//
// App: one configuration object builds the Runtime, the TimerService (with a
// RuntimeWaker and park-time timer rows), a ChildSupervisor, the Inbox and
// the LogLifecycle, and wires them together.
//
//   AppConfig config{.store = &store, .timers = &timers, .clock = &clock, .rng = &rng};
//   config.backend = AppBackend{.kind = AppBackend::Kind::kSqlite, .sqlite_path = path};
//   config.features.redrive = true;  // only once EVERY node runs this version
//   config.retention = RetentionPolicy{.age_ms_min = 7 * 86'400'000};
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<App> app, App::Create(std::move(config)));
//   app->runtime().Register("order", Order);
//   ONCE_RETURN_IF_ERROR(app->Start());  // boot sweeps, timers, inbox sweeper
//
// Start() after Register: it writes the timer row of every timer park that
// lacks one (a crash between a park and its row), delivers the messages
// stored before a restart (Inbox::Sweep), starts the TimerService, and runs
// Inbox::Sweep again every inbox_sweep_interval_ms on a thread of its own, so
// a message another node stored and then crashed before delivering reaches
// its parked execution without a restart or an operator. Stop() (and the
// destructor) joins that thread and stops the TimerService.
//
// kernel.features.redrive (AppConfig::features.redrive) is OFF by default: an
// older node's TimerService judges every row by the park and would retire a
// re-drive row as obsolete, silently. Off: nothing writes re-drive rows and
// a contended resume goes to on_error (Recover() re-drives). On, with timers
// configured: Redrive() hands out the wiring and the built-in supervisor and
// inbox use it (and register as re-drivers); a contended park-time
// self-resume of the runtime (a parent whose children were already done when
// it parked) then also takes the supervisor's re-drive path instead of going
// to on_error.
//
// With retention and an inbox, PinInboxRows(inbox store) is ORed into the
// lifecycle's pin: a finished log stays until the inbox deleted its rows.
//
// Supervise(s) routes the runtime's child-settled notifications to `s` too
// and ORs PinParkedChildren(s) into the lifecycle's pin (with config.pinned),
// so retention never deletes a child its parent is parked on. The built-in
// supervisor is supervised at Create.
//
// Threads: build and wire (Create, Supervise, Register) before running
// anything; the parts are then as thread-safe as documented on each.

#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "once/base/clock.h"
#include "once/base/rng.h"
#include "once/lifecycle/log_lifecycle.h"
#include "once/orchestration/child_supervisor.h"
#include "once/orchestration/inbox.h"
#include "once/orchestration/redrive.h"
#include "once/orchestration/runtime_waker.h"
#include "once/runtime/runtime.h"
#include "once/timers/timer_service.h"

namespace once::orchestration {

struct AppFeatures {
  bool redrive = false;  // kernel.features.redrive
};

// Where the App's event store lives, so that the App can build the stores
// it owns on the same backend. Today: the inbox store, when
// AppConfig::inbox is null. kMemory builds MemoryInboxStore (messages die
// with the process); kSqlite a SqliteInboxStore on sqlite_path (WAL,
// synchronous=FULL; the event store's file is the natural choice);
// kPostgres a PostgresInboxStore on postgres_url / postgres_schema.
struct AppBackend {
  enum class Kind { kMemory, kSqlite, kPostgres };
  Kind kind = Kind::kMemory;
  std::string sqlite_path;
  std::string postgres_url;  // a libpq connection string or URL
  std::string postgres_schema = "public";
};

struct AppConfig {
  store::EventStore* store = nullptr;    // required
  timers::TimerStore* timers = nullptr;  // optional: no TimerService without it
  const Clock* clock = nullptr;          // required
  Rng* rng = nullptr;                    // required
  runtime::RuntimeOptions runtime;       // its on_park / on_child_settled are chained
  timers::TimerServiceOptions timer_service;
  AppFeatures features;
  std::optional<lifecycle::RetentionPolicy> retention;  // no lifecycle without it
  store::EventStore* archive = nullptr;                 // for RetentionMode::kArchive
  lifecycle::PinPredicate pinned;                       // the app's own pins
  // The inbox's store. Null: built on `backend` (see AppBackend); null with
  // no backend: no Inbox.
  InboxStore* inbox = nullptr;
  std::optional<AppBackend> backend;
  inbox::InboxLimits inbox_limits;  // for a store the App builds
  // How often Start()'s background thread runs Inbox::Sweep (ms): the most a
  // message stranded by a crashed sender waits. 0: never (boot sweep only).
  int64_t inbox_sweep_interval_ms = 5'000;
  // Optional: where the App's events worth a log line go (it writes no logs
  // itself; once/base/log_sink.h). The runtime's errors (given to the
  // runtime unless runtime.log is set), the background sweeps' errors, and
  // contended resumes handed to re-drive.
  LogSink log;
};

class App {
 public:
  // kInvalidArgument when a required member is missing, or archive
  // retention has no archive store; the store's error when the inbox store
  // it builds on `backend` does not open. Every pointer must outlive the App.
  static Result<std::unique_ptr<App>> Create(AppConfig config);
  ~App();

  runtime::Runtime& runtime() { return *runtime_; }
  timers::TimerService* timer_service() { return service_.get(); }
  ParkTimers* park_timers() { return park_timers_.get(); }
  ChildSupervisor& supervisor() { return *supervisor_; }
  Inbox* inbox() { return inbox_.get(); }
  // The inbox's store (the configured one, or the one built on `backend`).
  InboxStore* inbox_store() { return config_.inbox; }
  lifecycle::LogLifecycle* lifecycle() { return lifecycle_.get(); }

  // See the file comment. Idempotent while running. Returns the first error
  // of the boot sweeps (the timer service is then not started); errors of
  // the background sweeps go to runtime.on_error.
  Status Start();
  void Stop();

  // See above. `supervisor` must outlive the App.
  void Supervise(ChildSupervisor& supervisor);
  // The re-drive wiring: kUnsupported when features.redrive is off,
  // kNotFound when no timers are configured.
  Result<RedriveWiring> Redrive() const;

 private:
  explicit App(AppConfig config);
  void OnPark(const std::string& id, int64_t seq, const store::Envelope& park);
  void OnChildSettled(const events::Json& parent);
  void OnRuntimeError(const Error& e);
  void SweepInboxEvery(int64_t interval_ms);
  void ReportSweep(const Result<SweepReport>& swept) const;

  AppConfig config_;
  std::function<void(const std::string&, int64_t, const store::Envelope&)> user_on_park_;
  std::function<void(const events::Json&)> user_on_child_settled_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<RuntimeWaker> waker_;
  std::unique_ptr<ParkTimers> park_timers_;
  std::unique_ptr<timers::TimerService> service_;
  std::unique_ptr<ChildSupervisor> supervisor_;
  std::unique_ptr<InboxStore> owned_inbox_store_;  // built on config.backend
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<lifecycle::LogLifecycle> lifecycle_;
  std::vector<ChildSupervisor*> supervised_;

  std::mutex sweeper_mu_;
  std::condition_variable sweeper_cv_;
  bool sweeper_stopping_ = false;  // guarded by sweeper_mu_
  std::thread sweeper_;
};

}  // namespace once::orchestration
