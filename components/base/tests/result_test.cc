#include "once/base/result.h"

#include <gtest/gtest.h>

namespace once {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return MakeError(ErrorCode::kInvalidArgument, "odd", "x");
  return x / 2;
}

Result<int> Quarter(int x) {
  ONCE_ASSIGN_OR_RETURN(int h, Half(x));
  ONCE_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  ONCE_RETURN_IF_ERROR(Half(x));
  return Ok();
}

TEST(ResultTest, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(Quarter(8).value(), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().subject, "x");
  EXPECT_TRUE(CheckEven(4));
  EXPECT_FALSE(CheckEven(3));
}

TEST(ResultTest, TypedDetailsAndRetryability) {
  Error e = MakeError(ErrorCode::kStaleFence, "refused", "ex", StaleFenceDetail{3, 5}).error();
  ASSERT_NE(e.As<StaleFenceDetail>(), nullptr);
  EXPECT_EQ(e.As<StaleFenceDetail>()->current, 5);
  EXPECT_EQ(e.As<LimitDetail>(), nullptr);
  EXPECT_FALSE(e.retryable());
  EXPECT_TRUE(IsRetryable(ErrorCode::kResumeContended));
  EXPECT_FALSE(IsRetryable(ErrorCode::kResumeRefused));
  EXPECT_EQ(e.ToString(), "StaleFence: refused (subject=ex)");
  Error l = LimitError("event_payload_bytes_max", 10, 5).error();
  EXPECT_EQ(l.As<LimitDetail>()->max, 5);
}

}  // namespace
}  // namespace once
