#include "once/orchestration/app.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "once/queues/cron.h"
#include "once/store/validate.h"

namespace once::orchestration {

namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How often Stop() looks whether the bodies running here are done.
constexpr int64_t kDrainPollMs = 10;
// Full claims in a row before the background thread's other tasks run.
constexpr int kClaimRoundsMax = 16;

}  // namespace

App::App(AppConfig config) : config_(std::move(config)) {}

App::~App() {
  Stop();
  if (config_.end_listener) config_.end_listener->Stop();  // its callbacks name this App
  if (runtime_) runtime_->WaitIdle();
}

void App::Report(const Error& e, const char* component) const {
  if (config_.log) {
    config_.log({.level = LogLevel::kWarn,
                 .component = component,
                 .message = e.message,
                 .subject = e.subject,
                 .code = ErrorCodeName(e.code)});
  }
  Notify(e);
}

void App::Notify(const Error& e) const {
  if (config_.runtime.on_error) config_.runtime.on_error(e);
}

Status App::Start() {
  {
    std::lock_guard lock(background_mu_);
    if (started_) return Ok();
  }
  if (node_) {
    ONCE_RETURN_IF_ERROR(node_->Beat());  // registered before anything runs
    node_->Start();
  }
  if (park_timers_) ONCE_RETURN_IF_ERROR(park_timers_->Sweep());
  if (inbox_) {
    // One execution's error (an unreadable log) is reported, not a failed
    // boot: one bad row must not stop every restart.
    Result<SweepReport> swept = inbox_->Sweep();
    if (!swept) return std::unexpected(swept.error());
    ReportSweep(swept);
  }
  periodic_.clear();
  if (inbox_ && config_.inbox_sweep_interval_ms > 0) {
    periodic_.push_back(
        {config_.inbox_sweep_interval_ms, 0, [this] { ReportSweep(inbox_->Sweep()); }});
  }
  if (config_.queues && config_.schedule_interval_ms > 0) {
    periodic_.push_back({config_.schedule_interval_ms, 0, [this] {
                           if (Status s = RunSchedules(); !s) Report(s.error());
                         }});
  }
  if (node_ && config_.queues && !config_.serve_queues.empty()) {
    periodic_.push_back({std::max<int64_t>(1, config_.queue_poll_interval_ms), 0,
                         [this] {
                           // Claims that get all they ask for claim again (a
                           // few rounds, then the other tasks get their turn).
                           int rounds = 0;
                           while (ClaimQueues()) {
                             if (++rounds == kClaimRoundsMax) {
                               claim_now_.store(true);
                               break;
                             }
                           }
                         },
                         /*claims=*/true});
    if (config_.queue_sweep_interval_ms > 0) {
      periodic_.push_back({config_.queue_sweep_interval_ms, config_.queue_sweep_interval_ms,
                           [this] { SweepQueues(); }});
    }
  }
  if (node_) {
    // The full pass now (a restart takes its own runs back, parents whose
    // children finished while every node was down are answered), then
    // takeover often and the full pass now and then.
    auto recover = [this] {
      Result<runtime::RecoverReport> r = runtime_->Recover();
      if (!r) return Report(r.error());
      for (const Error& e : r->errors) Report(e);
    };
    recover();
    if (config_.takeover_interval_ms > 0) {
      periodic_.push_back({config_.takeover_interval_ms, 0, [this] {
                             Result<runtime::TakeoverReport> r = runtime_->Takeover();
                             if (!r) return Report(r.error());
                             for (const Error& e : r->errors) Report(e);
                           }});
    }
    if (config_.recover_interval_ms > 0) {
      periodic_.push_back({config_.recover_interval_ms, config_.recover_interval_ms, recover});
    }
    if (config_.forget_nodes_interval_ms > 0 && config_.forget_nodes_after_ms > 0) {
      periodic_.push_back({config_.forget_nodes_interval_ms, 0, [this] {
                             Result<size_t> r =
                                 config_.nodes->ForgetNodes(config_.forget_nodes_after_ms);
                             if (!r) Report(r.error());
                           }});
    }
  }
  if (service_) service_->Start();
  EnsureListening();
  std::lock_guard lock(background_mu_);
  started_ = true;
  stopping_ = false;
  if (!periodic_.empty()) background_ = std::thread([this] { Background(); });
  return Ok();
}

void App::Background() {
  const int64_t begin_ms = SteadyMs();
  std::unique_lock lock(background_mu_);
  while (!stopping_) {
    lock.unlock();
    RunDue(SteadyMs() - begin_ms);
    int64_t next_ms = INT64_MAX;
    for (const Periodic& p : periodic_) next_ms = std::min(next_ms, p.next_ms);
    int64_t wait_ms = std::max<int64_t>(0, next_ms - (SteadyMs() - begin_ms));
    lock.lock();
    background_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                            [this] { return stopping_ || claim_now_.load(); });
  }
}

void App::RunDue(int64_t now_ms) {
  const bool claim_now = claim_now_.exchange(false);
  for (Periodic& p : periodic_) {
    if (p.next_ms > now_ms && !(p.claims && claim_now)) continue;
    p.run();
    p.next_ms = now_ms + p.interval_ms;
  }
}

void App::Stop() {
  {
    std::lock_guard lock(background_mu_);
    if (!started_) return;
    started_ = false;
    stopping_ = true;
  }
  // Stop claiming: no takeover, recover or sweep, no timer wake.
  background_cv_.notify_all();
  if (background_.joinable()) background_.join();
  if (service_) service_->Stop();
  if (config_.end_listener) config_.end_listener->Stop();
  Drain();
}

// Bodies running here may finish or park for up to drain_ms; then the node
// closes its gate and is released, so the others take what it still owns at
// once (not after the lease).
void App::Drain() {
  if (!node_) return;
  // The deadline at the clock's own resolution: one in whole milliseconds
  // of a truncated now ended the drain up to 1 ms short of drain_ms.
  using Steady = std::chrono::steady_clock;
  const Steady::time_point deadline =
      Steady::now() + std::chrono::milliseconds(std::max<int64_t>(0, config_.drain_ms));
  while (runtime_->RunningCount() > 0) {
    const Steady::time_point now = Steady::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(
        std::min<Steady::duration>(std::chrono::milliseconds(kDrainPollMs), deadline - now));
  }
  if (Status s = node_->Release(); !s) Report(s.error());
}

void App::ReportSweep(const Result<SweepReport>& swept) const {
  auto report = [&](const Error& e) { Report(e, "orchestration.inbox"); };
  if (!swept) return report(swept.error());
  for (const Error& e : swept->errors) report(e);
}

Result<std::unique_ptr<App>> App::Create(AppConfig config) {
  if (!config.store || !config.clock || !config.rng) {
    return MakeError(ErrorCode::kInvalidArgument, "AppConfig needs a store, a clock and an rng");
  }
  if (config.retention && config.retention->mode == lifecycle::RetentionMode::kArchive &&
      !config.archive) {
    return MakeError(ErrorCode::kInvalidArgument, "archive retention needs an archive store");
  }
  if (config.nodes) {
    ONCE_RETURN_IF_ERROR(nodes::ValidateNodeInfo(config.node.info, config.nodes->limits()));
    if (config.node.node_lease_ms <= 0 || config.node.heartbeat_interval_ms <= 0 ||
        config.node.step_margin_ms < 0 || config.node.step_margin_ms >= config.node.node_lease_ms) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "AppConfig::node: node_lease_ms, heartbeat_interval_ms > 0, "
                       "0 <= step_margin_ms < node_lease_ms");
    }
  }
  if (!config.serve_queues.empty() && (!config.queues || !config.nodes)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "serving queues needs a queue store and a node registry");
  }
  std::unique_ptr<App> app(new App(std::move(config)));
  AppConfig& c = app->config_;
  App* self = app.get();
  if (c.nodes) {
    const Clock* local = c.local_clock;
    if (!local) {
      self->owned_local_clock_ = std::make_unique<SteadyClock>();
      local = self->owned_local_clock_.get();
    }
    nodes::NodeOptions node_options = c.node;
    if (!node_options.on_error) node_options.on_error = c.runtime.on_error;
    self->node_ = std::make_unique<nodes::Node>(*c.nodes, *local, std::move(node_options));
  }
  runtime::RuntimeOptions rt_options = c.runtime;
  self->user_on_park_ = std::move(rt_options.on_park);
  self->user_on_child_settled_ = std::move(rt_options.on_child_settled);
  self->user_on_terminal_ = std::move(rt_options.on_terminal);
  rt_options.on_terminal = [self](const std::string& id, runtime::ExecutionStatus status) {
    self->OnTerminal(id, status);
  };
  rt_options.on_park = [self](const std::string& id, int64_t seq, const store::Envelope& park) {
    self->OnPark(id, seq, park);
  };
  rt_options.on_child_settled = [self](const events::Json& parent) {
    self->OnChildSettled(parent);
  };
  rt_options.on_error = [self](const Error& e) { self->OnRuntimeError(e); };
  rt_options.node = self->node_.get();
  if (!rt_options.log) rt_options.log = c.log;
  self->runtime_ = std::make_unique<runtime::Runtime>(*c.store, *c.clock, std::move(rt_options));
  if (c.timers) {
    self->waker_ = std::make_unique<RuntimeWaker>(*self->runtime_);
    self->park_timers_ = std::make_unique<ParkTimers>(*c.store, *c.timers, c.runtime.on_error);
    timers::TimerServiceOptions service_options = c.timer_service;
    if (self->node_ && service_options.owner == timers::TimerServiceOptions{}.owner) {
      service_options.owner = self->node_->id();  // timer leases name the node
    }
    self->service_ = std::make_unique<timers::TimerService>(*c.timers, *self->waker_, *c.clock,
                                                            *c.rng, std::move(service_options));
  }
  std::optional<RedriveWiring> wiring;
  if (Result<RedriveWiring> w = self->Redrive(); w) wiring = *w;
  self->supervisor_ = std::make_unique<ChildSupervisor>(
      *self->runtime_, *c.clock, *c.rng,
      ChildSupervisorOptions{.redrive = wiring, .on_error = c.runtime.on_error});
  if (c.inbox) {
    self->inbox_ =
        std::make_unique<Inbox>(*self->runtime_, *c.inbox, *c.clock, *c.rng,
                                InboxOptions{.redrive = wiring, .on_error = c.runtime.on_error});
  }
  if (c.retention) {
    self->lifecycle_ = std::make_unique<lifecycle::LogLifecycle>(
        *c.store, *c.clock,
        lifecycle::LogLifecycleOptions{
            .policy = *c.retention, .archive = c.archive, .pinned = c.pinned});
  }
  if (self->lifecycle_ && c.inbox) {
    self->lifecycle_->set_pinned(
        lifecycle::AnyPin(self->lifecycle_->pinned(), PinInboxRows(*c.inbox)));
  }
  self->Supervise(*self->supervisor_);
  return app;
}

void App::Supervise(ChildSupervisor& supervisor) {
  supervised_.push_back(&supervisor);
  if (lifecycle_) {
    lifecycle_->set_pinned(lifecycle::AnyPin(lifecycle_->pinned(), PinParkedChildren(supervisor)));
  }
}

Result<RedriveWiring> App::Redrive() const {
  if (!config_.features.redrive) {
    return MakeError(ErrorCode::kUnsupported, "kernel.features.redrive is off");
  }
  if (!config_.timers || !service_) {
    return MakeError(ErrorCode::kNotFound, "re-drive needs timers configured");
  }
  return RedriveWiring{config_.timers, service_.get()};
}

void App::OnPark(const std::string& id, int64_t seq, const store::Envelope& park) {
  if (park_timers_) park_timers_->OnPark(id, seq, park);
  if (inbox_) inbox_->OnPark(id, seq, park);
  if (user_on_park_) user_on_park_(id, seq, park);
}

// The runtime's background work reports a kResumeContended from one place:
// its park-time self-resume of a parent whose children were already done
// when it parked (the supervisor's own resumes report to its on_error). With
// re-drive wired it takes the supervisor's contended path (the first re-drive
// row, then the supervisor's Redriver), like any other contended parent
// resume; without, it goes to on_error unchanged.
void App::OnRuntimeError(const Error& e) {
  if (e.code == ErrorCode::kResumeContended && !e.subject.empty() && supervisor_ &&
      Redrive().has_value()) {
    const ResumeContendedDetail* d = e.As<ResumeContendedDetail>();
    if (config_.log) {
      config_.log({.level = LogLevel::kInfo,
                   .component = "orchestration",
                   .message = "contended resume handed to re-drive",
                   .subject = e.subject,
                   .code = ErrorCodeName(e.code)});
    }
    (void)supervisor_->HandOffContended(e.subject, d ? d->attempts : 0);  // reports its own error
    return;
  }
  Notify(e);  // the runtime logged it
}

Result<queues::Enqueued> App::Enqueue(std::string_view queue, std::string_view workflow,
                                      std::string_view id, events::Json input,
                                      EnqueueOptions options) {
  if (!config_.queues) return MakeError(ErrorCode::kUnsupported, "no queue store configured");
  ONCE_RETURN_IF_ERROR(store::ValidateExecutionId(id, config_.store->limits()));
  ONCE_ASSIGN_OR_RETURN(int64_t head, config_.store->Head(id));
  if (head > 0) return queues::Enqueued{.existing = true};  // that execution, not a second
  return config_.queues->Enqueue({.queue = std::string(queue),
                                  .workflow = std::string(workflow),
                                  .execution_id = std::string(id),
                                  .input = std::move(input),
                                  .priority = options.priority,
                                  .dedup_key = std::move(options.dedup_key),
                                  .delay_ms = options.delay_ms});
}

void App::EnsureListening() {
  if (!config_.end_listener) return;
  config_.end_listener->Start(
      {.on_end = [this](std::string_view id) { Wake(id); }, .on_up = [this](bool) { WakeAll(); }});
}

void App::Wake(std::string_view id) {
  std::lock_guard lock(ended_mu_);
  auto it = waiting_.find(std::string(id));
  if (it == waiting_.end()) return;
  ++it->second.ends;
  it->second.cv.notify_all();
}

void App::WakeAll() {
  std::lock_guard lock(ended_mu_);
  ++wake_all_;
  for (auto& [id, w] : waiting_) w.cv.notify_all();
}

Result<runtime::ExecutionState> App::Await(std::string_view id, int64_t timeout_ms) {
  const int64_t deadline_ms = SteadyMs() + std::max<int64_t>(0, timeout_ms);
  EnsureListening();
  std::unique_lock lock(ended_mu_);
  if (waiters_ >= config_.await_waiters_max) {
    return LimitError("await_waiters_max", static_cast<int64_t>(waiters_) + 1,
                      static_cast<int64_t>(config_.await_waiters_max), std::string(id));
  }
  // Registered before the first read: an end committed after it is heard.
  auto it = waiting_.try_emplace(std::string(id)).first;
  Waiter& w = it->second;
  ++w.count;
  ++waiters_;
  struct Leave {
    App* app;
    decltype(it) at;
    ~Leave() {  // under ended_mu_ (the lock is held whenever Await returns)
      --app->waiters_;
      if (--at->second.count == 0) app->waiting_.erase(at);
    }
  } leave{this, it};
  for (;;) {
    const uint64_t seen_ends = w.ends, seen_all = wake_all_;
    const bool listening = config_.end_listener && config_.end_listener->up();
    lock.unlock();
    Result<runtime::ExecutionState> state = runtime_->Inspect(id);
    lock.lock();
    if (!state) return std::unexpected(state.error());
    if (runtime::IsTerminal(state->status)) return state;
    int64_t now_ms = SteadyMs();
    if (now_ms >= deadline_ms) {
      return MakeError(ErrorCode::kTimeout,
                       "await: not ended within " + std::to_string(timeout_ms) + " ms",
                       std::string(id));
    }
    // Up: only a wake re-reads (an end of this id, the listener going up or
    // down). Down or none: the log is read every poll interval too.
    int64_t wait_ms = deadline_ms - now_ms;
    if (!listening) {
      wait_ms = std::min(wait_ms, std::max<int64_t>(1, config_.await_poll_interval_ms));
    }
    w.cv.wait_for(lock, std::chrono::milliseconds(wait_ms),
                  [&] { return w.ends != seen_ends || wake_all_ != seen_all; });
  }
}

Status App::Schedule(std::string_view name, std::string_view cron, std::string_view workflow,
                     ScheduleOptions options) {
  if (!config_.queues) return MakeError(ErrorCode::kUnsupported, "no queue store configured");
  ONCE_RETURN_IF_ERROR(queues::Cron::Parse(cron));
  return config_.queues->PutSchedule({.name = std::string(name),
                                      .cron = std::string(cron),
                                      .workflow = std::string(workflow),
                                      .queue = std::move(options.queue),
                                      .input = std::move(options.input)});
}

Status App::RunSchedules() {
  if (!config_.queues) return MakeError(ErrorCode::kUnsupported, "no queue store configured");
  ONCE_ASSIGN_OR_RETURN(int64_t now_ms, config_.queues->NowMs());
  return RunSchedules(now_ms);
}

Status App::RunSchedules(int64_t now_ms) {
  if (!config_.queues) return MakeError(ErrorCode::kUnsupported, "no queue store configured");
  ONCE_ASSIGN_OR_RETURN(std::vector<queues::ScheduleRow> rows, config_.queues->Schedules());
  for (const queues::ScheduleRow& row : rows) {
    if (row.last_tick_ms == 0) {  // new: its first tick is the next one
      ONCE_RETURN_IF_ERROR(config_.queues->AdvanceSchedule(row.name, 0, now_ms));
      continue;
    }
    Result<queues::Cron> cron = queues::Cron::Parse(row.cron);
    if (!cron) {
      Report(cron.error());
      continue;
    }
    ONCE_ASSIGN_OR_RETURN(std::vector<int64_t> ticks,
                          cron->TicksBetween(row.last_tick_ms, now_ms,
                                             std::max<size_t>(1, config_.schedule_catch_up_max)));
    if (ticks.empty()) continue;
    for (int64_t tick : ticks) {
      // The tick's id: every node enqueuing it names the same execution.
      Result<queues::Enqueued> e =
          Enqueue(row.queue, row.workflow, row.name + "@" + std::to_string(tick), row.input);
      if (!e) return std::unexpected(e.error());  // the tick stays due; the next pass retries
    }
    ONCE_RETURN_IF_ERROR(config_.queues->AdvanceSchedule(row.name, row.last_tick_ms, ticks.back()));
  }
  return Ok();
}

// Every end completes its item, if it has one: the execution may have been
// claimed on another node (taken over here) or started directly.
void App::OnTerminal(const std::string& id, runtime::ExecutionStatus status) {
  if (config_.queues) CompleteEnded(id);
  Wake(id);
  if (user_on_terminal_) user_on_terminal_(id, status);
}

void App::CompleteEnded(const std::string& id) {
  std::unique_lock lock(complete_mu_);
  to_complete_.push_back(id);
  if (completing_) return;  // the thread completing now takes it too
  completing_ = true;
  const size_t batch_max = std::max<size_t>(1, config_.queues->limits().batch_items_max);
  while (!to_complete_.empty()) {
    std::vector<std::string> batch;
    if (to_complete_.size() <= batch_max) {
      batch.swap(to_complete_);
    } else {
      batch.assign(to_complete_.begin(), to_complete_.begin() + batch_max);
      to_complete_.erase(to_complete_.begin(), to_complete_.begin() + batch_max);
    }
    lock.unlock();
    if (Status s = config_.queues->Complete(batch); !s) Report(s.error());  // the sweep retries
    Forget(batch);
    lock.lock();
  }
  completing_ = false;
}

// Claimed items that are done here (completed, released, swept) make room.
void App::Forget(std::span<const std::string> ids) {
  bool wake = false;
  {
    std::lock_guard lock(claimed_mu_);
    size_t erased = 0;
    for (const std::string& id : ids) erased += claimed_.erase(id);
    if (erased > 0 && claimer_held_) {
      claimer_held_ = false;
      wake = true;
    }
  }
  if (wake) WakeClaimer();
}

void App::WakeClaimer() {
  {
    std::lock_guard lock(background_mu_);
    claim_now_.store(true);
  }
  background_cv_.notify_all();
}

// One claim per served queue; each item's execution starts on the
// runtime's workers (if_absent: an existing id is not run again). A start
// the runtime refused is released for a later claim; one that found its
// execution already ended completes the item.
bool App::ClaimQueues() {
  bool full = false;
  for (const std::string& queue : config_.serve_queues) {
    size_t ask = 0;
    {
      std::lock_guard lock(claimed_mu_);
      const size_t in_flight = claimed_.size();
      const size_t room =
          in_flight >= config_.queue_in_flight_max ? 0 : config_.queue_in_flight_max - in_flight;
      ask = std::min(config_.queue_claim_batch_max, room);
      claimer_held_ = ask == room;  // what ends next makes room: wake the claimer then
      if (ask == 0) return false;
    }
    Result<std::vector<queues::QueueItem>> items =
        config_.queues->Claim({.queue = queue, .node = node_->id(), .limit = ask});
    if (!items) {
      Report(items.error());
      continue;
    }
    if (items->size() == ask) full = true;
    {
      std::lock_guard lock(claimed_mu_);  // before the start: an end may come at once
      for (const queues::QueueItem& item : *items) claimed_.insert(item.execution_id);
    }
    for (queues::QueueItem& item : *items) {
      std::string id = item.execution_id;
      std::future<Result<runtime::RunOutcome>> started = runtime_->StartAsync(
          std::move(item.workflow), item.execution_id, std::move(item.input), {.if_absent = true});
      // A pool's start runs later; an inline one (or a refused submit) is ready now.
      if (started.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
      Result<runtime::RunOutcome> out = started.get();
      std::string ids[] = {id};
      if (!out) {
        Report(out.error());
        if (Status s = config_.queues->Release(ids); !s) Report(s.error());
        Forget(ids);
      } else if (runtime::IsTerminal(out->status)) {
        if (Status s = config_.queues->Complete(ids); !s) Report(s.error());
        Forget(ids);
      }
    }
  }
  return full;
}

// Claimed items whose execution ended are completed; items whose execution
// never started are released once claimed longer than the node lease.
void App::SweepQueues() {
  Result<int64_t> now_ms = config_.queues->NowMs();
  if (!now_ms) return Report(now_ms.error());
  std::string after;
  for (;;) {
    Result<std::vector<queues::QueueItem>> page =
        config_.queues->Claimed(after, config_.queues->limits().items_page_max);
    if (!page) return Report(page.error());
    if (page->empty()) return;
    std::vector<std::string> done, unstarted;
    for (const queues::QueueItem& item : *page) {
      Result<runtime::ExecutionState> st = runtime_->Inspect(item.execution_id);
      if (!st) {
        Report(st.error());
        continue;
      }
      if (runtime::IsTerminal(st->status)) done.push_back(item.execution_id);
      if (st->status == runtime::ExecutionStatus::kUnknown &&
          *now_ms - item.claimed_at_ms > config_.node.node_lease_ms) {
        unstarted.push_back(item.execution_id);
      }
    }
    if (Status s = config_.queues->Complete(done); !s) Report(s.error());
    if (Status s = config_.queues->Release(unstarted); !s) Report(s.error());
    Forget(done);
    Forget(unstarted);
    after = page->back().execution_id;
  }
}

void App::OnChildSettled(const events::Json& parent) {
  for (ChildSupervisor* s : supervised_) s->OnChildSettled(parent);
  if (user_on_child_settled_) user_on_child_settled_(parent);
}

}  // namespace once::orchestration
