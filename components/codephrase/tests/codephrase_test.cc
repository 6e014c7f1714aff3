#include "once/codephrase/codephrase.h"

#include <gtest/gtest.h>

#include "once/base/rng.h"

namespace once::codephrase {
namespace {

std::string Repeat(std::string_view word, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    if (i > 0) out += "-";
    out += word;
  }
  return out;
}

TEST(CodephraseTest, ListIsTheSortedBip39EnglishList) {
  auto words = Words();
  ASSERT_EQ(words.size(), 2048u);
  EXPECT_EQ(words[0], "abandon");
  EXPECT_EQ(words[1], "ability");
  EXPECT_EQ(words[7], "abstract");
  EXPECT_EQ(words[2047], "zoo");
}

TEST(CodephraseTest, KnownVectors) {
  EXPECT_EQ(EncodeBytes(Bytes(11, 0x00)), Repeat("abandon", 8));
  EXPECT_EQ(EncodeBytes(Bytes(11, 0xff)), Repeat("zoo", 8));
  EXPECT_EQ(EncodeBytes(Bytes{0x01}), "ability");
  EXPECT_EQ(EncodeBytes(Bytes{0x00, 0x01}), "abandon-ability");
  // 32 bytes of ones: 24 words, the first carries 8 zero padding bits then 3 ones.
  EXPECT_EQ(EncodeBytes(Bytes(32, 0xff)), "abstract-" + Repeat("zoo", 23));
  EXPECT_EQ(EncodeNumber(0, 1), "abandon");
  EXPECT_EQ(EncodeNumber(5, 2), "abandon-absent");
  EXPECT_EQ(EncodeNumber(2047, 1), "zoo");
  EXPECT_EQ(EncodeNumber(2048, 2), "ability-abandon");
}

TEST(CodephraseTest, EightyEightBitIdsAreEightWords) {
  EXPECT_EQ(WordsForBytes(11), 8u);
  EXPECT_EQ(WordsForBytes(32), 24u);
  EXPECT_EQ(WordsForBytes(0), 0u);
}

TEST(CodephraseTest, BytesRoundTrip) {
  SeededRng rng(7);
  for (size_t size : {1u, 2u, 8u, 11u, 16u, 32u, 64u, 88u}) {
    for (int round = 0; round < 50; ++round) {
      Bytes bytes(size);
      rng.Fill(bytes.data(), bytes.size());
      std::string phrase = EncodeBytes(bytes);
      auto back = DecodeBytes(phrase, size);
      ASSERT_TRUE(back.has_value()) << back.error().ToString();
      EXPECT_EQ(*back, bytes);
    }
  }
}

TEST(CodephraseTest, NumbersRoundTrip) {
  SeededRng rng(8);
  for (int round = 0; round < 200; ++round) {
    uint64_t value = rng.Next();
    auto back = DecodeNumber(EncodeNumber(value, 6), 6);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, value);
  }
}

TEST(CodephraseTest, DecodingIsCaseInsensitive) {
  Bytes id{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x11, 0x22, 0x33};
  std::string phrase = EncodeBytes(id);
  std::string upper;
  for (char c : phrase) upper.push_back(static_cast<char>(std::toupper(c)));
  auto back = DecodeBytes(upper, 11);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, id);
  EXPECT_EQ(*WordIndex("ZoO"), 2047);
}

TEST(CodephraseTest, UnknownWordIsRefused) {
  auto r = DecodeBytes(Repeat("abandon", 7) + "-sush", 11);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("unknown"), std::string::npos);
  EXPECT_FALSE(DecodeBytes(Repeat("abandon", 7) + "-", 11).has_value());
  EXPECT_FALSE(DecodeBytes("", 11).has_value());
  EXPECT_FALSE(WordIndex("abandonabandonabandon").has_value());
}

TEST(CodephraseTest, WrongWordCountIsRefused) {
  for (int count : {1, 7, 9}) {
    auto r = DecodeBytes(Repeat("abandon", count), 11);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("words"), std::string::npos);
  }
}

TEST(CodephraseTest, ValueOutOfRangeIsRefused) {
  // 24 words carry 264 bits; 32 bytes leave the top 8 as zero padding.
  auto r = DecodeBytes(Repeat("zoo", 24), 32);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("out of range"), std::string::npos);
  // Six words carry 66 bits; a 64-bit number cannot use the top two.
  auto n = DecodeNumber(Repeat("zoo", 6), 6);
  ASSERT_FALSE(n.has_value());
  EXPECT_NE(n.error().message.find("out of range"), std::string::npos);
}

TEST(CodephraseTest, OverlongPhraseHitsTheNamedLimit) {
  auto r = DecodeBytes(Repeat("abandon", 100), 11);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kLimitExceeded);
  ASSERT_NE(r.error().As<LimitDetail>(), nullptr);
  EXPECT_EQ(r.error().As<LimitDetail>()->limit, "codephrase_bytes_max");
}

}  // namespace
}  // namespace once::codephrase
