// File: app.h
//
// App: one configuration object builds the Runtime, the TimerService (with a
// RuntimeWaker and park-time timer rows), a ChildSupervisor, the Inbox and
// the LogLifecycle, and wires them together.
//
//   AppConfig config{.store = &store, .timers = &timers, .clock = &clock, .rng = &rng,
//                    .inbox = &inbox};             // stores on one database, built by the caller
//   config.nodes = &registry;                     // this process is a node of the database
//   config.node.info = {.node_id = "worker-1", .host = host, .pid = getpid()};
//   config.features.redrive = true;  // only once EVERY node runs this version
//   config.retention = RetentionPolicy{.age_ms_min = 7 * 86'400'000};
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<App> app, App::Create(std::move(config)));
//   app->runtime().Register("order", Order);
//   ONCE_RETURN_IF_ERROR(app->Start());  // boot sweeps, timers, inbox sweeper
//
// The App takes the stores it is given (an event store, and optionally the
// timer, inbox and node stores on the same database: SqliteEventStore and
// its siblings in once::store_sqlite, PostgresEventStore and its siblings
// in once::store_postgres); it builds none, so once::orchestration links
// neither libpq nor sqlite3.
//
// Start() after Register: with a node registry it registers this node and
// starts its heartbeats (nodes::Node; the runtime owns what it runs and
// starts steps through the node's gate), then it writes the timer row of
// every timer park that lacks one (a crash between a park and its row),
// delivers the messages stored before a restart (Inbox::Sweep), runs the
// full Recover() pass once (with a node), starts the TimerService, and runs
// on a thread of its own: Inbox::Sweep every inbox_sweep_interval_ms (a
// message another node stored and then crashed before delivering reaches
// its parked execution without a restart or an operator), and with a node
// Runtime::Takeover() every takeover_interval_ms (a dead node's runs resume
// on the survivors with no operator) and the full Recover() every
// recover_interval_ms (ownerless runs, parents whose children are done).
//
// Stop() (and the destructor) drains: it stops claiming (the background
// thread and the TimerService stop: no new takeover, wake or sweep), lets
// the bodies running here finish or park for up to drain_ms, then closes the
// node's step gate (a body still running is refused its next step) and
// releases the node (the registry marks it stopped: what it still owns is
// taken by the others at once, not after the lease).
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
// Durable queues (docs/queues.md; AppConfig::queues, a QueueStore on the
// event store's database). Enqueue stores a start request; an App that is a
// node and serves queues (AppConfig::serve_queues) claims from each every
// queue_poll_interval_ms on its background thread, within the queue's
// limits and its own queue_in_flight_max (a full claim claims again at once;
// an end that makes room wakes the claimer), and starts each item's
// execution (StartAsync with if_absent: an id that exists is never run
// twice); the node that ends an execution completes its item (on_terminal,
// in batches across threads), and every queue_sweep_interval_ms the
// claimed items are swept: an ended execution's item is completed (a crash
// between the end and the completion), an item whose execution never
// started is released after the node lease (a crash between the claim and
// the start). Serving wants runtime.workers > 0 (with 0 the bodies run on
// the background thread). Await(id, timeout) returns the state once the
// execution ended on any node (see below).
//
//   config.queues = queue_store.get();
//   config.serve_queues = {"mail"};
//   app->Enqueue("mail", "send", "mail-7", input, {.dedup_key = "user-3"});
//   ONCE_ASSIGN_OR_RETURN(runtime::ExecutionState st, app->Await("mail-7", 30'000));
//
// Await wakes on three things: an end in this App (on_terminal), an end
// heard by AppConfig::end_listener (on PostgreSQL, PostgresEndListener: the
// database NOTIFYs every end, on any node, at its commit), and, only while
// no listener is up, a read of the log every await_poll_interval_ms. While
// the listener is up a waiter reads its log only when woken (its id ended,
// or the listener reconnected: ends while it was down were not heard, so
// every waiter re-reads). At most await_waiters_max Awaits wait at once
// (kLimitExceeded beyond). The listener is started by Start() or the first
// Await, and stopped by Stop() and the destructor; one App per listener.
//
//   auto listener = store::PostgresEndListener::Open({.conninfo = url, .schema = s}).value();
//   config.end_listener = listener.get();
//
// Cron schedules (docs/queues.md, "Schedules"): Schedule(name, cron,
// workflow, {queue, input}) stores the schedule in the queue store (shared by
// every node); every schedule_interval_ms each App with a queue store
// enqueues the ticks due since the schedule's last one, as execution
// "<name>@<tick ms>" (Enqueue is idempotent by id, so nodes racing on a
// tick make one execution), then moves the last tick forward with a
// compare-and-set. After an outage at most schedule_catch_up_max of the
// missed ticks (the newest) are enqueued. A new schedule's first tick is
// the first one after it was stored.
//
//   app->Schedule("digest", "*/5 * * * *", "send_digest", {.queue = "mail"});
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

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "once/base/clock.h"
#include "once/base/rng.h"
#include "once/lifecycle/log_lifecycle.h"
#include "once/nodes/node.h"
#include "once/orchestration/child_supervisor.h"
#include "once/orchestration/inbox.h"
#include "once/orchestration/redrive.h"
#include "once/orchestration/runtime_waker.h"
#include "once/queues/queue_store.h"
#include "once/runtime/runtime.h"
#include "once/store/end_listener.h"
#include "once/timers/timer_service.h"

namespace once::orchestration {

struct AppFeatures {
  bool redrive = false;  // kernel.features.redrive
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
  // The inbox's store (on the event store's database); null: no Inbox.
  InboxStore* inbox = nullptr;
  // How often Start()'s background thread runs Inbox::Sweep (ms): the most a
  // message stranded by a crashed sender waits. 0: never (boot sweep only).
  int64_t inbox_sweep_interval_ms = 5'000;

  // Nodes (docs/nodes.md). With a registry (on the event store's database)
  // this App is the node `node.info.node_id` (required then).
  nodes::NodeRegistry* nodes = nullptr;
  nodes::NodeOptions node;  // heartbeat_interval_ms, node_lease_ms, step gate
  // The node's own clock for its side of the lease: one that never jumps.
  // Null: a SteadyClock the App owns.
  const Clock* local_clock = nullptr;
  int64_t takeover_interval_ms = 1'000;  // Runtime::Takeover() this often (0: never)
  int64_t recover_interval_ms = 60'000;  // the full Recover() this often (0: at Start only)
  int64_t drain_ms = 10'000;             // Stop(): bodies may finish or park this long
  // A node row is forgotten (NodeRegistry::ForgetNodes) once its node has
  // been dead this long and owns no run; every node checks this often.
  // loom_nodes then holds the living and the recently dead, not every
  // process that ever ran. 0 for either: never.
  int64_t forget_nodes_after_ms = 7LL * 24 * 3'600'000;  // 7 days
  int64_t forget_nodes_interval_ms = 3'600'000;          // 1 hour

  // Optional: where the App's events worth a log line go (it writes no logs
  // itself; once/base/log_sink.h). The runtime's errors (given to the
  // runtime unless runtime.log is set), the background sweeps' errors, and
  // contended resumes handed to re-drive.
  LogSink log;

  // Durable queues (see the file comment). Serving needs a node.
  queues::QueueStore* queues = nullptr;
  std::vector<std::string> serve_queues;
  int64_t queue_poll_interval_ms = 50;  // a claim from each served queue this often
  size_t queue_claim_batch_max = 64;    // items one claim takes at most
  // Items this App claimed and has not ended yet, at most: a claim asks for
  // no more than the room left. A claim that got all it asked for claims
  // again at once (not after the poll interval); an end that makes room
  // when the claimer was held back wakes it.
  size_t queue_in_flight_max = 256;
  int64_t queue_sweep_interval_ms = 5'000;  // the claimed items' sweep (0: never)
  int64_t await_poll_interval_ms = 50;      // Await's read of the log while no listener is up
  // Hears ends on every node (see the file comment); null: Await polls.
  store::EndListener* end_listener = nullptr;
  size_t await_waiters_max = 10'000;     // Awaits waiting at once (each holds its caller's thread)
  int64_t schedule_interval_ms = 1'000;  // the schedules' pass (0: never; needs queues)
  size_t schedule_catch_up_max = 10;     // missed ticks enqueued after an outage, newest
};

struct ScheduleOptions {
  std::string queue = "schedules";  // the queue its ticks are enqueued in
  events::Json input = events::Json::object();
};

struct EnqueueOptions {
  int64_t priority = 0;   // higher is claimed first; FIFO among equals
  std::string dedup_key;  // empty: none
  int64_t delay_ms = 0;   // claimable from now + delay_ms (the store's clock)
};

class App {
 public:
  // kInvalidArgument when a required member is missing (a registry without
  // a node id), or archive retention has no archive store. Every pointer
  // must outlive the App.
  static Result<std::unique_ptr<App>> Create(AppConfig config);
  ~App();

  runtime::Runtime& runtime() { return *runtime_; }
  timers::TimerService* timer_service() { return service_.get(); }
  ParkTimers* park_timers() { return park_timers_.get(); }
  ChildSupervisor& supervisor() { return *supervisor_; }
  Inbox* inbox() { return inbox_.get(); }
  InboxStore* inbox_store() { return config_.inbox; }
  // This process as a node (null without a registry).
  nodes::Node* node() { return node_.get(); }
  lifecycle::LogLifecycle* lifecycle() { return lifecycle_.get(); }

  // See the file comment. Idempotent while running. Returns the first error
  // of the node's registration or the boot sweeps (nothing is then
  // started); errors of the background work go to runtime.on_error.
  Status Start();
  // See the file comment (the drain). Idempotent.
  void Stop();

  queues::QueueStore* queues() { return config_.queues; }

  // Stores a start request in `queue` (see the file comment). Idempotent:
  // an id whose execution exists or whose item is queued returns existing =
  // true and adds nothing. kAlreadyExists (AlreadyExistsDetail: the holder)
  // when the dedup key is held by another execution's item;
  // kInvalidArgument / kLimitExceeded for bad input; kUnsupported without a
  // queue store.
  Result<queues::Enqueued> Enqueue(std::string_view queue, std::string_view workflow,
                                   std::string_view id, events::Json input,
                                   EnqueueOptions options = {});
  // Stores (or updates) a cron schedule (see the file comment).
  // kInvalidArgument for a malformed expression or bad names; kUnsupported
  // without a queue store.
  Status Schedule(std::string_view name, std::string_view cron, std::string_view workflow,
                  ScheduleOptions options = {});
  // One schedules' pass now (the background thread runs it every
  // schedule_interval_ms): enqueues the due ticks of every schedule.
  Status RunSchedules();
  // The same pass judged at `now_ms` (Unix ms) instead of the queue store's
  // clock: for a caller that drives schedules on a clock of its own (the
  // chaos test runs cron time 60 times faster, with schedule_interval_ms =
  // 0). Every node of a schedule must use the same clock.
  Status RunSchedules(int64_t now_ms);

  // The execution's state once it is terminal (ended on any node); kTimeout
  // after timeout_ms. An id not started yet (queued) is waited for.
  // kLimitExceeded (LimitDetail "await_waiters_max") when that many Awaits
  // wait already.
  Result<runtime::ExecutionState> Await(std::string_view id, int64_t timeout_ms);

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
  void OnTerminal(const std::string& id, runtime::ExecutionStatus status);
  // Returns true when a claim got all it asked for (claim again at once).
  bool ClaimQueues();
  // Completes a queue item whose execution ended here, batched with the
  // ends of other threads: the caller that finds no completion running
  // completes, in batches of batch_items_max, until none is left; the
  // others add their id and return (a crash before the completion: the
  // sweep completes the item).
  void CompleteEnded(const std::string& id);
  void SweepQueues();
  void Background();
  void RunDue(int64_t now_ms);
  void Drain();
  void ReportSweep(const Result<SweepReport>& swept) const;
  // An error of the App's own work: logged at warn (config.log), then to
  // runtime.on_error. Notify: to on_error only (the runtime logged it).
  void Report(const Error& e, const char* component = "orchestration") const;
  void Notify(const Error& e) const;

  AppConfig config_;
  std::function<void(const std::string&, int64_t, const store::Envelope&)> user_on_park_;
  std::function<void(const events::Json&)> user_on_child_settled_;
  std::function<void(const std::string&, runtime::ExecutionStatus)> user_on_terminal_;
  // Await's waiters, by execution id: woken when that id ends (here or as
  // the listener heard) and when the listener goes up or down.
  struct Waiter {
    size_t count = 0;   // Awaits of this id
    uint64_t ends = 0;  // ends of this id heard since the first of them
    std::condition_variable cv;
  };
  void Wake(std::string_view id);
  void WakeAll();
  void EnsureListening();
  std::mutex ended_mu_;
  std::unordered_map<std::string, Waiter> waiting_;  // GUARDED_BY(ended_mu_)
  size_t waiters_ = 0;                               // GUARDED_BY(ended_mu_)
  uint64_t wake_all_ = 0;                            // GUARDED_BY(ended_mu_)
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<RuntimeWaker> waker_;
  std::unique_ptr<ParkTimers> park_timers_;
  std::unique_ptr<timers::TimerService> service_;
  std::unique_ptr<ChildSupervisor> supervisor_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<SteadyClock> owned_local_clock_;
  std::unique_ptr<nodes::Node> node_;
  std::unique_ptr<lifecycle::LogLifecycle> lifecycle_;
  std::vector<ChildSupervisor*> supervised_;

  // Queue items claimed here and not ended yet (their execution ids).
  std::mutex claimed_mu_;
  std::unordered_set<std::string> claimed_;  // GUARDED_BY(claimed_mu_)
  bool claimer_held_ = false;  // GUARDED_BY(claimed_mu_): the last claim met the room's end
  // CompleteEnded's batch: the ids waiting, and whether a thread completes.
  std::mutex complete_mu_;
  std::vector<std::string> to_complete_;  // GUARDED_BY(complete_mu_)
  bool completing_ = false;               // GUARDED_BY(complete_mu_)
  void WakeClaimer();
  void Forget(std::span<const std::string> ids);

  // The background thread: periodic tasks, each with its next due time
  // (steady ms since the thread began).
  struct Periodic {
    int64_t interval_ms = 0;
    int64_t next_ms = 0;
    std::function<void()> run;
    bool claims = false;  // the queue claim: due at once when claim_now_ is set
  };
  std::atomic<bool> claim_now_{false};  // WakeClaimer: the claim is due now
  std::vector<Periodic> periodic_;      // set by Start before the thread runs
  std::mutex background_mu_;
  std::condition_variable background_cv_;
  bool stopping_ = false;  // GUARDED_BY(background_mu_)
  bool started_ = false;   // GUARDED_BY(background_mu_)
  std::thread background_;
};

}  // namespace once::orchestration
