#include "once/base/varint.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace once {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(VarintTest, RoundTripsAtEveryLengthAndSaysItsSize) {
  for (uint64_t v : {uint64_t{0}, uint64_t{127}, uint64_t{128}, uint64_t{16383}, uint64_t{16384},
                     uint64_t{1} << 63, std::numeric_limits<uint64_t>::max()}) {
    std::string out;
    AppendVarint(out, v);
    EXPECT_EQ(out.size(), VarintBytes(v)) << v;
    out += "tail";
    VarintRead r = ReadVarint(AsBytes(out));
    ASSERT_EQ(r.problem, nullptr) << v;
    EXPECT_EQ(r.value, v);
    EXPECT_EQ(r.bytes, VarintBytes(v));
  }
  EXPECT_EQ(VarintBytes(std::numeric_limits<uint64_t>::max()), 10u);
}

TEST(VarintTest, RefusesTruncatedNonMinimalAndOverflowing) {
  EXPECT_STREQ(ReadVarint(AsBytes("")).problem, "truncated");
  EXPECT_STREQ(ReadVarint(AsBytes("\x80")).problem, "truncated");
  EXPECT_STREQ(ReadVarint(AsBytes(std::string("\x80\x00", 2))).problem, "varint not minimal");
  EXPECT_STREQ(ReadVarint(AsBytes(std::string(9, '\xff') + "\x02")).problem,
               "varint overflows 64 bits");
  EXPECT_EQ(ReadVarint(AsBytes(std::string(9, '\xff') + "\x01")).problem, nullptr);
}

}  // namespace
}  // namespace once
