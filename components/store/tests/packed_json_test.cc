#include "packed_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "once/fuzz_corpus/seeds.h"

namespace once::store::internal {
namespace {

using events::Json;

// The value and its type, all the way down (json's == takes 17 and 17u, or
// 1 and 1.0, for equal).
bool SameTyped(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::value_t::array: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!SameTyped(a[i], b[i])) return false;
      }
      return true;
    }
    case Json::value_t::object: {
      if (a.size() != b.size()) return false;
      for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
        if (ia.key() != ib.key() || !SameTyped(*ia, *ib)) return false;
      }
      return true;
    }
    case Json::value_t::number_float: {
      const double x = a.get<double>(), y = b.get<double>();
      return std::memcmp(&x, &y, sizeof x) == 0;  // NaN and -0.0 by their bits
    }
    case Json::value_t::discarded:
      return true;
    default:
      return a == b;
  }
}

Json RoundTrip(const Json& j) {
  std::string bytes;
  PackJson(j, bytes);
  Result<Json> back = UnpackJson(bytes, 64);
  EXPECT_TRUE(back) << back.error().ToString();
  return back ? *back : Json();
}

TEST(PackedJsonTest, EveryTypeRoundTripsWithItsType) {
  const std::vector<Json> values = {
      nullptr,
      true,
      false,
      0,
      -1,
      std::numeric_limits<int64_t>::min(),
      std::numeric_limits<int64_t>::max(),
      Json(uint64_t{17}),
      Json(std::numeric_limits<uint64_t>::max()),
      1.0,
      -0.0,
      std::numeric_limits<double>::quiet_NaN(),
      std::numeric_limits<double>::infinity(),
      5e-324,
      "",
      std::string("a\0b", 3),
      "h\xc3\xa9\xe4\xb8\x96",
      Json::array(),
      Json::object(),
      Json::binary({}),
      Json::binary({1, 2, 3}, 200),
      Json::binary({}, 0),
      Json(Json::value_t::discarded),
      {{"b", {1, 2.5, nullptr}}, {"a", {{"", false}}}, {"\x7f", "x"}},
  };
  for (const Json& v : values) {
    SCOPED_TRACE(v.is_discarded() ? std::string("discarded")
                                  : v.dump(-1, ' ', false, Json::error_handler_t::replace));
    EXPECT_TRUE(SameTyped(RoundTrip(v), v));
  }
}

// Random trees of every type, nested up to 6 deep: each one back as it was.
TEST(PackedJsonTest, RandomTreesRoundTrip) {
  std::mt19937_64 rng(20261205);
  std::function<Json(int)> make = [&](int depth) -> Json {
    switch (rng() % (depth > 0 ? 9 : 7)) {
      case 0:
        return nullptr;
      case 1:
        return rng() % 2 == 0;
      case 2:
        return static_cast<int64_t>(rng());
      case 3:
        return Json(static_cast<uint64_t>(rng()));
      case 4: {
        double d;
        uint64_t bits = rng();
        std::memcpy(&d, &bits, sizeof d);
        return d;
      }
      case 5:
        return std::string(rng() % 40, static_cast<char>('a' + rng() % 26));
      case 6:
        return rng() % 2 == 0 ? Json::binary(std::vector<uint8_t>(rng() % 5, 7))
                              : Json::binary(std::vector<uint8_t>(rng() % 5, 7), rng() % 300);
      case 7: {
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
  for (int i = 0; i < 2000; ++i) {
    const Json tree = make(6);
    ASSERT_TRUE(SameTyped(RoundTrip(tree), tree)) << i;
  }
}

TEST(PackedJsonTest, WhatPackJsonCannotHaveWrittenIsCorruption) {
  std::string good;
  PackJson(Json{{"a", 1}, {"b", {1, 2}}}, good);
  const std::vector<std::string> bad = {
      "",
      std::string(1, '\x0b'),                         // an unknown tag
      good.substr(0, good.size() - 1),                // truncated
      good + std::string(1, '\0'),                    // bytes after the value
      std::string("\x03\x80\x00", 3),                 // a varint that is not minimal
      std::string("\x03") + std::string(10, '\xff'),  // a varint past 64 bits
      std::string("\x07\x05\x00", 3),                 // a count past the bytes left
      std::string("\x08\x02\x01"
                  "b"
                  "\x00"
                  "\x01"
                  "a"
                  "\x00",
                  9),  // keys out of order
      std::string("\x08\x02\x01"
                  "a"
                  "\x00"
                  "\x01"
                  "a"
                  "\x00",
                  9),                  // a key twice
      std::string("\x09\x00\x02", 3),  // a binary's subtype flag of 2
      std::string("\x05\x00\x00", 3),  // a float cut short
  };
  for (const std::string& bytes : bad) {
    Result<Json> r = UnpackJson(bytes, 64);
    ASSERT_FALSE(r) << testing::PrintToString(bytes);
    EXPECT_EQ(r.error().code, ErrorCode::kCorruption);
  }
  // Nesting past depth_max is refused without recursing further.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += std::string("\x07\x01", 2);
  deep += std::string(1, '\0');
  EXPECT_FALSE(UnpackJson(deep, 64));
  EXPECT_TRUE(UnpackJson(deep, 100));
}

// The fuzzer's seeds (fuzz/packed_json_fuzz.cc): real packed payloads.
TEST(PackedJsonTest, FuzzSeedsAreCurrent) {
  auto packed = [](const Json& j) {
    std::string bytes;
    PackJson(j, bytes);
    return bytes;
  };
  std::map<std::string, std::string> seeds;
  seeds["started"] = packed({{"workflow", "order"}, {"input", {{"cents", 100}, {"sku", 7}}}});
  seeds["step"] = packed({{"name", "charge"}, {"value", {1, 2.5, nullptr, true, "x"}}});
  seeds["numbers"] = packed({-1, Json(uint64_t{18446744073709551615u}), -0.0, 1e300});
  seeds["binary"] = packed(Json::binary({1, 2, 3}, 42));
  seeds["null"] = packed(nullptr);
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/store_packed_json_fuzz", seeds);
}

}  // namespace
}  // namespace once::store::internal
