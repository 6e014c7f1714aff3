// JSON nested past the store's json_depth_max is refused where it enters the
// runtime, before anything copies it (a copy recurses as deep as the tree).
#include <gtest/gtest.h>

#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"

namespace once::runtime {
namespace {

using store::MemoryEventStore;

// [[...[1]...]]: `depth` arrays, built without recursion.
Json Nested(size_t depth) {
  Json json = 1;
  for (size_t i = 0; i < depth; ++i) {
    Json outer = Json::array();
    outer.push_back(std::move(json));
    json = std::move(outer);
  }
  return json;
}

void ExpectDepthLimit(const Error& e, int64_t depth_max) {
  EXPECT_EQ(e.code, ErrorCode::kLimitExceeded) << e.ToString();
  const auto* d = e.As<LimitDetail>();
  ASSERT_NE(d, nullptr) << e.ToString();
  EXPECT_EQ(d->limit, "json_depth_max");
  EXPECT_EQ(d->value, depth_max + 1);
  EXPECT_EQ(d->max, depth_max);
}

class JsonDepthTest : public ::testing::Test {
 protected:
  static store::Limits Depth8() {
    store::Limits limits;
    limits.json_depth_max = 8;
    return limits;
  }
  int64_t Head(std::string_view id) { return store_.Head(id).value(); }

  ManualClock clock_;
  MemoryEventStore store_{Depth8(), clock_};
  Runtime rt_{store_, clock_};
  int step_runs_ = 0;
};

// The input sits one level down in EXECUTION_STARTED's payload ({"input": ...}).
TEST_F(JsonDepthTest, AnInputOneLevelShortOfTheLimitRunsADeeperOneIsRefused) {
  ASSERT_TRUE(rt_.Register("echo", [&](Context& ctx, const Json& in) -> Result<Json> {
    return ctx.Step("copy", [&]() -> Result<Json> {
      ++step_runs_;
      return in;
    });
  }));
  Result<RunOutcome> ok = rt_.Start("echo", "ex-1", Nested(7));
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->value, Nested(7));
  EXPECT_EQ(Head("ex-1"), 3);

  Result<RunOutcome> deep = rt_.Start("echo", "ex-2", Nested(8));
  ASSERT_FALSE(deep);
  ExpectDepthLimit(deep.error(), 8);
  EXPECT_EQ(Head("ex-2"), 0);
  EXPECT_EQ(step_runs_, 1);  // the refused start ran nothing
}

TEST_F(JsonDepthTest, AStepValueTooDeepFailsTheRunAndRecordsNothing) {
  ASSERT_TRUE(rt_.Register("deep_step", [&](Context& ctx, const Json&) -> Result<Json> {
    return ctx.Step("make", [&]() -> Result<Json> {
      ++step_runs_;
      return Nested(8);
    });
  }));
  Result<RunOutcome> out = rt_.Start("deep_step", "ex-1", Json::object());
  ASSERT_FALSE(out);
  ExpectDepthLimit(out.error(), 8);
  EXPECT_EQ(Head("ex-1"), 0);  // like a value the store refuses: nothing was appended
  EXPECT_EQ(step_runs_, 1);
}

TEST_F(JsonDepthTest, ABodyResultTooDeepFailsTheRunAndRecordsNothing) {
  ASSERT_TRUE(
      rt_.Register("deep_result", [](Context&, const Json&) -> Result<Json> { return Nested(8); }));
  Result<RunOutcome> out = rt_.Start("deep_result", "ex-1", Json::object());
  ASSERT_FALSE(out);
  ExpectDepthLimit(out.error(), 8);
  EXPECT_EQ(Head("ex-1"), 0);
}

// An emitted payload is the payload itself: it may nest as deep as the limit.
TEST_F(JsonDepthTest, EmitTakesAPayloadAtTheLimitAndRefusesADeeperOne) {
  Status at_limit, past_limit;
  ASSERT_TRUE(rt_.Register("emits", [&](Context& ctx, const Json&) -> Result<Json> {
    at_limit = ctx.Emit("progress", Nested(8));
    past_limit = ctx.Emit("progress", Nested(9));
    return Json("done");
  }));
  Result<RunOutcome> out = rt_.Start("emits", "ex-1", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_TRUE(at_limit) << at_limit.error().ToString();
  ASSERT_FALSE(past_limit);
  ExpectDepthLimit(past_limit.error(), 8);
  EXPECT_EQ(Head("ex-1"), 3);  // STARTED, progress, COMPLETED
}

TEST_F(JsonDepthTest, DeliverAndRecordOutcomeRefuseDeepValuesAndAppendNothing) {
  ASSERT_TRUE(rt_.Register(
      "waits", [](Context& ctx, const Json&) -> Result<Json> { return ctx.Receive("orders"); }));
  Result<RunOutcome> parked = rt_.Start("waits", "ex-1", Json::object());
  ASSERT_TRUE(parked) << parked.error().ToString();
  int64_t head = Head("ex-1");
  Result<RunOutcome> delivered = rt_.Deliver("ex-1", "orders", Nested(8));
  ASSERT_FALSE(delivered);
  ExpectDepthLimit(delivered.error(), 8);
  EXPECT_EQ(Head("ex-1"), head);

  ASSERT_TRUE(rt_.Deliver("ex-1", "orders", Nested(3)));
  head = Head("ex-1");
  Result<int64_t> outcome = rt_.RecordOutcome("ex-1", Nested(8));
  ASSERT_FALSE(outcome);
  ExpectDepthLimit(outcome.error(), 8);
  EXPECT_EQ(Head("ex-1"), head);
}

// 300,000 nested arrays (600 KB of JSON): copying it into EXECUTION_STARTED
// recursed once a level and overflowed the stack.
TEST(JsonDepthHostileTest, AHostileInputIsRefusedNotACrash) {
  ManualClock clock;
  MemoryEventStore store(store::Limits{}, clock);
  Runtime rt(store, clock);
  ASSERT_TRUE(rt.Register("echo", [](Context&, const Json& in) -> Result<Json> { return in; }));
  Result<RunOutcome> out = rt.Start("echo", "ex-1", Nested(300'000));
  ASSERT_FALSE(out);
  ExpectDepthLimit(out.error(), static_cast<int64_t>(store.limits().json_depth_max));
  EXPECT_EQ(store.Head("ex-1").value(), 0);
}

}  // namespace
}  // namespace once::runtime
