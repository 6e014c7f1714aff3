// Versions: lattice laws, order, rank, min_ticks, tick, against a dense model.

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "support.h"

namespace once::itc {
namespace {

using testing::Dense;
using testing::P;
using testing::PartyFromProgram;
using testing::V;
using testing::VersionFromProgram;

constexpr int kCells = 7;  // programs are at most 6 deep

struct Three {
  Version a, b, c;
};
Three Make(const std::vector<uint8_t>& x, const std::vector<uint8_t>& y,
           const std::vector<uint8_t>& z) {
  return {VersionFromProgram(x, 6, 4), VersionFromProgram(y, 6, 4), VersionFromProgram(z, 6, 4)};
}

// rank * 2^kCells, exactly, from the dense model.
unsigned __int128 DenseIntegral(const Version& v) {
  unsigned __int128 s = 0;
  for (uint64_t h : Dense(v, kCells)) s += h;
  return s;
}
unsigned __int128 RankScaled(const Rank& r) {
  unsigned __int128 s = r.whole << kCells;
  if (!r.fraction.empty()) s += r.fraction[0] >> (64 - kCells);
  return s;
}

RC_GTEST_PROP(Version, LatticeLaws,
              (const std::vector<uint8_t>& x, const std::vector<uint8_t>& y,
               const std::vector<uint8_t>& z)) {
  const auto [a, b, c] = Make(x, y, z);
  RC_ASSERT(Join(a, b) == Join(b, a));
  RC_ASSERT(Meet(a, b) == Meet(b, a));
  RC_ASSERT(Join(Join(a, b), c) == Join(a, Join(b, c)));
  RC_ASSERT(Meet(Meet(a, b), c) == Meet(a, Meet(b, c)));
  RC_ASSERT(Join(a, a) == a);
  RC_ASSERT(Meet(a, a) == a);
  RC_ASSERT(Join(a, Meet(a, b)) == a);
  RC_ASSERT(Meet(a, Join(a, b)) == a);
  RC_ASSERT(Meet(a, Join(b, c)) == Join(Meet(a, b), Meet(a, c)));  // distributive
  RC_ASSERT(Join(a, Version()) == a);
  RC_ASSERT(Meet(a, Version()) == Version());
}

RC_GTEST_PROP(Version, OrderMatchesDenseModel,
              (const std::vector<uint8_t>& x, const std::vector<uint8_t>& y)) {
  const Version a = VersionFromProgram(x, 6, 4);
  const Version b = VersionFromProgram(y, 6, 4);
  const auto da = Dense(a, kCells);
  const auto db = Dense(b, kCells);
  bool leq = true, geq = true;
  std::vector<uint64_t> mx(da.size()), mn(da.size());
  for (size_t i = 0; i < da.size(); ++i) {
    leq = leq && da[i] <= db[i];
    geq = geq && da[i] >= db[i];
    mx[i] = std::max(da[i], db[i]);
    mn[i] = std::min(da[i], db[i]);
  }
  RC_ASSERT(Leq(a, b) == leq);
  RC_ASSERT(Concurrent(a, b) == (!leq && !geq));
  RC_ASSERT(Dense(Join(a, b), kCells) == mx);
  RC_ASSERT(Dense(Meet(a, b), kCells) == mn);
  RC_ASSERT((a == b) == (da == db));  // canonical: equal values have equal trees
  RC_ASSERT((a == b) == (a.Encode() == b.Encode()));
  RC_ASSERT(Leq(a, b) == (Join(a, b) == b));
  RC_ASSERT(Leq(a, b) == (Meet(a, b) == a));
}

RC_GTEST_PROP(Version, RankIsExactMonotoneValuation,
              (const std::vector<uint8_t>& x, const std::vector<uint8_t>& y)) {
  const Version a = VersionFromProgram(x, 6, 4);
  const Version b = VersionFromProgram(y, 6, 4);
  RC_ASSERT(RankScaled(RankOf(a)) == DenseIntegral(a));
  RC_ASSERT(RankOf(Join(a, b)) + RankOf(Meet(a, b)) == RankOf(a) + RankOf(b));
  if (Leq(a, b) && !(a == b)) {
    RC_ASSERT(RankOf(a) < RankOf(b));
    RC_ASSERT(TotalOrder(a, b) == std::strong_ordering::less);
  }
  RC_ASSERT((TotalOrder(a, b) == std::strong_ordering::equal) == (a == b));
  RC_ASSERT((TotalOrder(a, b) < 0) == (TotalOrder(b, a) > 0));
}

// Small versions live inside the object and larger ones on the heap: copies,
// moves and assignments across the two keep the value, and a moved-from
// version is zero (usable, not an empty tree).
TEST(Version, CopiesAndMovesKeepTheValueInlineOrNot) {
  const Version small = V("(0,1,2)");        // 3 nodes: inline
  const Version large = V("(1,0,(0,1,2))");  // 5 nodes: on the heap
  ASSERT_EQ(small.nodes().size(), Version::kInlineNodes);
  ASSERT_GT(large.nodes().size(), Version::kInlineNodes);
  for (const Version& original : {small, large}) {
    Version copy = original;
    EXPECT_EQ(copy, original);
    Version moved = std::move(copy);
    EXPECT_EQ(moved, original);
    EXPECT_EQ(copy, Version());  // NOLINT(bugprone-use-after-move): the contract
    EXPECT_EQ(FormatVersion(copy), "0");
    for (const Version& other : {small, large, Version()}) {
      Version assigned = other;
      assigned = original;
      EXPECT_EQ(assigned, original);
      Version move_assigned = other;
      Version source = original;
      move_assigned = std::move(source);
      EXPECT_EQ(move_assigned, original);
      EXPECT_EQ(source, Version());  // NOLINT(bugprone-use-after-move)
    }
    Version self = original;
    self = *&self;
    EXPECT_EQ(self, original);
  }
  EXPECT_NE(small, large);
  EXPECT_NE(V("(0,1,2)"), V("(0,1,3)"));
}

TEST(Version, RankExamples) {
  EXPECT_EQ(RankOf(V("5")).ToString(), "5");
  const Rank r = RankOf(V("(1,0,(0,1,0))"));  // 1/2 * 1 + 1/4 * 2 + 1/4 * 1 = 1.25
  EXPECT_EQ(r.whole, 1u);
  ASSERT_EQ(r.fraction.size(), 1u);
  EXPECT_EQ(r.fraction[0], uint64_t{1} << 62);
  EXPECT_LT(RankOf(V("(0,0,1)")), RankOf(V("(0,1,1)")));
}

TEST(Version, MinTicksExamples) {
  EXPECT_EQ(*MinTicks(Version()), 0u);
  Party seed = Party::Seed();
  EXPECT_EQ(*MinTicks(*Ticks(Version(), seed, 5)), 5u);
  auto parts = Party::Forks(Party::Seed(), 4);
  ASSERT_TRUE(parts);
  Version v = *Tick(Version(), (*parts)[0]);
  v = *Tick(v, (*parts)[3]);
  EXPECT_EQ(FormatVersion(v), "(0,(0,1,0),(0,0,1))");
  EXPECT_EQ(*MinTicks(v), 2u);
  EXPECT_EQ(*MinTicks(V("(1,0,(0,1,0))")), 2u);
}

TEST(Version, TickOverflowIsTyped) {
  Version top = V("18446744073709551615");
  auto t = Tick(top, Party::Seed());
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, ErrorCode::kLimitExceeded);
  auto ts = Ticks(V("18446744073709551610"), Party::Seed(), 6);
  ASSERT_FALSE(ts);
  EXPECT_EQ(ts.error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(*Ticks(V("18446744073709551610"), Party::Seed(), 5), top);
  // Two leaves at 2^64-1 under a part-owner: fill does nothing, grow overflows.
  auto g = Tick(V("(18446744073709551615,0,0)"), P("(1,0)"));
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, ErrorCode::kLimitExceeded);
}

TEST(Version, MinTicksOverflowIsTyped) {
  auto m = MinTicks(V("(0,18446744073709551615,(0,0,18446744073709551615))"));
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kLimitExceeded);
}

RC_GTEST_PROP(Version, TickRaisesOnlyTheOwnRegion,
              (const std::vector<uint8_t>& x, const std::vector<uint8_t>& y)) {
  const Version v = VersionFromProgram(x, 6, 4);
  const Party p = PartyFromProgram(y);
  auto t = Tick(v, p);
  RC_ASSERT(t.has_value());
  RC_ASSERT(Leq(v, *t) && !(v == *t));
  const auto dv = Dense(v, kCells);
  const auto dt = Dense(*t, kCells);
  const auto dp = Dense(p, kCells);
  for (size_t c = 0; c < dv.size(); ++c) {
    if (!dp[c]) RC_ASSERT(dv[c] == dt[c]);
  }
}

RC_GTEST_PROP(Version, TicksEqualsRepeatedTick,
              (const std::vector<uint8_t>& x, const std::vector<uint8_t>& y)) {
  const Version v = VersionFromProgram(x, 6, 4);
  const Party p = PartyFromProgram(y);
  const uint64_t k = *rc::gen::inRange<uint64_t>(0, 64);
  Version step = v;
  for (uint64_t i = 0; i < k; ++i) step = *Tick(step, p);
  auto bulk = Ticks(v, p, k);
  RC_ASSERT(bulk.has_value());
  RC_ASSERT(bulk->Encode() == step.Encode());
  RC_ASSERT(*MinTicks(step) <= *MinTicks(v) + k);
}

// Ticks is linear in its inputs, not in `count`: a million events split at any
// point give the same bytes as all at once.
RC_GTEST_PROP(Version, TicksOfAMillionSplitAnywhere,
              (const std::vector<uint8_t>& x, const std::vector<uint8_t>& y)) {
  const Version v = VersionFromProgram(x, 6, 4);
  const Party p = PartyFromProgram(y);
  constexpr uint64_t kCount = 1'000'000;
  const uint64_t split = *rc::gen::inRange<uint64_t>(0, kCount + 1);
  auto whole = Ticks(v, p, kCount);
  RC_ASSERT(whole.has_value());
  auto first = Ticks(v, p, split);
  RC_ASSERT(first.has_value());
  auto rest = Ticks(*first, p, kCount - split);
  RC_ASSERT(rest.has_value());
  RC_ASSERT(rest->Encode() == whole->Encode());
  RC_ASSERT(*MinTicks(*whole) <= *MinTicks(v) + kCount);
}

TEST(Version, TicksOfAMillionEqualAMillionTicks) {
  auto parts = Party::Forks(Party::Seed(), 5);
  ASSERT_TRUE(parts.has_value());
  Version v = *Tick(Version(), (*parts)[1]);
  v = *Tick(v, (*parts)[4]);
  v = *Tick(v, (*parts)[2]);
  for (size_t which : {size_t{0}, size_t{3}}) {
    const Party& p = (*parts)[which];
    Version step = v;
    for (int i = 0; i < 1'000'000; ++i) step = *Tick(step, p);
    auto bulk = Ticks(v, p, 1'000'000);
    ASSERT_TRUE(bulk.has_value());
    EXPECT_EQ(bulk->Encode(), step.Encode());
  }
  // 2^40 events on a split party: immediate, and it overflows exactly as
  // single ticks would.
  auto huge = Ticks(v, (*parts)[3], uint64_t{1} << 40);
  ASSERT_TRUE(huge.has_value());
  EXPECT_LE(*MinTicks(*huge), *MinTicks(v) + (uint64_t{1} << 40));
  EXPECT_GT(*MinTicks(*huge), *MinTicks(v) + (uint64_t{1} << 39));
  auto halves = Ticks(*Ticks(v, (*parts)[3], uint64_t{1} << 39), (*parts)[3], uint64_t{1} << 39);
  ASSERT_TRUE(halves.has_value());
  EXPECT_EQ(halves->Encode(), huge->Encode());
  EXPECT_FALSE(Ticks(*huge, (*parts)[3], ~uint64_t{0}).has_value());
}

}  // namespace
}  // namespace once::itc
