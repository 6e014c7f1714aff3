#include "packed_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "once/base/clock.h"
#include "once/fuzz_corpus/seeds.h"
#include "once/store/validate.h"

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

// Random trees of every type, nested up to `depth` deep. Strings run to 300
// bytes: past PackWriter's buffer (256) and past half of it (a string that
// long goes straight to the output).
Json RandomTree(std::mt19937_64& rng, int depth) {
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
        return std::string(rng() % 4 == 0 ? rng() % 300 : rng() % 40,
                           static_cast<char>('a' + rng() % 26));
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
  return make(depth);
}

// Random trees, nested up to 6 deep: each one back as it was.
TEST(PackedJsonTest, RandomTreesRoundTrip) {
  std::mt19937_64 rng(20261205);
  for (int i = 0; i < 2000; ++i) {
    const Json tree = RandomTree(rng, 6);
    ASSERT_TRUE(SameTyped(RoundTrip(tree), tree)) << i;
  }
}

// The bytes themselves, where a buffered writer could go wrong: a string of
// 300 bytes (its length a two-byte varint, its bytes past the buffer), and
// 200 small values that fill the buffer several times over.
TEST(PackedJsonTest, LongValuesAreTheFormatsBytes) {
  std::string bytes;
  PackJson(std::string(300, 'x'), bytes);
  EXPECT_EQ(bytes, std::string("\x06\xac\x02") + std::string(300, 'x'));
  bytes.clear();
  Json many = Json::array();
  for (int i = 0; i < 200; ++i) many.push_back(i);
  PackJson(many, bytes);
  std::string expected("\x07\xc8\x01", 3);  // 200 values
  for (int i = 0; i < 200; ++i) {
    expected.push_back(3);  // an integer, zigzagged
    const unsigned z = 2 * i;
    if (z >= 0x80) {
      expected.push_back(static_cast<char>((z & 0x7f) | 0x80));
      expected.push_back(static_cast<char>(z >> 7));
    } else {
      expected.push_back(static_cast<char>(z));
    }
  }
  EXPECT_EQ(bytes, expected);
}

// CheckAndPackAppend (the memory store's one walk over a payload) answers as
// CheckAppend does and packs each payload as PackJson does, for random
// requests; and refuses what CheckAppend refuses, with the same error.
TEST(PackedJsonTest, CheckAndPackAppendIsCheckAppendAndPackJson) {
  std::mt19937_64 rng(20261206);
  const Limits limits;
  const ManualClock clock;
  std::string packed;
  std::vector<size_t> payload_end;
  for (int i = 0; i < 500; ++i) {
    AppendRequest req{.execution_id = "order-" + std::to_string(i), .expected_next = 1};
    std::string expected;
    std::vector<size_t> expected_end;
    for (size_t n = 1 + rng() % 5; n > 0; --n) {
      // Object payloads: a kernel kind's shape is checked, an app kind's is not.
      Json payload = RandomTree(rng, 5);
      req.events.push_back(events::AppEvent("APP_" + std::to_string(n), std::move(payload)));
      PackJson(req.events.back().payload, expected);
      expected_end.push_back(expected.size());
    }
    Result<CheckedAppend> want = CheckAppend(req, limits, clock);
    Result<CheckedAppend> got = CheckAndPackAppend(req, limits, clock, packed, payload_end);
    ASSERT_EQ(want.has_value(), got.has_value()) << i;
    if (!want) {  // floats and binaries that dump() refuses
      EXPECT_EQ(got.error().ToString(), want.error().ToString()) << i;
      continue;
    }
    EXPECT_EQ(got->bytes, want->bytes) << i;
    EXPECT_EQ(got->now_ms, want->now_ms) << i;
    EXPECT_EQ(got->run_row, want->run_row) << i;
    ASSERT_EQ(packed, expected) << i;
    ASSERT_EQ(payload_end, expected_end) << i;
  }
  // Refusals, with CheckAppend's error: a string that is not UTF-8 in the
  // second event, a payload nested past json_depth_max, an event past
  // event_bytes_max.
  Json deep = nullptr;
  for (size_t d = 0; d <= limits.json_depth_max; ++d) deep = Json::array({deep});
  const std::vector<Json> bad = {"\xc3", deep, std::string(limits.event_bytes_max, 'a')};
  for (const Json& payload : bad) {
    AppendRequest req{.execution_id = "order-bad", .expected_next = 1};
    req.events.push_back(events::AppEvent("APP", Json{{"fine", 1}}));
    req.events.push_back(events::AppEvent("APP", payload));
    Result<CheckedAppend> want = CheckAppend(req, limits, clock);
    Result<CheckedAppend> got = CheckAndPackAppend(req, limits, clock, packed, payload_end);
    ASSERT_FALSE(want);
    ASSERT_FALSE(got);
    EXPECT_EQ(got.error().ToString(), want.error().ToString());
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
