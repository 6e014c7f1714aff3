#include "once/orchestration/app.h"

#include "once/store_postgres/postgres_inbox_store.h"
#include "once/store_sqlite/sqlite_inbox_store.h"

namespace once::orchestration {

namespace {

// The inbox store matching the event store's backend.
Result<std::unique_ptr<InboxStore>> OpenInboxStore(const AppBackend& backend,
                                                   const inbox::InboxLimits& limits) {
  switch (backend.kind) {
    case AppBackend::Kind::kMemory:
      return std::make_unique<MemoryInboxStore>(limits);
    case AppBackend::Kind::kSqlite: {
      ONCE_ASSIGN_OR_RETURN(auto s,
                            store::SqliteInboxStore::Open(backend.sqlite_path, {.limits = limits}));
      return std::unique_ptr<InboxStore>(std::move(s));
    }
    case AppBackend::Kind::kPostgres: {
      store::PostgresInboxOptions options;
      options.conninfo = backend.postgres_url;
      options.schema = backend.postgres_schema;
      options.limits = limits;
      ONCE_ASSIGN_OR_RETURN(auto s, store::PostgresInboxStore::Open(options));
      return std::unique_ptr<InboxStore>(std::move(s));
    }
  }
  return MakeError(ErrorCode::kInvalidArgument, "AppBackend: unknown kind");
}

}  // namespace

App::App(AppConfig config) : config_(std::move(config)) {}

App::~App() {
  Stop();
  if (runtime_) runtime_->WaitIdle();
}

Status App::Start() {
  if (sweeper_.joinable()) return {};
  if (park_timers_) ONCE_RETURN_IF_ERROR(park_timers_->Sweep());
  if (inbox_) {
    // One execution's error (an unreadable log) is reported, not a failed
    // boot: one bad row must not stop every restart.
    Result<SweepReport> swept = inbox_->Sweep();
    if (!swept) return std::unexpected(swept.error());
    ReportSweep(swept);
  }
  if (service_) service_->Start();
  if (inbox_ && config_.inbox_sweep_interval_ms > 0) {
    sweeper_stopping_ = false;
    sweeper_ = std::thread([this, ms = config_.inbox_sweep_interval_ms] { SweepInboxEvery(ms); });
  }
  return {};
}

void App::Stop() {
  {
    std::lock_guard lock(sweeper_mu_);
    sweeper_stopping_ = true;
  }
  sweeper_cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  if (service_) service_->Stop();
}

void App::SweepInboxEvery(int64_t interval_ms) {
  std::unique_lock lock(sweeper_mu_);
  while (!sweeper_cv_.wait_for(lock, std::chrono::milliseconds(interval_ms),
                               [this] { return sweeper_stopping_; })) {
    lock.unlock();
    ReportSweep(inbox_->Sweep());
    lock.lock();
  }
}

void App::ReportSweep(const Result<SweepReport>& swept) const {
  if (!config_.runtime.on_error) return;
  if (!swept) {
    config_.runtime.on_error(swept.error());
    return;
  }
  for (const Error& e : swept->errors) config_.runtime.on_error(e);
}

Result<std::unique_ptr<App>> App::Create(AppConfig config) {
  if (!config.store || !config.clock || !config.rng) {
    return MakeError(ErrorCode::kInvalidArgument, "AppConfig needs a store, a clock and an rng");
  }
  if (config.retention && config.retention->mode == lifecycle::RetentionMode::kArchive &&
      !config.archive) {
    return MakeError(ErrorCode::kInvalidArgument, "archive retention needs an archive store");
  }
  std::unique_ptr<App> app(new App(std::move(config)));
  AppConfig& c = app->config_;
  if (!c.inbox && c.backend) {
    ONCE_ASSIGN_OR_RETURN(app->owned_inbox_store_, OpenInboxStore(*c.backend, c.inbox_limits));
    c.inbox = app->owned_inbox_store_.get();
  }
  App* self = app.get();
  runtime::RuntimeOptions rt_options = c.runtime;
  self->user_on_park_ = std::move(rt_options.on_park);
  self->user_on_child_settled_ = std::move(rt_options.on_child_settled);
  rt_options.on_park = [self](const std::string& id, int64_t seq, const store::Envelope& park) {
    self->OnPark(id, seq, park);
  };
  rt_options.on_child_settled = [self](const events::Json& parent) {
    self->OnChildSettled(parent);
  };
  rt_options.on_error = [self](const Error& e) { self->OnRuntimeError(e); };
  self->runtime_ = std::make_unique<runtime::Runtime>(*c.store, *c.clock, std::move(rt_options));
  if (c.timers) {
    self->waker_ = std::make_unique<RuntimeWaker>(*self->runtime_);
    self->park_timers_ = std::make_unique<ParkTimers>(*c.store, *c.timers, c.runtime.on_error);
    self->service_ = std::make_unique<timers::TimerService>(*c.timers, *self->waker_, *c.clock,
                                                            *c.rng, c.timer_service);
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
    (void)supervisor_->HandOffContended(e.subject, d ? d->attempts : 0);  // reports its own error
    return;
  }
  if (config_.runtime.on_error) config_.runtime.on_error(e);
}

void App::OnChildSettled(const events::Json& parent) {
  for (ChildSupervisor* s : supervised_) s->OnChildSettled(parent);
  if (user_on_child_settled_) user_on_child_settled_(parent);
}

}  // namespace once::orchestration
