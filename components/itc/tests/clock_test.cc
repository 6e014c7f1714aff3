// Clocks: send/recv causality, fork/join, sync, codec.

#include <gtest/gtest.h>

#include "support.h"

namespace once::itc {
namespace {

TEST(Clock, SendRecvOrdersEvents) {
  Clock a = Clock::Seed();
  auto b = a.Fork();
  ASSERT_TRUE(b);
  auto m1 = a.Send();
  ASSERT_TRUE(m1);
  ASSERT_TRUE(b->Recv(*m1));
  auto m2 = b->Send();
  ASSERT_TRUE(m2);
  EXPECT_TRUE(Leq(*m1, *m2));
  EXPECT_FALSE(Leq(*m2, *m1));
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(Concurrent(a.version(), *m2));
  EXPECT_EQ(TotalOrder(*m1, *m2), std::strong_ordering::less);
}

TEST(Clock, JoinRefusesOverlapAndHandsBack) {
  Clock a = Clock::Seed();
  Clock copy = testing::CloneForTest(a);
  auto r = a.Join(std::move(copy));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().error.code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().operand.party(), Party::Seed());
  EXPECT_EQ(a, Clock::Seed());
}

TEST(Clock, ForkJoinSyncAbsorb) {
  Clock a = Clock::Seed();
  auto b = a.Fork();
  ASSERT_TRUE(a.Tick());
  ASSERT_TRUE(b->Ticks(3));
  EXPECT_TRUE(Concurrent(a.version(), b->version()));
  Clock c = testing::CloneForTest(a);
  c.Absorb(b->version());
  a.Sync(*b);
  EXPECT_EQ(a.version(), b->version());
  EXPECT_EQ(a.version(), c.version());
  ASSERT_TRUE(a.Join(std::move(*b)));
  EXPECT_EQ(a.party(), Party::Seed());
  EXPECT_EQ(*Clock::Decode(a.Encode()), a);
}

TEST(Clock, DecodeRejectsTrailingAndTruncated) {
  EXPECT_FALSE(Clock::Decode(*HexDecode("20")));
  EXPECT_FALSE(Clock::Decode(*HexDecode("20a800")));
  EXPECT_TRUE(Clock::Decode(*HexDecode("20a8")));
}

}  // namespace
}  // namespace once::itc
