// Parties: fork, forks, join, disjoint, covers, without, against a dense model.

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "support.h"

namespace once::itc {
namespace {

using testing::CloneForTest;
using testing::Dense;
using testing::P;
using testing::PartyFromProgram;

constexpr int kCells = 8;  // dense model resolution: 2^8 cells, deeper than programs

TEST(Party, SeedForkJoin) {
  Party a = Party::Seed();
  auto b = a.Fork();
  ASSERT_TRUE(b);
  EXPECT_EQ(FormatParty(a), "(1,0)");
  EXPECT_EQ(FormatParty(*b), "(0,1)");
  EXPECT_TRUE(Disjoint(a, *b));
  EXPECT_TRUE(itc::Disjoint(a, *b));  // callable qualified, not only by ADL
  EXPECT_FALSE(itc::Covers(a, *b));
  ASSERT_TRUE(a.Join(std::move(*b)));
  EXPECT_EQ(a, Party::Seed());
}

TEST(Party, ForkFollowsThePaper) {
  Party a = P("(0,(1,1))");  // normalised to (0,1)
  EXPECT_EQ(FormatParty(a), "(0,1)");
  auto b = a.Fork();
  EXPECT_EQ(FormatParty(a), "(0,(1,0))");
  EXPECT_EQ(FormatParty(*b), "(0,(0,1))");
  Party c = P("((1,0),(0,1))");
  auto d = c.Fork();
  EXPECT_EQ(FormatParty(c), "((1,0),0)");
  EXPECT_EQ(FormatParty(*d), "(0,(0,1))");
}

TEST(Party, ForksBalanced) {
  auto parts = Party::Forks(Party::Seed(), 3);
  ASSERT_TRUE(parts);
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ(FormatParty((*parts)[0]), "((1,0),0)");
  EXPECT_EQ(FormatParty((*parts)[1]), "((0,1),0)");
  EXPECT_EQ(FormatParty((*parts)[2]), "(0,1)");
  auto none = Party::Forks(Party::Seed(), 0);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().error.code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(none.error().operand, Party::Seed());
}

TEST(Party, ForksOfManyArePairwiseDisjointAndJoinBack) {
  for (size_t k : {1u, 2u, 5u, 32u, 33u, 100u}) {
    auto parts = Party::Forks(Party::Seed(), k);
    ASSERT_TRUE(parts);
    ASSERT_EQ(parts->size(), k);
    for (size_t x = 0; x < k; ++x) {
      for (size_t y = x + 1; y < k; ++y) EXPECT_TRUE(Disjoint((*parts)[x], (*parts)[y]));
    }
    Party all = std::move(parts->back());
    parts->pop_back();
    for (Party& p : *parts) ASSERT_TRUE(all.Join(std::move(p)));
    EXPECT_EQ(all, Party::Seed());
  }
}

TEST(Party, JoinRefusesOverlapAndHandsTheOperandBack) {
  Party a = P("(1,(1,0))");
  Party b = P("(0,(1,1))");
  auto r = a.Join(std::move(b));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().error.code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(FormatParty(r.error().operand), "(0,1)");
  EXPECT_EQ(FormatParty(a), "(1,(1,0))");
}

TEST(Party, Without) {
  auto w = Party::Without(P("1"), P("(0,(1,0))"));
  ASSERT_TRUE(w);
  EXPECT_EQ(FormatParty(*w), "(1,(0,1))");
  EXPECT_FALSE(Party::Without(P("(1,0)"), P("1")));
}

TEST(Party, TextRejectsEmpty) { EXPECT_FALSE(ParseParty("(0,0)")); }

RC_GTEST_PROP(Party, SetOperationsMatchDenseModel,
              (const std::vector<uint8_t>& pa, const std::vector<uint8_t>& pb)) {
  const Party a = PartyFromProgram(pa);
  const Party b = PartyFromProgram(pb);
  const auto da = Dense(a, kCells);
  const auto db = Dense(b, kCells);
  bool disjoint = true, covers = true, a_minus_b_empty = true;
  std::vector<bool> uni(da.size()), diff(da.size());
  for (size_t c = 0; c < da.size(); ++c) {
    disjoint = disjoint && !(da[c] && db[c]);
    covers = covers && (da[c] || !db[c]);
    uni[c] = da[c] || db[c];
    diff[c] = da[c] && !db[c];
    a_minus_b_empty = a_minus_b_empty && !diff[c];
  }
  RC_ASSERT(Disjoint(a, b) == disjoint);
  RC_ASSERT(Covers(a, b) == covers);
  auto w = Party::Without(CloneForTest(a), b);
  RC_ASSERT(w.has_value() == !a_minus_b_empty);
  if (w) RC_ASSERT(Dense(*w, kCells) == diff);
  Party j = CloneForTest(a);
  auto joined = j.Join(CloneForTest(b));
  RC_ASSERT(joined.has_value() == disjoint);
  if (joined) {
    RC_ASSERT(Dense(j, kCells) == uni);
  } else {
    RC_ASSERT(j == a);
    RC_ASSERT(joined.error().operand == b);
  }
}

RC_GTEST_PROP(Party, ForkHalvesDisjointAndJoinBack, (const std::vector<uint8_t>& pa)) {
  const Party original = PartyFromProgram(pa);
  Party left = CloneForTest(original);
  auto right = left.Fork();
  RC_ASSERT(right.has_value());
  RC_ASSERT(Disjoint(left, *right));
  RC_ASSERT(Covers(original, left) && Covers(original, *right));
  RC_ASSERT(!(left == original));
  RC_ASSERT(left.Join(std::move(*right)).has_value());
  RC_ASSERT(left == original);
}

}  // namespace
}  // namespace once::itc
