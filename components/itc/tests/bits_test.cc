// The bit streams' Elias gamma codes: BitReader::GetGamma reads a short code
// from one 64-bit window and anything else a bit at a time; both must give
// exactly what a plain bit-by-bit reading of the definition gives, at every
// bit offset, for every width, and on truncated and overlong input.

#include "bits.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace once::itc::internal {
namespace {

// The definition, a bit at a time: `width` zeros, a one, `width` more bits;
// the value is the code (the one and the bits after it) minus 1. nullopt
// where the stream ends first or the zeros run past 66.
std::optional<unsigned __int128> GammaByDefinition(const Bytes& bytes, size_t bit) {
  auto at = [&](size_t i) { return (bytes[i / 8] >> (7 - i % 8)) & 1; };
  const size_t total = bytes.size() * 8;
  int width = 0;
  while (true) {
    if (bit >= total) return std::nullopt;
    if (at(bit++)) break;
    if (++width > 66) return std::nullopt;
  }
  if (total - bit < static_cast<size_t>(width)) return std::nullopt;
  unsigned __int128 code = 1;
  for (int i = 0; i < width; ++i) code = (code << 1) | at(bit++);
  return code - 1;
}

// Skips `skip` bits, then reads one gamma code.
Result<unsigned __int128> ReadGammaAfter(const Bytes& bytes, int skip) {
  BitReader r(bytes, "test");
  for (int i = 0; i < skip; ++i) {
    Result<bool> bit = r.Get();
    if (!bit) return std::unexpected(bit.error());
  }
  return r.GetGamma();
}

TEST(Gamma, EveryWidthAtEveryOffsetRoundTrips) {
  for (int skip = 0; skip < 16; ++skip) {
    for (int width = 0; width <= 65; ++width) {
      const unsigned __int128 low = (static_cast<unsigned __int128>(1) << width) - 1;
      const unsigned __int128 high = (static_cast<unsigned __int128>(1) << (width + 1)) - 2;
      for (unsigned __int128 n : {low, high, low + (high - low) / 3}) {
        BitWriter w;
        w.PutBits(0x5a5a, skip);
        w.PutGamma(n);
        w.PutBits(0x3c3c, 13);  // a neighbour after the code
        const Bytes bytes = std::move(w).Finish();
        BitReader r(bytes, "test");
        for (int i = 0; i < skip; ++i) ASSERT_TRUE(r.Get().has_value());
        Result<unsigned __int128> read = r.GetGamma();
        ASSERT_TRUE(read.has_value()) << "skip " << skip << " width " << width;
        EXPECT_TRUE(*read == n) << "skip " << skip << " width " << width;
        // The reader stands right after the code: the neighbour follows.
        unsigned neighbour = 0;
        for (int i = 0; i < 13; ++i) neighbour = (neighbour << 1) | (*r.Get() ? 1 : 0);
        EXPECT_EQ(neighbour, 0x3c3cu & 0x1fff) << "skip " << skip << " width " << width;
        EXPECT_TRUE(r.Finish().has_value());
      }
    }
  }
}

TEST(Gamma, TruncatedAndOverlongCodesAreTypedErrors) {
  // 67 zeros (one past the longest width) and then a one.
  Bytes overlong(9, 0);
  overlong.push_back(0x10);
  Result<unsigned __int128> r = ReadGammaAfter(overlong, 0);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("gamma code too long"), std::string::npos);
  // A code of width 20 cut after its first 3 bytes (41 bits are needed).
  BitWriter w;
  w.PutGamma(1'500'000);
  Bytes cut = std::move(w).Finish();
  cut.resize(3);
  r = ReadGammaAfter(cut, 0);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("truncated"), std::string::npos);
  EXPECT_FALSE(ReadGammaAfter(Bytes{}, 0).has_value());
}

// Any bytes, any offset: the window and the definition agree on the value,
// on failure, and on the error (the window falls back to the bitwise reader
// for everything it does not read itself).
RC_GTEST_PROP(Gamma, WindowAgreesWithTheDefinition, ()) {
  const auto bytes = *rc::gen::container<Bytes>(*rc::gen::inRange<size_t>(0, 20),
                                                rc::gen::weightedOneOf<uint8_t>({
                                                    {4, rc::gen::just<uint8_t>(0)},
                                                    {1, rc::gen::just<uint8_t>(1)},
                                                    {4, rc::gen::arbitrary<uint8_t>()},
                                                }));
  const int skip = *rc::gen::inRange(0, 24);
  if (static_cast<size_t>(skip) > bytes.size() * 8) return;
  const std::optional<unsigned __int128> expected = GammaByDefinition(bytes, skip);
  const Result<unsigned __int128> read = ReadGammaAfter(bytes, skip);
  RC_ASSERT(read.has_value() == expected.has_value());
  if (expected) RC_ASSERT(*read == *expected);
}

}  // namespace
}  // namespace once::itc::internal
