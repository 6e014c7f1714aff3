// The boundary record as a value: its one encoding (round trips, hostile
// bytes), the bounds its named sizes promise (the worst case fits, the
// filter's false-positive rate at its capacity), the map of left universes
// and its eviction into the filter, and the verdicts of the pure rules.

#include <gtest/gtest.h>

#include "once/base/rng.h"
#include "once/itc/party.h"
#include "once/rack/boundary.h"

namespace once::rack {
namespace {

NetworkId Network(uint8_t n) {
  NetworkId id;
  id.bytes.fill(n);
  return id;
}

JobId Job(uint8_t n) {
  std::array<uint8_t, kId88Bytes> raw{};
  raw.fill(n);
  return JobId{raw};
}

SessionId Session(uint8_t n) {
  std::array<uint8_t, kId88Bytes> raw{};
  raw.fill(n);
  return SessionId{raw};
}

// Versions of one causal history, made by two parties ticking in turn.
struct History {
  itc::Party a = itc::Party::Seed();
  itc::Party b = a.Fork().value();
  itc::Version now;
  itc::Version TickA() { return now = itc::Tick(now, a).value(); }
  itc::Version TickB() { return now = itc::Tick(now, b).value(); }
};

BoundaryRecord Executed(BoundaryRecord record, const NetworkId& network, uint8_t session,
                        const itc::Version& start, uint8_t job, const itc::Version& job_version,
                        BoundaryOptions options = {}) {
  return AfterExecution(std::move(record), network, Session(session), start, Job(job), job_version,
                        Job(job + 1), options);
}

TEST(BoundaryRecordTest, ATypicalRecordRoundTripsAndEncodesCanonically) {
  History h;
  BoundaryRecord record;
  record = AfterMarker(record, Network(1), h.TickA(), MarkerKind::kEntry, {});
  const itc::Version start = h.TickB();
  record = Executed(record, Network(1), 7, start, 9, h.TickA());
  record = AfterEnd(record, Job(9),
                    ExitReport{ExitOutcome{ExitOutcome::Kind::kExited, 3, ""}, {12, {}}, {0, {}}});
  record = Executed(record, Network(2), 8, h.TickB(), 20, h.TickA());
  auto bytes = EncodeBoundary(record);
  ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
  auto decoded = DecodeBoundary(*bytes);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
  EXPECT_EQ(*decoded, record);
  EXPECT_EQ(EncodeBoundary(*decoded).value(), *bytes);
  ASSERT_EQ(decoded->left.size(), 1u);
  EXPECT_EQ(decoded->left[0].network, Network(1));
  EXPECT_EQ(decoded->left[0].boundary.last_executed, Job(9));
  EXPECT_EQ(decoded->left[0].boundary.outcome->outcome.code, 3);
  EXPECT_EQ(decoded->here.last_executed, Job(20));
  EXPECT_EQ(decoded->amnesia, Amnesia::kNone);
}

TEST(BoundaryRecordTest, TheWorstCaseFitsItsNamedBound) {
  const BoundaryRecord worst = WorstCaseBoundaryRecord();
  EXPECT_EQ(worst.left.size(), kLeftUniversesMax);
  EXPECT_EQ(worst.here.floor.size(), kMarkersMax);
  EXPECT_EQ(worst.here.markers.size(), kMarkersMax);
  EXPECT_EQ(worst.here.outcome->outcome.error.size(), kBoundaryErrorTextBytesMax);
  auto bytes = EncodeBoundary(worst);
  ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
  EXPECT_LE(bytes->size(), kBoundaryRecordBytesMax);
  EXPECT_GT(bytes->size(), kLeftUniversesMax * kBoundaryVersionBytesMax);  // it is the worst
  EXPECT_EQ(DecodeBoundary(*bytes).value(), worst);
  // One byte of version more than the bound is refused when written.
  BoundaryRecord over = worst;
  over.here.executed = LargestVersion(kBoundaryVersionBytesMax + 64);
  ASSERT_GT(over.here.executed.Encode().size(), kBoundaryVersionBytesMax);
  auto refused = EncodeBoundary(over);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kLimitExceeded);
}

TEST(BoundaryRecordTest, HostileBytesAreTypedErrorsNeverACrash) {
  History h;
  BoundaryRecord record = Executed({}, Network(1), 7, h.TickA(), 9, h.TickB());
  record = Executed(record, Network(2), 8, h.TickA(), 10, h.TickB());
  const Bytes bytes = EncodeBoundary(record).value();
  for (size_t n = 0; n < bytes.size(); ++n) {  // every truncation
    auto r = DecodeBoundary(std::span(bytes).first(n));
    ASSERT_FALSE(r.has_value()) << n;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << n;
  }
  Bytes trailing = bytes;
  trailing.push_back(0);
  EXPECT_EQ(DecodeBoundary(trailing).error().code, ErrorCode::kInvalidArgument);
  Bytes format = bytes;
  format[0] = 9;
  EXPECT_NE(DecodeBoundary(format).error().message.find("format 9"), std::string::npos);
  Bytes flags = bytes;
  flags[1] = 0x80;
  EXPECT_EQ(DecodeBoundary(flags).error().code, ErrorCode::kInvalidArgument);
  Bytes huge(kBoundaryRecordBytesMax + 1, 0);
  EXPECT_EQ(DecodeBoundary(huge).error().code, ErrorCode::kLimitExceeded);
  // Every single-byte flip decodes to an error or to a record that encodes
  // back to exactly those bytes.
  for (size_t i = 0; i < bytes.size(); ++i) {
    Bytes flipped = bytes;
    flipped[i] ^= 0x5a;
    auto r = DecodeBoundary(flipped);
    if (r) {
      EXPECT_EQ(EncodeBoundary(*r).value(), flipped) << i;
    }
  }
}

TEST(BoundaryRecordTest, AUniverseListedTwiceIsRefused) {
  BoundaryRecord record;
  record.network = Network(1);
  record.left.push_back(LeftUniverse{Network(2), {}});
  record.left.push_back(LeftUniverse{Network(2), {}});
  const Bytes bytes = EncodeBoundary(record).value();
  auto r = DecodeBoundary(bytes);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("twice"), std::string::npos);
}

// The filter's false-positive rate with kNetworkFilterCapacity networks in
// it is at most kNetworkFilterFalsePositiveMax: exactly, from the share of
// bits set (a network never inserted is a false positive iff all its probes
// land on set bits), and as measured over a million other networks.
TEST(BoundaryRecordTest, TheFilterAtItsCapacityKeepsItsFalsePositiveBound) {
  SeededRng rng(2026);
  NetworkFilter filter;
  std::vector<NetworkId> inserted;
  for (size_t i = 0; i < kNetworkFilterCapacity; ++i) {
    inserted.push_back(NetworkId::Random(rng));
    filter.Insert(inserted.back());
  }
  for (const NetworkId& n : inserted) ASSERT_TRUE(filter.MayContain(n));  // no false negative
  double share = static_cast<double>(filter.bits_set()) / kNetworkFilterBits;
  double rate = 1;
  for (size_t p = 0; p < kNetworkFilterProbes; ++p) rate *= share;
  EXPECT_LE(rate, kNetworkFilterFalsePositiveMax);
  constexpr int kProbes = 1'000'000;
  int hits = 0;
  for (int i = 0; i < kProbes; ++i) hits += filter.MayContain(NetworkId::Random(rng)) ? 1 : 0;
  EXPECT_LE(hits, 3 * kNetworkFilterFalsePositiveMax * kProbes) << "measured " << hits;
}

// Rule 5: whenever the record's network changes, the old one goes into the
// map first; beyond its cap the oldest falls into the filter, never lost.
TEST(BoundaryRecordTest, TheMapKeepsItsCapAndEvictsTheOldestIntoTheFilter) {
  History h;
  BoundaryRecord record;
  record.amnesia = Amnesia::kNone;
  for (uint8_t n = 1; n <= kLeftUniversesMax + 2; ++n) {
    record = Executed(record, Network(n), n, h.TickA(), n, h.TickB());
  }
  EXPECT_EQ(record.network, Network(kLeftUniversesMax + 2));
  ASSERT_EQ(record.left.size(), kLeftUniversesMax);
  EXPECT_EQ(record.left.front().network, Network(2));
  EXPECT_TRUE(record.evicted.MayContain(Network(1)));
  EXPECT_EQ(BoundaryFor(record, Network(1)), nullptr);
  EXPECT_EQ(BoundaryFor(record, Network(2))->last_executed, Job(2));
  EXPECT_EQ(ClassifyArrival(record, Network(1), {}), Arrival::kFlipFlop);
  EXPECT_EQ(ClassifyArrival(record, Network(2), {}), Arrival::kKnown);
  EXPECT_EQ(ClassifyArrival(record, Network(200), {}), Arrival::kNew);
  // Returning to a mapped universe takes its entry out of the map: exact.
  record = Executed(record, Network(2), 2, h.TickA(), 30, h.TickB());
  EXPECT_EQ(record.left.size(), kLeftUniversesMax);
  EXPECT_EQ(record.left.back().network, Network(kLeftUniversesMax + 2));
  EXPECT_FALSE(record.evicted.MayContain(Network(200)));
}

// The insert in every branch: a flip-flop into a universe found in the
// filter still puts the one it leaves into the map (here capped at 0, so
// into the filter), so a second flip-flop is caught too.
TEST(BoundaryRecordTest, AFlipFlopIntoTheFilterStillRemembersTheUniverseItLeaves) {
  History h;
  BoundaryOptions no_map{.left_universes_max = 0};
  BoundaryRecord record;
  record.amnesia = Amnesia::kNone;
  record = Executed(record, Network(1), 1, h.TickA(), 1, h.TickB(), no_map);
  record = Executed(record, Network(2), 2, h.TickA(), 2, h.TickB(), no_map);
  EXPECT_TRUE(record.evicted.MayContain(Network(1)));
  ASSERT_EQ(ClassifyArrival(record, Network(1), no_map), Arrival::kFlipFlop);
  record = AfterMarker(record, Network(1), h.TickA(), MarkerKind::kFlipFlop, no_map);
  EXPECT_EQ(record.network, Network(1));
  EXPECT_EQ(ClassifyArrival(record, Network(2), no_map), Arrival::kFlipFlop);
  BoundaryOptions flawed = no_map;
  flawed.flaws.no_filter_insert_on_hit = true;
  BoundaryRecord replayed;
  replayed.amnesia = Amnesia::kNone;
  replayed = Executed(replayed, Network(1), 1, h.TickA(), 1, h.TickB(), flawed);
  replayed = Executed(replayed, Network(2), 2, h.TickA(), 2, h.TickB(), flawed);
  replayed = AfterMarker(replayed, Network(1), h.TickA(), MarkerKind::kFlipFlop, flawed);
  EXPECT_EQ(ClassifyArrival(replayed, Network(2), flawed), Arrival::kNew)  // the replay
      << "the negative control no longer shows the rejected design";
}

// Rules 2-4 as pure functions: the recorded session resumes; a session whose
// start is not below V was never executed here; anything else needs a hop,
// after which only a job above the marker whose predecessor is above it too
// may run.
TEST(BoundaryRecordTest, SessionsAreJudgedAgainstV) {
  itc::Party a = itc::Party::Seed();
  itc::Party b = a.Fork().value();
  const itc::Version old = itc::Tick(itc::Version(), a).value();  // session 1
  const itc::Version sa = itc::Tick(old, a).value();              // session 2, saw 1
  const itc::Version sb = itc::Tick(old, b).value();              // session 3, beside 2
  BoundaryRecord record;
  record.amnesia = Amnesia::kNone;
  BoundaryOptions v_alone{.left_sessions_max = 0};  // V decides: no left sessions kept
  auto Executed = [&](BoundaryRecord r, const NetworkId& n, uint8_t session,
                      const itc::Version& start, uint8_t job, const itc::Version& v) {
    return rack::Executed(std::move(r), n, session, start, job, v, v_alone);
  };
  record = Executed(record, Network(1), 3, sb, 1, itc::Tick(sb, b).value());
  EXPECT_EQ(JudgeSession(record, Network(1), Session(3), sb), SessionVerdict::kResume);
  EXPECT_EQ(JudgeSession(record, Network(1), Session(2), sa), SessionVerdict::kNew);
  const itc::Version a_job = itc::Tick(itc::Join(sa, sb), a).value();
  record = Executed(record, Network(1), 2, sa, 2, a_job);
  EXPECT_EQ(JudgeSession(record, Network(1), Session(2), sa), SessionVerdict::kResume);
  EXPECT_EQ(JudgeSession(record, Network(1), Session(1), old), SessionVerdict::kNeedsHop);
  // Back to session 3, below V = sa v sb, neither older nor newer: a hop.
  EXPECT_EQ(JudgeSession(record, Network(1), Session(3), sb), SessionVerdict::kNeedsHop);
  const itc::Version before_hop = itc::Tick(a_job, b).value();
  const itc::Version marker = itc::Tick(before_hop, a).value();
  record = AfterMarker(record, Network(1), marker, MarkerKind::kHop, v_alone);
  EXPECT_EQ(JudgeSession(record, Network(1), Session(3), sb), SessionVerdict::kGated);
  const itc::Version after = itc::Tick(marker, b).value();
  const itc::Version later = itc::Tick(after, b).value();
  EXPECT_FALSE(JobMayRun(record, Network(1), SessionVerdict::kGated, before_hop, &sb));
  EXPECT_FALSE(JobMayRun(record, Network(1), SessionVerdict::kGated, after, &before_hop))
      << "a new job at a position from before the hop";
  EXPECT_TRUE(JobMayRun(record, Network(1), SessionVerdict::kGated, later, &after));
  // The first execution after the hop drops the markers: chain position rules.
  record = Executed(record, Network(1), 3, sb, 3, later);
  EXPECT_TRUE(record.here.markers.empty());
  EXPECT_EQ(JudgeSession(record, Network(1), Session(3), sb), SessionVerdict::kResume);
  EXPECT_EQ(JudgeSession(record, Network(1), Session(2), sa), SessionVerdict::kNeedsHop);
}

// The record keeps where each session's chain stood when the sled left it
// (at most kLeftSessionsMax besides the recorded one, the oldest dropped): a
// return resumes it exactly; a dropped one is judged by V.
TEST(BoundaryRecordTest, LeftSessionsResumeExactlyUpToTheirCap) {
  History h;
  BoundaryRecord record;
  record.amnesia = Amnesia::kNone;
  std::vector<itc::Version> starts;
  for (uint8_t n = 1; n <= kLeftSessionsMax + 2; ++n) {
    starts.push_back(h.TickA());
    record = Executed(record, Network(1), n, starts.back(), 10 * n, h.TickB());
  }
  record = AfterEnd(record, Job(10 * (kLeftSessionsMax + 2)),
                    ExitReport{ExitOutcome{ExitOutcome::Kind::kExited, 4, ""}, {}, {}});
  ASSERT_EQ(record.here.left_sessions.size(), kLeftSessionsMax);
  EXPECT_EQ(record.here.left_sessions.front().session, Session(2));
  EXPECT_FALSE(ChainOf(record.here, Session(1)).has_value());  // dropped
  EXPECT_EQ(JudgeSession(record, Network(1), Session(1), starts[0]), SessionVerdict::kNeedsHop);
  auto two = ChainOf(record.here, Session(2));
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->last_executed, Job(20));
  EXPECT_EQ(two->successor, Job(21));
  EXPECT_EQ(JudgeSession(record, Network(1), Session(2), starts[1]), SessionVerdict::kResume);
  // Back to session 2: its entry comes out, the recorded one goes in.
  record = Executed(record, Network(1), 2, starts[1], 21, h.TickB());
  EXPECT_EQ(record.here.session, Session(2));
  EXPECT_FALSE(ChainOf(record.here, Session(2))->outcome.has_value());
  auto last = ChainOf(record.here, Session(kLeftSessionsMax + 2));
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->outcome->outcome.code, 4);  // its outcome went along
  EXPECT_EQ(RecordedOutcome(record, Job(10 * (kLeftSessionsMax + 2)))->outcome.code, 4);
  EXPECT_EQ(DecodeBoundary(EncodeBoundary(record).value()).value(), record);
  BoundaryRecord twice = record;
  twice.here.left_sessions.back() = twice.here.left_sessions.front();
  EXPECT_NE(DecodeBoundary(EncodeBoundary(twice).value()).error().message.find("twice"),
            std::string::npos);
}

// Rule 6: an empty record's entry marker is a floor: a session is new only
// if its start is strictly above it; the marker survives the first execution
// as the floor, bounding the past the record never knew.
TEST(BoundaryRecordTest, AnEmptyRecordsEntryMarkerBoundsItsForgottenPast) {
  History h;
  const itc::Version old_session = h.TickB();  // from before the sled came
  const itc::Version entry = h.TickA();
  BoundaryRecord record;  // amnesic until its first execution
  EXPECT_EQ(ClassifyArrival(record, Network(1), {}), Arrival::kEntry);
  record = AfterMarker(record, Network(1), entry, MarkerKind::kEntry, {});
  EXPECT_EQ(JudgeSession(record, Network(1), Session(1), old_session),
            SessionVerdict::kPastForgotten);
  const itc::Version new_session = h.TickB();
  EXPECT_EQ(JudgeSession(record, Network(1), Session(2), new_session), SessionVerdict::kNew);
  record = Executed(record, Network(1), 2, new_session, 1, h.TickB());
  EXPECT_EQ(record.amnesia, Amnesia::kNone);
  EXPECT_EQ(record.here.floor.size(), 1u);
  EXPECT_NE(JudgeSession(record, Network(1), Session(1), old_session), SessionVerdict::kNew);
}

}  // namespace
}  // namespace once::rack
