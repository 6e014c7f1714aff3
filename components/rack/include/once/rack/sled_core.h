// File: sled_core.h
//
// The sush sled core: a deterministic state machine, one per sled. No threads,
// no I/O, no wall clock: everything arrives as an Input and everything it
// wants done leaves as Outputs, so a simulator can run 32 sleds in one process
// and replay a seed exactly. Randomness (server nonces) comes from an injected
// Rng; the drives from an injected BoundaryStore.
//
//   MemoryBoundaryStore drives;
//   SledCore core(SledConfig{{"913-0000019:BRM1", 3}, "once 0.1", trusted}, rng, drives);
//   for (const Output& out : core.Handle(Delivered{version, payload_bytes})) {
//     // Broadcast -> gossip send; StartProcess/StopProcess -> the executor;
//     // Reply -> the HTTP client; JobStatusChanged/SessionChanged -> watchers.
//   }
//
// Contract with the gossip layer: every message, including this sled's own
// Broadcasts, comes back exactly once as Delivered, in causal order. Requests
// take effect only when delivered; a client's Submit is checked and then
// broadcast.
//
// The rules (seed 001, "Causal gossip and its consequences"):
// - Sessions: a start strictly after the frontier supersedes the active one; a
//   start concurrent with the active one annihilates both (ConcurrentSessions
//   is gossiped; a new session is needed); anything else is absorbed. At most
//   one session is active.
// - Jobs: only trusted, well-signed, well-formed jobs of the active session
//   run; everything else gets an Error status and never runs. A job starts
//   only when it is the chain's next id (all predecessors known) and targets
//   this sled; the chain advances either way. Non-concurrent jobs wait for
//   running jobs to end; starts always follow chain order.
// - Skips: a session skip burns a *cancelled* chain position (one a job stop
//   named before the chain passed it), so a chain stuck at a hole whose job
//   never arrives moves on to H("Burned" || id). A skip of a position that is
//   not cancelled is refused (typed error at submission, a Diagnostic when
//   delivered): a stop is causally before any skip a sled accepted, so every
//   sled that delivers the skip has seen the stop.
// - Every process start passes through one function (the execution gate),
//   which writes the boundary record (boundary.h) to the BoundaryStore first,
//   and starts the process only if that write succeeded.
// - The boundary rules (seed 001; issue 13 rules 1-8; docs/sush-boundary.md):
//   the gate stays closed after a Joined until ReplayDrained (the sled has
//   heard what a peer holds), and while a marker is being minted. Then a job
//   of the recorded session resumes by chain position (positions up to the
//   record's last_executed are passed, never run); a session whose start is
//   strictly above V runs its queue; any other session needs a lightcone hop
//   (a gossiped SessionHop whose version is the marker), decided eagerly when
//   the session becomes active, and only jobs strictly above the marker run;
//   every other targeted job gets a terminal Skipped{reason}. An amnesic
//   record mints an entry marker when it joins a universe; a universe in the
//   filter gets a UniverseFlipFlop marker. An untrusted sled (its drives
//   disagree or failed) skips every job until an operator's SledReset.
// - Previous lives: a LifeMarker minted at every join is the birth marker;
//   an own-baseboard JobStarted not above it, of a job this process did not
//   start, belongs to a previous life; once replay has drained, one with no
//   end known becomes Interrupted (or Stopped with the outcome the record
//   kept for it).
// - Statuses per (job, sled) only grow, by strength: a refused Error <
//   Queued < Started < Skipped/Cancelled < Interrupted < Stopped/Error after
//   a start (ties broken by content), so every sled converges on the same
//   status whatever order it learns them in, and a fact about an earlier
//   life (it ran) wins over this life's guess (skipped).
//
// Not thread-safe: one thread (or one simulated actor) owns a core.

#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/base/rng.h"
#include "once/itc/version.h"
#include "once/rack/boundary.h"
#include "once/rack/ids.h"
#include "once/rack/keys.h"
#include "once/rack/messages.h"
#include "once/rack/target.h"

namespace once::rack {

struct SledLimits {
  // Jobs of the active session known, not yet passed, and reachable from the
  // chain's head through jobs this sled holds (jobs that can run).
  size_t queued_jobs_per_session_max = 1000;
  // Jobs of the active session known but not reachable from the chain's head
  // (behind a hole, or at a position no chain reaches).
  size_t unchained_jobs_per_session_max = 1000;
  // An unchained job gets a terminal Error (kTimeout) after this long here:
  // it no longer counts, and never runs on this sled.
  Duration unchained_job_age_max = std::chrono::minutes(10);
  // Jobs remembered with their per-sled statuses (the causally oldest
  // finished ones are evicted first; queued or running ones never).
  size_t history_entries_max = 65536;
  // A server nonce is good for one session start this long after it was
  // issued. Issuing one keeps no state (see SledConfig::nonce_key).
  Duration session_nonce_ttl = std::chrono::minutes(10);
  // Nonces used by session starts, remembered until they expire (only a
  // trusted signer's start uses one up).
  size_t used_session_nonces_max = 4096;
  // Processes running at once on this sled.
  size_t running_jobs_max = 256;
  // Sleds remembered from version announcements.
  size_t known_sleds_max = 64;
};

struct SledConfig {
  SledIdentity identity;
  std::string build_version;
  TrustedKeys trusted;
  SledLimits limits;
  BoundaryOptions boundary;  // flaws: the simulator's negative controls only
  // The key of this sled's session nonces: a nonce is its issue time (in
  // seconds, 24 bits), 4 random bytes and a MAC over them, the baseboard and
  // this key, so issuing one costs the sled no state and an unauthenticated
  // caller cannot exhaust anything; the start that uses it is remembered
  // until it expires (single use). The server draws it from the system; the
  // simulator's zero key is as good where nobody forges.
  std::array<uint8_t, 32> nonce_key{};
};

// ---- Inputs ----

// A gossip delivery: a message and its causal version, in causal order.
struct Delivered {
  itc::Version version;
  Bytes payload;
};
// A client posts an encoded SignedRequest message to this sled.
struct ClientSubmit {
  Bytes request;
};
// A client asks this sled for a server nonce to start a session with.
struct IssueSessionNonce {};
// The executor reports that a started job's process ended.
struct ProcessExited {
  JobId job_id;
  ExitReport report;
};
// Time passes (expires nonces; the first tick announces this sled's version).
struct TimerTick {
  TimePoint now;
};
// The sled entered universe `network`: at process start (before any
// Delivered), and whenever its gossip node dropped its universe for another's
// (what the old universe held is forgotten; running processes stay).
struct Joined {
  NetworkId network;
  Bytes party;  // this sled's gossip identity there (itc Party encoding); empty: none
};
// Since the last Joined, a reconciliation with a peer completed (or the drain
// timeout passed): the sled has heard what its peers hold. `ceiling` is the
// replica's ceiling at that moment.
struct ReplayDrained {
  itc::Version ceiling;
};
using Input = std::variant<Delivered, ClientSubmit, IssueSessionNonce, ProcessExited, TimerTick,
                           Joined, ReplayDrained>;

// ---- Outputs ----

enum class JobState : uint8_t {
  kQueued,
  kStarted,
  kStopped,
  kCancelled,
  kError,
  kSkipped,      // never runs on this sled (skip_reason)
  kInterrupted,  // started in an earlier life, no end known
};
std::string_view JobStateName(JobState state);

struct JobStatus {
  JobState state = JobState::kQueued;
  ExitOutcome outcome;           // kStopped, and kError after a start
  OutputSummary stdout_summary;  // kStopped, and kError after a start
  OutputSummary stderr_summary;
  ErrorCode error_code = ErrorCode::kInternal;  // kError
  std::string error;                            // kError
  // kError for a job request this sled refused (it never ran). Later evidence
  // that a genuine job holds this id (Queued, Started, ...) overrides it, so
  // a forgery delivered first cannot mask the real job's status.
  bool refused = false;
  SkipReason skip_reason = SkipReason::kLightcone;  // kSkipped
  std::string detail;                               // kSkipped
  bool terminal() const { return state != JobState::kQueued && state != JobState::kStarted; }
  friend bool operator==(const JobStatus&, const JobStatus&) = default;
};
// The merge order of statuses (see the file comment): true iff `a` replaces `b`.
bool Stronger(const JobStatus& a, const JobStatus& b);

// Send these bytes to every peer (gossip).
struct Broadcast {
  Bytes payload;
};
// Run this job now (the executor). Only the execution gate emits it.
struct StartProcess {
  JobId job_id;
  SessionId session_id;
  std::string command;
  Bytes request;  // the encoded signed request, for job.json
};
// Kill this job's process group.
struct StopProcess {
  JobId job_id;
};
// The answer to ClientSubmit or IssueSessionNonce.
struct Reply {
  Status status;
  std::optional<Nonce> nonce;           // IssueSessionNonce
  std::optional<SessionId> session_id;  // a submitted session start
};
// A sled's status for a job changed (this sled's or one learned by gossip).
struct JobStatusChanged {
  JobId job_id;
  std::string baseboard;
  JobStatus status;
};
enum class SessionEnd : uint8_t { kNone, kSuperseded, kAnnihilated, kStopped };
struct SessionChanged {
  std::optional<SessionId> active;
  SessionEnd ended = SessionEnd::kNone;  // why the previous one ended, if one did
};
// A sled (this one or a peer) reported an error such as ConcurrentSessions.
struct SledErrorSeen {
  SledError error;
};
// Persist the gossip bookmark now: the marker just broadcast must be covered
// before the core relies on it (a later life then never reuses its height).
// Own events sent after it are strictly above `tick_floor`: at a join, every
// version the record holds for the universe (a send the bookmark lost at a
// crash may have been executed here: its height must never be issued again,
// or a new session or job would look as old as it and be skipped forever).
struct PersistGossipIdentity {
  itc::Version tick_floor;
};
// Something was dropped (undecodable delivery, duplicate, bad request that is
// not a job): for logs, never for control flow.
struct Diagnostic {
  Error error;
};
// The boundary record changed on the drives (or, untrusted, could not).
struct BoundaryChanged {
  std::string why;  // "executed J", "entry marker", "session hop", "reset", "untrusted: ..."
};
using Output =
    std::variant<Broadcast, StartProcess, StopProcess, Reply, JobStatusChanged, SessionChanged,
                 SledErrorSeen, Diagnostic, BoundaryChanged, PersistGossipIdentity>;

// A job this sled knows, with every sled's status for it.
struct JobRecord {
  JobStart job;
  KeyId key_id;  // the key that signed it (claimed, unless verified)
  itc::Version version;
  bool verified = false;                      // `job` is a trusted, well-signed request
  std::map<std::string, JobStatus> statuses;  // by baseboard
};

// Where the boundary gate stands, for operators.
enum class GateState : uint8_t {
  kNotJoined,      // no Joined yet
  kReplaying,      // joined, waiting for ReplayDrained
  kMintingMarker,  // a marker was sent and is not delivered back yet
  kOpen,           // jobs are judged by the rules
  kUntrusted,      // every job is skipped until an operator's reset
};
std::string_view GateStateName(GateState state);

class SledCore {
 public:
  // `rng` and `boundary` must outlive the core. The record (or the untrusted
  // verdict) is read from `boundary.loaded()`.
  SledCore(SledConfig config, Rng& rng, BoundaryStore& boundary);

  // Applies one input; returns what to do, in order.
  std::vector<Output> Handle(const Input& input);

  const SledIdentity& identity() const { return config_.identity; }
  std::optional<SessionId> active_session() const;
  // The join of the versions of every session start delivered so far.
  const itc::Version& frontier() const { return frontier_; }
  const JobRecord* FindJob(const JobId& id) const;
  const JobStatus* StatusOf(const JobId& id, const std::string& baseboard) const;
  size_t history_size() const { return history_.size(); }
  // Trusted job starts in the order they were delivered, newest first.
  std::vector<JobId> History(size_t offset, size_t limit) const;
  size_t history_total() const { return history_order_.size(); }
  // Jobs of the active session that can run (reachable from the chain's
  // head) and that cannot yet (unchained, not aged out).
  size_t queued_jobs() const;
  size_t unchained_jobs() const;
  // The active session's next free chain position: from the chain's head,
  // past every known job (H("Some" || its digest)) and every burned position
  // (H("Burned" || id)). What a client signs its next job at; nullopt
  // without an active session.
  std::optional<JobId> next_free_job_id() const;
  // Whether a session skip of `skip.job_id` would be applied now: kNotFound
  // (session not active), kInvalidArgument (position passed, already burned,
  // or not cancelled by a job stop).
  Status CheckSkip(const SessionSkip& skip) const;
  // Whether the active session's chain waits at a position whose job this
  // sled does not hold (a hole: the request was lost, or lost a race for the
  // position); what follows waits until it arrives or is skipped.
  bool waiting_at_hole() const;
  size_t running_jobs() const { return running_.size(); }
  // Jobs of this process running now.
  std::vector<JobId> running() const;
  // Processes started in this core's life.
  uint64_t executions() const { return executions_; }
  const std::map<std::string, VersionAnnouncement>& known_sleds() const { return sleds_; }
  // The first TimerTick's time (this life's start), if one came.
  std::optional<TimePoint> started_at() const { return started_at_; }

  // ---- the boundary, for operators ----
  const std::optional<NetworkId>& network() const { return network_; }
  // Universes joined in this life (Joined inputs), a return to the same
  // network included.
  uint64_t joins() const { return joins_; }
  const BoundaryRecord& boundary() const { return record_; }  // meaningless when untrusted
  // Bumped by every change of the in-memory record (written or not): what an
  // observer derives from boundary() is current while this is unchanged.
  uint64_t boundary_revision() const { return record_revision_; }
  bool trusted() const { return trusted_; }
  const std::string& untrusted_reason() const { return untrusted_reason_; }
  // The nonce a SledReset must name (only while untrusted).
  std::optional<Nonce> reset_nonce() const;
  GateState gate() const;
  const std::optional<itc::Version>& birth_marker() const { return birth_; }
  // How a job of the active session is judged now (nullopt: no session).
  std::optional<SessionVerdict> active_verdict() const;
  uint64_t skipped() const { return skipped_; }
  uint64_t interrupted() const { return interrupted_; }

 private:
  struct PendingJob {
    JobStart job;
    Digest256 digest{};
    Bytes request;
    itc::Version version;
    bool targeted = false;
    bool cancelled = false;  // this sled's terminal status (Cancelled, aged out) was reported
    bool stopped = false;    // a job stop named it (targeted here or not)
    TimePoint known_at{};    // when this sled was delivered it
    bool aged = false;       // unchained past unchained_job_age_max: never runs here
  };
  // Chain positions this sled passed in an earlier life: walked to mark them
  // passed (never run), from the session's first job to the record's last.
  struct Replay {
    JobId at;
    JobId until;
  };
  struct Session {
    SessionId id;
    itc::Version start_version;
    JobId next;
    // The version of the job whose digest derived `next` (none: the first
    // position, or a successor from the record, or one after a burn of those).
    std::optional<itc::Version> next_from;
    std::optional<Replay> replay;
    std::map<JobId, PendingJob> known;
    std::set<JobId> skips;
    std::set<JobId> stops;  // job stops of jobs not known yet
    std::set<JobId> passed;
    std::deque<JobId> passed_order;
  };
  struct Running {
    bool stop_requested = false;
  };
  struct PendingMarker {
    Nonce nonce;
    MarkerKind kind;
  };
  enum class Gate : uint8_t { kHold, kRun, kSkipLightcone, kSkipUntrusted };

  void OnDelivered(const Delivered& input);
  void OnSubmit(const ClientSubmit& input);
  void OnIssueNonce();
  void OnProcessExited(const ProcessExited& input);
  void OnTick(const TimerTick& input);
  void OnJoined(const Joined& input);
  void OnReplayDrained(const ReplayDrained& input);

  void OnRequest(const itc::Version& version, const SignedRequest& request, const Bytes& raw);
  void OnSessionStart(const itc::Version& version, const SessionStart& start);
  void OnSessionStop(const SessionStop& stop);
  void OnSessionSkip(const SessionSkip& skip);
  void OnJobStart(const itc::Version& version, const SignedRequest& request, const Bytes& raw);
  void OnJobStop(const JobStop& stop);
  void OnSledReset(const SledReset& reset);
  void OnEvent(const itc::Version& version, const Message& event);
  Status CheckSubmitted(const RequestPayload& payload, std::optional<SessionId>& session_id);
  // The known jobs of the active session the chain reaches from its head.
  std::set<JobId> Chained() const;
  // Room in the queue (chained) or among the unchained for a job at `id`.
  Status RoomFor(const JobId& id) const;
  void AgeUnchained();
  Nonce MintNonce();
  Status UseNonce(const SessionStart& start);
  Status CheckReset(const SledReset& reset) const;

  void Activate(const SessionId& id, const itc::Version& version);
  void EndSession(SessionEnd why);
  void ForgetUniverse();
  void Advance();
  void AdvanceReplay();
  void Pass(const JobId& id);
  // The boundary rules for the job at the chain's head.
  Gate Judge(const PendingJob& pending);
  SessionVerdict ActiveVerdict() const;
  // The execution gate: the only place a StartProcess is emitted.
  void Execute(const PendingJob& pending);
  void Skip(const PendingJob& pending, SkipReason reason);

  // Markers (birth, entry, flip-flop, hop).
  void MintHopIfNeeded(bool at_gate = false);
  itc::Version OwnPart(const itc::Version& version) const;
  void RenewLostMarker(const itc::Version& ceiling);
  void SendMarker(const Message& message);
  void OnMarkerDelivered(const itc::Version& version);
  void NoteOwnStart(const itc::Version& version, const JobId& id);
  void ClassifyStart(const itc::Version& version, const JobId& id);
  void ResolvePreviousLives();
  void ResolvePassed(const JobId& id, bool last);
  void WriteRecord(BoundaryRecord next, std::string why);
  // The in-memory record becomes `next` (every change goes through here).
  void SetRecord(BoundaryRecord next);
  void WriteDeferredRecord();
  Nonce FreshNonce();

  // `request` carries a JobStart.
  void RefuseJob(const itc::Version& version, const SignedRequest& request, const Error& error,
                 bool verified);
  void Cancel(PendingJob& pending);
  void Report(const JobId& id, const JobStatus& status, Message event);
  // Reports `status` only if it would change this sled's own status.
  void ReportIfStronger(const JobId& id, const JobStatus& status, Message event);
  void Learn(const JobId& id, const std::string& baseboard, const JobStatus& status);
  void SetStatus(const JobId& id, const std::string& baseboard, const JobStatus& status);
  const JobStatus* OwnStatus(const JobId& id) const;
  Status Remember(const itc::Version& version, const SignedRequest& request, bool verified);
  Status MakeRoomInHistory();
  bool Evictable(const JobId& id, const JobRecord& record) const;
  bool Targets(const JobStart& job) const;

  void Send(const Message& message);
  void Emit(Output output) { out_.push_back(std::move(output)); }

  SledConfig config_;
  Rng& rng_;
  BoundaryStore& store_;
  TimePoint now_{};
  std::optional<TimePoint> started_at_;
  // When the last VersionAnnouncement in this universe was sent; none yet.
  std::optional<TimePoint> announced_at_;
  itc::Version frontier_;
  std::optional<Session> active_;
  std::map<JobId, Running> running_;
  std::set<JobId> executed_;  // this life's starts (the gate's own guard)
  std::deque<JobId> executed_order_;
  uint64_t executions_ = 0;
  uint64_t skipped_ = 0;
  uint64_t interrupted_ = 0;
  std::map<JobId, JobRecord> history_;
  std::deque<JobId> history_order_;         // trusted job starts, in delivery order
  std::map<Nonce, TimePoint> used_nonces_;  // used by a session start, with expiry
  std::map<std::string, VersionAnnouncement> sleds_;

  // The boundary.
  std::optional<NetworkId> network_;
  uint64_t joins_ = 0;
  BoundaryRecord record_;
  uint64_t record_revision_ = 0;
  bool trusted_ = true;
  std::string untrusted_reason_;
  Nonce reset_nonce_;
  bool drained_ = false;
  bool deferred_write_ = false;  // flaw record_after_start: record_ not on the drives yet
  Nonce birth_nonce_;
  std::optional<itc::Version> birth_;
  std::optional<PendingMarker> pending_marker_;
  std::optional<itc::Version> join_frontier_;  // flaw zombies_by_join_frontier
  Bytes party_;  // the gossip identity in network_ (encoded), as Joined said
  // Own starts not classified yet (no birth marker, or not drained for the flaw).
  std::vector<std::pair<itc::Version, JobId>> unclassified_starts_;
  std::set<JobId> previous_life_starts_;                   // unresolved
  std::vector<std::pair<JobId, bool>> passed_unresolved_;  // (job, last), before the drain

  std::vector<Output> out_;
};

}  // namespace once::rack
