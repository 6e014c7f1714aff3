// File: boundary.h
//
// The boundary record: everything a sled remembers about what it executed, in
// one record (one file per drive, so it cannot tear), and the rules that
// decide at the sled core's execution gate whether a job may run (seed 001,
// "Enough preamble: how do we do it?" and its reviews; docs/sush-boundary.md
// states the rules and why each is there).
//
//   BoundaryRecord record;                          // what the drives held
//   Arrival arrival = ClassifyArrival(record, network, options);
//   SessionVerdict s = JudgeSession(record, network, session, start, options);
//   if (JobMayRun(record, network, s, job_version)) {
//     BoundaryRecord next = AfterExecution(record, network, session, start, job, successor,
//     options); ONCE_RETURN_IF_ERROR(store.Record(next));     // both drives, before the process
//     starts
//   }
//
// The record, per universe (gossip network) the sled has executed in:
//   V        the join of the start versions of every session it executed under
//            (a session whose start is not below V was never executed there);
//   session  the session of the last executed job, with that job and its
//            successor on the chain (so the chain resumes without the
//            predecessor's bytes) and the job's outcome once it ended;
//   floor    markers bounding a past the record forgot (an empty record's entry
//            marker): a session is new only if strictly above one of them;
//   markers  the lightcone: while nothing has executed since they were
//            minted, a job of a session that is not new runs only if it and
//            the job that derived its chain position are strictly above one.
// The current universe's boundary is `here`; universes left behind go to a
// capped exact map (`left`, oldest first) and, when evicted from it, into a
// Bloom filter (`evicted`), which never forgets.
//
// All functions here are pure: no I/O, no clock. `BoundaryStore` is the seam
// through which the sled core makes a record durable; MemoryBoundaryStore
// keeps it in memory (tests), LockerBoundaryStore (locker_boundary_store.h)
// on both M.2 drives.

#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "once/base/result.h"
#include "once/gossip/replica.h"
#include "once/itc/version.h"
#include "once/rack/ids.h"
#include "once/rack/messages.h"

namespace once::rack {

using NetworkId = gossip::NetworkId;

// ---- Named sizes (each has a test of its bound) ----

// Universes kept exactly in the map of left universes; older ones fall to the filter.
inline constexpr size_t kLeftUniversesMax = 16;
// Sessions of a universe kept exactly besides the recorded one (where each
// one's chain stands); a session evicted from them is judged by V alone.
inline constexpr size_t kLeftSessionsMax = 4;
// Markers of each list (floor, lightcone) a universe's boundary keeps; the
// oldest beyond it is dropped.
inline constexpr size_t kMarkersMax = 3;
// The Bloom filter of evicted universes: bits, probes, and the capacity at
// which its false-positive rate is at most kNetworkFilterFalsePositiveMax.
inline constexpr size_t kNetworkFilterBits = 8192;
inline constexpr size_t kNetworkFilterProbes = 7;
inline constexpr size_t kNetworkFilterCapacity = 256;
inline constexpr double kNetworkFilterFalsePositiveMax = 2e-5;
// Largest encoded V the record holds, and largest encoded marker (a marker is
// kept as this sled's own party's part of its version: mostly zeros).
inline constexpr size_t kBoundaryVersionBytesMax = 512;
inline constexpr size_t kMarkerBytesMax = 128;
// Longest error text of a recorded outcome.
inline constexpr size_t kBoundaryErrorTextBytesMax = 256;
// Largest encoded record (the worst case of every field at its limit fits).
inline constexpr size_t kBoundaryRecordBytesMax = 64 * 1024;

// Where this sled's chain stands in a session it executed under.
struct SessionChain {
  SessionId session;
  JobId last_executed;
  JobId successor;
  std::optional<ExitReport> outcome;
  friend bool operator==(const SessionChain&, const SessionChain&) = default;
};

// What this sled did in one universe.
struct UniverseBoundary {
  itc::Version executed;               // V: exactly the sessions executed under here
  std::optional<SessionId> session;    // of the last executed job
  std::optional<JobId> last_executed;  // set together with session and successor
  std::optional<JobId> successor;      // the chain position after last_executed
  std::optional<ExitReport> outcome;   // how last_executed ended, once it did
  // Markers that bound a past this record does not know (an empty record's
  // entry marker, a filter hit's flip-flop marker, and their renewals): a
  // session is new here only if strictly above one of them. Kept for good.
  std::vector<itc::Version> floor;
  // The lightcone since the last execution (hop, entry and flip-flop markers,
  // renewals): a job of a session that is not new runs only if it, and the
  // job that derived its chain position, are strictly above one of them.
  std::vector<itc::Version> markers;
  // Sessions executed under here before the recorded one, oldest first, at
  // most left_sessions_max (rule 2 for each: a return resumes by position).
  std::vector<SessionChain> left_sessions;
  friend bool operator==(const UniverseBoundary&, const UniverseBoundary&) = default;
};

// A Bloom filter of networks: no false negatives; false positives (a network
// never left seen as left) only cost a lightcone hop, never a replay.
class NetworkFilter {
 public:
  void Insert(const NetworkId& network);
  bool MayContain(const NetworkId& network) const;
  size_t bits_set() const;
  std::span<const uint8_t> bytes() const { return bits_; }
  static NetworkFilter FromBytes(std::span<const uint8_t, kNetworkFilterBits / 8> bytes);
  friend bool operator==(const NetworkFilter&, const NetworkFilter&) = default;

 private:
  std::array<uint8_t, kNetworkFilterBits / 8> bits_{};
};

// How much of its past a record remembers.
enum class Amnesia : uint8_t {
  kNone = 0,
  // An empty record (a new sled, or both drives wiped): until its first
  // execution, every universe it joins gets an entry marker.
  kUntilFirstExecution = 1,
  // Reset by an operator after the drives disagreed: what it executed before
  // is forgotten, so every universe not in `left` is treated as left.
  kPermanent = 2,
};

struct LeftUniverse {
  NetworkId network;
  UniverseBoundary boundary;
  friend bool operator==(const LeftUniverse&, const LeftUniverse&) = default;
};

// Metadata only: never a command, an environment or output (the drives are
// unencrypted).
struct BoundaryRecord {
  std::optional<NetworkId> network;  // the universe `here` is about; none: empty
  UniverseBoundary here;
  std::vector<LeftUniverse> left;  // oldest first, at most left_universes_max
  NetworkFilter evicted;
  Amnesia amnesia = Amnesia::kUntilFirstExecution;
  uint32_t resets = 0;              // operator resets applied
  std::optional<Nonce> last_reset;  // the reset nonce of the last one
  friend bool operator==(const BoundaryRecord&, const BoundaryRecord&) = default;
};

// The record's one binary encoding (docs/sush-boundary.md). Decode reads
// hostile bytes: kInvalidArgument when malformed, kLimitExceeded past a
// named size; Encode fails with kLimitExceeded when a version passes
// kBoundaryVersionBytesMax or the record kBoundaryRecordBytesMax.
Result<Bytes> EncodeBoundary(const BoundaryRecord& record);
Result<BoundaryRecord> DecodeBoundary(std::span<const uint8_t> bytes);

// The largest record the format allows: kLeftUniversesMax left universes and
// the current one, each with V at kBoundaryVersionBytesMax, kMarkersMax
// markers of kMarkerBytesMax in each list, kLeftSessionsMax left sessions,
// outcomes with the longest error text, and the filter at its named capacity. For the size bound's
// test and the boundary bench; it encodes within kBoundaryRecordBytesMax.
BoundaryRecord WorstCaseBoundaryRecord();
// The largest version (events of many parties at distinct heights) whose
// encoding fits `max_bytes`.
itc::Version LargestVersion(size_t max_bytes);

// ---- The rules ----

// Designs the seed records as rejected, switchable only by the simulator's
// negative controls (components/sim); a server never sets one.
struct BoundaryFlaws {
  bool single_session_version = false;    // V := the last session's start, not the join
  bool no_filter_insert_on_hit = false;   // a flip-flop overwrites the record's network
  bool lazy_entry_marker = false;         // the entry marker minted at first execution
  bool unpersisted_entry_marker = false;  // the entry marker kept in memory only
  bool zombies_by_join_frontier = false;  // previous-life starts by the frontier at drain
  bool record_after_start = false;        // the record written after the process starts
  bool position_unchecked = false;        // a gated job judged without its predecessor
  bool rehop_past = false;      // a session not below V but not above the floor held to a hop
  bool reused_heights = false;  // own sends after a crash may reissue a height the record holds
  bool any() const {
    return single_session_version || no_filter_insert_on_hit || lazy_entry_marker ||
           unpersisted_entry_marker || zombies_by_join_frontier || record_after_start ||
           position_unchecked || rehop_past || reused_heights;
  }
};

struct BoundaryOptions {
  size_t left_universes_max = kLeftUniversesMax;
  size_t left_sessions_max = kLeftSessionsMax;
  BoundaryFlaws flaws;
};

// What joining `network` asks of a record (rules 5 and 6), decided when the
// sled enters a universe (process start, bootstrap migration).
enum class Arrival : uint8_t {
  kKnown,     // the record's universe, or one in the map: exact
  kNew,       // never left: its queue runs (a healthy cold boot skips nothing)
  kEntry,     // amnesic: mint an entry marker now (LifeMarker), V := marker
  kFlipFlop,  // in the filter: gossip UniverseFlipFlop, its version is the marker, V := marker
};
Arrival ClassifyArrival(const BoundaryRecord& record, const NetworkId& network,
                        const BoundaryOptions& options);

// The record's boundary for `network`: `here`, a map entry, or null when the
// universe was never entered (a fresh boundary, V bottom). Points into
// `record`: valid while the record is neither changed nor destroyed.
const UniverseBoundary* BoundaryFor(const BoundaryRecord& record, const NetworkId& network);
// Every version the record holds for `network` (V, the floor, the markers):
// the heights a sled's own sends must stay above after a restart (its
// bookmark may have lost them), and what a peer must have heard for a session
// it starts to be judged above this sled's markers.
itc::Version RecordedHeights(const BoundaryRecord& record, const NetworkId& network);
// Where the chain of `session` stands in `boundary`: the recorded session's,
// or a left session's; nullopt if neither.
std::optional<SessionChain> ChainOf(const UniverseBoundary& boundary, const SessionId& session);

// How a session's jobs are judged (rules 2-4), from the boundary of its universe.
enum class SessionVerdict : uint8_t {
  kResume,         // the recorded session or a left one: resume by chain position
                   // after its last_executed (ChainOf)
  kNew,            // its start is not below V (and above the floor, if any): never
                   // executed there, its queue runs
  kPastForgotten,  // not below V but not above the floor: never executed there
                   // since the record began, perhaps in the past it forgot; a job
                   // runs iff it and its predecessor are above a floor or lightcone
                   // marker (made after that past)
  kGated,          // markers stand: a job runs iff it and its predecessor are above one
  kNeedsHop,       // anything else: a lightcone hop (gossip SessionHop; it is the marker)
};
SessionVerdict JudgeSession(const BoundaryRecord& record, const NetworkId& network,
                            const SessionId& session, const itc::Version& session_start);
// Whether a job of that session with version `job_version` may run now at its
// chain position, which the job of version `predecessor` derived (nullptr: the
// session's first position, or one whose predecessor is unknown). Gated, both
// must be strictly above a marker: at most once is per position, and a job
// created after the marker may claim a position that existed before it.
bool JobMayRun(const BoundaryRecord& record, const NetworkId& network, SessionVerdict verdict,
               const itc::Version& job_version, const itc::Version* predecessor);

// The record after `job` of `session` is executed in `network` (rule 3's
// fold and rule 1's chain fields; the marker is dropped: lightcone gates only
// the first execution after re-entry).
BoundaryRecord AfterExecution(BoundaryRecord record, const NetworkId& network,
                              const SessionId& session, const itc::Version& session_start,
                              const JobId& job, const itc::Version& job_version,
                              const JobId& successor, const BoundaryOptions& options);
enum class MarkerKind : uint8_t { kEntry, kFlipFlop, kHop, kRenew };
// The record once a marker of `kind` minted in `network` is known.
BoundaryRecord AfterMarker(BoundaryRecord record, const NetworkId& network,
                           const itc::Version& marker, MarkerKind kind,
                           const BoundaryOptions& options);
// The record once `job` ended with `outcome` (kept only for a last_executed).
BoundaryRecord AfterEnd(BoundaryRecord record, const JobId& job, const ExitReport& outcome);
// The outcome the record kept for `job` (a last_executed of any session and
// universe it holds), if any.
std::optional<ExitReport> RecordedOutcome(const BoundaryRecord& record, const JobId& job);
// The record an operator's reset writes over a discarded one.
BoundaryRecord ResetRecord(const Nonce& reset_nonce);

// ---- The seam ----

// One drive as the store last saw it, for operators.
struct DriveStatus {
  std::string path;
  std::string state = "ok";  // ok, record missing, corrupt, io error, missing folder
  std::string message;
  uint64_t sequence = 0;  // of the record it holds
  friend bool operator==(const DriveStatus&, const DriveStatus&) = default;
};

// What the drives held when the sled started.
struct BoundaryLoad {
  std::optional<BoundaryRecord> record;  // nullopt: untrusted
  std::string verdict = "empty";         // the locker's verdict, for operators
  std::string untrusted_reason;          // why, when untrusted
  std::vector<DriveStatus> drives;
};

class BoundaryStore {
 public:
  virtual ~BoundaryStore() = default;
  virtual const BoundaryLoad& loaded() const = 0;
  // Durably records `record` (both drives) before the job it names starts.
  // On error the job must not run, and the drives may hold either record.
  // Called only from the sled core's thread.
  virtual Status Record(const BoundaryRecord& record) = 0;
  // After an untrusted load: writes `record` over whatever the drives hold.
  virtual Status Reset(const BoundaryRecord& record) = 0;
  // The drives' health now, for operators (GET /v1/boundary).
  virtual std::vector<DriveStatus> Drives() const { return loaded().drives; }
};

// Keeps the record in memory. Not thread-safe.
class MemoryBoundaryStore final : public BoundaryStore {
 public:
  MemoryBoundaryStore() { load_.record = BoundaryRecord{}; }
  // Starts from `load` (a record, or untrusted).
  explicit MemoryBoundaryStore(BoundaryLoad load) : load_(std::move(load)) {}

  const BoundaryLoad& loaded() const override { return load_; }
  Status Record(const BoundaryRecord& record) override;
  Status Reset(const BoundaryRecord& record) override { return Record(record); }

  // The next Record fails with `error` and records nothing.
  void FailNext(Error error) { fail_next_ = std::move(error); }
  const std::vector<BoundaryRecord>& records() const { return records_; }
  // The last record written, or the loaded one.
  std::optional<BoundaryRecord> current() const;

 private:
  BoundaryLoad load_;
  std::optional<Error> fail_next_;
  std::vector<BoundaryRecord> records_;
};

}  // namespace once::rack
