// The seed corpus of rack_boundary_fuzz (fuzz/corpus): boundary records as
// the rules write them through a sled's life (empty, an entry marker, an
// execution and its end, a move to another universe and back, evictions into
// the filter, an operator's reset) and the worst case of every field.

#include <gtest/gtest.h>

#include <map>

#include "once/fuzz_corpus/seeds.h"
#include "once/itc/clock.h"
#include "once/rack/boundary.h"

namespace once::rack {
namespace {

template <class Id>
Id Filled(uint8_t fill) {
  Id id;
  id.bytes.fill(fill);
  return id;
}

NetworkId Network(uint8_t fill) {
  NetworkId n;
  n.bytes.fill(fill);
  return n;
}

TEST(FuzzSeeds, BoundaryRecordsAreCurrentEncodings) {
  std::map<std::string, std::string> seeds;
  auto keep = [&](const std::string& name, const BoundaryRecord& record) {
    auto bytes = EncodeBoundary(record);
    ASSERT_TRUE(bytes) << name << ": " << bytes.error().ToString();
    auto back = DecodeBoundary(*bytes);
    ASSERT_TRUE(back) << name << ": " << back.error().ToString();
    EXPECT_EQ(*back, record) << name;
    seeds[name] = fuzz_corpus::AsString(*bytes);
  };
  itc::Clock sled = itc::Clock::Seed();
  itc::Clock client = *sled.Fork();
  const BoundaryOptions options;
  BoundaryRecord r;
  keep("empty", r);
  const itc::Version entry = *sled.Send();
  r = AfterMarker(r, Network(1), entry, MarkerKind::kEntry, options);
  keep("entry-marker", r);
  client.Absorb(sled.version());
  const itc::Version start = *client.Send();
  const itc::Version job = *client.Send();
  r = AfterExecution(r, Network(1), Filled<SessionId>(2), start, Filled<JobId>(3), job,
                     Filled<JobId>(4), options);
  keep("executed", r);
  r = AfterEnd(r, Filled<JobId>(3),
               ExitReport{ExitOutcome{ExitOutcome::Kind::kFailed, 7, "output limit"},
                          OutputSummary{4096, Digest256{1, 2}}, OutputSummary{0, Digest256{}}});
  keep("ended", r);
  r = AfterExecution(r, Network(5), Filled<SessionId>(6), *client.Send(), Filled<JobId>(7),
                     *client.Send(), Filled<JobId>(8), options);
  keep("moved", r);
  sled.Absorb(client.version());
  r = AfterMarker(r, Network(1), *sled.Send(), MarkerKind::kHop, options);
  keep("back-with-hop", r);
  r = AfterMarker(r, Network(1), *sled.Send(), MarkerKind::kRenew, options);
  keep("renewed", r);
  BoundaryOptions small = options;
  small.left_universes_max = 1;
  BoundaryRecord evicting = r;
  for (uint8_t n = 10; n < 14; ++n) {
    evicting = AfterExecution(evicting, Network(n), Filled<SessionId>(n), *client.Send(),
                              Filled<JobId>(n), *client.Send(), Filled<JobId>(n + 1), small);
  }
  evicting = AfterMarker(evicting, Network(10), *sled.Send(), MarkerKind::kFlipFlop, small);
  keep("evicted-flip-flop", evicting);
  keep("reset", ResetRecord(Filled<Nonce>(9)));
  keep("worst-case", WorstCaseBoundaryRecord());
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/rack_boundary_fuzz", seeds);
}

}  // namespace
}  // namespace once::rack
