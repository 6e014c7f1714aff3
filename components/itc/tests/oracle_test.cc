// The library against the naive recursive oracle, on random values and on
// random fork/tick/send/recv/join histories.

#include "oracle.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "support.h"

namespace once::itc {
namespace {

using testing::CloneForTest;
using testing::PartyFromProgram;
using testing::VersionFromProgram;

TEST(Oracle, AgreesOnTheTextOfSimpleValues) {
  EXPECT_EQ(oracle::EvText(oracle::EvFrom(testing::V("(1,0,(0,1,0))"))), "(1,0,(0,1,0))");
  EXPECT_EQ(oracle::IdText(oracle::IdFrom(testing::P("(1,(0,1))"))), "(1,(0,1))");
}

RC_GTEST_PROP(Oracle, VersionOperations,
              (const std::vector<uint8_t>& x, const std::vector<uint8_t>& y,
               const std::vector<uint8_t>& z)) {
  const Version a = VersionFromProgram(x, 6, 5);
  const Version b = VersionFromProgram(y, 6, 5);
  const Party p = PartyFromProgram(z);
  const oracle::Ev oa = oracle::EvFrom(a);
  const oracle::Ev ob = oracle::EvFrom(b);
  const oracle::Id op = oracle::IdFrom(p);
  RC_ASSERT(oracle::EvText(oa) == FormatVersion(a));
  RC_ASSERT(oracle::EvText(oracle::Join(oa, ob)) == FormatVersion(Join(a, b)));
  RC_ASSERT(oracle::Leq(oa, ob) == Leq(a, b));
  RC_ASSERT(oracle::MinTicks(oa) == *MinTicks(a));
  RC_ASSERT(oracle::EvText(oracle::Event(op, oa)) == FormatVersion(*Tick(a, p)));
  auto [ol, orr] = oracle::Split(op);
  Party left = CloneForTest(p);
  Party right = *left.Fork();
  RC_ASSERT(oracle::IdText(ol) == FormatParty(left));
  RC_ASSERT(oracle::IdText(orr) == FormatParty(right));
}

struct Member {
  Clock clock;
  oracle::Id id;
  oracle::Ev ev;
};

void ExpectSame(const Member& m) {
  RC_ASSERT(FormatParty(m.clock.party()) == oracle::IdText(m.id));
  RC_ASSERT(FormatVersion(m.clock.version()) == oracle::EvText(m.ev));
}

RC_GTEST_PROP(Oracle, RandomHistories, (const std::vector<uint32_t>& ops)) {
  std::vector<Member> pop;
  pop.push_back({Clock::Seed(), oracle::IdLeaf(1), oracle::EvLeaf(0)});
  uint64_t events = 0;
  for (uint32_t op : ops) {
    const size_t x = (op >> 4) % pop.size();
    const size_t y = (op >> 12) % pop.size();
    switch (op % 5) {
      case 0: {  // fork
        if (pop.size() >= 12) break;
        auto right = pop[x].clock.Fork();
        RC_ASSERT(right.has_value());
        auto [l, r] = oracle::Split(pop[x].id);
        pop[x].id = l;
        pop.push_back({std::move(*right), r, pop[x].ev});
        break;
      }
      case 1:  // tick
        RC_ASSERT(pop[x].clock.Tick().has_value());
        pop[x].ev = oracle::Event(pop[x].id, pop[x].ev);
        ++events;
        break;
      case 2: {  // x sends to y
        if (x == y) break;
        auto stamp = pop[x].clock.Send();
        RC_ASSERT(stamp.has_value());
        pop[x].ev = oracle::Event(pop[x].id, pop[x].ev);
        RC_ASSERT(pop[y].clock.Recv(*stamp).has_value());
        pop[y].ev = oracle::Event(pop[y].id, oracle::Join(pop[y].ev, pop[x].ev));
        events += 2;
        break;
      }
      case 3: {  // y retires into x
        if (x == y) break;
        Member gone = std::move(pop[y]);
        pop.erase(pop.begin() + static_cast<std::ptrdiff_t>(y));
        Member& into = pop[x < y ? x : x - 1];
        RC_ASSERT(into.clock.Join(std::move(gone.clock)).has_value());
        into.id = oracle::Sum(into.id, gone.id);
        into.ev = oracle::Join(into.ev, gone.ev);
        break;
      }
      case 4:  // x absorbs y
        pop[x].clock.Absorb(pop[y].clock.version());
        pop[x].ev = oracle::Join(pop[x].ev, pop[y].ev);
        break;
    }
    for (const Member& m : pop) ExpectSame(m);
  }
  // Identity is conserved and parties stay pairwise disjoint.
  Party all = CloneForTest(pop[0].clock.party());
  Version top = pop[0].clock.version();
  for (size_t i = 1; i < pop.size(); ++i) {
    RC_ASSERT(all.Join(CloneForTest(pop[i].clock.party())).has_value());
    top = Join(top, pop[i].clock.version());
  }
  RC_ASSERT(all == Party::Seed());
  RC_ASSERT(*MinTicks(top) <= events);
}

}  // namespace
}  // namespace once::itc
