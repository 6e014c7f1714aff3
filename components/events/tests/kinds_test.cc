#include "once/events/kinds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace once::events {
namespace {

using nlohmann::json;

TEST(KindsTest, AnsweringKindsAreExactlyTheSeedsList) {
  std::set<std::string_view> answering(AnsweringKernelKindNames().begin(),
                                       AnsweringKernelKindNames().end());
  EXPECT_EQ(answering, (std::set<std::string_view>{"EXECUTION_RESUMED", "EXECUTION_SUSPENDED",
                                                   "EXECUTION_COMPLETED", "EXECUTION_FAILED",
                                                   "EXECUTION_CANCELLED", "EXECUTION_CONTINUED"}));
}

// The status indexes of both SQL stores and the listings that read them
// take their kinds from this one list.
TEST(KindsTest, StatusKindsAreStartedSuspendedAndTheTerminalKinds) {
  std::vector<std::string_view> status(StatusKernelKindNames().begin(),
                                       StatusKernelKindNames().end());
  EXPECT_EQ(status, (std::vector<std::string_view>{"EXECUTION_STARTED", "EXECUTION_SUSPENDED",
                                                   "EXECUTION_COMPLETED", "EXECUTION_FAILED",
                                                   "EXECUTION_CANCELLED", "EXECUTION_CONTINUED"}));
  for (const KernelKindInfo& row : kKernelKinds) {
    const bool listed = std::find(status.begin(), status.end(), row.name) != status.end();
    EXPECT_EQ(IsStatusKind(row.kind), listed) << row.name;
  }
  EXPECT_FALSE(IsStatusKind(KernelKind::kExecutionResumed));
  EXPECT_FALSE(IsStatusKind(KernelKind::kStepCompleted));
}

TEST(KindsTest, RuleOneKernelKindsFollowTheirRow) {
  json none;
  for (auto k : {"EXECUTION_RESUMED", "EXECUTION_SUSPENDED", "EXECUTION_COMPLETED",
                 "EXECUTION_FAILED", "EXECUTION_CANCELLED", "EXECUTION_CONTINUED"}) {
    EXPECT_TRUE(IsAnswering(k, none)) << k;
    EXPECT_TRUE(IsAnswering(k, json{{"kernel", true}})) << k;
  }
  for (auto k : {"EXECUTION_DENIED", "OUTCOME_RECORDED", "STEP_FAILED", "MESSAGE_CONSUMED",
                 "EXECUTION_MIGRATED", "ANNOTATION", "EXECUTION_STARTED", "STEP_COMPLETED",
                 "CHILD_STARTED"}) {
    EXPECT_FALSE(IsAnswering(k, none)) << k;
    EXPECT_FALSE(IsAnswering(k, json{{"kernel", true}})) << k;
  }
}

TEST(KindsTest, RuleTwoAndThreeUnknownKinds) {
  EXPECT_FALSE(IsAnswering("order.charged", json::object()));
  EXPECT_FALSE(IsAnswering("order.charged", json()));
  EXPECT_TRUE(IsAnswering("EXECUTION_FROM_THE_FUTURE", json{{"kernel", true}}));
  EXPECT_FALSE(IsAnswering("EXECUTION_FROM_THE_FUTURE", json{{"kernel", "true"}}));
  EXPECT_FALSE(IsAnswering("EXECUTION_FROM_THE_FUTURE", json{{"kernel", 1}}));
  EXPECT_FALSE(IsAnswering("EXECUTION_FROM_THE_FUTURE", json{{"kernel", false}}));
  EXPECT_FALSE(IsAnswering("EXECUTION_FROM_THE_FUTURE", json::array({true})));
}

TEST(KindsTest, ParseRoundTripsEveryRow) {
  for (const auto& row : kKernelKinds) {
    ASSERT_EQ(ParseKernelKind(row.name), row.kind);
  }
  EXPECT_FALSE(ParseKernelKind("execution_resumed").has_value());
  EXPECT_EQ(AllKernelKindNames().size(), kKernelKindCount);
}

}  // namespace
}  // namespace once::events
