// Wire formats: the vectors of the notes, rejection of malformed input,
// hostile inputs, single bit flips, prefix freedom.

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "once/base/hex.h"
#include "support.h"

namespace once::itc {
namespace {

using testing::P;
using testing::V;

std::string Hex(const Bytes& b) { return HexEncode(b); }
Bytes Unhex(std::string_view h) { return *HexDecode(h); }

TEST(PartyCodec, Vectors) {
  EXPECT_EQ(Hex(P("1").Encode()), "20");
  EXPECT_EQ(Hex(P("(1,0)").Encode()), "88");
  EXPECT_EQ(Hex(P("(1,(0,1))").Encode()), "c480");
  EXPECT_EQ(FormatParty(*Party::Decode(Unhex("20"))), "1");
  EXPECT_EQ(FormatParty(*Party::Decode(Unhex("88"))), "(1,0)");
  EXPECT_EQ(FormatParty(*Party::Decode(Unhex("c480"))), "(1,(0,1))");
}

TEST(VersionCodec, Vectors) {
  EXPECT_EQ(Hex(V("0").Encode()), "e0");
  EXPECT_EQ(Hex(V("5").Encode()), "9a");
  EXPECT_EQ(Hex(V("(1,0,(0,1,0))").Encode()), "52ea");
  EXPECT_EQ(FormatVersion(*Version::Decode(Unhex("e0"))), "0");
  EXPECT_EQ(FormatVersion(*Version::Decode(Unhex("9a"))), "5");
  EXPECT_EQ(FormatVersion(*Version::Decode(Unhex("52ea"))), "(1,0,(0,1,0))");
}

TEST(ClockCodec, SeedAfterOneTick) {
  Clock c = Clock::Seed();
  ASSERT_TRUE(c.Tick());
  EXPECT_EQ(Hex(c.Encode()), "20a8");
  auto back = Clock::Decode(Unhex("20a8"));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, c);
}

void ExpectError(const Result<Party>& r, ErrorCode code) {
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, code) << r.error().ToString();
}
void ExpectError(const Result<Version>& r, ErrorCode code) {
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, code) << r.error().ToString();
}

TEST(PartyCodec, Rejects) {
  ExpectError(Party::Decode({}), ErrorCode::kInvalidArgument);               // empty
  ExpectError(Party::Decode(Unhex("00")), ErrorCode::kInvalidArgument);      // missing marker
  ExpectError(Party::Decode(Unhex("2000")), ErrorCode::kInvalidArgument);    // extra zero byte
  ExpectError(Party::Decode(Unhex("21")), ErrorCode::kInvalidArgument);      // trailing bit
  ExpectError(Party::Decode(Unhex("c0")), ErrorCode::kInvalidArgument);      // truncated
  ExpectError(Party::Decode(Unhex("c2")), ErrorCode::kCorruption);           // (1,1)
  ExpectError(Party::Decode(Unhex("c480ff")), ErrorCode::kInvalidArgument);  // trailing byte
}

TEST(VersionCodec, Rejects) {
  ExpectError(Version::Decode({}), ErrorCode::kInvalidArgument);
  ExpectError(Version::Decode(Unhex("c0")), ErrorCode::kInvalidArgument);  // 1 1 then 0: no marker
  ExpectError(Version::Decode(Unhex("e000")), ErrorCode::kInvalidArgument);  // extra zero byte
  ExpectError(Version::Decode(Unhex("e1")), ErrorCode::kInvalidArgument);    // trailing bit
  ExpectError(Version::Decode(Unhex("00")), ErrorCode::kInvalidArgument);    // truncated
  ExpectError(Version::Decode(Unhex("57")), ErrorCode::kCorruption);         // (0,1,1)
  // Descending below zero: leaves 0 then zigzag 1 (= -1): 0 1 1 1 010, marker.
  ExpectError(Version::Decode(Unhex("75")), ErrorCode::kInvalidArgument);
}

TEST(VersionCodec, HeightLimits) {
  // 2^64-1 round-trips; 2^64 is refused.
  Version top = *ParseVersion("18446744073709551615");
  auto back = Version::Decode(top.Encode());
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, top);
  EXPECT_FALSE(ParseVersion("18446744073709551616"));
  Bytes enc;
  // flag 1, then 64 zeros, then 1, 63 zeros, 1 -> n + 1 = 2^64 + 1, n = 2^64.
  std::vector<bool> bits{true};
  for (int i = 0; i < 64; ++i) bits.push_back(false);
  bits.push_back(true);
  for (int i = 0; i < 63; ++i) bits.push_back(false);
  bits.push_back(true);
  bits.push_back(true);  // marker
  while (bits.size() % 8) bits.push_back(false);
  for (size_t i = 0; i < bits.size(); i += 8) {
    uint8_t byte = 0;
    for (int j = 0; j < 8; ++j) byte = static_cast<uint8_t>(byte << 1 | bits[i + j]);
    enc.push_back(byte);
  }
  ExpectError(Version::Decode(enc), ErrorCode::kInvalidArgument);
}

TEST(Hostile, MegabyteInputsDoNotCrash) {
  for (uint8_t fill : {0x00, 0xff, 0xaa, 0x55, 0x80, 0x49}) {
    const Bytes big(1 << 20, fill);
    auto p = Party::Decode(big);
    auto v = Version::Decode(big);
    auto c = Clock::Decode(big);
    EXPECT_FALSE(p.has_value());
    EXPECT_FALSE(v.has_value());
    EXPECT_FALSE(c.has_value());
  }
  const Bytes deep(1 << 20, 0x00);  // all internal version nodes
  EXPECT_EQ(Version::Decode(deep).error().code, ErrorCode::kLimitExceeded);
  const Bytes left_chain(1 << 20, 0xaa);  // party 10 10 10 ...: a left chain
  EXPECT_EQ(Party::Decode(left_chain).error().code, ErrorCode::kLimitExceeded);
  const Bytes huge(kEncodedBytesMax + 1, 0x20);
  EXPECT_EQ(Party::Decode(huge).error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(Version::Decode(huge).error().code, ErrorCode::kLimitExceeded);
}

TEST(Hostile, DeepestAcceptedTreesWork) {
  // A party at kTreeDepthMax: fork the left half again and again.
  Party p = Party::Seed();
  std::vector<Party> rights;
  for (uint32_t i = 0; i < kTreeDepthMax; ++i) {
    auto r = p.Fork();
    ASSERT_TRUE(r) << i;
    rights.push_back(std::move(*r));
  }
  auto too_deep = p.Fork();
  ASSERT_FALSE(too_deep);
  EXPECT_EQ(too_deep.error().code, ErrorCode::kLimitExceeded);
  auto back = Party::Decode(p.Encode());
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, p);
  // Versions that deep: tick, join, compare, encode, rank.
  Version v;
  auto t = Tick(v, p);
  ASSERT_TRUE(t);
  auto t2 = Tick(v, rights.front());
  ASSERT_TRUE(t2);
  Version j = Join(*t, *t2);
  EXPECT_TRUE(Leq(*t, j));
  EXPECT_TRUE(Concurrent(*t, *t2));
  EXPECT_EQ(*Version::Decode(j.Encode()), j);
  EXPECT_EQ(*MinTicks(j), 2u);
  EXPECT_LT(RankOf(*t), RankOf(j));
  EXPECT_EQ(*ParseVersion(FormatVersion(j)), j);
  for (Party& r : rights) ASSERT_TRUE(p.Join(std::move(r)));
  EXPECT_EQ(p, Party::Seed());
}

// Every single-bit flip of a valid encoding either fails with a typed error
// or decodes to a value that re-encodes to exactly the flipped bytes.
template <class T>
void FlipEveryBit(const Bytes& valid) {
  for (size_t bit = 0; bit < valid.size() * 8; ++bit) {
    Bytes flipped = valid;
    flipped[bit / 8] ^= static_cast<uint8_t>(0x80 >> (bit % 8));
    auto r = T::Decode(flipped);
    if (r) {
      EXPECT_EQ(r->Encode(), flipped) << "bit " << bit;
    } else {
      const ErrorCode c = r.error().code;
      EXPECT_TRUE(c == ErrorCode::kInvalidArgument || c == ErrorCode::kCorruption ||
                  c == ErrorCode::kLimitExceeded)
          << r.error().ToString();
    }
  }
}

TEST(BitFlip, Vectors) {
  for (const char* h : {"20", "88", "c480"}) FlipEveryBit<Party>(Unhex(h));
  for (const char* h : {"e0", "9a", "52ea"}) FlipEveryBit<Version>(Unhex(h));
  FlipEveryBit<Clock>(Unhex("20a8"));
}

RC_GTEST_PROP(BitFlip, RandomVersions, (const std::vector<uint8_t>& program)) {
  FlipEveryBit<Version>(testing::VersionFromProgram(program, 6, 40).Encode());
}

RC_GTEST_PROP(BitFlip, RandomParties, (const std::vector<uint8_t>& program)) {
  FlipEveryBit<Party>(testing::PartyFromProgram(program).Encode());
}

RC_GTEST_PROP(Codec, VersionRoundTripAndPrefixFree,
              (const std::vector<uint8_t>& pa, const std::vector<uint8_t>& pb)) {
  const Version a = testing::VersionFromProgram(pa, 6, 1000);
  const Version b = testing::VersionFromProgram(pb, 6, 1000);
  const Bytes ea = a.Encode();
  RC_ASSERT(*Version::Decode(ea) == a);
  Bytes both = ea;
  const Bytes eb = b.Encode();
  both.insert(both.end(), eb.begin(), eb.end());
  auto first = Version::DecodePrefix(both);
  RC_ASSERT(first.has_value());
  RC_ASSERT(first->first == a);
  RC_ASSERT(first->second == ea.size());
  // A proper prefix never decodes.
  for (size_t n = 0; n < ea.size(); ++n) {
    RC_ASSERT(!Version::Decode(std::span<const uint8_t>(ea.data(), n)).has_value());
  }
  RC_ASSERT((a == b) == (ea == eb));
}

RC_GTEST_PROP(Codec, PartyRoundTripAndPrefixFree,
              (const std::vector<uint8_t>& pa, const std::vector<uint8_t>& pb)) {
  const Party a = testing::PartyFromProgram(pa);
  const Party b = testing::PartyFromProgram(pb);
  const Bytes ea = a.Encode();
  RC_ASSERT(*Party::Decode(ea) == a);
  Bytes both = ea;
  const Bytes eb = b.Encode();
  both.insert(both.end(), eb.begin(), eb.end());
  auto first = Party::DecodePrefix(both);
  RC_ASSERT(first.has_value());
  RC_ASSERT(first->first == a);
  RC_ASSERT(first->second == ea.size());
  RC_ASSERT((a == b) == (ea == eb));
  RC_ASSERT((testing::Dense(a, 7) == testing::Dense(b, 7)) == (a == b));
}

}  // namespace
}  // namespace once::itc
