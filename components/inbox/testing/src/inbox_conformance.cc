#include "once/inbox_testing/inbox_conformance.h"

#include <atomic>
#include <set>
#include <thread>

namespace once::inbox_testing {

using events::Json;
using inbox::InboxLimits;
using inbox::InboxMessage;

void InboxStoreConformance::SetUp() {
  auto made = GetParam().make_database();
  if (!made) GTEST_SKIP() << made.error().ToString();
  open_ = std::move(made).value();
  store_ = Open();
}

void InboxStoreConformance::TearDown() {
  store_.reset();
  open_ = nullptr;
}

std::shared_ptr<inbox::InboxStore> InboxStoreConformance::Open(const InboxLimits& limits) {
  auto opened = open_(limits);
  EXPECT_TRUE(opened.has_value()) << (opened ? "" : opened.error().ToString());
  return opened ? std::move(opened).value() : nullptr;
}

namespace {

void ExpectLimit(const Error& e, const std::string& name, int64_t value, int64_t max) {
  EXPECT_EQ(e.code, ErrorCode::kLimitExceeded) << e.ToString();
  const LimitDetail* d = e.As<LimitDetail>();
  ASSERT_NE(d, nullptr) << e.ToString();
  EXPECT_EQ(d->limit, name);
  EXPECT_EQ(d->value, value);
  EXPECT_EQ(d->max, max);
}

// A JSON string whose compact serialization is exactly `bytes` long.
Json MessageOfBytes(size_t bytes) { return Json(std::string(bytes - 2, 'x')); }

}  // namespace

TEST_P(InboxStoreConformance, PutNumbersEachTopicFromOneAndGetRoundTrips) {
  Json rich = {{"by", "ann"},
               {"n", 9007199254740993LL},
               {"u", "h\u00e9\u4e16\U0001F600"},
               {"nul", std::string("a\0b", 3)},
               {"list", {1, 2.5, nullptr, true}}};
  EXPECT_EQ(store_->Put("x", "approve", rich).value(), 1);
  EXPECT_EQ(store_->Put("x", "approve", "second").value(), 2);
  EXPECT_EQ(store_->Put("x", "reject", "other topic").value(), 1);
  EXPECT_EQ(store_->Put("y", "approve", 3).value(), 1);  // another execution
  EXPECT_EQ(store_->Get("x", "approve", 1).value(), (InboxMessage{"approve", 1, rich}));
  // A signed integer comes back signed, as an event's payload does (json
  // compares 9 and 9u equal; a reader that asks for the type would not).
  EXPECT_EQ(store_->Get("x", "approve", 1).value()->message["n"].type(),
            Json::value_t::number_integer);
  EXPECT_EQ(store_->Get("x", "approve", 2).value()->message, "second");
  EXPECT_EQ(store_->Get("x", "reject", 1).value()->message, "other topic");
  auto pending = store_->Pending("x").value();
  ASSERT_EQ(pending.size(), 3u);  // by (topic, seq)
  EXPECT_EQ(pending[0].seq, 1);
  EXPECT_EQ(pending[1], (InboxMessage{"approve", 2, "second"}));
  EXPECT_EQ(pending[2].topic, "reject");
}

TEST_P(InboxStoreConformance, GetOfAMessageNeverPutIsEmpty) {
  ASSERT_TRUE(store_->Put("x", "approve", 1));
  EXPECT_FALSE(store_->Get("x", "approve", 0).value().has_value());
  EXPECT_FALSE(store_->Get("x", "approve", 2).value().has_value());
  EXPECT_FALSE(store_->Get("x", "other", 1).value().has_value());
  EXPECT_FALSE(store_->Get("nobody", "approve", 1).value().has_value());
  EXPECT_TRUE(store_->Pending("nobody").value().empty());
}

TEST_P(InboxStoreConformance, TrimDeletesThroughTheSeqAndKeepsTheNumbering) {
  for (int i = 1; i <= 3; ++i) ASSERT_EQ(store_->Put("x", "t", i).value(), i);
  ASSERT_TRUE(store_->Put("x", "u", "kept"));
  ASSERT_TRUE(store_->Trim("x", "t", 2));
  EXPECT_FALSE(store_->Get("x", "t", 1).value().has_value());
  EXPECT_FALSE(store_->Get("x", "t", 2).value().has_value());
  EXPECT_EQ(store_->Get("x", "t", 3).value()->message, 3);
  EXPECT_EQ(store_->Pending("x").value().size(), 2u);
  ASSERT_TRUE(store_->Trim("x", "t", 2));  // idempotent
  ASSERT_TRUE(store_->Trim("x", "t", 3));
  ASSERT_TRUE(store_->Trim("nobody", "t", 9));
  // Everything of "t" is gone, and the next message is still number 4.
  EXPECT_EQ(store_->Put("x", "t", 4).value(), 4);
  EXPECT_EQ(store_->Get("x", "u", 1).value()->message, "kept");
}

TEST_P(InboxStoreConformance, ForgetDeletesTheExecutionAndRestartsItsNumbering) {
  ASSERT_TRUE(store_->Put("x", "t", 1));
  ASSERT_TRUE(store_->Put("x", "t", 2));
  ASSERT_TRUE(store_->Put("y", "t", 1));
  ASSERT_TRUE(store_->Trim("x", "t", 2));
  EXPECT_TRUE(store_->Holds("x").value());  // its counter
  ASSERT_TRUE(store_->Forget("x"));
  ASSERT_TRUE(store_->Forget("x"));  // idempotent
  EXPECT_FALSE(store_->Holds("x").value());
  EXPECT_TRUE(store_->Holds("y").value());
  EXPECT_FALSE(store_->Holds("nobody").value());
  EXPECT_TRUE(store_->Pending("x").value().empty());
  EXPECT_EQ(store_->Executions("", 10).value(), std::vector<std::string>{"y"});
  EXPECT_EQ(store_->Put("x", "t", "again").value(), 1);
  EXPECT_EQ(store_->Get("y", "t", 1).value()->message, 1);
}

TEST_P(InboxStoreConformance, ExecutionsPageInByteOrder) {
  for (const char* id : {"b", "a", "c", "\xc3\xa9"}) ASSERT_TRUE(store_->Put(id, "t", 1));
  // Trimmed to nothing, an execution still holds its counter.
  ASSERT_TRUE(store_->Trim("c", "t", 1));
  EXPECT_EQ(store_->Executions("", 2).value(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(store_->Executions("b", 10).value(), (std::vector<std::string>{"c", "\xc3\xa9"}));
  EXPECT_TRUE(store_->Executions("\xc3\xa9", 10).value().empty());
  EXPECT_TRUE(store_->Executions("", 0).value().empty());
}

TEST_P(InboxStoreConformance, MessageBytesAtTheLimit) {
  InboxLimits limits{.message_bytes_max = 1000};
  auto s = Open(limits);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->Put("x", "t", MessageOfBytes(1000)).value(), 1);
  ExpectLimit(s->Put("x", "t", MessageOfBytes(1001)).error(), "inbox_message_bytes_max", 1001,
              1000);
  EXPECT_EQ(s->Pending("x").value().size(), 1u);
  EXPECT_EQ(s->Get("x", "t", 1).value()->message, MessageOfBytes(1000));
  // The default: 256 KiB.
  EXPECT_EQ(store_->limits().message_bytes_max, 256u * 1024);
  EXPECT_TRUE(store_->Put("x", "t", MessageOfBytes(256 * 1024)));
  ExpectLimit(store_->Put("x", "t", MessageOfBytes(256 * 1024 + 1)).error(),
              "inbox_message_bytes_max", 256 * 1024 + 1, 256 * 1024);
}

TEST_P(InboxStoreConformance, TopicBytesAtTheLimit) {
  std::string at(255, 't');
  EXPECT_EQ(store_->Put("x", at, 1).value(), 1);
  ExpectLimit(store_->Put("x", at + "t", 1).error(), "inbox_topic_bytes_max", 256, 255);
  EXPECT_EQ(store_->Pending("x").value().size(), 1u);
}

TEST_P(InboxStoreConformance, PendingMessagesPerExecutionAtTheLimit) {
  auto s = Open(InboxLimits{.pending_messages_per_execution_max = 3});
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->Put("x", "a", 1));
  ASSERT_TRUE(s->Put("x", "b", 2));  // the limit spans topics
  ASSERT_TRUE(s->Put("x", "a", 3));
  ExpectLimit(s->Put("x", "b", 4).error(), "inbox_pending_messages_per_execution_max", 4, 3);
  EXPECT_EQ(s->Pending("x").value().size(), 3u);  // nothing stored
  EXPECT_TRUE(s->Put("y", "a", 1));               // per execution
  ASSERT_TRUE(s->Trim("x", "a", 1));              // a consumed message frees its place
  EXPECT_EQ(s->Put("x", "b", 4).value(), 2);
  EXPECT_EQ(s->Put("x", "b", 5).error().code, ErrorCode::kLimitExceeded);
}

TEST_P(InboxStoreConformance, RefusesMalformedInputAndStoresNothing) {
  auto code = [&](std::string_view id, std::string_view topic, const Json& m) {
    auto r = store_->Put(id, topic, m);
    return r ? ErrorCode::kInternal : r.error().code;
  };
  EXPECT_EQ(code("", "t", 1), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("a\n", "t", 1), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(std::string(256, 'a'), "t", 1), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("x", "", 1), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("x", "a\x01", 1), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("x", "\xff", 1), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("x", "t", Json("\xff")), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(store_->Executions("", 10).value().empty());
}

TEST_P(InboxStoreConformance, ConcurrentPutsNumberWithoutGapsOrRepeats) {
  constexpr int kThreads = 4;
  constexpr int kEach = 25;
  std::vector<std::vector<int64_t>> seqs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto r = store_->Put("x", "t", Json{{"t", t}, {"i", i}});
        if (r) seqs[t].push_back(*r);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> all;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seqs[t].size(), static_cast<size_t>(kEach));
    for (int i = 0; i < kEach; ++i) {
      EXPECT_TRUE(all.insert(seqs[t][i]).second) << "seq " << seqs[t][i] << " twice";
      if (i > 0) {
        EXPECT_LT(seqs[t][i - 1], seqs[t][i]);  // one sender's order is kept
      }
      EXPECT_EQ(store_->Get("x", "t", seqs[t][i]).value()->message, (Json{{"t", t}, {"i", i}}));
    }
  }
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kEach);
}

TEST_P(InboxStoreConformance, ConcurrentPutsNeverPassThePendingLimit) {
  auto s = Open(InboxLimits{.pending_messages_per_execution_max = 30});
  ASSERT_TRUE(s);
  std::atomic<int> stored{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 15; ++i) {
        auto r = s->Put("x", "t" + std::to_string(t % 2), i);
        if (r) {
          ++stored;
        } else if (r.error().code == ErrorCode::kLimitExceeded) {
          ++refused;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(stored.load(), 30);
  EXPECT_EQ(refused.load(), 30);
  EXPECT_EQ(s->Pending("x").value().size(), 30u);
}

TEST_P(InboxStoreConformance, AReopenedStoreKeepsMessagesAndNumbering) {
  if (!GetParam().durable) GTEST_SKIP() << "not durable";
  ASSERT_TRUE(store_->Put("x", "t", "one"));
  ASSERT_TRUE(store_->Put("x", "t", "two"));
  ASSERT_TRUE(store_->Trim("x", "t", 1));
  store_.reset();  // the process is gone
  auto again = Open();
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->Get("x", "t", 1).value().has_value());
  EXPECT_EQ(again->Get("x", "t", 2).value()->message, "two");
  EXPECT_EQ(again->Put("x", "t", "three").value(), 3);
}

}  // namespace once::inbox_testing
