#include "once/rack/sled_core.h"

#include <algorithm>
#include <tuple>

#include "once/base/overloaded.h"
#include "once/rack/chain.h"
#include "once/rack/limits.h"

namespace once::rack {
namespace {

std::string Truncated(std::string text, size_t max) {
  if (text.size() > max) text.resize(max);
  return text;
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

// A genuine job that this sled will not run (the gate could not record it).
JobStatus FailedStatus(ErrorCode code, std::string message) {
  JobStatus status = ErrorStatus(code, std::move(message));
  status.refused = false;
  return status;
}

JobStatus SimpleStatus(JobState state) {
  JobStatus status;
  status.state = state;
  return status;
}

JobStatus SkippedStatus(SkipReason reason, std::string detail) {
  JobStatus status;
  status.state = JobState::kSkipped;
  status.skip_reason = reason;
  status.detail = std::move(detail);
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

// The merge strength of a status (see sled_core.h): what a later life cannot
// know (that an earlier one ran the job) outranks what this life decided.
int Strength(const JobStatus& s) {
  switch (s.state) {
    case JobState::kError:  // refused (a forgery may come first), never started, or ended
      return s.refused ? 0 : s.outcome.kind == ExitOutcome::Kind::kFailed ? 5 : 3;
    case JobState::kQueued:
      return 1;
    case JobState::kStarted:
      return 2;
    case JobState::kCancelled:
    case JobState::kSkipped:
      return 3;
    case JobState::kInterrupted:
      return 4;
    case JobState::kStopped:
      return 5;
  }
  return 0;
}

auto TieKey(const JobStatus& s) {
  return std::tie(s.state, s.skip_reason, s.detail, s.outcome.kind, s.outcome.code, s.outcome.error,
                  s.stdout_summary.bytes, s.stdout_summary.hash, s.stderr_summary.bytes,
                  s.stderr_summary.hash, s.error_code, s.error);
}

constexpr std::string_view kLightconeDetail =
    "queued before this sled's lightcone marker (it moved between partitions, or its record "
    "is new): only jobs submitted after it arrived run here";

// The status says a process of this job ran and ended here (Stopped,
// Interrupted, or an Error after its start). Skipped and Cancelled are a
// life's judgement that it did not run, which an earlier life's start
// overrules.
bool RunEnded(const JobStatus& s) {
  return Strength(s) >= Strength(SimpleStatus(JobState::kInterrupted));
}

}  // namespace

bool Stronger(const JobStatus& a, const JobStatus& b) {
  const int sa = Strength(a), sb = Strength(b);
  if (sa != sb) return sa > sb;
  return TieKey(a) > TieKey(b);
}

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
    case JobState::kSkipped:
      return "Skipped";
    case JobState::kInterrupted:
      return "Interrupted";
  }
  return "?";
}

std::string_view GateStateName(GateState state) {
  switch (state) {
    case GateState::kNotJoined:
      return "not joined";
    case GateState::kReplaying:
      return "replaying";
    case GateState::kMintingMarker:
      return "minting marker";
    case GateState::kOpen:
      return "open";
    case GateState::kUntrusted:
      return "untrusted";
  }
  return "?";
}

SledCore::SledCore(SledConfig config, Rng& rng, BoundaryStore& boundary)
    : config_(std::move(config)), rng_(rng), store_(boundary) {
  const BoundaryLoad& load = store_.loaded();
  if (load.record) {
    SetRecord(*load.record);
  } else {
    trusted_ = false;
    untrusted_reason_ =
        load.untrusted_reason.empty() ? "the drives cannot be trusted" : load.untrusted_reason;
    reset_nonce_ = FreshNonce();
  }
}

std::vector<Output> SledCore::Handle(const Input& input) {
  out_.clear();
  // The rejected design writes the record only after the process started:
  // a crash before the next input loses it.
  if (deferred_write_) WriteDeferredRecord();
  std::visit(Overloaded{
                 [&](const Delivered& in) { OnDelivered(in); },
                 [&](const ClientSubmit& in) { OnSubmit(in); },
                 [&](const IssueSessionNonce&) { OnIssueNonce(); },
                 [&](const ProcessExited& in) { OnProcessExited(in); },
                 [&](const TimerTick& in) { OnTick(in); },
                 [&](const Joined& in) { OnJoined(in); },
                 [&](const ReplayDrained& in) { OnReplayDrained(in); },
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

const JobStatus* SledCore::OwnStatus(const JobId& id) const {
  return StatusOf(id, config_.identity.baseboard);
}

std::vector<JobId> SledCore::History(size_t offset, size_t limit) const {
  std::vector<JobId> out;
  for (auto it = history_order_.rbegin(); it != history_order_.rend() && out.size() < limit; ++it) {
    if (!history_.contains(*it)) continue;
    if (offset > 0) {
      --offset;
      continue;
    }
    out.push_back(*it);
  }
  return out;
}

size_t SledCore::queued_jobs() const { return active_ ? Chained().size() : 0; }

size_t SledCore::unchained_jobs() const {
  if (!active_) return 0;
  const std::set<JobId> chained = Chained();
  size_t n = 0;
  for (const auto& [id, pending] : active_->known) n += !pending.aged && !chained.contains(id);
  return n;
}

// The walk of next_free_job_id (and of the replay of an earlier life's
// positions), collecting the known jobs it passes.
std::set<JobId> SledCore::Chained() const {
  std::set<JobId> out;
  if (!active_) return out;
  const Session& session = *active_;
  std::vector<JobId> starts{session.next};
  if (session.replay) starts.push_back(session.replay->at);
  for (JobId tip : starts) {
    for (size_t step = 0; step <= session.known.size() + session.skips.size(); ++step) {
      if (session.skips.contains(tip)) {
        tip = NextJobIdAfterBurned(tip);
      } else if (auto it = session.known.find(tip); it != session.known.end()) {
        out.insert(tip);
        tip = NextJobId(it->second.digest);
      } else {
        break;
      }
    }
  }
  return out;
}

// A job at the chain's free tip joins the queue (queued_jobs_per_session_max);
// any other position is unchained (unchained_jobs_per_session_max).
Status SledCore::RoomFor(const JobId& id) const {
  const std::set<JobId> chained = Chained();
  if (id == next_free_job_id()) {
    if (chained.size() >= config_.limits.queued_jobs_per_session_max) {
      return LimitError("queued_jobs_per_session_max", static_cast<int64_t>(chained.size() + 1),
                        static_cast<int64_t>(config_.limits.queued_jobs_per_session_max),
                        id.ToString());
    }
    return Ok();
  }
  size_t unchained = 0;
  for (const auto& [known, pending] : active_->known) {
    unchained += !pending.aged && !chained.contains(known);
  }
  if (unchained >= config_.limits.unchained_jobs_per_session_max) {
    return LimitError("unchained_jobs_per_session_max", static_cast<int64_t>(unchained + 1),
                      static_cast<int64_t>(config_.limits.unchained_jobs_per_session_max),
                      id.ToString() + " (no job this sled holds leads to its chain position)");
  }
  return Ok();
}

// An unchained job older than unchained_job_age_max gets its terminal Error
// here (it no longer counts, never runs here, and keeps only what passing
// its position needs); past unchained_jobs_per_session_max aged ones, the
// oldest are forgotten (their positions become plain holes).
void SledCore::AgeUnchained() {
  if (!active_ || active_->known.empty()) return;
  Session& session = *active_;
  const std::set<JobId> chained = Chained();
  std::vector<std::pair<TimePoint, JobId>> aged;
  for (auto& [id, pending] : session.known) {
    if (chained.contains(id)) continue;
    if (!pending.aged && now_ - pending.known_at > config_.limits.unchained_job_age_max) {
      pending.aged = true;
      pending.request.clear();
      pending.request.shrink_to_fit();
      if (pending.targeted && !pending.cancelled) {
        pending.cancelled = true;
        const std::string why = Truncated(
            "unreachable chain position: no job this sled holds led to it within " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                   config_.limits.unchained_job_age_max)
                                   .count()) +
                " s (a predecessor lost on the way, or a position no chain reaches); it never "
                "runs here",
            kErrorTextBytesMax);
        Report(id, FailedStatus(ErrorCode::kTimeout, why),
               JobError{config_.identity.baseboard, id, ErrorCode::kTimeout, why});
      }
    }
    if (pending.aged) aged.emplace_back(pending.known_at, id);
  }
  if (aged.size() <= config_.limits.unchained_jobs_per_session_max) return;
  std::sort(aged.begin(), aged.end());
  for (size_t i = 0; i + config_.limits.unchained_jobs_per_session_max < aged.size(); ++i) {
    session.known.erase(aged[i].second);
  }
}

std::vector<JobId> SledCore::running() const {
  std::vector<JobId> out;
  for (const auto& [id, r] : running_) out.push_back(id);
  return out;
}

std::optional<Nonce> SledCore::reset_nonce() const {
  if (trusted_) return std::nullopt;
  return reset_nonce_;
}

GateState SledCore::gate() const {
  if (!trusted_) return GateState::kUntrusted;
  if (!network_) return GateState::kNotJoined;
  if (!drained_) return GateState::kReplaying;
  if (pending_marker_) return GateState::kMintingMarker;
  return GateState::kOpen;
}

std::optional<SessionVerdict> SledCore::active_verdict() const {
  if (!active_ || !network_ || !trusted_) return std::nullopt;
  return ActiveVerdict();
}

// Rules 2-4 for the active session (with the simulator's rehop-past control).
SessionVerdict SledCore::ActiveVerdict() const {
  SessionVerdict verdict = JudgeSession(record_, *network_, active_->id, active_->start_version);
  if (verdict == SessionVerdict::kPastForgotten && config_.boundary.flaws.rehop_past) {
    const UniverseBoundary* b = BoundaryFor(record_, *network_);
    verdict = b && !b->markers.empty() ? SessionVerdict::kGated : SessionVerdict::kNeedsHop;
  }
  return verdict;
}

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

bool SledCore::waiting_at_hole() const {
  if (!active_) return false;
  const Session& session = *active_;
  const bool replay_hole = session.replay && !session.known.contains(session.replay->at) &&
                           !session.skips.contains(session.replay->at);
  return replay_hole || (!session.known.contains(session.next) &&
                         !session.skips.contains(session.next) && !session.known.empty());
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
    OnEvent(input.version, *message);
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
  } else if (!drained_) {
    // A request signed against a view that has not heard from any peer since
    // this sled (re)joined would be concurrent with what the rack knows, and
    // the other sleds' markers would skip it: the client asks another sled.
    reply.status = MakeError(ErrorCode::kUnavailable,
                             "this sled is replaying gossip after joining its universe; try "
                             "again in a moment or submit through another sled");
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
    ONCE_RETURN_IF_ERROR(UseNonce(*start));
    session_id = DeriveSessionId(start->baseboard, start->server_nonce, start->signer_nonce);
    return Ok();
  }
  if (const auto* stop = std::get_if<SessionStop>(&payload)) {
    if (!active_ || active_->id != stop->session_id) {
      return MakeError(ErrorCode::kNotFound,
                       "session not active: nothing to stop (active: " +
                           (active_ ? active_->id.ToString() : std::string("none")) + ")",
                       stop->session_id.ToString());
    }
    return Ok();
  }
  if (const auto* skip = std::get_if<SessionSkip>(&payload)) return CheckSkip(*skip);
  if (const auto* reset = std::get_if<SledReset>(&payload)) return CheckReset(*reset);
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
    ONCE_RETURN_IF_ERROR(RoomFor(job->job_id));
  }
  return Ok();
}

Status SledCore::CheckReset(const SledReset& reset) const {
  if (reset.baseboard != config_.identity.baseboard) {
    return MakeError(ErrorCode::kInvalidArgument, "sled reset names another sled", reset.baseboard);
  }
  if (trusted_) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the boundary record is trusted: nothing to reset");
  }
  if (reset.reset_nonce != reset_nonce_) {
    return MakeError(ErrorCode::kPermissionDenied,
                     "reset nonce is not this sled's current one (read GET /v1/boundary)",
                     reset.reset_nonce.ToString());
  }
  return Ok();
}

void SledCore::OnIssueNonce() {
  Reply reply;
  reply.nonce = MintNonce();
  Emit(std::move(reply));
}

namespace {

constexpr size_t kNonceTimeBytes = 3;  // issue time in seconds, mod 2^24 (194 days)
constexpr size_t kNonceMacBytes = 4;

uint32_t NonceSeconds(TimePoint t) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
  return static_cast<uint32_t>(s) & 0xffffff;
}

std::array<uint8_t, kNonceMacBytes> NonceMac(const std::array<uint8_t, 32>& key,
                                             std::string_view baseboard, const Nonce& nonce) {
  const Digest256 digest =
      Blake2b256({key, AsBytes("once.sush.session-nonce.v1"), AsBytes(baseboard),
                  std::span(nonce.bytes).first(kId88Bytes - kNonceMacBytes)});
  std::array<uint8_t, kNonceMacBytes> mac{};
  std::copy_n(digest.begin(), kNonceMacBytes, mac.begin());
  return mac;
}

}  // namespace

// Issue time, random bytes, MAC (SledConfig::nonce_key): nothing is kept.
// The rng is drawn from as for a fully random nonce, so a simulator's
// streams do not move.
Nonce SledCore::MintNonce() {
  Nonce nonce = FreshNonce();
  const uint32_t seconds = NonceSeconds(now_);
  for (size_t i = 0; i < kNonceTimeBytes; ++i) {
    nonce.bytes[i] = static_cast<uint8_t>(seconds >> (8 * (kNonceTimeBytes - 1 - i)));
  }
  const auto mac = NonceMac(config_.nonce_key, config_.identity.baseboard, nonce);
  std::copy(mac.begin(), mac.end(), nonce.bytes.end() - kNonceMacBytes);
  return nonce;
}

// This sled's MAC, issued within session_nonce_ttl, and not used before.
Status SledCore::UseNonce(const SessionStart& start) {
  const Nonce& nonce = start.server_nonce;
  auto refuse = [&](std::string why) {
    return MakeError(ErrorCode::kPermissionDenied, "server nonce " + why, nonce.ToString());
  };
  const auto mac = NonceMac(config_.nonce_key, config_.identity.baseboard, nonce);
  if (!std::equal(mac.begin(), mac.end(), nonce.bytes.end() - kNonceMacBytes)) {
    return refuse("unknown: this sled did not issue it");
  }
  uint32_t issued = 0;
  for (size_t i = 0; i < kNonceTimeBytes; ++i) issued = issued << 8 | nonce.bytes[i];
  const uint32_t age = (NonceSeconds(now_) - issued) & 0xffffff;
  const auto ttl =
      std::chrono::duration_cast<std::chrono::seconds>(config_.limits.session_nonce_ttl).count();
  if (static_cast<int64_t>(age) > ttl) return refuse("expired (ask for a new one)");
  std::erase_if(used_nonces_, [&](const auto& entry) { return entry.second <= now_; });
  if (used_nonces_.contains(nonce)) return refuse("already used");
  if (used_nonces_.size() >= config_.limits.used_session_nonces_max) {
    return LimitError("used_session_nonces_max", static_cast<int64_t>(used_nonces_.size() + 1),
                      static_cast<int64_t>(config_.limits.used_session_nonces_max));
  }
  used_nonces_[nonce] = now_ + config_.limits.session_nonce_ttl + std::chrono::seconds(1);
  return Ok();
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::OnProcessExited(const ProcessExited& input) {
  auto it = running_.find(input.job_id);
  if (it == running_.end()) {
    Emit(Diagnostic{
        MakeError(ErrorCode::kNotFound, "exit of a job not running", input.job_id.ToString())
            .error()});
    return;
  }
  running_.erase(it);
  // The outcome is recorded before it is gossiped, so that a later life that
  // finds the start but not the stop reports the truth.
  if (trusted_) {
    BoundaryRecord next = AfterEnd(record_, input.job_id, input.report);
    if (!(next == record_)) WriteRecord(std::move(next), "outcome of " + input.job_id.ToString());
  }
  JobStopped stopped{config_.identity.baseboard, input.job_id, input.report.outcome,
                     input.report.stdout_summary, input.report.stderr_summary};
  stopped.outcome.error = Truncated(stopped.outcome.error, kErrorTextBytesMax);
  Report(input.job_id, StatusFromStop(stopped), stopped);
  Advance();
}

// How long a sled waits to hear its own VersionAnnouncement back before it
// sends it again (own messages come back at the next delivery, within a
// tick or two).
constexpr Duration kReannounceAfter = std::chrono::seconds(2);

void SledCore::OnTick(const TimerTick& input) {
  now_ = input.now;
  if (!started_at_) started_at_ = now_;
  std::erase_if(used_nonces_, [&](const auto& entry) { return entry.second <= now_; });
  AgeUnchained();
  // Announced again while the sled has not heard its own announcement back
  // (kReannounceAfter). The loss this was first added for had another cause
  // (a host back in a network it left, unseen by Sled: fixed there); this
  // stays as the net under any other, since one lost announcement leaves
  // the sled out of every sled's list for good.
  const bool due = !announced_at_ || (!sleds_.contains(config_.identity.baseboard) &&
                                      now_ - *announced_at_ >= kReannounceAfter);
  if (due && network_) {
    announced_at_ = now_;
    Send(VersionAnnouncement{config_.identity.baseboard,
                             config_.identity.cubby.value_or(kCubbyUnknown),
                             Truncated(config_.build_version, kBuildVersionBytesMax)});
  }
}

// Entering a universe: the birth marker (and, for an amnesic record, the
// entry marker) is one LifeMarker; a universe the record left long ago gets a
// UniverseFlipFlop marker; an untrusted sled says so.
// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::OnJoined(const Joined& input) {
  if (network_) ForgetUniverse();
  network_ = input.network;
  ++joins_;
  drained_ = false;
  announced_at_.reset();
  birth_.reset();
  join_frontier_.reset();
  pending_marker_.reset();
  party_ = input.party;
  unclassified_starts_.clear();
  previous_life_starts_.clear();
  passed_unresolved_.clear();
  birth_nonce_ = FreshNonce();
  if (trusted_ && !config_.boundary.flaws.reused_heights) {
    Emit(PersistGossipIdentity{RecordedHeights(record_, input.network)});
  }
  SendMarker(LifeMarker{config_.identity.baseboard, birth_nonce_});
  if (!trusted_) {
    Send(SledError{config_.identity.baseboard,
                   SledErrorKind::kUntrusted,
                   {},
                   {},
                   {},
                   0,
                   Truncated("boundary record untrusted: " + untrusted_reason_ +
                                 " (every job is skipped until `sush sled reset`)",
                             kErrorTextBytesMax)});
    return;
  }
  switch (ClassifyArrival(record_, input.network, config_.boundary)) {
    case Arrival::kEntry:
      pending_marker_ = PendingMarker{birth_nonce_, MarkerKind::kEntry};
      break;
    case Arrival::kFlipFlop: {
      const Nonce nonce = FreshNonce();
      pending_marker_ = PendingMarker{nonce, MarkerKind::kFlipFlop};
      SendMarker(SledError{config_.identity.baseboard,
                           SledErrorKind::kUniverseFlipFlop,
                           {},
                           {},
                           nonce,
                           0,
                           "this sled returned to a gossip universe it left before: jobs queued "
                           "before it arrived are skipped here, later ones run"});
      break;
    }
    case Arrival::kKnown:
      break;
    case Arrival::kNew:
      break;
  }
}

// The universe was dropped for another's: what it held is gone. Running
// processes stay (they block non-concurrent starts until they end).
void SledCore::ForgetUniverse() {
  std::optional<std::pair<SessionId, uint32_t>> dropped;
  if (active_) {
    uint32_t jobs = 0;
    for (const auto& [id, record] : history_) jobs += record.job.session_id == active_->id;
    dropped.emplace(active_->id, jobs);
  }
  frontier_ = itc::Version{};
  active_.reset();
  history_.clear();
  history_order_.clear();
  sleds_.clear();
  if (dropped) {
    // Sent after the new universe's LifeMarker would be nicer, but the order
    // of two own sends carries no meaning: both land in the new universe.
    Send(SledError{config_.identity.baseboard,
                   SledErrorKind::kUniverseDropped,
                   dropped->first,
                   {},
                   {},
                   dropped->second,
                   Truncated("a smaller gossip universe met this one and was dropped: session " +
                                 dropped->first.ToString() + " with " +
                                 std::to_string(dropped->second) + " job(s) is gone here",
                             kErrorTextBytesMax)});
  }
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::OnReplayDrained(const ReplayDrained& input) {
  if (!network_ || drained_) return;
  drained_ = true;
  join_frontier_ = input.ceiling;
  if (config_.boundary.flaws.zombies_by_join_frontier) {
    std::vector<std::pair<itc::Version, JobId>> starts;
    starts.swap(unclassified_starts_);
    for (const auto& [version, id] : starts) ClassifyStart(version, id);
  }
  ResolvePreviousLives();
  RenewLostMarker(input.ceiling);
  MintHopIfNeeded();
  Advance();
}

// A marker is kept as the own party's part of its version: a job is above
// it iff its creator had seen this sled's event at the marker's height or a
// later one, all of which this sled made after the marker in real time (the
// gossip bookmark covered the marker before it was relied on, so a later
// life never reuses its height). Where the party was split for newcomers,
// their part of the marker is above only for sleds that heard of it, and a
// marker whose every holder is down (or whose identity is gone: a wiped data
// folder) may be one nobody gets above for a long time. So when the drain
// finds a ceiling above none of the markers, one more marker, later in real
// time, is minted: a job above any of them runs (a drain that only lagged
// costs nothing: the earlier markers stay).
itc::Version SledCore::OwnPart(const itc::Version& version) const {
  auto party = itc::Party::Decode(party_);
  return party ? gossip::Restrict(version, *party) : version;
}

void SledCore::RenewLostMarker(const itc::Version& ceiling) {
  if (!trusted_ || !network_ || pending_marker_) return;
  const UniverseBoundary* b = BoundaryFor(record_, *network_);
  if (!b) return;
  auto lost = [&](const std::vector<itc::Version>& markers) {
    return !markers.empty() && std::none_of(markers.begin(), markers.end(),
                                            [&](const auto& m) { return itc::Leq(m, ceiling); });
  };
  if (!lost(b->markers) && !lost(b->floor)) return;
  const Nonce nonce = FreshNonce();
  pending_marker_ = PendingMarker{nonce, MarkerKind::kRenew};
  SendMarker(LifeMarker{config_.identity.baseboard, nonce});
}

// A marker's message: the bookmark is made to cover it before it comes back.
void SledCore::SendMarker(const Message& message) {
  Send(message);
  Emit(PersistGossipIdentity{});
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
                 [&](const SledReset& p) { OnSledReset(p); },
             },
             *payload);
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
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
    Send(SledError{config_.identity.baseboard,
                   SledErrorKind::kConcurrentSessions,
                   first,
                   id,
                   {},
                   0,
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

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
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
  if (auto room = RoomFor(job.job_id); !room)
    return RefuseJob(version, request, room.error(), true);
  if (auto room = Remember(version, request, true); !room) {
    return RefuseJob(version, request, room.error(), true);
  }
  PendingJob pending{
      job, ToBeSignedDigest(request), raw, version, Targets(job), false, false, now_, false};
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

// An operator's reset of this untrusted sled: a fresh, permanently amnesic
// record over whatever the drives hold; then an entry marker, as for a new sled.
void SledCore::OnSledReset(const SledReset& reset) {
  if (reset.baseboard != config_.identity.baseboard) return;
  if (auto allowed = CheckReset(reset); !allowed) {
    Emit(Diagnostic{allowed.error()});
    return;
  }
  BoundaryRecord fresh = ResetRecord(reset.reset_nonce);
  if (auto written = store_.Reset(fresh); !written) {
    untrusted_reason_ = "reset failed: " + written.error().message;
    reset_nonce_ = FreshNonce();
    Emit(BoundaryChanged{"untrusted: " + untrusted_reason_});
    return;
  }
  trusted_ = true;
  untrusted_reason_.clear();
  SetRecord(std::move(fresh));
  Emit(BoundaryChanged{"reset by an operator"});
  Send(SledError{config_.identity.baseboard,
                 SledErrorKind::kBoundaryReset,
                 {},
                 {},
                 {},
                 0,
                 "boundary record reset by an operator: only jobs submitted from now on run here"});
  if (network_ && ClassifyArrival(record_, *network_, config_.boundary) == Arrival::kEntry) {
    const Nonce nonce = FreshNonce();
    pending_marker_ = PendingMarker{nonce, MarkerKind::kEntry};
    SendMarker(LifeMarker{config_.identity.baseboard, nonce});
  }
}

// ---- events ----

void SledCore::OnEvent(const itc::Version& version, const Message& event) {
  const std::string& me = config_.identity.baseboard;
  std::visit(
      Overloaded{
          [&](const SignedRequest&) {},
          [&](const JobStarted& e) {
            Learn(e.job_id, e.baseboard, SimpleStatus(JobState::kStarted));
            if (e.baseboard == me) NoteOwnStart(version, e.job_id);
          },
          [&](const JobStopped& e) { Learn(e.job_id, e.baseboard, StatusFromStop(e)); },
          [&](const JobCancelled& e) {
            Learn(e.job_id, e.baseboard, SimpleStatus(JobState::kCancelled));
          },
          [&](const JobError& e) { Learn(e.job_id, e.baseboard, ErrorStatus(e.code, e.message)); },
          [&](const JobSkipped& e) {
            Learn(e.job_id, e.baseboard, SkippedStatus(e.reason, e.detail));
          },
          [&](const JobInterrupted& e) {
            Learn(e.job_id, e.baseboard, SimpleStatus(JobState::kInterrupted));
          },
          [&](const SledError& e) {
            if (e.baseboard == me && pending_marker_ && pending_marker_->nonce == e.marker &&
                (e.kind == SledErrorKind::kSessionHop ||
                 e.kind == SledErrorKind::kUniverseFlipFlop)) {
              OnMarkerDelivered(version);
            }
            Emit(SledErrorSeen{e});
          },
          [&](const LifeMarker& e) {
            if (e.baseboard != me) return;
            if (e.nonce == birth_nonce_ && !birth_) {
              birth_ = version;
              if (!config_.boundary.flaws.zombies_by_join_frontier) {
                std::vector<std::pair<itc::Version, JobId>> starts;
                starts.swap(unclassified_starts_);
                for (const auto& [v, id] : starts) ClassifyStart(v, id);
              }
            }
            if (pending_marker_ && pending_marker_->nonce == e.nonce) OnMarkerDelivered(version);
          },
          [&](const VersionAnnouncement& e) {
            if (sleds_.contains(e.baseboard) || sleds_.size() < config_.limits.known_sleds_max) {
              sleds_[e.baseboard] = e;
            }
          },
      },
      event);
}

// A status learned from gossip, merged by strength: a late echo of an older
// status of this sled never overrides newer knowledge, and an earlier life's
// fact (it ran) overrides this life's guess.
void SledCore::Learn(const JobId& id, const std::string& baseboard, const JobStatus& status) {
  SetStatus(id, baseboard, status);
  if (baseboard == config_.identity.baseboard && RunEnded(status)) {
    previous_life_starts_.erase(id);
  }
}

// ---- previous lives ----

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::NoteOwnStart(const itc::Version& version, const JobId& id) {
  if (running_.contains(id) || executed_.contains(id)) return;  // this life's own
  const bool by_frontier = config_.boundary.flaws.zombies_by_join_frontier;
  if ((by_frontier && !drained_) || (!by_frontier && !birth_)) {
    unclassified_starts_.emplace_back(version, id);
    return;
  }
  ClassifyStart(version, id);
  if (drained_) ResolvePreviousLives();
}

// A start of this baseboard that this process did not make: of a previous
// life iff not strictly above the birth marker (this life's events observed
// it before they were sent). The rejected design compares with the frontier
// of the peer it drained from, which a previous life may have outrun.
// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::ClassifyStart(const itc::Version& version, const JobId& id) {
  if (running_.contains(id) || executed_.contains(id)) return;
  const bool previous = config_.boundary.flaws.zombies_by_join_frontier
                            ? join_frontier_ && itc::Leq(version, *join_frontier_)
                            : birth_ && !StrictlyAfter(version, *birth_);
  if (!previous) return;
  const JobStatus* own = OwnStatus(id);
  if (own == nullptr || !RunEnded(*own)) previous_life_starts_.insert(id);
}

// Once replay has drained: a previous life's start with no end known is
// Interrupted, unless the record kept its outcome; and a position passed in
// a previous life that no status of this sled covers is Skipped{already
// executed} (or, for the record's last job, its outcome or Interrupted).
// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::ResolvePreviousLives() {
  if (!drained_) return;
  std::set<JobId> starts;
  starts.swap(previous_life_starts_);
  for (const JobId& id : starts) {
    const JobStatus* own = OwnStatus(id);
    if (own != nullptr && RunEnded(*own)) continue;
    ResolvePassed(id, /*last=*/true);
  }
  std::vector<std::pair<JobId, bool>> passed;
  passed.swap(passed_unresolved_);
  for (const auto& [id, last] : passed) ResolvePassed(id, last);
}

void SledCore::ResolvePassed(const JobId& id, bool last) {
  const JobStatus* own = OwnStatus(id);
  if (own != nullptr && RunEnded(*own)) return;
  if (!last) {
    if (own != nullptr && own->terminal()) return;
    return ReportIfStronger(id,
                            SkippedStatus(SkipReason::kAlreadyExecuted,
                                          "this sled passed the position in an earlier life"),
                            JobSkipped{config_.identity.baseboard, id, SkipReason::kAlreadyExecuted,
                                       "this sled passed the position in an earlier life"});
  }
  std::optional<ExitReport> recorded = RecordedOutcome(record_, id);
  if (recorded) {
    JobStopped stopped{config_.identity.baseboard, id, recorded->outcome, recorded->stdout_summary,
                       recorded->stderr_summary};
    return ReportIfStronger(id, StatusFromStop(stopped), stopped);
  }
  ++interrupted_;
  ReportIfStronger(id, SimpleStatus(JobState::kInterrupted),
                   JobInterrupted{config_.identity.baseboard, id});
}

// ---- markers ----

Nonce SledCore::FreshNonce() {
  Nonce nonce;
  rng_.Fill(nonce.bytes.data(), nonce.bytes.size());
  return nonce;
}

// Rule 4, decided when the session becomes active (after the drain): a hop
// now makes every job submitted after the marker spreads runnable.
// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::MintHopIfNeeded(bool at_gate) {
  if (!trusted_ || !drained_ || pending_marker_ || !active_ || !network_) return;
  const SessionVerdict verdict = ActiveVerdict();
  if (verdict != SessionVerdict::kNeedsHop) return;
  // The rejected design mints an amnesic record's marker only when a job
  // reaches the gate, which skips that job.
  if (config_.boundary.flaws.lazy_entry_marker && !at_gate && record_.amnesia != Amnesia::kNone &&
      !BoundaryFor(record_, *network_)) {
    return;
  }
  const Nonce nonce = FreshNonce();
  pending_marker_ = PendingMarker{nonce, MarkerKind::kHop};
  const UniverseBoundary* b = BoundaryFor(record_, *network_);
  const SessionId recorded = b && b->session ? *b->session : SessionId{};
  SendMarker(SledError{
      config_.identity.baseboard, SledErrorKind::kSessionHop, recorded, active_->id, nonce, 0,
      Truncated("this sled hops into session " + active_->id.ToString() + " (it last executed in " +
                    (b && b->session ? b->session->ToString() : std::string("none")) +
                    "): jobs queued before this hop are skipped here, later ones run",
                kErrorTextBytesMax)});
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::OnMarkerDelivered(const itc::Version& version) {
  const PendingMarker marker = *pending_marker_;
  pending_marker_.reset();
  if (!trusted_ || !network_) return;
  BoundaryRecord next =
      AfterMarker(record_, *network_, OwnPart(version), marker.kind, config_.boundary);
  static constexpr const char* kWhy[] = {"entry marker", "universe flip-flop marker",
                                         "session hop marker", "renewed marker"};
  const std::string why = kWhy[static_cast<int>(marker.kind)];
  if (marker.kind == MarkerKind::kEntry && config_.boundary.flaws.unpersisted_entry_marker) {
    SetRecord(std::move(next));  // the rejected design keeps it in memory only
  } else {
    WriteRecord(std::move(next), why);
  }
  MintHopIfNeeded();
  Advance();
}

// A write that fails leaves the record as it was in memory (what it refused
// to make durable never counts); the next write tries again, so a drive that
// keeps failing shows as an Error on every job it would have run.
void SledCore::SetRecord(BoundaryRecord next) {
  record_ = std::move(next);
  ++record_revision_;
}

void SledCore::WriteRecord(BoundaryRecord next, std::string why) {
  if (auto written = store_.Record(next); !written) {
    Emit(Diagnostic{MakeError(written.error().code, "boundary record not written (" + why +
                                                        "): " + written.error().message)
                        .error()});
    Emit(BoundaryChanged{"not written (" + why + "): " + written.error().message});
    return;
  }
  SetRecord(std::move(next));
  Emit(BoundaryChanged{std::move(why)});
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::WriteDeferredRecord() {
  deferred_write_ = false;
  WriteRecord(record_, "executed (written after the start)");
}

// ---- sessions and the chain ----

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::Activate(const SessionId& id, const itc::Version& version) {
  active_.emplace();
  active_->id = id;
  active_->start_version = version;
  active_->next = FirstJobId(id);
  // Rule 2: the recorded session resumes by chain position; the positions up
  // to its last executed job are passed, never run.
  if (trusted_ && network_ &&
      JudgeSession(record_, *network_, id, version) == SessionVerdict::kResume) {
    const SessionChain chain = *ChainOf(*BoundaryFor(record_, *network_), id);
    active_->next = chain.successor;
    active_->replay = Replay{FirstJobId(id), chain.last_executed};
  }
  Emit(SessionChanged{id, SessionEnd::kNone});
  MintHopIfNeeded();
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::EndSession(SessionEnd why) {
  for (auto& [id, pending] : active_->known) {
    if (pending.targeted && !pending.cancelled) Cancel(pending);
  }
  active_.reset();
  Emit(SessionChanged{std::nullopt, why});
}

// The earlier life's part of the chain: consumed, never run.
// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::AdvanceReplay() {
  while (active_ && active_->replay) {
    Session& session = *active_;
    Replay& replay = *session.replay;
    const JobId id = replay.at;
    const bool last = id == replay.until;
    JobId next;
    if (session.skips.erase(id) > 0) {
      if (auto it = session.known.find(id); it != session.known.end()) session.known.erase(it);
      next = NextJobIdAfterBurned(id);
    } else {
      auto it = session.known.find(id);
      if (it == session.known.end()) return;  // a hole: wait for the predecessor
      if (it->second.targeted) {
        if (drained_) {
          ResolvePassed(id, last);
        } else {
          passed_unresolved_.emplace_back(id, last);
        }
      }
      next = NextJobId(it->second.digest);
      session.known.erase(it);
    }
    Pass(id);
    if (last) {
      session.replay.reset();
    } else {
      replay.at = next;
    }
  }
}

// Walks the chain as far as the known jobs allow, starting targeted ones
// that the boundary rules let run.
// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::Advance() {
  AdvanceReplay();
  while (active_) {
    Session& session = *active_;
    const JobId id = session.next;
    if (session.skips.erase(id) > 0) {
      if (auto it = session.known.find(id); it != session.known.end()) {
        if (it->second.targeted && !it->second.cancelled) Cancel(it->second);
        session.known.erase(it);
      }
      Pass(id);
      session.next = NextJobIdAfterBurned(id);
      continue;
    }
    auto it = session.known.find(id);
    if (it == session.known.end()) return;  // a hole: wait for the predecessor
    PendingJob& pending = it->second;
    if (pending.targeted && !pending.cancelled) {
      switch (Judge(pending)) {
        case Gate::kHold:
          return;
        case Gate::kRun:
          if (!pending.job.concurrent && !running_.empty()) return;
          if (running_.size() >= config_.limits.running_jobs_max) return;
          Execute(pending);
          if (!active_) return;
          break;
        case Gate::kSkipLightcone:
          Skip(pending, SkipReason::kLightcone);
          break;
        case Gate::kSkipUntrusted:
          Skip(pending, SkipReason::kUntrusted);
          break;
      }
    }
    JobId next = NextJobId(pending.digest);
    session.next_from = pending.version;
    session.known.erase(it);
    Pass(id);
    session.next = next;
  }
}

void SledCore::Pass(const JobId& id) {
  Session& session = *active_;
  session.passed.insert(id);
  session.passed_order.push_back(id);
  if (session.passed_order.size() > config_.limits.history_entries_max) {
    session.passed.erase(session.passed_order.front());
    session.passed_order.pop_front();
  }
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
SledCore::Gate SledCore::Judge(const PendingJob& pending) {
  if (!trusted_) return Gate::kSkipUntrusted;
  if (!network_ || !drained_ || pending_marker_) return Gate::kHold;
  const SessionVerdict verdict = ActiveVerdict();
  if (verdict == SessionVerdict::kNeedsHop) {
    MintHopIfNeeded(/*at_gate=*/true);
    return Gate::kHold;
  }
  const itc::Version* from = active_->next_from ? &*active_->next_from : nullptr;
  if (config_.boundary.flaws.position_unchecked) from = &pending.version;  // the rejected design
  return JobMayRun(record_, *network_, verdict, pending.version, from) ? Gate::kRun
                                                                       : Gate::kSkipLightcone;
}

void SledCore::Skip(const PendingJob& pending, SkipReason reason) {
  const JobId& id = pending.job.job_id;
  ++skipped_;
  const std::string detail =
      reason == SkipReason::kUntrusted
          ? Truncated("boundary record untrusted: " + untrusted_reason_, kErrorTextBytesMax)
          : std::string(kLightconeDetail);
  ReportIfStronger(id, SkippedStatus(reason, detail),
                   JobSkipped{config_.identity.baseboard, id, reason, detail});
}

// THE EXECUTION GATE. Every process start passes here, and only here: the job
// is the active session's next chain link, targets this sled, has not started
// in this life, the boundary rules let it run, and the boundary record naming
// it is on both drives before the process may start.
// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void SledCore::Execute(const PendingJob& pending) {
  const JobId& id = pending.job.job_id;
  ONCE_CHECK(active_ && id == active_->next && pending.job.session_id == active_->id);
  ONCE_CHECK(pending.targeted && !pending.cancelled && !running_.contains(id));
  if (executed_.contains(id)) {
    return Report(
        id, FailedStatus(ErrorCode::kPermissionDenied, "already executed"),
        JobError{config_.identity.baseboard, id, ErrorCode::kPermissionDenied, "already executed"});
  }
  BoundaryRecord next =
      AfterExecution(record_, *network_, active_->id, active_->start_version, id, pending.version,
                     NextJobId(pending.digest), config_.boundary);
  if (config_.boundary.flaws.record_after_start) {
    SetRecord(std::move(next));  // the rejected design: written at the next input
    deferred_write_ = true;
  } else if (auto recorded = store_.Record(next); !recorded) {
    std::string why =
        Truncated("boundary not recorded: " + recorded.error().message, kErrorTextBytesMax);
    Report(id, FailedStatus(recorded.error().code, why),
           JobError{config_.identity.baseboard, id, recorded.error().code, why});
    Emit(BoundaryChanged{"not written: " + recorded.error().message});
    return;
  } else {
    SetRecord(std::move(next));
    Emit(BoundaryChanged{"executed " + id.ToString()});
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
  const JobStatus* mine = OwnStatus(job.job_id);
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

void SledCore::ReportIfStronger(const JobId& id, const JobStatus& status, Message event) {
  const JobStatus* own = OwnStatus(id);
  if (own != nullptr && !Stronger(status, *own)) return;
  Report(id, status, std::move(event));
}

void SledCore::SetStatus(const JobId& id, const std::string& baseboard, const JobStatus& status) {
  auto record = history_.find(id);
  if (record == history_.end()) return;
  auto& statuses = record->second.statuses;
  auto it = statuses.find(baseboard);
  if (it != statuses.end() && !Stronger(status, it->second)) return;
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
      history_order_.push_back(job.job_id);
    }
    return Ok();
  }
  ONCE_RETURN_IF_ERROR(MakeRoomInHistory());
  history_.emplace(job.job_id, JobRecord{job, request.key_id, version, verified, {}});
  if (verified) {
    history_order_.push_back(job.job_id);
    while (history_order_.size() > config_.limits.history_entries_max) history_order_.pop_front();
  }
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
