// The paper's text notation.

#include <gtest/gtest.h>

#include <map>

#include "once/fuzz_corpus/seeds.h"
#include "support.h"

namespace once::itc {
namespace {

TEST(Text, RoundTripsCanonicalText) {
  for (const char* t : {"0", "5", "(1,0,(0,1,0))", "(0,(0,3,0),0)", "(2,0,1)"}) {
    auto v = ParseVersion(t);
    ASSERT_TRUE(v) << t;
    EXPECT_EQ(FormatVersion(*v), t);
  }
  for (const char* t : {"1", "(1,0)", "(1,(0,1))", "((1,0),(0,1))"}) {
    auto p = ParseParty(t);
    ASSERT_TRUE(p) << t;
    EXPECT_EQ(FormatParty(*p), t);
  }
}

TEST(Text, Normalises) {
  EXPECT_EQ(FormatVersion(*ParseVersion("(0,2,2)")), "2");
  EXPECT_EQ(FormatVersion(*ParseVersion("(1,(0,2,2),2)")), "3");
  EXPECT_EQ(FormatVersion(*ParseVersion("(0, 1 ,(0,2,1))")), "(1,0,(0,1,0))");
  EXPECT_EQ(FormatParty(*ParseParty("((1,1),(0,0))")), "(1,0)");
}

TEST(Text, RejectsMalformed) {
  for (const char* t : {"", "(", "(1,2", "(1,2,3", "(1,2,3))", "x", "-1", "(1,2,3,4)", "1 2",
                        "18446744073709551616", "(18446744073709551615,0,1)", "(1;2;3)"}) {
    auto v = ParseVersion(t);
    ASSERT_FALSE(v) << t;
    EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument) << t;
  }
  for (const char* t : {"", "2", "0", "(0,0)", "(1)", "(1,0,0)", "(1,0", "((1,0)"}) {
    auto p = ParseParty(t);
    ASSERT_FALSE(p) << t;
    EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument) << t;
  }
}

TEST(Text, RejectsDeepNesting) {
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += "(0,";
  deep += "0";
  for (int i = 0; i < 5000; ++i) deep += ",1)";
  auto v = ParseVersion(deep);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kLimitExceeded);
  std::string deep_party;
  for (int i = 0; i < 5000; ++i) deep_party += "(";
  auto p = ParseParty(deep_party);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, ErrorCode::kLimitExceeded);
}

}  // namespace
}  // namespace once::itc

namespace once::itc {
namespace {

// The seed corpora of the itc fuzzers (fuzz/corpus): texts and encodings of
// parties, versions and clocks a rack makes (forks, ticks, joins), the
// non-canonical texts the parser normalises, and the wire-format doc's vectors.
TEST(FuzzSeeds, AreCurrentEncodings) {
  std::map<std::string, std::string> text, bytes;
  Clock a = Clock::Seed();
  Clock b = *a.Fork();
  Clock c = *b.Fork();
  ASSERT_TRUE(a.Ticks(3));
  ASSERT_TRUE(b.Recv(*a.Send()));
  ASSERT_TRUE(c.Tick());
  c.Absorb(b.version());
  const std::pair<const char*, const Clock*> clocks[] = {{"seed", &a}, {"fork", &b}, {"fork2", &c}};
  for (const auto& [name, clock] : clocks) {
    const std::string n = name;
    text["party-" + n] = FormatParty(clock->party());
    text["version-" + n] = FormatVersion(clock->version());
    bytes["party-" + n] = fuzz_corpus::AsString(clock->party().Encode());
    bytes["version-" + n] = fuzz_corpus::AsString(clock->version().Encode());
    bytes["clock-" + n] = fuzz_corpus::AsString(clock->Encode());
  }
  text["version-zero"] = FormatVersion(Version());
  text["version-max-height"] = "18446744073709551615";
  text["noncanonical-party"] = "((1,1),(0,0))";
  text["noncanonical-version"] = " (0, 1 ,(0,2,1))\n";
  text["noncanonical-leaves"] = "(1,(0,2,2),2)";
  text["leading-zeros"] = "(001,0,(0,01,0))";
  // docs/itc-wire-format.md
  const char* vectors[] = {"20", "88", "c480", "e0", "9a", "52ea", "20a8"};
  for (const char* hex : vectors) {
    bytes[std::string("doc-") + hex] = fuzz_corpus::AsString(*HexDecode(hex));
  }
  for (const auto& [name, t] : text) ASSERT_TRUE(ParseParty(t) || ParseVersion(t)) << name;
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/itc_text_fuzz", text);
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/itc_decode_fuzz", bytes);
}

}  // namespace
}  // namespace once::itc
