#include "once/events/envelope.h"

#include <gtest/gtest.h>

namespace once::events {
namespace {

TEST(EnvelopeTest, KernelEventIsStampedAndCarriesItsFence) {
  Envelope e = KernelEvent(KernelKind::kExecutionResumed, nullptr, 7);
  EXPECT_TRUE(e.is_kernel());
  EXPECT_EQ(e.fence(), 7);
  EXPECT_TRUE(e.answering());
  EXPECT_TRUE(e.Is(KernelKind::kExecutionResumed));
  Envelope unfenced = KernelEvent(KernelKind::kExecutionDenied, {{"why", "policy"}});
  EXPECT_EQ(unfenced.fence(), 0);
  EXPECT_FALSE(unfenced.answering());
}

TEST(EnvelopeTest, AppEventIsNotStamped) {
  Envelope e = AppEvent("order.charged", {{"cents", 100}});
  EXPECT_FALSE(e.is_kernel());
  EXPECT_FALSE(e.answering());
}

TEST(EnvelopeTest, JsonObjectEqualsTheInitializerListForm) {
  Json value{{"n", 1}, {"list", {1, 2}}};
  std::string_view name = "charge";
  EXPECT_EQ(JsonObject("name", name, "value", value), (Json{{"name", "charge"}, {"value", value}}));
  EXPECT_EQ(JsonObject(), Json::object());
  Json moved = JsonObject("value", std::move(value));
  EXPECT_EQ(moved["value"]["list"], Json({1, 2}));
  EXPECT_TRUE(value.is_null());  // moved from, not copied
  EXPECT_EQ(KernelEvent(KernelKind::kStepCompleted, nullptr, 3).metadata.ToJson(),
            (Json{{"kernel", true}, {"fence", 3}}));
}

TEST(EnvelopeTest, ParseJsonRejectsMalformedText) {
  EXPECT_EQ(ParseJson("{\"a\":1}").value()["a"], 1);
  EXPECT_TRUE(ParseJson("17").value().is_number_integer());
  EXPECT_TRUE(ParseJson("18446744073709551615").value().is_number_unsigned());
  EXPECT_EQ(ParseJson("17").value(), Json(17));
  auto bad = ParseJson("{\"a\":");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace once::events
