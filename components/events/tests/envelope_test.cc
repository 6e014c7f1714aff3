#include "once/events/envelope.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

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

TEST(EnvelopeTest, JsonArrayEqualsTheInitializerListForm) {
  Json wait = JsonObject("type", "timer", "wake_at_ms", 17);
  EXPECT_EQ(JsonArray(wait), Json::array({wait}));
  EXPECT_EQ(JsonArray(), Json::array());
  EXPECT_EQ(JsonArray(1, "two", wait), Json::array({1, "two", wait}));
  // One pair of values stays an array (an initializer list of a string and
  // a value would be taken for an object's member).
  EXPECT_TRUE(JsonArray("key", 1).is_array());
  Json moved = JsonArray(std::move(wait));
  EXPECT_EQ(moved[0]["wake_at_ms"], 17);
  EXPECT_TRUE(wait.is_null());  // moved from, not copied
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

// FreeTree leaves null, whatever the tree (ASan's leak check sees that it
// frees every block), and the tree it was copied from is untouched.
TEST(EnvelopeTest, FreeTreeFreesAnyTree) {
  std::mt19937_64 rng(20261205);
  std::function<Json(int)> make = [&](int depth) -> Json {
    switch (rng() % (depth > 0 ? 6 : 4)) {
      case 0:
        return nullptr;
      case 1:
        return static_cast<int64_t>(rng());
      case 2:
        return std::string(rng() % 40, 'x');
      case 3:
        return rng() % 2 == 0;
      case 4: {
        Json a = Json::array();
        for (size_t n = rng() % 5; n > 0; --n) a.push_back(make(depth - 1));
        return a;
      }
      default: {
        Json o = Json::object();
        for (size_t n = rng() % 5; n > 0; --n) o[std::to_string(rng() % 100)] = make(depth - 1);
        return o;
      }
    }
  };
  for (int i = 0; i < 500; ++i) {
    const Json tree = make(i % 40);  // depth limits up to 40 (the deep case: below)
    Json copy = tree;
    FreeTree(copy);
    EXPECT_TRUE(copy.is_null());
    Json again = tree;
    EXPECT_EQ(again, tree);
  }
}

// A tree far deeper than kFreeTreeDepth: FreeTree stops there and the
// destructor's own walk (no recursion) frees the rest, so the stack does
// not grow with the tree.
TEST(EnvelopeTest, FreeTreeDoesNotRecursePastItsDepth) {
  Json deep = nullptr;
  for (int i = 0; i < 1'000'000; ++i) {
    Json a = Json::array();
    a.push_back(std::move(deep));
    deep = std::move(a);
  }
  FreeTree(deep);
  EXPECT_TRUE(deep.is_null());
}

}  // namespace
}  // namespace once::events
