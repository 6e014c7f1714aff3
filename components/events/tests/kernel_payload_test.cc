#include "once/events/kernel_payload.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace once::events {
namespace {

using Json = nlohmann::json;

// One member rule of kernel_payload.h: a value it accepts and one it refuses.
struct Rule {
  KernelKind kind;
  std::string member;
  Json good;
  Json bad;
  bool required = false;
};

const std::vector<Rule>& Rules() {
  static const std::vector<Rule> rules = {
      {KernelKind::kExecutionStarted, "workflow", "order", 7},
      {KernelKind::kExecutionStarted, "principal", "ops", Json::array()},
      {KernelKind::kExecutionStarted, "continued_from", nullptr, 3},
      {KernelKind::kExecutionStarted, "parent", {{"execution_id", "p"}, {"key", "k"}}, "p"},
      {KernelKind::kExecutionResumed, "park_seq", 4, "4"},
      {KernelKind::kExecutionResumed, "wait", Json::object(), "timer"},
      {KernelKind::kExecutionResumed, "by", "timer", 1},
      {KernelKind::kExecutionSuspended, "call", "sleep", 1},
      {KernelKind::kExecutionSuspended, "group", "g", false},
      {KernelKind::kExecutionSuspended, "waits", Json::array({{{"type", "timer"}}}),
       Json::object()},
      {KernelKind::kExecutionFailed, "error", {{"code", 1}}, "boom"},
      {KernelKind::kExecutionContinued, "next", "n", 1},
      {KernelKind::kStepCompleted, "name", "charge", 3, true},
      {KernelKind::kStepFailed, "name", "charge", nullptr, true},
      {KernelKind::kChildStarted, "key", "k", 1, true},
      {KernelKind::kChildStarted, "child_id", "c", 1},
      {KernelKind::kChildStarted, "workflow", "w", 1},
      {KernelKind::kChildStarted, "group", "g", 1},
      {KernelKind::kMessageConsumed, "topic", "t", 1, true},
  };
  return rules;
}

// The members every rule of `kind` requires, at their good values.
Json Required(KernelKind kind) {
  Json out = Json::object();
  for (const Rule& r : Rules()) {
    if (r.kind == kind && r.required) out[r.member] = r.good;
  }
  return out;
}

// Members no rule names, sorting before, between and after every rule's
// member (the check walks the object's members in order beside its own).
Json WithDecoys(Json payload) {
  for (const char* decoy : {"", "a", "by0", "call_", "continued", "error0", "group_", "key0",
                            "name0", "next0", "parent_", "principal0", "topic0", "wait0", "waits0",
                            "workflow0", "zzz", "\x7f", "\xc3\xa9"}) {
    payload[decoy] = decoy;
  }
  return payload;
}

TEST(KernelPayloadTest, EveryMemberIsFoundAmongOthersAndItsTypeChecked) {
  for (const Rule& r : Rules()) {
    SCOPED_TRACE(std::string(Name(r.kind)) + "." + r.member);
    Json good = WithDecoys(Required(r.kind));
    good[r.member] = r.good;
    EXPECT_EQ(KernelPayloadProblem(r.kind, good), std::nullopt);
    Json bad = good;
    bad[r.member] = r.bad;
    std::optional<std::string> problem = KernelPayloadProblem(r.kind, bad);
    ASSERT_TRUE(problem.has_value());
    EXPECT_NE(problem->find(r.member), std::string::npos) << *problem;
  }
}

TEST(KernelPayloadTest, ARequiredMemberThatIsMissingIsNamed) {
  for (const Rule& r : Rules()) {
    if (!r.required) continue;
    SCOPED_TRACE(std::string(Name(r.kind)) + "." + r.member);
    Json payload = WithDecoys(Required(r.kind));
    payload.erase(r.member);
    std::optional<std::string> problem = KernelPayloadProblem(r.kind, payload);
    ASSERT_TRUE(problem.has_value());
    EXPECT_NE(problem->find("has no \"" + r.member + "\""), std::string::npos) << *problem;
  }
}

TEST(KernelPayloadTest, NestedMembersAreCheckedAmongOthers) {
  Json parent = WithDecoys({{"execution_id", "p"}, {"key", "k"}});
  EXPECT_EQ(KernelPayloadProblem(KernelKind::kExecutionStarted, {{"parent", parent}}),
            std::nullopt);
  for (const char* member : {"execution_id", "key"}) {
    Json missing = parent;
    missing.erase(member);
    auto problem = KernelPayloadProblem(KernelKind::kExecutionStarted, {{"parent", missing}});
    ASSERT_TRUE(problem.has_value()) << member;
    EXPECT_NE(problem->find(std::string("the parent has no \"") + member), std::string::npos);
  }
  Json wait = WithDecoys({{"type", "timer"}, {"wake_at_ms", 5}, {"group", "g"}});
  EXPECT_EQ(KernelPayloadProblem(KernelKind::kExecutionSuspended, {{"waits", {wait}}}),
            std::nullopt);
  for (const char* member : {"type", "key", "topic", "wake_at_ms", "group"}) {
    Json bad = wait;
    bad[member] = member == std::string("wake_at_ms") ? Json("soon") : Json(1);
    auto problem = KernelPayloadProblem(KernelKind::kExecutionSuspended, {{"waits", {wait, bad}}});
    ASSERT_TRUE(problem.has_value()) << member;
    EXPECT_NE(problem->find(std::string("a wait's \"") + member), std::string::npos) << *problem;
  }
}

TEST(KernelPayloadTest, SealedPayloadsPassAndLookalikesDoNot) {
  EXPECT_TRUE(IsSealedPayload({{"$sealed", "abc"}}));
  EXPECT_FALSE(IsSealedPayload({{"$sealed", 1}}));
  EXPECT_FALSE(IsSealedPayload({{"$sealed", "abc"}, {"name", "x"}}));
  EXPECT_FALSE(IsSealedPayload({{"$seale", "abc"}}));
  EXPECT_FALSE(IsSealedPayload(Json::array({"$sealed"})));
  EXPECT_EQ(KernelPayloadProblem(KernelKind::kStepCompleted, {{"$sealed", "abc"}}), std::nullopt);
  EXPECT_TRUE(KernelPayloadProblem(KernelKind::kStepCompleted, {{"$seale", "abc"}}).has_value());
}

}  // namespace
}  // namespace once::events
