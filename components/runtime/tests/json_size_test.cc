// store::SerializedJsonSize (the memory store's non-allocating size check)
// must equal dump().size() exactly, and refuse what dump() refuses. It lives
// beside the runtime's tests because the runtime's hot path relies on it.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

#include "once/store/validate.h"

namespace once::store {
namespace {

using events::Json;

void ExpectExact(const Json& j) {
  std::optional<size_t> size = SerializedJsonSize(j);
  ASSERT_TRUE(size) << j.dump();
  EXPECT_EQ(*size, j.dump().size()) << j.dump();
}

TEST(SerializedJsonSizeTest, EqualsDumpForEveryKind) {
  for (const Json& j : {Json(),
                        Json(true),
                        Json(false),
                        Json(0),
                        Json(-1),
                        Json(9),
                        Json(10),
                        Json(-10),
                        Json(std::numeric_limits<int64_t>::min()),
                        Json(std::numeric_limits<int64_t>::max()),
                        Json(std::numeric_limits<uint64_t>::max()),
                        Json(1.5),
                        Json(1.0),
                        Json(-0.0),
                        Json(1e300),
                        Json(0.1),
                        Json(std::numeric_limits<double>::quiet_NaN()),
                        Json(""),
                        Json("plain"),
                        Json("q\"b\\s/"),
                        Json(std::string("\x00\x01\b\t\n\f\r\x1f\x7f", 9)),
                        Json("é€𝄞"),
                        Json::array(),
                        Json::object(),
                        Json::array({1, "a", nullptr}),
                        Json{{"k", 1}, {"é\n", Json::array({Json::object(), 2.5})}, {"", ""}},
                        Json::binary({1, 2, 3})}) {
    ExpectExact(j);
  }
}

TEST(SerializedJsonSizeTest, RandomDocuments) {
  std::mt19937 rng(7);
  auto random_string = [&] {
    std::string s;
    int n = rng() % 8;
    for (int i = 0; i < n; ++i) {
      static const char* kPieces[] = {"a", "\"", "\\", "\n", "\x02", "é", "€", "𝄞", " "};
      s += kPieces[rng() % 9];
    }
    return s;
  };
  std::function<Json(int)> make = [&](int depth) -> Json {
    switch (depth > 3 ? rng() % 4 : rng() % 6) {
      case 0:
        return Json(static_cast<int64_t>(rng()) - (1ll << 31));
      case 1:
        return Json(random_string());
      case 2:
        return Json(static_cast<double>(rng()) / 7.0);
      case 3:
        return Json(rng() % 2 == 0);
      case 4: {
        Json a = Json::array();
        for (int i = rng() % 4; i > 0; --i) a.push_back(make(depth + 1));
        return a;
      }
      default: {
        Json o = Json::object();
        for (int i = rng() % 4; i > 0; --i) o[random_string()] = make(depth + 1);
        return o;
      }
    }
  };
  for (int i = 0; i < 2000; ++i) ExpectExact(make(0));
}

TEST(SerializedJsonSizeTest, RefusesWhatDumpRefuses) {
  for (std::string bad : {std::string("\xff"), std::string("\xc0\xaf"), std::string("\xe0\x80\x80"),
                          std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80"),
                          std::string("\xe2\x82"), std::string("ok\x80")}) {
    Json j = Json{{"k", bad}};
    EXPECT_THROW(j.dump(), nlohmann::json::exception);
    EXPECT_FALSE(SerializedJsonSize(j));
    Json key;
    key[bad] = 1;
    EXPECT_FALSE(SerializedJsonSize(key));
  }
}

}  // namespace
}  // namespace once::store
