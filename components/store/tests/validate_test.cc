#include "once/store/validate.h"

#include <gtest/gtest.h>

namespace once::store {
namespace {

TEST(ValidateTest, SqlQuotedListJoinsLiterals) {
  EXPECT_EQ(SqlQuotedList({}), "");
  const std::string_view one[] = {"EXECUTION_STARTED"};
  EXPECT_EQ(SqlQuotedList(one), "'EXECUTION_STARTED'");
  const std::string_view two[] = {"A", "B_C"};
  EXPECT_EQ(SqlQuotedList(two), "'A', 'B_C'");
}

TEST(ValidateTest, ExecutionIds) {
  Limits limits;
  EXPECT_TRUE(ValidateExecutionId("order-7", limits));
  EXPECT_TRUE(ValidateExecutionId("заказ-7", limits));
  EXPECT_FALSE(ValidateExecutionId("", limits));
  EXPECT_FALSE(ValidateExecutionId(std::string(256, 'a'), limits));
  EXPECT_TRUE(ValidateExecutionId(std::string(255, 'a'), limits));
  EXPECT_FALSE(ValidateExecutionId("a\nb", limits));
  EXPECT_FALSE(ValidateExecutionId(std::string("a\0b", 3), limits));
  EXPECT_FALSE(ValidateExecutionId("a\x7f", limits));
  EXPECT_FALSE(ValidateExecutionId("\xc3", limits));          // truncated
  EXPECT_FALSE(ValidateExecutionId("\xc0\xaf", limits));      // overlong
  EXPECT_FALSE(ValidateExecutionId("\xed\xa0\x80", limits));  // surrogate
  EXPECT_EQ(ValidateExecutionId("", limits).error().code, ErrorCode::kInvalidArgument);
}

// Ids and kinds are checked eight bytes at a time: every byte value at every
// place of a word and of the tail, between neighbours at both ends of the
// range (a borrow or carry between bytes must not hide or invent one).
TEST(ValidateTest, EveryByteAtEveryPlaceOfIdsAndKinds) {
  Limits limits;
  for (char fill : {'!', '~', 'a'}) {
    for (size_t at = 0; at < 19; ++at) {
      for (int b = 0; b < 256; ++b) {
        std::string s(19, fill);
        s[at] = static_cast<char>(b);
        SCOPED_TRACE(testing::Message() << "fill " << fill << " byte " << b << " at " << at);
        EXPECT_EQ(ValidateKind(s, limits).has_value(), b >= 0x21 && b <= 0x7e);
        EXPECT_EQ(ValidateExecutionId(s, limits).has_value(), b >= 0x20 && b <= 0x7e);
      }
    }
  }
}

TEST(ValidateTest, MetadataSizeIsTheLengthOfItsText) {
  for (const Json& object : {Json::object(), Json{{"kernel", true}}, Json{{"fence", 9}},
                             Json{{"fence", 12345678901}, {"kernel", true}},
                             Json{{"a", 1}, {"fence", 3}, {"g", "x\"y"}, {"kernel", true}},
                             Json{{"fence", 0}, {"kernel", "true"}, {"z", {1, 2.5}}}}) {
    SCOPED_TRACE(object.dump());
    events::Metadata m = events::Metadata::FromJson(object);
    std::string text;
    ASSERT_TRUE(events::AppendMetadataText(m, text));
    EXPECT_EQ(SerializedMetadataSize(m), text.size());
  }
  events::Metadata bad{.extra = {{"s", std::string("\xc3")}}};  // not UTF-8
  EXPECT_FALSE(SerializedMetadataSize(bad));
}

TEST(ValidateTest, EncodeAppendChecksEverything) {
  Limits limits;
  limits.event_bytes_max = 64;
  ManualClock clock(FromUnixMillis(1234));
  AppendRequest req{
      .execution_id = "x", .expected_next = 3, .events = {events::AppEvent("a.b", {{"k", 1}})}};
  auto enc = EncodeAppend(req, limits, clock);
  ASSERT_TRUE(enc) << enc.error().ToString();
  EXPECT_EQ(enc->events[0].sequence, 3);
  EXPECT_EQ(enc->events[0].time_ms, 1234);
  EXPECT_EQ(enc->events[0].payload_json, "{\"k\":1}");
  EXPECT_EQ(enc->events[0].metadata_json, "{}");

  AppendRequest big = req;
  big.events[0].payload = std::string(100, 'x');
  auto too_big = EncodeAppend(big, limits, clock);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(too_big.error().As<LimitDetail>()->limit, "event_bytes_max");

  AppendRequest wrong_seq = req;
  wrong_seq.events[0].sequence = 4;
  EXPECT_EQ(EncodeAppend(wrong_seq, limits, clock).error().code, ErrorCode::kInvalidArgument);
  AppendRequest bad_meta = req;
  bad_meta.events[0].metadata.extra = Json::array();
  EXPECT_EQ(EncodeAppend(bad_meta, limits, clock).error().code, ErrorCode::kInvalidArgument);
  AppendRequest bad_kind = req;
  bad_kind.events[0].kind = "has space";
  EXPECT_EQ(EncodeAppend(bad_kind, limits, clock).error().code, ErrorCode::kInvalidArgument);
  AppendRequest empty = req;
  empty.events.clear();
  EXPECT_EQ(EncodeAppend(empty, limits, clock).error().code, ErrorCode::kInvalidArgument);
  AppendRequest bad_utf8 = req;
  bad_utf8.events[0].payload = std::string("\xff\xfe");
  EXPECT_EQ(EncodeAppend(bad_utf8, limits, clock).error().code, ErrorCode::kInvalidArgument);
}

TEST(ValidateTest, DecodeRowRejectsCorruptJson) {
  auto ok = DecodeRow("x", 1, "K", "{\"a\":1}", "{}", 5);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->payload["a"], 1);
  EXPECT_EQ(DecodeRow("x", 1, "K", "{", "{}", 5).error().code, ErrorCode::kCorruption);
}

TEST(ValidateTest, DecodeRowReadsIntegersBackSigned) {
  auto e = DecodeRow("x", 1, "K", "[17, -2, 18446744073709551615]", "{\"fence\": 3, \"n\": 4}", 5)
               .value();
  EXPECT_EQ(e.payload[0].type(), Json(17).type());
  EXPECT_EQ(e.payload[1].type(), Json(-2).type());
  EXPECT_TRUE(e.payload[2].is_number_unsigned());  // does not fit in int64_t
  EXPECT_EQ(e.metadata.fence, 3);
  EXPECT_EQ(e.metadata.extra["n"].type(), Json(4).type());
  EXPECT_EQ(DecodeRow("x", 1, "K", "17", "{}", 5).value().payload.type(), Json(17).type());
}

}  // namespace
}  // namespace once::store
