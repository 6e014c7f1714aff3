#include "once/base/hex.h"

#include <gtest/gtest.h>

namespace once {
namespace {

TEST(HexTest, RoundTrip) {
  Bytes b = {0x00, 0x7f, 0xff, 0x10};
  EXPECT_EQ(HexEncode(b), "007fff10");
  EXPECT_EQ(HexDecode("007FFF10").value(), b);
  EXPECT_EQ(HexEncode(std::string_view("ab")), "6162");
}

TEST(HexTest, RejectsOddAndNonHex) {
  EXPECT_EQ(HexDecode("abc").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(HexDecode("zz").error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(HexDecode("").value().empty());
}

}  // namespace
}  // namespace once
