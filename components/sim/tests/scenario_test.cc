#include "once/sim/scenario.h"

#include <gtest/gtest.h>

#include <map>

#include "once/fuzz_corpus/seeds.h"

namespace once::sim {
namespace {

using namespace std::string_literals;

constexpr char kEverything[] = R"(# every step, once
sleds 4 split s0,s1 | s2,s3
left-cap 0
partition s0,s1 | s2,s3
heal
crash s1
move s1 to s2,s3
boot s1
wipe s1
link s1 s0
unlink s1 s0
session start A via s0
job J1 in A via s0 target s0,s1 cmd echo hello world
job J2 in A via s0 target 1,3 cmd true
job J3 in A via s0
job stop J1 via s0
session stop A via s0
reset s1
settle
wait 500ms
wait 2s
drive s1 0 fail
drive s1 1 tear
drive s0 0 enospc
drive s0 0 heal
expect ran J1 on s0 once
expect ran J2 on s1 never
expect status J2 on s1 skipped
expect status J2 on s1 none
expect refused s1
expect trusted s0
)";

TEST(ScenarioTest, EveryStepParsesAndFormatsBackToTheSameSteps) {
  auto parsed = ParseScenario(kEverything);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().ToString();
  EXPECT_EQ(parsed->steps.size(), 30u);
  const std::string formatted = FormatScenario(*parsed);
  auto again = ParseScenario(formatted);
  ASSERT_TRUE(again.has_value()) << again.error().ToString() << "\n" << formatted;
  EXPECT_EQ(FormatScenario(*again), formatted);
  EXPECT_EQ(parsed->lines[0], 2);
  EXPECT_EQ(std::get<JobStart>(parsed->steps[11]).command, "echo hello world");
  EXPECT_EQ(std::get<Wait>(parsed->steps[19]).ms, 2000);
}

// The seed corpus of sim_scenario_fuzz (fuzz/corpus): every step as written
// above and in its canonical form, and the header's example.
TEST(ScenarioTest, FuzzSeedsAreCurrentTexts) {
  std::map<std::string, std::string> seeds;
  seeds["every-step"] = kEverything;
  auto parsed = ParseScenario(kEverything);
  ASSERT_TRUE(parsed.has_value());
  seeds["every-step-canonical"] = FormatScenario(*parsed);
  seeds["split-boot-flip-flop"] =
      "sleds 4 split s0,s1|s2,s3\n"
      "session start A via s0\nsession start B via s2\nsettle\n"
      "job J1 in A via s0 target s1 cmd true\nsettle\n"
      "crash s1\nmove s1 to s2,s3\nboot s1\nsettle\n"
      "job J2 in B via s2 target s1\nsettle\n"
      "drive s1 0 tear 2\ncrash s1\nmove s1 to s0\nboot s1\nsettle\nwait 3s\n"
      "expect ran J1 on s1 once\nexpect status J2 on s1 stopped\nexpect trusted s1\n";
  for (const auto& [name, text] : seeds) ASSERT_TRUE(ParseScenario(text)) << name;
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/sim_scenario_fuzz", seeds);
}

TEST(ScenarioTest, MalformedLinesAreTypedErrorsNamingTheirLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"crash s1", "the first step is `sleds N`"},
      {"sleds 4\nsleds 4", "comes once"},
      {"sleds 0", "1-32"},
      {"sleds 4\ncrash s9", "no sled s9"},
      {"sleds 4\nflap s1", "unknown step"},
      {"sleds 4\ncrash x1", "not a sled"},
      {"sleds 4\npartition s0,s1 | s1,s2", "two groups"},
      {"sleds 4\nmove s1 to s1", "itself"},
      {"sleds 4\njob J1 in A via s0 target s0 cmd", "empty command"},
      {"sleds 4\nwait 10", "ms or s"},
      {"sleds 4\nexpect status J1 on s0 asleep", "unknown status"},
      {"sleds 4\ndrive s0 2 fail", "scenario_number_max"},
      {"sleds 4\nsession start A via", "a sled"},
      {"sleds 4\nexpect ran J1 on s0 thrice", "once, never or twice"},
      {"", "no steps"},
      {"sleds 4\njob J1 in A via s0 cmd true\r\r\n", "a control byte (0x0d)"},
      {"sleds 4\nwait 1s\x01", "a control byte (0x01)"},
  };
  for (const auto& [text, why] : cases) {
    auto parsed = ParseScenario(text);
    ASSERT_FALSE(parsed.has_value()) << text;
    EXPECT_NE(parsed.error().ToString().find(why), std::string::npos)
        << text << " -> " << parsed.error().ToString();
  }
  auto line = ParseScenario("sleds 2\n\n# comment\nboot s7\n");
  ASSERT_FALSE(line.has_value());
  EXPECT_NE(line.error().message.find("line 4"), std::string::npos) << line.error().message;
}

// Found by sim_scenario_fuzz (CI, 2026-12-05): a command ending in two CRs
// formatted to a line whose reparse dropped one of them. A CRLF file still
// parses; a control byte in a comment is still a comment.
TEST(ScenarioTest, ACommandEndingInAControlByteIsRefusedAndCrlfFilesStillParse) {
  auto crlf = ParseScenario("sleds 2\r\n# a \x02\x00 comment\r\njob J1 in A via s0 cmd true\r\n"s);
  ASSERT_TRUE(crlf.has_value()) << crlf.error().ToString();
  EXPECT_EQ(std::get<JobStart>(crlf->steps[1]).command, "true");
  auto again = ParseScenario(FormatScenario(*crlf));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(FormatScenario(*again), FormatScenario(*crlf));
  auto doubled = ParseScenario("sleds 2\njob J4 in S1 via s0 target s1 cmd trngle-sessi\r\r\r\n");
  ASSERT_FALSE(doubled.has_value());
  EXPECT_EQ(doubled.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(doubled.error().message.find("line 2"), std::string::npos) << doubled.error().message;
}

TEST(ScenarioTest, LimitsAreNamed) {
  std::string long_line = "sleds 2\nwait " + std::string(kLineBytesMax, '1') + "ms\n";
  auto parsed = ParseScenario(long_line);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().code, ErrorCode::kLimitExceeded);
  auto label =
      ParseScenario("sleds 2\nsession start " + std::string(kLabelBytesMax + 1, 'a') + " via s0\n");
  ASSERT_FALSE(label.has_value());
  EXPECT_EQ(label.error().code, ErrorCode::kLimitExceeded);
}

}  // namespace
}  // namespace once::sim
