#include "once/orchestration/child_supervisor.h"

#include "log_read.h"

namespace once::orchestration {

using events::Json;
using events::KernelKind;
using internal::Member;
using runtime::ExecutionStatus;

namespace {

bool IsChildPark(const store::Envelope& park) {
  const Json& call = Member(park.payload, "call");
  return call == "await_child" || call == "await_children";
}

bool Shredded(const Error& e) { return e.code == ErrorCode::kPayloadShredded; }

}  // namespace

ChildSupervisor::ChildSupervisor(runtime::Runtime& runtime, const Clock& clock, Rng& rng,
                                 ChildSupervisorOptions options)
    : runtime_(runtime), clock_(clock), rng_(rng), options_(std::move(options)) {
  ONCE_CHECK(options_.conditional_resumes_max > 0);
  ONCE_CHECK(options_.acquisitions_max_without_fence_if > 0);
  if (options_.redrive) {
    ONCE_CHECK(options_.redrive->timers != nullptr && options_.redrive->service != nullptr);
    options_.redrive->service->AddRedriver(this);
  }
}

void ChildSupervisor::ReportError(const Error& e) const {
  if (options_.on_error) options_.on_error(e);
}

void ChildSupervisor::Count(int64_t ChildSupervisorStats::*field) {
  std::lock_guard lock(mu_);
  stats_.*field += 1;
}

ChildSupervisorStats ChildSupervisor::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void ChildSupervisor::Remember(std::string child_id, Edge edge) {
  std::lock_guard lock(mu_);
  edges_.insert_or_assign(std::move(child_id), std::move(edge));
}

std::optional<ChildSupervisor::Edge> ChildSupervisor::Recall(std::string_view child_id) const {
  std::lock_guard lock(mu_);
  auto it = edges_.find(child_id);
  if (it == edges_.end()) return std::nullopt;
  return it->second;
}

void ChildSupervisor::OnChildSettled(const Json& parent) {
  const Json& pid = Member(parent, "execution_id");
  const Json& key = Member(parent, "key");
  if (!pid.is_string() || !key.is_string()) {
    return ReportError(Error{ErrorCode::kInvalidArgument, "a child's parent is malformed", ""});
  }
  std::string parent_id = pid.get<std::string>();
  Remember(runtime::ChildExecutionId(parent_id, key.get<std::string>()),
           Edge{parent_id, key.get<std::string>()});
  (void)ResumeParent(parent_id);  // errors were reported
}

// The open park's sequence when it waits on children that are all
// terminal, else nullopt.
Result<std::optional<int64_t>> ChildSupervisor::SettledPark(std::string_view parent_id) {
  ONCE_ASSIGN_OR_RETURN(std::optional<runtime::Park> park, runtime_.LocatePark(parent_id));
  if (!park || !IsChildPark(park->envelope)) return std::optional<int64_t>();
  for (const Json& wait : Member(park->envelope.payload, "waits")) {
    if (Member(wait, "type") != "child" || !Member(wait, "key").is_string()) continue;
    std::string key = Member(wait, "key").get<std::string>();
    std::string child_id = runtime::ChildExecutionId(parent_id, key);
    Remember(child_id, Edge{std::string(parent_id), key});
    ONCE_ASSIGN_OR_RETURN(runtime::ExecutionState child, runtime_.Inspect(child_id));
    if (!runtime::ChildResult(child)) return std::optional<int64_t>();
  }
  return std::optional<int64_t>(park->sequence);
}

int ChildSupervisor::AttemptsMax() const {
  return runtime_.store().Supports(store::Capability::kAcquireFenceIf)
             ? options_.conditional_resumes_max
             : options_.acquisitions_max_without_fence_if;
}

// The rule of the header, as Runtime::AnswerPark runs it: an unfenced try,
// then conditional resumes within one budget of acquires.
Result<SuperviseVerdict> ChildSupervisor::TryResume(std::string_view parent_id) {
  ONCE_ASSIGN_OR_RETURN(std::optional<int64_t> park_seq, SettledPark(parent_id));
  if (!park_seq) return SuperviseVerdict::kNoop;
  ONCE_ASSIGN_OR_RETURN(runtime::ParkAnswered answered,
                        runtime_.AnswerPark(parent_id, {.park_seq = *park_seq,
                                                        .unfenced_first = true,
                                                        .attempts_max = AttemptsMax()}));
  {
    std::lock_guard lock(mu_);
    stats_.conditional_resumes += answered.conditional_resumes;
  }
  switch (answered.verdict) {
    case runtime::ParkVerdict::kResumed:
      return SuperviseVerdict::kResumed;
    case runtime::ParkVerdict::kNoop:
      return SuperviseVerdict::kNoop;
    case runtime::ParkVerdict::kContended:
      break;
  }
  return SuperviseVerdict::kContended;
}

Result<SuperviseVerdict> ChildSupervisor::ResumeParent(std::string_view parent_id) {
  Result<SuperviseVerdict> verdict = TryResume(parent_id);
  if (!verdict) {
    ReportError(verdict.error());
    return verdict;
  }
  switch (*verdict) {
    case SuperviseVerdict::kResumed:
      Count(&ChildSupervisorStats::resumed);
      return verdict;
    case SuperviseVerdict::kNoop:
      Count(&ChildSupervisorStats::noop);
      return verdict;
    case SuperviseVerdict::kContended:
      break;
  }
  Count(&ChildSupervisorStats::contended);
  ONCE_RETURN_IF_ERROR(HandOffContended(parent_id, AttemptsMax()));
  return verdict;
}

Status ChildSupervisor::HandOffContended(std::string_view parent_id, int attempts) {
  if (!options_.redrive) {
    ReportError(Error{ErrorCode::kResumeContended,
                      "parent resume contended; left to Recover() (redrive is off)",
                      std::string(parent_id), ResumeContendedDetail{attempts}});
    return Ok();
  }
  int64_t delay_ms;
  {
    std::lock_guard lock(mu_);
    delay_ms = options_.backoff.DelayMs(0, rng_);
  }
  timers::TimerRow row{std::string(parent_id), clock_.NowUnixMillis() + delay_ms,
                       timers::Redrive{0}};
  if (Status s = options_.redrive->timers->Schedule(row); !s) {
    ReportError(s.error());
    return s;
  }
  Count(&ChildSupervisorStats::redrive_rows_written);
  return Ok();
}

Result<timers::RedriveAnswer> ChildSupervisor::Redrive(const timers::TimerRow& row) {
  ONCE_ASSIGN_OR_RETURN(SuperviseVerdict v, TryResume(row.execution_id));
  switch (v) {
    case SuperviseVerdict::kResumed:
      Count(&ChildSupervisorStats::resumed);
      return timers::RedriveAnswer::kDone;
    case SuperviseVerdict::kNoop:
      return timers::RedriveAnswer::kNoop;
    case SuperviseVerdict::kContended:
      break;
  }
  Count(&ChildSupervisorStats::contended);
  return timers::RedriveAnswer::kContended;
}

Result<size_t> ChildSupervisor::Rebuild() {
  store::EventStore& s = runtime_.store();
  std::string after;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(store::ExecutionPage page,
                          s.ListExecutions(after, s.limits().list_page_executions_max));
    for (const std::string& id : page.execution_ids) {
      Result<std::vector<store::Envelope>> log = store::ReadLog(s, id);
      if (!log) {
        if (Shredded(log.error())) continue;
        return std::unexpected(log.error());
      }
      for (const store::Envelope& e : *log) {
        if (!e.Is(KernelKind::kChildStarted)) continue;
        const Json& key = Member(e.payload, "key");
        const Json& child = Member(e.payload, "child_id");
        if (!key.is_string()) continue;
        std::string child_id = child.is_string()
                                   ? child.get<std::string>()
                                   : runtime::ChildExecutionId(id, key.get<std::string>());
        Remember(std::move(child_id), Edge{id, key.get<std::string>()});
      }
    }
    if (page.next_after.empty()) break;
    after = page.next_after;
  }
  std::lock_guard lock(mu_);
  return edges_.size();
}

Result<bool> ChildSupervisor::ParkedOnChild(std::string_view child_id) {
  store::EventStore& s = runtime_.store();
  Result<std::vector<store::Envelope>> first = s.ReadRange(child_id, 1, 1);
  if (!first) {
    if (Shredded(first.error())) return false;
    return std::unexpected(first.error());
  }
  std::optional<Edge> edge;
  if (!first->empty()) {
    const Json& parent = Member(first->front().payload, "parent");
    const Json& pid = Member(parent, "execution_id");
    const Json& key = Member(parent, "key");
    if (pid.is_string() && key.is_string()) {
      edge = Edge{pid.get<std::string>(), key.get<std::string>()};
    }
  }
  if (!edge) edge = Recall(child_id);
  if (!edge) return false;
  Result<std::vector<store::Envelope>> log = store::ReadLog(s, edge->parent_id);
  if (!log) {
    if (Shredded(log.error())) return false;
    return std::unexpected(log.error());
  }
  ONCE_ASSIGN_OR_RETURN(runtime::ExecutionState parent, runtime::Fold(*log));
  if (runtime::IsTerminal(parent.status)) return false;
  const store::Envelope* park = runtime::FindOpenPark(*log);
  if (!park || !IsChildPark(*park)) return false;
  for (const Json& wait : Member(park->payload, "waits")) {
    if (Member(wait, "type") == "child" && Member(wait, "key") == edge->key) return true;
  }
  return false;
}

lifecycle::PinPredicate PinParkedChildren(ChildSupervisor& supervisor) {
  return [&supervisor](std::string_view id) { return supervisor.ParkedOnChild(id); };
}

}  // namespace once::orchestration
