#include "once/rack/boundary.h"

#include <algorithm>

#include "wire.h"

namespace once::rack {
namespace {

using wire::Reader;
using wire::Writer;

constexpr uint8_t kRecordFormat = 1;
constexpr uint8_t kHasNetwork = 1;
constexpr uint8_t kHasChain = 1;  // session, last_executed, successor
constexpr uint8_t kHasOutcome = 2;
constexpr uint8_t kHasLastReset = 2;

bool StrictlyAbove(const itc::Version& v, const itc::Version& floor) {
  return itc::Leq(floor, v) && !(v == floor);
}

// ---- encoding ----

Status WriteVersion(Writer& w, const itc::Version& v,
                    const char* limit = "boundary_version_bytes_max",
                    size_t max = kBoundaryVersionBytesMax) {
  const Bytes bytes = v.Encode();
  ONCE_RETURN_IF_ERROR(wire::CheckSize(limit, bytes.size(), max));
  w.U16(static_cast<uint16_t>(bytes.size()));
  w.Raw(bytes);
  return Ok();
}

Result<itc::Version> ReadVersion(Reader& r, const char* limit = "boundary_version_bytes_max",
                                 size_t max = kBoundaryVersionBytesMax) {
  ONCE_ASSIGN_OR_RETURN(uint16_t size, r.U16());
  ONCE_RETURN_IF_ERROR(wire::CheckSize(limit, size, max));
  if (size > r.remaining()) return MakeError(ErrorCode::kInvalidArgument, "truncated");
  Bytes bytes(size);
  for (uint8_t& b : bytes) {
    ONCE_ASSIGN_OR_RETURN(b, r.U8());
  }
  auto version = itc::Version::Decode(bytes);
  if (!version) {
    return MakeError(ErrorCode::kInvalidArgument, "bad version: " + version.error().message);
  }
  return *version;
}

template <class Id>
Result<Id> ReadId(Reader& r) {
  ONCE_ASSIGN_OR_RETURN(auto raw, r.Fixed<kId88Bytes>());
  return Id{raw};
}

Status WriteOutcome(Writer& w, const ExitReport& report) {
  w.U8(static_cast<uint8_t>(report.outcome.kind));
  w.U32(static_cast<uint32_t>(report.outcome.code));
  const std::string& error = report.outcome.error;
  ONCE_RETURN_IF_ERROR(
      wire::CheckSize("boundary_error_text_bytes_max", error.size(), kBoundaryErrorTextBytesMax));
  w.U16(static_cast<uint16_t>(error.size()));
  w.Raw({reinterpret_cast<const uint8_t*>(error.data()), error.size()});
  for (const OutputSummary* s : {&report.stdout_summary, &report.stderr_summary}) {
    w.U64(s->bytes);
    w.Raw(s->hash);
  }
  return Ok();
}

Result<ExitReport> ReadOutcome(Reader& r) {
  ExitReport report;
  ONCE_ASSIGN_OR_RETURN(uint8_t kind, r.U8());
  if (kind < 1 || kind > 3) return MakeError(ErrorCode::kInvalidArgument, "unknown exit kind");
  report.outcome.kind = static_cast<ExitOutcome::Kind>(kind);
  ONCE_ASSIGN_OR_RETURN(uint32_t code, r.U32());
  report.outcome.code = static_cast<int32_t>(code);
  ONCE_ASSIGN_OR_RETURN(uint16_t size, r.U16());
  ONCE_RETURN_IF_ERROR(
      wire::CheckSize("boundary_error_text_bytes_max", size, kBoundaryErrorTextBytesMax));
  for (uint16_t i = 0; i < size; ++i) {
    ONCE_ASSIGN_OR_RETURN(uint8_t c, r.U8());
    report.outcome.error.push_back(static_cast<char>(c));
  }
  for (OutputSummary* s : {&report.stdout_summary, &report.stderr_summary}) {
    ONCE_ASSIGN_OR_RETURN(s->bytes, r.U64());
    ONCE_ASSIGN_OR_RETURN(s->hash, r.Fixed<32>());
  }
  return report;
}

Status WriteMarkers(Writer& w, const std::vector<itc::Version>& markers) {
  ONCE_RETURN_IF_ERROR(wire::CheckSize("markers_max", markers.size(), kMarkersMax));
  w.U8(static_cast<uint8_t>(markers.size()));
  for (const itc::Version& m : markers) {
    ONCE_RETURN_IF_ERROR(WriteVersion(w, m, "marker_bytes_max", kMarkerBytesMax));
  }
  return Ok();
}

Result<std::vector<itc::Version>> ReadMarkers(Reader& r) {
  ONCE_ASSIGN_OR_RETURN(uint8_t count, r.U8());
  ONCE_RETURN_IF_ERROR(wire::CheckSize("markers_max", count, kMarkersMax));
  std::vector<itc::Version> out;
  for (uint8_t i = 0; i < count; ++i) {
    ONCE_ASSIGN_OR_RETURN(itc::Version m, ReadVersion(r, "marker_bytes_max", kMarkerBytesMax));
    out.push_back(std::move(m));
  }
  return out;
}

Status WriteUniverse(Writer& w, const UniverseBoundary& u) {
  const bool chain = u.session.has_value();
  if (chain != u.last_executed.has_value() || chain != u.successor.has_value()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "boundary: session, last_executed and successor go together");
  }
  w.U8(static_cast<uint8_t>((chain ? kHasChain : 0) | (u.outcome ? kHasOutcome : 0)));
  ONCE_RETURN_IF_ERROR(WriteVersion(w, u.executed));
  if (chain) {
    w.Raw(u.session->bytes);
    w.Raw(u.last_executed->bytes);
    w.Raw(u.successor->bytes);
  }
  if (u.outcome) ONCE_RETURN_IF_ERROR(WriteOutcome(w, *u.outcome));
  ONCE_RETURN_IF_ERROR(WriteMarkers(w, u.floor));
  ONCE_RETURN_IF_ERROR(WriteMarkers(w, u.markers));
  ONCE_RETURN_IF_ERROR(
      wire::CheckSize("left_sessions_max", u.left_sessions.size(), kLeftSessionsMax));
  w.U8(static_cast<uint8_t>(u.left_sessions.size()));
  for (const SessionChain& c : u.left_sessions) {
    w.Raw(c.session.bytes);
    w.Raw(c.last_executed.bytes);
    w.Raw(c.successor.bytes);
    w.U8(c.outcome ? kHasOutcome : 0);
    if (c.outcome) ONCE_RETURN_IF_ERROR(WriteOutcome(w, *c.outcome));
  }
  return Ok();
}

Result<UniverseBoundary> ReadUniverse(Reader& r) {
  UniverseBoundary u;
  ONCE_ASSIGN_OR_RETURN(uint8_t flags, r.U8());
  if (flags & ~(kHasChain | kHasOutcome)) {
    return MakeError(ErrorCode::kInvalidArgument, "boundary: unknown universe flags");
  }
  ONCE_ASSIGN_OR_RETURN(u.executed, ReadVersion(r));
  if (flags & kHasChain) {
    ONCE_ASSIGN_OR_RETURN(u.session, ReadId<SessionId>(r));
    ONCE_ASSIGN_OR_RETURN(u.last_executed, ReadId<JobId>(r));
    ONCE_ASSIGN_OR_RETURN(u.successor, ReadId<JobId>(r));
  }
  if (flags & kHasOutcome) {
    ONCE_ASSIGN_OR_RETURN(u.outcome, ReadOutcome(r));
  }
  ONCE_ASSIGN_OR_RETURN(u.floor, ReadMarkers(r));
  ONCE_ASSIGN_OR_RETURN(u.markers, ReadMarkers(r));
  ONCE_ASSIGN_OR_RETURN(uint8_t sessions, r.U8());
  ONCE_RETURN_IF_ERROR(wire::CheckSize("left_sessions_max", sessions, kLeftSessionsMax));
  for (uint8_t i = 0; i < sessions; ++i) {
    SessionChain c;
    ONCE_ASSIGN_OR_RETURN(c.session, ReadId<SessionId>(r));
    ONCE_ASSIGN_OR_RETURN(c.last_executed, ReadId<JobId>(r));
    ONCE_ASSIGN_OR_RETURN(c.successor, ReadId<JobId>(r));
    ONCE_ASSIGN_OR_RETURN(uint8_t chain_flags, r.U8());
    if (chain_flags & ~kHasOutcome) {
      return MakeError(ErrorCode::kInvalidArgument, "boundary: unknown session flags");
    }
    if (chain_flags & kHasOutcome) {
      ONCE_ASSIGN_OR_RETURN(c.outcome, ReadOutcome(r));
    }
    if (u.session == c.session || ChainOf(u, c.session)) {
      return MakeError(ErrorCode::kInvalidArgument, "boundary: a session listed twice");
    }
    u.left_sessions.push_back(std::move(c));
  }
  return u;
}

Result<NetworkId> ReadNetwork(Reader& r) {
  ONCE_ASSIGN_OR_RETURN(auto raw, r.Fixed<16>());
  NetworkId network;
  network.bytes = raw;
  return network;
}

// ---- the rules ----

std::vector<LeftUniverse>::const_iterator FindLeft(const BoundaryRecord& record,
                                                   const NetworkId& network) {
  return std::find_if(record.left.begin(), record.left.end(),
                      [&](const LeftUniverse& l) { return l.network == network; });
}

bool KnownExactly(const BoundaryRecord& record, const NetworkId& network) {
  return record.network == network || FindLeft(record, network) != record.left.end();
}

// Makes `network` the record's universe. Whenever the record's network
// changes, the old one goes into the map first (evicting the oldest into the
// filter), in every branch.
// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
void Enter(BoundaryRecord& record, const NetworkId& network, const BoundaryOptions& options) {
  if (record.network == network) return;
  UniverseBoundary entered;  // what the map knows of it (taken out before any eviction)
  if (auto it = FindLeft(record, network); it != record.left.end()) {
    entered = it->boundary;
    record.left.erase(it);
  }
  if (record.network) {
    record.left.push_back(LeftUniverse{*record.network, std::move(record.here)});
    while (record.left.size() > options.left_universes_max) {
      record.evicted.Insert(record.left.front().network);
      record.left.erase(record.left.begin());
    }
  }
  record.here = std::move(entered);
  record.network = network;
}

void RecordOutcome(UniverseBoundary& u, const JobId& job, const ExitReport& outcome) {
  ExitReport kept = outcome;
  if (kept.outcome.error.size() > kBoundaryErrorTextBytesMax) {
    kept.outcome.error.resize(kBoundaryErrorTextBytesMax);
  }
  if (u.last_executed == job) u.outcome = kept;
  for (SessionChain& c : u.left_sessions) {
    if (c.last_executed == job) c.outcome = kept;
  }
}

// The recorded session's chain goes into the left sessions (its own entry,
// if `next` is one of them, comes out first: it is about to be recorded), the
// oldest beyond the cap dropped: a dropped session is judged by V alone.
void LeaveSession(UniverseBoundary& u, const SessionId& next, const BoundaryOptions& options) {
  std::erase_if(u.left_sessions, [&](const SessionChain& c) { return c.session == next; });
  if (u.session) {
    u.left_sessions.push_back(SessionChain{*u.session, *u.last_executed, *u.successor, u.outcome});
  }
  const size_t cap = std::min(options.left_sessions_max, kLeftSessionsMax);
  while (u.left_sessions.size() > cap) u.left_sessions.erase(u.left_sessions.begin());
}

}  // namespace

// ---- NetworkFilter ----

namespace {
// The probe positions of a network: 13-bit slices of BLAKE2b-256("once.sush.left" || id).
std::array<size_t, kNetworkFilterProbes> Probes(const NetworkId& network) {
  static_assert(kNetworkFilterBits == 8192 && kNetworkFilterProbes * 13 <= 256);
  const Digest256 digest = Blake2b256({AsBytes("once.sush.left"), network.bytes});
  std::array<size_t, kNetworkFilterProbes> out{};
  for (size_t p = 0; p < kNetworkFilterProbes; ++p) {
    size_t value = 0;
    for (size_t bit = 13 * p; bit < 13 * p + 13; ++bit) {
      value = value << 1 | ((digest[bit / 8] >> (7 - bit % 8)) & 1);
    }
    out[p] = value;
  }
  return out;
}
}  // namespace

void NetworkFilter::Insert(const NetworkId& network) {
  for (size_t bit : Probes(network)) bits_[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
}

bool NetworkFilter::MayContain(const NetworkId& network) const {
  for (size_t bit : Probes(network)) {
    if ((bits_[bit / 8] & (1u << (bit % 8))) == 0) return false;
  }
  return true;
}

size_t NetworkFilter::bits_set() const {
  size_t n = 0;
  for (uint8_t byte : bits_) n += static_cast<size_t>(__builtin_popcount(byte));
  return n;
}

NetworkFilter NetworkFilter::FromBytes(std::span<const uint8_t, kNetworkFilterBits / 8> bytes) {
  NetworkFilter filter;
  std::copy(bytes.begin(), bytes.end(), filter.bits_.begin());
  return filter;
}

// ---- codec ----

Result<Bytes> EncodeBoundary(const BoundaryRecord& record) {
  Writer w;
  w.U8(kRecordFormat);
  w.U8(record.network ? kHasNetwork : 0);
  if (record.network) w.Raw(record.network->bytes);
  w.U8(static_cast<uint8_t>(record.amnesia));
  w.U32(record.resets);
  w.U8(record.last_reset ? kHasLastReset : 0);
  if (record.last_reset) w.Raw(record.last_reset->bytes);
  ONCE_RETURN_IF_ERROR(WriteUniverse(w, record.here));
  if (record.left.size() > UINT16_MAX)
    return LimitError("left_universes_max", record.left.size(), UINT16_MAX);
  w.U16(static_cast<uint16_t>(record.left.size()));
  for (const LeftUniverse& left : record.left) {
    w.Raw(left.network.bytes);
    ONCE_RETURN_IF_ERROR(WriteUniverse(w, left.boundary));
  }
  w.Raw(record.evicted.bytes());
  Bytes out = w.Take();
  ONCE_RETURN_IF_ERROR(
      wire::CheckSize("boundary_record_bytes_max", out.size(), kBoundaryRecordBytesMax));
  return out;
}

Result<BoundaryRecord> DecodeBoundary(std::span<const uint8_t> bytes) {
  ONCE_RETURN_IF_ERROR(
      wire::CheckSize("boundary_record_bytes_max", bytes.size(), kBoundaryRecordBytesMax));
  Reader r(bytes);
  BoundaryRecord record;
  ONCE_ASSIGN_OR_RETURN(uint8_t format, r.U8());
  if (format != kRecordFormat) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "unknown boundary record format " + std::to_string(format));
  }
  ONCE_ASSIGN_OR_RETURN(uint8_t flags, r.U8());
  if (flags & ~kHasNetwork) return MakeError(ErrorCode::kInvalidArgument, "boundary: bad flags");
  if (flags & kHasNetwork) {
    ONCE_ASSIGN_OR_RETURN(record.network, ReadNetwork(r));
  }
  ONCE_ASSIGN_OR_RETURN(uint8_t amnesia, r.U8());
  if (amnesia > static_cast<uint8_t>(Amnesia::kPermanent)) {
    return MakeError(ErrorCode::kInvalidArgument, "boundary: unknown amnesia");
  }
  record.amnesia = static_cast<Amnesia>(amnesia);
  ONCE_ASSIGN_OR_RETURN(record.resets, r.U32());
  ONCE_ASSIGN_OR_RETURN(uint8_t reset_flags, r.U8());
  if (reset_flags & ~kHasLastReset) {
    return MakeError(ErrorCode::kInvalidArgument, "boundary: bad reset flags");
  }
  if (reset_flags & kHasLastReset) {
    ONCE_ASSIGN_OR_RETURN(record.last_reset, ReadId<Nonce>(r));
  }
  ONCE_ASSIGN_OR_RETURN(record.here, ReadUniverse(r));
  ONCE_ASSIGN_OR_RETURN(uint16_t left, r.U16());
  for (uint16_t i = 0; i < left; ++i) {
    LeftUniverse entry;
    ONCE_ASSIGN_OR_RETURN(entry.network, ReadNetwork(r));
    ONCE_ASSIGN_OR_RETURN(entry.boundary, ReadUniverse(r));
    if (record.network == entry.network || FindLeft(record, entry.network) != record.left.end()) {
      return MakeError(ErrorCode::kInvalidArgument, "boundary: a universe listed twice");
    }
    record.left.push_back(std::move(entry));
  }
  ONCE_ASSIGN_OR_RETURN(auto filter, r.Fixed<kNetworkFilterBits / 8>());
  record.evicted = NetworkFilter::FromBytes(filter);
  ONCE_RETURN_IF_ERROR(r.End());
  if (!record.network && !(record.here == UniverseBoundary{})) {
    return MakeError(ErrorCode::kInvalidArgument, "boundary: a boundary without its network");
  }
  return record;
}

// ---- rules ----

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
Arrival ClassifyArrival(const BoundaryRecord& record, const NetworkId& network,
                        const BoundaryOptions& options) {
  if (KnownExactly(record, network)) return Arrival::kKnown;
  if (record.amnesia != Amnesia::kNone) {
    // The rejected design mints nothing now and hops at the first execution.
    return options.flaws.lazy_entry_marker ? Arrival::kNew : Arrival::kEntry;
  }
  if (record.evicted.MayContain(network)) return Arrival::kFlipFlop;
  return Arrival::kNew;
}

std::optional<SessionChain> ChainOf(const UniverseBoundary& boundary, const SessionId& session) {
  if (boundary.session == session) {
    return SessionChain{session, *boundary.last_executed, *boundary.successor, boundary.outcome};
  }
  for (const SessionChain& c : boundary.left_sessions) {
    if (c.session == session) return c;
  }
  return std::nullopt;
}

const UniverseBoundary* BoundaryFor(const BoundaryRecord& record, const NetworkId& network) {
  if (record.network == network) return &record.here;
  if (auto it = FindLeft(record, network); it != record.left.end()) return &it->boundary;
  return nullptr;
}

namespace {

const itc::Version* Above(const std::vector<itc::Version>& markers, const itc::Version& v) {
  for (const itc::Version& m : markers) {
    if (StrictlyAbove(v, m)) return &m;
  }
  return nullptr;
}

void Push(std::vector<itc::Version>& markers, const itc::Version& m) {
  markers.push_back(m);
  if (markers.size() > kMarkersMax) markers.erase(markers.begin());
}

}  // namespace

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
itc::Version RecordedHeights(const BoundaryRecord& record, const NetworkId& network) {
  const UniverseBoundary* b = BoundaryFor(record, network);
  if (!b) return itc::Version{};
  itc::Version heights = b->executed;
  for (const itc::Version& v : b->floor) heights = itc::Join(heights, v);
  for (const itc::Version& v : b->markers) heights = itc::Join(heights, v);
  return heights;
}

SessionVerdict JudgeSession(const BoundaryRecord& record, const NetworkId& network,
                            const SessionId& session, const itc::Version& session_start) {
  const UniverseBoundary* b = BoundaryFor(record, network);
  if (!b) {
    // Its past there is unknown (amnesic, or a filter hit) and no marker
    // stands yet: only a hop makes anything safe to run.
    if (record.amnesia != Amnesia::kNone || record.evicted.MayContain(network)) {
      return SessionVerdict::kNeedsHop;
    }
    return SessionVerdict::kNew;  // never entered: V is bottom
  }
  if (ChainOf(*b, session)) return SessionVerdict::kResume;
  // Every session executed under here has its start below V, so one whose
  // start is not below V never was; a past the record forgot is bounded by
  // the floor instead, which only a start strictly above it clears.
  if (!itc::Leq(session_start, b->executed)) {
    if (b->floor.empty() || Above(b->floor, session_start)) return SessionVerdict::kNew;
    // Never executed here since the record began, but perhaps in the past
    // it forgot: what was made after one of its markers is new. (Holding it
    // to a hop instead skips a job owed since before a crash, once the
    // execution of another session's job has dropped the lightcone: model 3.)
    return SessionVerdict::kPastForgotten;
  }
  if (!b->markers.empty()) return SessionVerdict::kGated;
  return SessionVerdict::kNeedsHop;
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
bool JobMayRun(const BoundaryRecord& record, const NetworkId& network, SessionVerdict verdict,
               const itc::Version& job_version, const itc::Version* predecessor) {
  switch (verdict) {
    case SessionVerdict::kResume:
    case SessionVerdict::kNew:
      return true;
    case SessionVerdict::kGated: {
      // At most once is per chain position, and a new job can claim an old
      // position (another job held it across a partition): a position is new
      // only if the job whose digest derived it is above a marker (the
      // session's first position is as old as the session).
      const UniverseBoundary* b = BoundaryFor(record, network);
      return b && Above(b->markers, job_version) != nullptr && predecessor != nullptr &&
             Above(b->markers, *predecessor) != nullptr;
    }
    case SessionVerdict::kPastForgotten: {
      // A position made after any marker of this universe (the floor's
      // included: each was minted after the past it bounds) was never run.
      const UniverseBoundary* b = BoundaryFor(record, network);
      if (!b || predecessor == nullptr) return false;
      auto made_after = [&](const itc::Version& v) {
        return Above(b->floor, v) != nullptr || Above(b->markers, v) != nullptr;
      };
      return made_after(job_version) && made_after(*predecessor);
    }
    case SessionVerdict::kNeedsHop:
      return false;
  }
  return false;
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
BoundaryRecord AfterExecution(BoundaryRecord record, const NetworkId& network,
                              const SessionId& session, const itc::Version& session_start,
                              const JobId& job, const itc::Version& job_version,
                              const JobId& successor, const BoundaryOptions& options) {
  (void)job_version;
  Enter(record, network, options);
  UniverseBoundary& here = record.here;
  if (here.session != session) LeaveSession(here, session, options);
  here.executed = options.flaws.single_session_version ? session_start
                                                       : itc::Join(here.executed, session_start);
  here.session = session;
  here.last_executed = job;
  here.successor = successor;
  here.outcome.reset();
  here.markers.clear();  // lightcone gates only the first execution after re-entry
  if (record.amnesia == Amnesia::kUntilFirstExecution) record.amnesia = Amnesia::kNone;
  return record;
}

// Model: models/boundary.pml (issue 19; spin checks it, scripts/models).
BoundaryRecord AfterMarker(BoundaryRecord record, const NetworkId& network,
                           const itc::Version& marker, MarkerKind kind,
                           const BoundaryOptions& options) {
  const bool exact = KnownExactly(record, network);
  if (kind == MarkerKind::kFlipFlop && options.flaws.no_filter_insert_on_hit) {
    record.network = network;  // the rejected design: the old universe is forgotten
    record.here = UniverseBoundary{};
  } else {
    Enter(record, network, options);
  }
  // The rejected lazy design mints an amnesic record's entry marker as a hop
  // at its first job: it still bounds the forgotten past.
  if (kind == MarkerKind::kHop && !exact && record.amnesia != Amnesia::kNone) {
    kind = MarkerKind::kEntry;
  }
  UniverseBoundary& here = record.here;
  switch (kind) {
    case MarkerKind::kEntry:
    case MarkerKind::kFlipFlop:
      // The past here is forgotten (or never known): the marker bounds it.
      Push(here.floor, marker);
      Push(here.markers, marker);
      break;
    case MarkerKind::kHop:
      here.markers.clear();
      Push(here.markers, marker);
      break;
    case MarkerKind::kRenew:
      Push(here.markers, marker);
      if (!here.floor.empty()) Push(here.floor, marker);
      break;
  }
  return record;
}

BoundaryRecord AfterEnd(BoundaryRecord record, const JobId& job, const ExitReport& outcome) {
  RecordOutcome(record.here, job, outcome);
  for (LeftUniverse& left : record.left) RecordOutcome(left.boundary, job, outcome);
  return record;
}

std::optional<ExitReport> RecordedOutcome(const BoundaryRecord& record, const JobId& job) {
  auto in = [&](const UniverseBoundary& u) -> std::optional<ExitReport> {
    if (u.last_executed == job && u.outcome) return u.outcome;
    for (const SessionChain& c : u.left_sessions) {
      if (c.last_executed == job && c.outcome) return c.outcome;
    }
    return std::nullopt;
  };
  if (auto here = in(record.here)) return here;
  for (const LeftUniverse& left : record.left) {
    if (auto there = in(left.boundary)) return there;
  }
  return std::nullopt;
}

BoundaryRecord ResetRecord(const Nonce& reset_nonce) {
  BoundaryRecord record;
  record.amnesia = Amnesia::kPermanent;
  record.resets = 1;
  record.last_reset = reset_nonce;
  return record;
}

// ---- the worst case ----

itc::Version LargestVersion(size_t max_bytes) {
  itc::Version best;
  for (size_t parties = 2;; ++parties) {
    auto forked = itc::Party::Forks(itc::Party::Seed(), parties);
    if (!forked) break;
    itc::Version v;
    uint64_t height = 1;
    for (const itc::Party& p : *forked) {
      v = *itc::Ticks(v, p, height);
      height = height * 3 + 1;  // distinct heights: no two leaves merge
      if (height > (uint64_t{1} << 40)) height = 2;
    }
    if (v.Encode().size() > max_bytes) break;
    best = v;
  }
  return best;
}

BoundaryRecord WorstCaseBoundaryRecord() {
  const itc::Version v = LargestVersion(kBoundaryVersionBytesMax);
  const itc::Version m = LargestVersion(kMarkerBytesMax);
  auto full = [&](uint8_t fill) {
    UniverseBoundary u;
    u.executed = v;
    SessionId s;
    s.bytes.fill(fill);
    JobId j;
    j.bytes.fill(fill);
    u.session = s;
    u.last_executed = j;
    u.successor = j;
    ExitReport report;
    report.outcome =
        ExitOutcome{ExitOutcome::Kind::kFailed, 9, std::string(kBoundaryErrorTextBytesMax, 'e')};
    u.outcome = report;
    u.floor.assign(kMarkersMax, m);
    u.markers.assign(kMarkersMax, m);
    for (size_t i = 0; i < kLeftSessionsMax; ++i) {
      SessionChain c{s, j, j, report};
      c.session.bytes[0] = static_cast<uint8_t>(fill + 1 + i);  // distinct from s
      u.left_sessions.push_back(c);
    }
    return u;
  };
  BoundaryRecord worst;
  NetworkId here;
  here.bytes.fill(0xee);
  worst.network = here;
  worst.here = full(0xee);
  for (size_t i = 0; i < kLeftUniversesMax; ++i) {
    NetworkId left;
    left.bytes.fill(static_cast<uint8_t>(i + 1));
    worst.left.push_back(LeftUniverse{left, full(static_cast<uint8_t>(i))});
  }
  for (size_t i = 0; i < kNetworkFilterCapacity; ++i) {
    NetworkId evicted;
    evicted.bytes.fill(0);
    evicted.bytes[0] = static_cast<uint8_t>(i);
    evicted.bytes[1] = static_cast<uint8_t>(i >> 8);
    evicted.bytes[2] = 0x77;
    worst.evicted.Insert(evicted);
  }
  worst.amnesia = Amnesia::kPermanent;
  worst.resets = UINT32_MAX;
  worst.last_reset = Nonce{};
  return worst;
}

// ---- MemoryBoundaryStore ----

Status MemoryBoundaryStore::Record(const BoundaryRecord& record) {
  if (fail_next_) {
    Error error = std::move(*fail_next_);
    fail_next_.reset();
    return std::unexpected(std::move(error));
  }
  ONCE_RETURN_IF_ERROR(EncodeBoundary(record));  // what the drives would refuse, refuse here
  records_.push_back(record);
  return Ok();
}

std::optional<BoundaryRecord> MemoryBoundaryStore::current() const {
  if (!records_.empty()) return records_.back();
  return load_.record;
}

}  // namespace once::rack
