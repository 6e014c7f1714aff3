#include "once/events/json_text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace once::events {
namespace {

// AppendJsonText must write exactly what dump() writes, or refuse exactly
// where dump() throws.
void ExpectSameAsDump(const Json& json) {
  std::string mine;
  bool ok = AppendJsonText(json, mine);
  std::string theirs;
  bool throws = false;
  try {
    theirs = json.dump();
  } catch (const nlohmann::json::exception&) {
    throws = true;
  }
  ASSERT_EQ(ok, !throws);
  if (ok) {
    EXPECT_EQ(mine, theirs);
  }
  if (json.is_string()) {
    std::optional<size_t> size = JsonStringLiteralSize(json.get_ref<const std::string&>());
    ASSERT_EQ(size.has_value(), ok);
    if (ok) {
      EXPECT_EQ(*size, theirs.size());
    }
  }
}

TEST(JsonTextTest, ScalarsMatchDump) {
  for (const Json& j :
       {Json(nullptr), Json(true), Json(false), Json(0), Json(-1), Json(17),
        Json(std::numeric_limits<int64_t>::min()), Json(std::numeric_limits<int64_t>::max()),
        Json(std::numeric_limits<uint64_t>::max()), Json(1.5), Json(-0.0), Json(1e300), Json(0.1),
        Json(""), Json("plain"), Json::array(), Json::object()}) {
    ExpectSameAsDump(j);
  }
}

TEST(JsonTextTest, EscapesMatchDump) {
  std::string every_control;
  for (int c = 0; c < 0x20; ++c) every_control.push_back(static_cast<char>(c));
  for (const std::string& s :
       {std::string("quote \" backslash \\ slash /"), every_control, std::string("\x7f"),
        std::string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string("a\0b", 3),
        std::string("tab\tnew\nline\r\n")}) {
    ExpectSameAsDump(Json(s));
    ExpectSameAsDump(Json::object({{s, s}}));
  }
}

TEST(JsonTextTest, InvalidUtf8IsRefusedWhereDumpThrows) {
  for (const std::string& s :
       {std::string("\xff"), std::string("\xc0\xaf"), std::string("\xe0\x80\xaf"),
        std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80"), std::string("cut \xe2\x82"),
        std::string("\x80"), std::string("ok \xc3")}) {
    ExpectSameAsDump(Json(s));
    ExpectSameAsDump(Json::array({1, Json::object({{"k", s}})}));
    ExpectSameAsDump(Json::object({{s, 1}}));
    std::string out;
    EXPECT_FALSE(AppendJsonText(Json(s), out));
  }
}

TEST(JsonTextTest, NestedValuesMatchDump) {
  Json j = {{"step", "charge-card"},
            {"attempt", 1},
            {"output", {{"cents", -100}, {"ok", true}, {"tags", {"a", "b\n", nullptr, 2.25}}}},
            {"empty", Json::object()},
            {"list", Json::array()}};
  ExpectSameAsDump(j);
  std::string out = "prefix:";
  ASSERT_TRUE(AppendJsonText(j, out));
  EXPECT_EQ(out, "prefix:" + j.dump());  // appends, keeps what was there
}

// Random strings over bytes that matter (ASCII, controls, quotes, UTF-8
// lead and continuation bytes) inside random nesting, against dump().
TEST(JsonTextTest, RandomValuesMatchDump) {
  std::mt19937 rng(20261130);
  const std::string alphabet = std::string("ab \"\\/\x01\x1f\x7f\t\n", 12) +
                               "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x80\xbf\xed\xa0\xff";
  auto random_string = [&] {
    std::string s;
    for (int n = static_cast<int>(rng() % 12); n > 0; --n) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  std::function<Json(int)> random_json = [&](int depth) -> Json {
    switch (rng() % (depth > 3 ? 4 : 6)) {
      case 0:
        return nullptr;
      case 1:
        return static_cast<int64_t>(rng()) - (1LL << 31);
      case 2:
        return random_string();
      case 3:
        return rng() % 2 == 0;
      case 4: {
        Json a = Json::array();
        for (int n = static_cast<int>(rng() % 4); n > 0; --n) a.push_back(random_json(depth + 1));
        return a;
      }
      default: {
        Json o = Json::object();
        for (int n = static_cast<int>(rng() % 4); n > 0; --n) {
          o[random_string()] = random_json(depth + 1);
        }
        return o;
      }
    }
  };
  for (int i = 0; i < 5000; ++i) {
    ExpectSameAsDump(random_json(0));
    ExpectSameAsDump(Json(random_string()));
  }
}

// Plain ASCII is skipped 8 bytes at a time: one byte that needs escaping or
// is not ASCII, at every offset of strings up to 40 bytes long, and the
// boundary bytes around each class, must come out as dump() writes them.
TEST(JsonTextTest, OneSpecialByteAtEveryOffsetOfAPlainRun) {
  const std::vector<std::string> specials = {
      "\"",       "\\",           std::string("\0", 1), "\x01", "\x1f", "\t", "\n", "\x7f",
      "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",   " ",    "!",    "#",  "[",  "]",
      "~"};
  for (const std::string& special : specials) {
    for (size_t length = 0; length <= 40; ++length) {
      for (size_t at = 0; at <= length; ++at) {
        std::string s(length, 'x');
        s.insert(at, special);
        ExpectSameAsDump(Json(s));
      }
    }
  }
}

}  // namespace
}  // namespace once::events

namespace once::events {
namespace {

// [[...[1]...]] with `depth` arrays, or {"a":{"a":...}} with `depth` objects.
Json NestedJson(size_t depth, bool objects) {
  Json json = 1;
  for (size_t i = 0; i < depth; ++i) {
    Json outer = objects ? Json::object() : Json::array();
    if (objects) {
      outer["a"] = std::move(json);
    } else {
      outer.push_back(std::move(json));
    }
    json = std::move(outer);
  }
  return json;
}

TEST(JsonDepthTest, CountsContainersNestedInsideEachOther) {
  EXPECT_TRUE(JsonDepthWithin(Json(1), 0));
  EXPECT_TRUE(JsonDepthWithin(Json("deep"), 0));
  EXPECT_FALSE(JsonDepthWithin(Json::array(), 0));
  EXPECT_TRUE(JsonDepthWithin(Json::array(), 1));
  EXPECT_TRUE(JsonDepthWithin(Json::object(), 1));
  for (bool objects : {false, true}) {
    for (size_t depth : {1, 2, 7, 64}) {
      EXPECT_TRUE(JsonDepthWithin(NestedJson(depth, objects), depth)) << depth;
      EXPECT_FALSE(JsonDepthWithin(NestedJson(depth, objects), depth - 1)) << depth;
    }
  }
  // The deepest branch counts, wherever it is.
  Json wide = Json::array({1, NestedJson(3, true), Json::array(), NestedJson(5, false)});
  EXPECT_TRUE(JsonDepthWithin(wide, 6));
  EXPECT_FALSE(JsonDepthWithin(wide, 5));
}

// The walk stops one level past the limit, so a hostile tree is safe to ask
// about (a recursive walk of it overflowed the stack).
TEST(JsonDepthTest, AHostileTreeIsAnsweredWithoutWalkingAllOfIt) {
  Json hostile = NestedJson(300'000, false);
  EXPECT_FALSE(JsonDepthWithin(hostile, 512));
  EXPECT_FALSE(JsonDepthWithin(hostile, 0));
}

}  // namespace
}  // namespace once::events
