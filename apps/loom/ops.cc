#include "ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "once/base/rng.h"
#include "once/events/kernel_payload.h"
#include "once/lifecycle/log_lifecycle.h"
#include "once/orchestration/child_supervisor.h"
#include "once/orchestration/inbox.h"
#include "once/runtime/log_view.h"
#include "once/runtime/runtime.h"
#include "once/store/validate.h"
#include "once/store_postgres/postgres_event_store.h"
#include "once/store_postgres/postgres_inbox_store.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/store_sqlite/sqlite_inbox_store.h"

namespace once::loom_app {

using events::Envelope;
using events::KernelKind;

Json EventJson(const Envelope& e) {
  return Json{{"sequence", e.sequence},  {"kind", std::string(e.kind.view())},
              {"time_ms", e.time_ms},    {"fence", e.fence()},
              {"kernel", e.is_kernel()}, {"payload", e.payload}};
}

int ExitCodeOf(const Error& e) {
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kLimitExceeded:
    case ErrorCode::kPermissionDenied:
      return 2;
    case ErrorCode::kNotFound:
      return 3;
    case ErrorCode::kResumeRefused:
    case ErrorCode::kResumeContended:
    case ErrorCode::kStaleFence:
    case ErrorCode::kSequenceConflict:
      return 4;
    case ErrorCode::kUnsupported:
      return 5;
    case ErrorCode::kUnavailable:
    case ErrorCode::kTimeout:
    case ErrorCode::kBusy:
      return 6;
    default:
      return 1;
  }
}

Ops::Ops(visibility::Target target) : target_(std::move(target)) {}
Ops::~Ops() = default;

Result<std::unique_ptr<Ops>> Ops::Open(const visibility::Target& target,
                                       visibility::VisibilityLimits limits) {
  std::unique_ptr<Ops> ops(new Ops(target));
  ONCE_ASSIGN_OR_RETURN(ops->view_, visibility::Visibility::Open(target, limits));
  return ops;
}

Result<store::EventStore*> Ops::Store() {
  std::lock_guard<std::mutex> lock(mu_);
  if (store_) return store_.get();
  if (!target_.sqlite_path.empty()) {
    ONCE_ASSIGN_OR_RETURN(auto s, store::SqliteEventStore::Open(target_.sqlite_path, {}));
    store_ = std::move(s);
  } else {
    store::PostgresOptions options;
    options.conninfo = target_.postgres_url;
    options.schema = target_.postgres_schema;
    options.connections_max = 4;
    ONCE_ASSIGN_OR_RETURN(auto s, store::PostgresEventStore::Open(options, clock_));
    store_ = std::move(s);
  }
  return store_.get();
}

Result<inbox::InboxStore*> Ops::Inbox() {
  std::lock_guard<std::mutex> lock(mu_);
  if (inbox_) return inbox_.get();
  if (!target_.sqlite_path.empty()) {
    ONCE_ASSIGN_OR_RETURN(auto s, store::SqliteInboxStore::Open(target_.sqlite_path, {}));
    inbox_ = std::move(s);
  } else {
    store::PostgresInboxOptions options;
    options.conninfo = target_.postgres_url;
    options.schema = target_.postgres_schema;
    options.connections_max = 2;
    ONCE_ASSIGN_OR_RETURN(auto s, store::PostgresInboxStore::Open(options));
    inbox_ = std::move(s);
  }
  return inbox_.get();
}

Result<std::vector<Envelope>> Ops::ReadLog(const std::string& id, size_t events_max,
                                           const ProgressFn& progress) {
  ONCE_ASSIGN_OR_RETURN(store::EventStore * store, Store());
  ONCE_ASSIGN_OR_RETURN(int64_t head, store->Head(id));
  std::vector<Envelope> log;
  for (int64_t next = 1; log.size() < events_max;) {
    ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> page, store->ReadRange(id, next));
    if (page.empty()) break;
    next = page.back().sequence + 1;
    for (auto& e : page) {
      if (log.size() == events_max) break;
      log.push_back(std::move(e));
    }
    if (progress) progress(next - 1, head);
  }
  return log;
}

Result<Json> Ops::Show(const std::string& id, size_t events_max) {
  // The store first: an id no execution could have (not UTF-8, a control,
  // too long) is kInvalidArgument, not "no execution with this id".
  ONCE_ASSIGN_OR_RETURN(store::EventStore * store, Store());
  ONCE_RETURN_IF_ERROR(store::ValidateExecutionId(id, store->limits()));
  ONCE_ASSIGN_OR_RETURN(visibility::ExecutionRow row, view_->Summary(id));
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, ReadLog(id, events_max));
  Json events = Json::array();
  Json children = Json::array();
  // A kernel event whose payload breaks its kind's shape (a row written by
  // hand or by an older build) is shown and named, and its members are not
  // read (json's value() throws on a member of another type).
  Json problems = Json::array();
  std::vector<int64_t> bent;  // their sequences, ascending
  auto has_shape = [&](const Envelope& e) {
    const std::optional<KernelKind> kind = e.kind.interned();
    if (!kind) return true;
    std::optional<std::string> problem = events::KernelPayloadProblem(*kind, e.payload);
    if (!problem) return true;
    problems.push_back(Json{{"sequence", e.sequence}, {"problem", *problem}});
    bent.push_back(e.sequence);
    return false;
  };
  for (const Envelope& e : log) {
    events.push_back(EventJson(e));
    if (!has_shape(e)) continue;
    if (e.Is(KernelKind::kChildStarted)) {
      Json child{{"key", e.payload.value("key", "")},
                 {"execution_id", e.payload.value("child_id", "")},
                 {"workflow", e.payload.value("workflow", "")}};
      auto state = view_->Summary(child["execution_id"].get<std::string>());
      child["status"] = state ? state->status : "unknown";
      children.push_back(std::move(child));
    }
  }
  Json park;
  const Envelope* open = runtime::FindOpenPark(log);
  if (open && std::binary_search(bent.begin(), bent.end(), open->sequence)) {
    open = nullptr;  // named in problems above
  }
  if (open) {
    park = Json{{"sequence", open->sequence},
                {"fence", open->fence()},
                {"time_ms", open->time_ms},
                {"call", open->payload.value("call", "")},
                {"waits", open->payload.value("waits", Json::array())}};
  }
  ONCE_ASSIGN_OR_RETURN(auto timers, view_->TimersOf(id));
  Json timer_rows = Json::array();
  for (const auto& t : timers) timer_rows.push_back(visibility::ToJson(t));
  ONCE_ASSIGN_OR_RETURN(auto pending, view_->Pending(id, 100));
  ONCE_ASSIGN_OR_RETURN(std::optional<visibility::Owner> owner, view_->OwnerOf(id));
  Json messages = Json::array();
  for (const auto& m : pending) messages.push_back(visibility::ToJson(m));
  return Json{
      {"execution", visibility::ToJson(row)},
      {"events", std::move(events)},
      {"events_truncated", static_cast<int64_t>(log.size()) < row.head},
      {"open_park", std::move(park)},
      {"timers", std::move(timer_rows)},
      {"pending_messages", std::move(messages)},
      {"children", std::move(children)},
      {"problems", std::move(problems)},
      // The node running its body (issue 15's loom_runs), if any.
      {"owner", owner ? Json{{"node_id", owner->node_id}, {"since_ms", owner->since_ms}} : Json()}};
}

Result<Json> Ops::Cancel(const std::string& id, const std::string& reason) {
  ONCE_ASSIGN_OR_RETURN(visibility::ExecutionRow row, view_->Summary(id));
  if (row.status != "running" && row.status != "suspended") {
    return MakeError(ErrorCode::kResumeRefused, "the execution is " + row.status, id,
                     ResumeRefusedDetail{"terminal"});
  }
  ONCE_ASSIGN_OR_RETURN(store::EventStore * store, Store());
  runtime::Runtime rt(*store, clock_, {.group_commit = false});
  ONCE_ASSIGN_OR_RETURN(int64_t token, store->AcquireFence(id));
  ONCE_ASSIGN_OR_RETURN(runtime::RunOutcome out, rt.Cancel(id, reason, {.fence = token}));
  return Json{{"execution_id", id},
              {"status", std::string(runtime::StatusName(out.status))},
              {"fence", token}};
}

Result<Json> Ops::Resume(const std::string& id) {
  ONCE_ASSIGN_OR_RETURN(visibility::ExecutionRow row, view_->Summary(id));
  ONCE_ASSIGN_OR_RETURN(store::EventStore * store, Store());
  runtime::Runtime rt(*store, clock_, {.group_commit = false});
  ONCE_ASSIGN_OR_RETURN(std::optional<runtime::Park> park, rt.LocatePark(id));
  if (!park) {
    return MakeError(ErrorCode::kResumeRefused, "the execution is " + row.status + ", not parked",
                     id, ResumeRefusedDetail{"not-suspended"});
  }
  // The answer the runtime gives a Resume without one (runtime.h,
  // RunOptions::answer): the park's timer wait, else nothing.
  Json wait;
  for (const Json& w : park->envelope.payload.value("waits", Json::array())) {
    if (w.is_object() && w.value("type", "") == "timer") wait = w;
  }
  ONCE_ASSIGN_OR_RETURN(
      store::ConditionalAcquire acquired,
      store->AcquireFenceIf(id, {.fence = park->envelope.fence(), .park_seq = park->sequence}));
  if (acquired.stale) {
    return MakeError(
        ErrorCode::kResumeContended,
        "the park was answered or fenced meanwhile (fence " + std::to_string(acquired.fence) + ")",
        id, ResumeContendedDetail{1});
  }
  ONCE_ASSIGN_OR_RETURN(int64_t head, store->Head(id));
  Json payload{{"park_seq", park->sequence}, {"wait", wait}, {"value", nullptr}, {"by", "loom"}};
  store::AppendRequest req{
      .execution_id = id,
      .expected_next = head + 1,
      .events = {events::KernelEvent(KernelKind::kExecutionResumed, payload, acquired.fence)},
      .fence = acquired.fence};
  ONCE_RETURN_IF_ERROR(store->Append(req));
  return Json{{"execution_id", id},
              {"status", "running"},
              {"park_seq", park->sequence},
              {"wait", wait},
              {"fence", acquired.fence}};
}

Result<Json> Ops::Send(const std::string& id, const std::string& topic, const Json& message) {
  ONCE_ASSIGN_OR_RETURN(visibility::ExecutionRow row, view_->Summary(id));
  if (row.status != "running" && row.status != "suspended") {
    return MakeError(ErrorCode::kResumeRefused,
                     "the execution is " + row.status + ": nothing would receive the message", id,
                     ResumeRefusedDetail{"terminal"});
  }
  ONCE_ASSIGN_OR_RETURN(inbox::InboxStore * inbox, Inbox());
  ONCE_ASSIGN_OR_RETURN(int64_t seq, inbox->Put(id, topic, message));
  return Json{{"execution_id", id}, {"topic", topic}, {"seq", seq}, {"delivery", "stored"}};
}

Result<Json> Ops::Fork(const std::string& id, int64_t from_step, std::string new_id,
                       const ProgressFn& progress) {
  if (from_step < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "--from-step must be >= 0");
  }
  ONCE_ASSIGN_OR_RETURN(visibility::ExecutionRow row, view_->Summary(id));
  ONCE_ASSIGN_OR_RETURN(store::EventStore * store, Store());
  if (!store->Supports(store::Capability::kCopyPrefix)) {
    return store::Unsupported(store::Capability::kCopyPrefix, "this store");
  }
  // Find the from_step-th step, reading the log page by page.
  int64_t through = 0, steps = 0;
  for (int64_t next = 1; through == 0;) {
    ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> page, store->ReadRange(id, next));
    if (page.empty()) break;
    for (const Envelope& e : page) {
      if (e.Is(KernelKind::kChildStarted)) {
        return MakeError(ErrorCode::kUnsupported,
                         "the first " + std::to_string(from_step) +
                             " steps include a child start (sequence " +
                             std::to_string(e.sequence) + "); fork copies steps only",
                         id);
      }
      bool step = e.Is(KernelKind::kStepCompleted) || e.Is(KernelKind::kStepFailed);
      if ((from_step == 0 && e.Is(KernelKind::kExecutionStarted)) ||
          (step && ++steps == from_step)) {
        through = e.sequence;
        break;
      }
    }
    next = page.back().sequence + 1;
    if (progress) progress(next - 1, row.head);
  }
  if (through == 0) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "the execution has " + std::to_string(steps) + " steps, not " + std::to_string(from_step),
        id);
  }
  if (new_id.empty()) {
    new_id = fmt::format("{}.fork{}.{}", id, from_step, clock_.NowUnixMillis());
  }
  ONCE_RETURN_IF_ERROR(store->CopyPrefix(id, new_id, through));
  if (progress) progress(row.head, row.head);
  return Json{{"execution_id", new_id},
              {"forked_from", id},
              {"from_step", from_step},
              {"events_copied", through},
              {"status", "running"}};
}

Result<Json> Ops::Retention(int64_t age_ms, bool dry_run, const ProgressFn& progress,
                            RetentionPace pace) {
  if (age_ms < 0) return MakeError(ErrorCode::kInvalidArgument, "--age must be >= 0");
  ONCE_ASSIGN_OR_RETURN(visibility::StatusCounts counts, view_->Counts());
  int64_t terminal = counts.completed + counts.failed + counts.cancelled + counts.continued;
  ONCE_ASSIGN_OR_RETURN(store::EventStore * store, Store());
  ONCE_ASSIGN_OR_RETURN(inbox::InboxStore * inbox, Inbox());
  // The pins App wires: the inbox's rows, and children their parent waits on.
  SystemRng rng;
  runtime::Runtime rt(*store, clock_, {.group_commit = false});
  orchestration::ChildSupervisor supervisor(rt, clock_, rng, {});
  ONCE_RETURN_IF_ERROR(supervisor.Rebuild());
  lifecycle::PinPredicate pins = lifecycle::AnyPin(orchestration::PinInboxRows(*inbox),
                                                   orchestration::PinParkedChildren(supervisor));
  std::atomic<int64_t> eligible{0}, pinned{0};
  lifecycle::PinPredicate counted = [&](std::string_view id) -> Result<bool> {
    int64_t n = ++eligible;
    if (progress) progress(n, terminal);
    ONCE_ASSIGN_OR_RETURN(bool pin, pins(id));
    if (pin) ++pinned;
    // A dry run pins everything: LogLifecycle then changes nothing.
    return pin || dry_run;
  };
  lifecycle::LogLifecycle lifecycle(*store, clock_,
                                    {.policy = {.age_ms_min = age_ms,
                                                .mode = lifecycle::RetentionMode::kDelete,
                                                .batch_executions = pace.batch_executions,
                                                .batch_pause_ms = pace.batch_pause_ms},
                                     .pinned = counted});
  ONCE_ASSIGN_OR_RETURN(lifecycle::RetentionReport report, lifecycle.ApplyRetention());
  return Json{{"dry_run", dry_run},
              {"age_ms", age_ms},
              {"examined", report.examined},
              {"eligible", report.eligible},
              {"pinned", pinned.load()},
              {"deleted", dry_run ? int64_t{0} : static_cast<int64_t>(report.deleted)},
              {"gone", report.gone},
              {"batches", report.batches},
              {"would_delete", dry_run ? eligible.load() - pinned.load() : int64_t{0}}};
}

}  // namespace once::loom_app
