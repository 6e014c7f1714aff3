#include "once/base/decimal.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace once {
namespace {

TEST(DecimalTest, ReadsTheWholeStringInRange) {
  EXPECT_EQ(ParseDecimal<int64_t>("0"), 0);
  EXPECT_EQ(ParseDecimal<int64_t>("-17"), -17);
  EXPECT_EQ(ParseDecimal<int64_t>("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ParseDecimal<int64_t>("-9223372036854775808"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ParseDecimal<uint64_t>("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(ParseDecimal<uint16_t>("65535"), 65535);
  EXPECT_EQ(ParseDecimal<int>("007"), 7);
}

TEST(DecimalTest, RefusesAnythingElse) {
  for (const char* bad : {"", " 1", "1 ", "+1", "1x", "x1", "1.5", "0x10", "--1", "-",
                          "9223372036854775808", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(ParseDecimal<int64_t>(bad), std::nullopt);
  }
  EXPECT_EQ(ParseDecimal<uint64_t>("-1"), std::nullopt);
  EXPECT_EQ(ParseDecimal<uint64_t>("18446744073709551616"), std::nullopt);
  EXPECT_EQ(ParseDecimal<uint16_t>("65536"), std::nullopt);
  EXPECT_EQ(ParseDecimal<int>("2147483648"), std::nullopt);
}

}  // namespace
}  // namespace once
