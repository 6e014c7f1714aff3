#include "once/queues/cron.h"

#include <gtest/gtest.h>

namespace once::queues {
namespace {

// 2024-01-01T00:00:00Z (a Monday).
constexpr int64_t kJan1 = 1'704'067'200'000;
constexpr int64_t kMin = 60'000;
constexpr int64_t kHour = 60 * kMin;
constexpr int64_t kDay = 24 * kHour;

TEST(CronTest, EveryFiveMinutes) {
  Cron c = Cron::Parse("*/5 * * * *").value();
  EXPECT_EQ(c.NextAfter(kJan1).value(), kJan1 + 5 * kMin);
  EXPECT_EQ(c.NextAfter(kJan1 - 1).value(), kJan1);
  EXPECT_EQ(c.NextAfter(kJan1 + 7 * kMin + 30'000).value(), kJan1 + 10 * kMin);
}

TEST(CronTest, FieldsListsRangesAndDays) {
  Cron c = Cron::Parse("30 9-17/4 * * 1-5").value();  // 09:30, 13:30, 17:30 on weekdays
  EXPECT_EQ(c.NextAfter(kJan1).value(), kJan1 + 9 * kHour + 30 * kMin);
  EXPECT_EQ(c.NextAfter(kJan1 + 9 * kHour + 30 * kMin).value(), kJan1 + 13 * kHour + 30 * kMin);
  // Saturday 2024-01-06: skipped to Monday 2024-01-08.
  EXPECT_EQ(c.NextAfter(kJan1 + 4 * kDay + 18 * kHour).value(),
            kJan1 + 7 * kDay + 9 * kHour + 30 * kMin);
  Cron monthly = Cron::Parse("0 0 1 * *").value();
  EXPECT_EQ(monthly.NextAfter(kJan1).value(), kJan1 + 31 * kDay);  // 2024-02-01
  Cron sunday7 = Cron::Parse("0 12 * * 7").value();
  EXPECT_EQ(sunday7.NextAfter(kJan1).value(), kJan1 + 6 * kDay + 12 * kHour);  // 2024-01-07
  // Both day fields restricted: either matches (the 15th, or any Monday).
  Cron either = Cron::Parse("0 0 15 * 1").value();
  EXPECT_EQ(either.NextAfter(kJan1).value(), kJan1 + 7 * kDay);  // Monday 2024-01-08
}

TEST(CronTest, TicksBetweenKeepsTheNewestWithinTheLimit) {
  Cron c = Cron::Parse("* * * * *").value();
  size_t skipped = 0;
  auto ticks = c.TicksBetween(kJan1, kJan1 + 10 * kMin, 3, &skipped).value();
  EXPECT_EQ(ticks, (std::vector<int64_t>{kJan1 + 8 * kMin, kJan1 + 9 * kMin, kJan1 + 10 * kMin}));
  EXPECT_EQ(skipped, 7u);
  EXPECT_TRUE(c.TicksBetween(kJan1, kJan1 + kMin - 1, 3).value().empty());
}

TEST(CronTest, BadExpressionsAreRefused) {
  for (const char* bad : {"", "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *",
                          "* * * * 8", "*/0 * * * *", "a * * * *", "5-1 * * * *", "* * * * * *"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(Cron::Parse(bad).error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(Cron::Parse("0 0 31 2 *").value().NextAfter(kJan1).error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace once::queues
