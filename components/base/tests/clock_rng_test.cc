#include <gtest/gtest.h>

#include <set>

#include "once/base/clock.h"
#include "once/base/rng.h"

namespace once {
namespace {

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock clock(FromUnixMillis(1000));
  EXPECT_EQ(clock.NowUnixMillis(), 1000);
  clock.Advance(std::chrono::milliseconds(250));
  EXPECT_EQ(clock.NowUnixMillis(), 1250);
  clock.Set(FromUnixMillis(5));
  EXPECT_EQ(clock.NowUnixMillis(), 5);
}

TEST(RngTest, SameSeedSameSequence) {
  SeededRng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    (void)c;
  }
  SeededRng d(42), e(43);
  EXPECT_NE(d.Next(), e.Next());
}

TEST(RngTest, BelowStaysInRangeAndCoversIt) {
  SeededRng rng(7);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = rng.Below(10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 10u);
  for (int i = 0; i < 1000; ++i) {
    double d = rng.NextDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

}  // namespace
}  // namespace once
