#include "once/rack/sled_core.h"

#include <algorithm>

#include "once/rack/chain.h"
#include "once/rack/limits.h"

namespace once::rack {
namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};

std::string Truncated(std::string text, size_t max) {
  if (text.size() > max) text.resize(max);
  return text;
}

int Rank(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return 0;
    case JobState::kStarted:
      return 1;
    default:
      return 2;
  }
}

bool StrictlyAfter(const itc::Version& v, const itc::Version& frontier) {
  return itc::Leq(frontier, v) && !(v == frontier);
}

JobStatus ErrorStatus(ErrorCode code, std::string message) {
  JobStatus status;
  status.state = JobState::kError;
  status.error_code = code;
  status.error = std::move(message);
  status.refused = true;
  return status;
}

JobStatus SimpleStatus(JobState state) {
  JobStatus status;
  status.state = state;
  return status;
}

JobStatus StatusFromStop(const JobStopped& stopped) {
  JobStatus status;
  bool failed = stopped.outcome.kind == ExitOutcome::Kind::kFailed;
  status.state = failed ? JobState::kError : JobState::kStopped;
  status.outcome = stopped.outcome;
  status.stdout_summary = stopped.stdout_summary;
  status.stderr_summary = stopped.stderr_summary;
  if (failed) {
    bool known = stopped.outcome.code >= 0 &&
                 stopped.outcome.code <= static_cast<int32_t>(ErrorCode::kInternal);
    status.error_code = known ? static_cast<ErrorCode>(stopped.outcome.code) : ErrorCode::kInternal;
    status.error = stopped.outcome.error;
  }
  return status;
}

// A job's own checks, before any session state is consulted.
Status ValidateJob(const JobStart& job) {
  if (job.command.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty command");
  if (job.command.front() == '-') {
    return MakeError(ErrorCode::kInvalidArgument, "command starts with '-'");
  }
  if (job.command.find('\0') != std::string::npos) {
    return MakeError(ErrorCode::kInvalidArgument, "command contains a NUL byte");
  }
  ONCE_RETURN_IF_ERROR(Target::Parse(job.target));
  return Ok();
}

}  // namespace

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "Queued";
    case JobState::kStarted:
      return "Started";
    case JobState::kStopped:
      return "Stopped";
    case JobState::kCancelled:
      return "Cancelled";
    case JobState::kError:
      return "Error";
  }
  return "?";
}

SledCore::SledCore(SledConfig config, Rng& rng, BoundaryStore& boundary)
    : config_(std::move(config)), rng_(rng), boundary_(boundary) {}

std::vector<Output> SledCore::Handle(const Input& input) {
  out_.clear();
  std::visit(Overloaded{
                 [&](const Delivered& in) { OnDelivered(in); },
                 [&](const ClientSubmit& in) { OnSubmit(in); },
                 [&](const IssueSessionNonce&) { OnIssueNonce(); },
                 [&](const ProcessExited& in) { OnProcessExited(in); },
                 [&](const TimerTick& in) { OnTick(in); },
             },
             input);
  return std::move(out_);
}

std::optional<SessionId> SledCore::active_session() const {
  if (!active_) return std::nullopt;
  return active_->id;
}

const JobRecord* SledCore::FindJob(const JobId& id) const {
  auto it = history_.find(id);
  return it == history_.end() ? nullptr : &it->second;
}

const JobStatus* SledCore::StatusOf(const JobId& id, const std::string& baseboard) const {
  const JobRecord* record = FindJob(id);
  if (record == nullptr) return nullptr;
  auto it = record->statuses.find(baseboard);
  return it == record->statuses.end() ? nullptr : &it->second;
}

size_t SledCore::queued_jobs() const { return active_ ? active_->known.size() : 0; }

std::optional<JobId> SledCore::next_free_job_id() const {
  if (!active_) return std::nullopt;
  const Session& session = *active_;
  JobId tip = session.next;
  // Each step consumes a distinct known job or skip: the walk is bounded.
  for (size_t step = 0; step <= session.known.size() + session.skips.size(); ++step) {
    if (session.skips.contains(tip)) {
      tip = NextJobIdAfterBurned(tip);
    } else if (auto it = session.known.find(tip); it != session.known.end()) {
      tip = NextJobId(it->second.digest);
    } else {
      break;
    }
  }
  return tip;
}

Status SledCore::CheckSkip(const SessionSkip& skip) const {
  if (!active_ || active_->id != skip.session_id) {
    return MakeError(ErrorCode::kNotFound, "session not active", skip.session_id.ToString());
  }
  const Session& session = *active_;
  const std::string id = skip.job_id.ToString();
  if (session.passed.contains(skip.job_id)) {
    return MakeError(ErrorCode::kInvalidArgument, "chain position already passed: nothing to skip",
                     id);
  }
  if (session.skips.contains(skip.job_id)) {
    return MakeError(ErrorCode::kInvalidArgument, "chain position already skipped", id);
  }
  auto known = session.known.find(skip.job_id);
  const bool stopped = session.stops.contains(skip.job_id) ||
                       (known != session.known.end() && known->second.stopped);
  if (!stopped) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "chain position not cancelled: only a cancelled job can be skipped "
                     "(sush job stop it first)",
                     id);
  }
  return Ok();
}

// ---- inputs ----

void SledCore::OnDelivered(const Delivered& input) {
  auto message = Decode(input.payload);
  if (!message) {
    Emit(Diagnostic{message.error()});
    return;
  }
  if (const auto* request = std::get_if<SignedRequest>(&*message)) {
    OnRequest(input.version, *request, input.payload);
  } else {
    OnEvent(*message);
  }
}

void SledCore::OnSubmit(const ClientSubmit& input) {
  Reply reply;
  auto message = Decode(input.request);
  const SignedRequest* request = message ? std::get_if<SignedRequest>(&*message) : nullptr;
  if (!message) {
    reply.status = std::unexpected(message.error());
  } else if (request == nullptr) {
    reply.status = MakeError(ErrorCode::kInvalidArgument, "not a signed request");
  } else if (auto payload = Verify(*request, config_.trusted); !payload) {
    reply.status = std::unexpected(payload.error());
  } else {
    reply.status = CheckSubmitted(*payload, reply.session_id);
  }
  if (reply.status) Emit(Broadcast{input.request});
  Emit(std::move(reply));
}

// What the accepting sled checks beyond the signature.
Status SledCore::CheckSubmitted(const RequestPayload& payload,
                                std::optional<SessionId>& session_id) {
  if (const auto* start = std::get_if<SessionStart>(&payload)) {
    if (start->baseboard != config_.identity.baseboard) {
      return MakeError(ErrorCode::kInvalidArgument, "session start names another sled",
                       start->baseboard);
    }
    auto nonce = nonces_.find(start->server_nonce);
    if (nonce == nonces_.end() || nonce->second <= now_) {
      return MakeError(ErrorCode::kPermissionDenied, "server nonce unknown, used or expired",
                       start->server_nonce.ToString());
    }
    nonces_.erase(nonce);
    session_id = DeriveSessionId(start->baseboard, start->server_nonce, start->signer_nonce);
    return Ok();
  }
  if (const auto* skip = std::get_if<SessionSkip>(&payload)) return CheckSkip(*skip);
  if (const auto* job = std::get_if<JobStart>(&payload)) {
    ONCE_RETURN_IF_ERROR(ValidateJob(*job));
    if (!active_ || active_->id != job->session_id) {
      return MakeError(ErrorCode::kNotFound, "session not active", job->session_id.ToString());
    }
    // Another signed job already holds this chain position here: on delivery
    // it would be dropped, so the submitter learns now and re-signs at the
    // chain's next id.
    if (active_->known.contains(job->job_id)) {
      return MakeError(ErrorCode::kInvalidArgument, "chain position already taken",
                       job->job_id.ToString());
    }
    if (active_->passed.contains(job->job_id)) {
      return MakeError(ErrorCode::kInvalidArgument, "chain position already passed",
                       job->job_id.ToString());
    }
    const size_t queued = active_->known.size();
    if (queued >= config_.limits.queued_jobs_per_session_max) {
      return LimitError("queued_jobs_per_session_max", static_cast<int64_t>(queued + 1),
                        static_cast<int64_t>(config_.limits.queued_jobs_per_session_max),
                        job->job_id.ToString());
    }
  }
  return Ok();
}

void SledCore::OnIssueNonce() {
  Reply reply;
  if (nonces_.size() >= config_.limits.session_nonces_max) {
    reply.status = LimitError("session_nonces_max", static_cast<int64_t>(nonces_.size() + 1),
                              static_cast<int64_t>(config_.limits.session_nonces_max));
  } else {
    Nonce nonce;
    rng_.Fill(nonce.bytes.data(), nonce.bytes.size());
    nonces_[nonce] = now_ + config_.limits.session_nonce_ttl;
    reply.nonce = nonce;
  }
  Emit(std::move(reply));
}

void SledCore::OnProcessExited(const ProcessExited& input) {
  auto it = running_.find(input.job_id);
  if (it == running_.end()) {
    Emit(Diagnostic{
        MakeError(ErrorCode::kNotFound, "exit of a job not running", input.job_id.ToString())
            .error()});
    return;
  }
  running_.erase(it);
  JobStopped stopped{config_.identity.baseboard, input.job_id, input.report.outcome,
                     input.report.stdout_summary, input.report.stderr_summary};
  stopped.outcome.error = Truncated(stopped.outcome.error, kErrorTextBytesMax);
  Report(input.job_id, StatusFromStop(stopped), stopped);
  Advance();
}

void SledCore::OnTick(const TimerTick& input) {
  now_ = input.now;
  std::erase_if(nonces_, [&](const auto& entry) { return entry.second <= now_; });
  if (!announced_) {
    announced_ = true;
    Send(VersionAnnouncement{config_.identity.baseboard,
                             config_.identity.cubby.value_or(kCubbyUnknown),
                             Truncated(config_.build_version, kBuildVersionBytesMax)});
  }
}

// ---- requests ----

void SledCore::OnRequest(const itc::Version& version, const SignedRequest& request,
                         const Bytes& raw) {
  auto payload = Verify(request, config_.trusted);
  if (!payload) {
    if (const JobStart* job = AsJobStart(request); job != nullptr) {
      RefuseJob(version, request, payload.error(), /*verified=*/false);
    } else {
      Emit(Diagnostic{payload.error()});
    }
    return;
  }
  std::visit(Overloaded{
                 [&](const SessionStart& p) { OnSessionStart(version, p); },
                 [&](const SessionStop& p) { OnSessionStop(p); },
                 [&](const SessionSkip& p) { OnSessionSkip(p); },
                 [&](const JobStart&) { OnJobStart(version, request, raw); },
                 [&](const JobStop& p) { OnJobStop(p); },
             },
             *payload);
}

void SledCore::OnSessionStart(const itc::Version& version, const SessionStart& start) {
  SessionId id = DeriveSessionId(start.baseboard, start.server_nonce, start.signer_nonce);
  if (active_ && active_->id == id) return;  // duplicate
  if (StrictlyAfter(version, frontier_)) {
    if (active_) EndSession(SessionEnd::kSuperseded);
    frontier_ = version;
    Activate(id, version);
    return;
  }
  frontier_ = itc::Join(frontier_, version);
  if (active_ && itc::Concurrent(version, active_->start_version)) {
    SessionId first = active_->id;
    EndSession(SessionEnd::kAnnihilated);
    Send(SledError{config_.identity.baseboard, SledErrorKind::kConcurrentSessions, first, id,
                   "concurrent sessions annihilated; start a new session"});
  }
  // Otherwise stale: absorbed into the frontier.
}

void SledCore::OnSessionStop(const SessionStop& stop) {
  // The frontier joins session starts only: a start that saw this session
  // but not its stop must still supersede it, whichever arrives first.
  if (!active_ || active_->id != stop.session_id) return;
  EndSession(SessionEnd::kStopped);
}

void SledCore::OnSessionSkip(const SessionSkip& skip) {
  if (auto allowed = CheckSkip(skip); !allowed) {
    Emit(Diagnostic{allowed.error()});
    return;
  }
  if (active_->skips.size() >= config_.limits.queued_jobs_per_session_max) {
    Emit(Diagnostic{LimitError("queued_jobs_per_session_max",
                               static_cast<int64_t>(active_->skips.size() + 1),
                               static_cast<int64_t>(config_.limits.queued_jobs_per_session_max))
                        .error()});
    return;
  }
  active_->skips.insert(skip.job_id);
  Advance();
}

void SledCore::OnJobStart(const itc::Version& version, const SignedRequest& request,
                          const Bytes& raw) {
  const JobStart& job = *AsJobStart(request);
  if (auto valid = ValidateJob(job); !valid)
    return RefuseJob(version, request, valid.error(), true);
  if (!active_ || active_->id != job.session_id) {
    return RefuseJob(version, request,
                     MakeError(ErrorCode::kNotFound, "session not active").error(), true);
  }
  Session& session = *active_;
  if (session.known.contains(job.job_id) || session.passed.contains(job.job_id)) {
    Emit(Diagnostic{MakeError(ErrorCode::kInvalidArgument, "chain position already taken",
                              job.job_id.ToString())
                        .error()});
    return;
  }
  size_t queue_max = config_.limits.queued_jobs_per_session_max;
  if (session.known.size() >= queue_max) {
    return RefuseJob(
        version, request,
        LimitError("queued_jobs_per_session_max", static_cast<int64_t>(session.known.size() + 1),
                   static_cast<int64_t>(queue_max))
            .error(),
        true);
  }
  if (auto room = Remember(version, request, true); !room) {
    return RefuseJob(version, request, room.error(), true);
  }
  PendingJob pending{job, ToBeSignedDigest(request), raw, Targets(job), false, false};
  if (pending.targeted) SetStatus(job.job_id, config_.identity.baseboard, {});
  auto [it, inserted] = session.known.emplace(job.job_id, std::move(pending));
  if (session.stops.erase(job.job_id) > 0) {
    it->second.stopped = true;
    if (it->second.targeted) Cancel(it->second);
  }
  Advance();
}

void SledCore::OnJobStop(const JobStop& stop) {
  if (auto it = running_.find(stop.job_id); it != running_.end()) {
    if (!it->second.stop_requested) {
      it->second.stop_requested = true;
      Emit(StopProcess{stop.job_id});
    }
    return;
  }
  if (!active_) return;
  if (auto it = active_->known.find(stop.job_id); it != active_->known.end()) {
    it->second.stopped = true;
    if (it->second.targeted && !it->second.cancelled) Cancel(it->second);
    return;
  }
  if (active_->passed.contains(stop.job_id)) return;
  if (active_->stops.size() >= config_.limits.queued_jobs_per_session_max) {
    Emit(Diagnostic{LimitError("queued_jobs_per_session_max",
                               static_cast<int64_t>(active_->stops.size() + 1),
                               static_cast<int64_t>(config_.limits.queued_jobs_per_session_max))
                        .error()});
    return;
  }
  active_->stops.insert(stop.job_id);  // the job is behind a hole: cancel it on arrival
}

// ---- events ----

void SledCore::OnEvent(const Message& event) {
  std::visit(
      Overloaded{
          [&](const SignedRequest&) {},
          [&](const JobStarted& e) {
            Learn(e.job_id, e.baseboard, SimpleStatus(JobState::kStarted));
          },
          [&](const JobStopped& e) { Learn(e.job_id, e.baseboard, StatusFromStop(e)); },
          [&](const JobCancelled& e) {
            Learn(e.job_id, e.baseboard, SimpleStatus(JobState::kCancelled));
          },
          [&](const JobError& e) { Learn(e.job_id, e.baseboard, ErrorStatus(e.code, e.message)); },
          [&](const SledError& e) { Emit(SledErrorSeen{e}); },
          [&](const VersionAnnouncement& e) {
            if (sleds_.contains(e.baseboard) || sleds_.size() < config_.limits.known_sleds_max) {
              sleds_[e.baseboard] = e;
            }
          },
      },
      event);
}

// A status learned from gossip. This sled's own statuses are set where they
// happen (Report); gossip about this baseboard only fills a gap (e.g. events
// of a previous life), so a late echo never overrides newer local knowledge.
void SledCore::Learn(const JobId& id, const std::string& baseboard, const JobStatus& status) {
  if (baseboard == config_.identity.baseboard && StatusOf(id, baseboard) != nullptr) return;
  SetStatus(id, baseboard, status);
}

// ---- sessions and the chain ----

void SledCore::Activate(const SessionId& id, const itc::Version& version) {
  active_.emplace();
  active_->id = id;
  active_->start_version = version;
  active_->next = FirstJobId(id);
  Emit(SessionChanged{id, SessionEnd::kNone});
}

void SledCore::EndSession(SessionEnd why) {
  for (auto& [id, pending] : active_->known) {
    if (pending.targeted && !pending.cancelled) Cancel(pending);
  }
  active_.reset();
  Emit(SessionChanged{std::nullopt, why});
}

// Walks the chain as far as the known jobs allow, starting targeted ones.
void SledCore::Advance() {
  while (active_) {
    Session& session = *active_;
    const JobId id = session.next;
    if (session.skips.erase(id) > 0) {
      if (auto it = session.known.find(id); it != session.known.end()) {
        if (it->second.targeted && !it->second.cancelled) Cancel(it->second);
        session.known.erase(it);
      }
      Pass(id, NextJobIdAfterBurned(id));
      continue;
    }
    auto it = session.known.find(id);
    if (it == session.known.end()) return;  // a hole: wait for the predecessor
    PendingJob& pending = it->second;
    if (pending.targeted && !pending.cancelled) {
      if (!pending.job.concurrent && !running_.empty()) return;
      if (running_.size() >= config_.limits.running_jobs_max) return;
      Execute(pending);
    }
    JobId next = NextJobId(pending.digest);
    session.known.erase(it);
    Pass(id, next);
  }
}

void SledCore::Pass(const JobId& id, const JobId& next) {
  Session& session = *active_;
  session.passed.insert(id);
  session.passed_order.push_back(id);
  if (session.passed_order.size() > config_.limits.history_entries_max) {
    session.passed.erase(session.passed_order.front());
    session.passed_order.pop_front();
  }
  session.next = next;
}

// THE EXECUTION GATE. Every process start passes here, and only here: the job
// is the active session's next chain link, targets this sled, has not started
// in this life, and the boundary is recorded before the process may start.
void SledCore::Execute(const PendingJob& pending) {
  const JobId& id = pending.job.job_id;
  ONCE_CHECK(active_ && id == active_->next && pending.job.session_id == active_->id);
  ONCE_CHECK(pending.targeted && !pending.cancelled && !running_.contains(id));
  if (executed_.contains(id)) {
    return Report(
        id, ErrorStatus(ErrorCode::kPermissionDenied, "already executed"),
        JobError{config_.identity.baseboard, id, ErrorCode::kPermissionDenied, "already executed"});
  }
  BoundaryRecord record{active_->id, active_->start_version, id, NextJobId(pending.digest)};
  if (auto recorded = boundary_.Record(record); !recorded) {
    std::string why =
        Truncated("boundary not recorded: " + recorded.error().message, kErrorTextBytesMax);
    return Report(id, ErrorStatus(recorded.error().code, why),
                  JobError{config_.identity.baseboard, id, recorded.error().code, why});
  }
  executed_.insert(id);
  executed_order_.push_back(id);
  if (executed_order_.size() > config_.limits.history_entries_max) {
    executed_.erase(executed_order_.front());
    executed_order_.pop_front();
  }
  running_[id] = Running{};
  ++executions_;
  // Started is gossiped before the process is asked for, so that a start the
  // executor then fails is followed, not preceded, by its Error.
  Report(id, SimpleStatus(JobState::kStarted), JobStarted{config_.identity.baseboard, id});
  Emit(StartProcess{id, pending.job.session_id, pending.job.command, pending.request});
}

// ---- statuses and history ----

void SledCore::RefuseJob(const itc::Version& version, const SignedRequest& request,
                         const Error& error, bool verified) {
  const JobStart& job = *AsJobStart(request);
  auto target = Target::Parse(job.target);
  const JobStatus* mine = StatusOf(job.job_id, config_.identity.baseboard);
  if ((target && !target->Matches(config_.identity)) || mine != nullptr) {
    // Not ours, or this id already has a status here (a genuine job, or an
    // earlier refusal): a forgery reusing its id must not change it.
    Emit(Diagnostic{error});
    return;
  }
  (void)Remember(version, request, verified);  // a full history only costs the local record
  std::string message = Truncated(error.message, kErrorTextBytesMax);
  Report(job.job_id, ErrorStatus(error.code, message),
         JobError{config_.identity.baseboard, job.job_id, error.code, message});
}

void SledCore::Cancel(PendingJob& pending) {
  pending.cancelled = true;
  Report(pending.job.job_id, SimpleStatus(JobState::kCancelled),
         JobCancelled{config_.identity.baseboard, pending.job.job_id});
}

// This sled's own status: recorded now, and gossiped.
void SledCore::Report(const JobId& id, const JobStatus& status, Message event) {
  SetStatus(id, config_.identity.baseboard, status);
  Send(event);
}

void SledCore::SetStatus(const JobId& id, const std::string& baseboard, const JobStatus& status) {
  auto record = history_.find(id);
  if (record == history_.end()) return;
  auto& statuses = record->second.statuses;
  auto it = statuses.find(baseboard);
  if (it != statuses.end() && Rank(status.state) <= Rank(it->second.state) &&
      !(it->second.refused && status.state != JobState::kError)) {
    return;
  }
  if (it == statuses.end() && statuses.size() >= config_.limits.known_sleds_max) return;
  statuses[baseboard] = status;
  Emit(JobStatusChanged{id, baseboard, status});
}

Status SledCore::Remember(const itc::Version& version, const SignedRequest& request,
                          bool verified) {
  const JobStart& job = *AsJobStart(request);
  if (auto it = history_.find(job.job_id); it != history_.end()) {
    if (verified && !it->second.verified) {  // the genuine job replaces a forgery's record
      it->second.job = job;
      it->second.key_id = request.key_id;
      it->second.version = version;
      it->second.verified = true;
    }
    return Ok();
  }
  ONCE_RETURN_IF_ERROR(MakeRoomInHistory());
  history_.emplace(job.job_id, JobRecord{job, request.key_id, version, verified, {}});
  return Ok();
}

// Evicts the causally oldest finished entry (TotalOrder extends causality).
Status SledCore::MakeRoomInHistory() {
  if (history_.size() < config_.limits.history_entries_max) return Ok();
  auto victim = history_.end();
  for (auto it = history_.begin(); it != history_.end(); ++it) {
    if (!Evictable(it->first, it->second)) continue;
    if (victim == history_.end() ||
        itc::TotalOrder(it->second.version, victim->second.version) < 0) {
      victim = it;
    }
  }
  if (victim == history_.end()) {
    return LimitError("history_entries_max", static_cast<int64_t>(history_.size() + 1),
                      static_cast<int64_t>(config_.limits.history_entries_max));
  }
  history_.erase(victim);
  return Ok();
}

bool SledCore::Evictable(const JobId& id, const JobRecord& record) const {
  if (running_.contains(id)) return false;
  if (active_ && active_->known.contains(id)) return false;
  return std::all_of(record.statuses.begin(), record.statuses.end(),
                     [](const auto& entry) { return entry.second.terminal(); });
}

bool SledCore::Targets(const JobStart& job) const {
  auto target = Target::Parse(job.target);
  return target && target->Matches(config_.identity);
}

void SledCore::Send(const Message& message) {
  auto bytes = Encode(message);
  if (!bytes) {
    Emit(Diagnostic{bytes.error()});
    return;
  }
  Emit(Broadcast{std::move(*bytes)});
}

}  // namespace once::rack
