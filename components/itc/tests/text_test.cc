// The paper's text notation.

#include <gtest/gtest.h>

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
