// The QueueStore cases (queue_store.h is the spec).
#include "once/queues_testing/queue_conformance.h"

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

namespace once::queues_testing {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QueueStoreConformance);

void QueueStoreConformance::SetUp() {
  Result<std::shared_ptr<queues::QueueStore>> made = GetParam().make();
  if (!made && made.error().code == ErrorCode::kUnavailable) {
    GTEST_SKIP() << GetParam().name << " unavailable: " << made.error().ToString();
  }
  ASSERT_TRUE(made) << made.error().ToString();
  store_ = std::move(*made);
}

namespace {

using queues::ClaimRequest;
using queues::EnqueueRequest;
using queues::Json;
using queues::QueueConfig;
using queues::QueueItem;

EnqueueRequest Req(std::string id, int64_t priority = 0, std::string queue = "q") {
  return EnqueueRequest{.queue = std::move(queue),
                        .workflow = "w",
                        .execution_id = std::move(id),
                        .input = Json{{"n", 1}},
                        .priority = priority};
}

std::vector<std::string> Ids(const std::vector<QueueItem>& items) {
  std::vector<std::string> out;
  for (const QueueItem& i : items) out.push_back(i.execution_id);
  return out;
}

std::vector<QueueItem> Claim(queues::QueueStore& s, size_t limit, std::string node = "n1",
                             std::string queue = "q") {
  Result<std::vector<QueueItem>> r = s.Claim({.queue = queue, .node = node, .limit = limit});
  EXPECT_TRUE(r) << r.error().ToString();
  return r ? *r : std::vector<QueueItem>{};
}

TEST_P(QueueStoreConformance, ClaimsByPriorityThenFifoAndKeepsTheRequest) {
  for (auto [id, prio] : std::vector<std::pair<std::string, int64_t>>{
           {"a", 0}, {"b", 5}, {"c", 0}, {"d", 5}, {"e", -1}}) {
    ASSERT_TRUE(store().Enqueue(Req(id, prio)));
  }
  std::vector<QueueItem> got = Claim(store(), 10);
  EXPECT_EQ(Ids(got), (std::vector<std::string>{"b", "d", "a", "c", "e"}));
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].workflow, "w");
  EXPECT_EQ(got[0].input, (Json{{"n", 1}}));
  EXPECT_EQ(got[0].claimed_by, "n1");
  EXPECT_GT(got[0].claimed_at_ms, 0);
  EXPECT_LT(got[2].seq, got[3].seq);        // a before c: FIFO
  EXPECT_TRUE(Claim(store(), 10).empty());  // claimed items are not claimed again
  auto counts = store().Counts("q", "n1").value();
  EXPECT_EQ(counts.claimed, 5u);
  EXPECT_EQ(counts.claimed_by_node, 5u);
  EXPECT_EQ(counts.pending, 0u);
}

TEST_P(QueueStoreConformance, EnqueueIsIdempotentByExecutionId) {
  auto first = store().Enqueue(Req("a")).value();
  EXPECT_FALSE(first.existing);
  auto again = store().Enqueue(Req("a", 9)).value();
  EXPECT_TRUE(again.existing);
  EXPECT_EQ(again.seq, first.seq);
  EXPECT_EQ(Claim(store(), 10).size(), 1u);
  ASSERT_TRUE(store().Complete(std::vector<std::string>{"a"}));
  EXPECT_FALSE(store().Enqueue(Req("a")).value().existing);  // gone: a new item
}

TEST_P(QueueStoreConformance, ADedupKeyRefusesASecondEnqueueNamingTheHolder) {
  EnqueueRequest first = Req("mail-1");
  first.dedup_key = "user-7";
  ASSERT_TRUE(store().Enqueue(first));
  EnqueueRequest second = Req("mail-2");
  second.dedup_key = "user-7";
  Result<queues::Enqueued> refused = store().Enqueue(second);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kAlreadyExists);
  ASSERT_NE(refused.error().As<AlreadyExistsDetail>(), nullptr);
  EXPECT_EQ(refused.error().As<AlreadyExistsDetail>()->execution_id, "mail-1");
  // Another queue, or no key: fine. The holder itself: idempotent.
  EnqueueRequest elsewhere = Req("mail-3", 0, "other");
  elsewhere.dedup_key = "user-7";
  EXPECT_TRUE(store().Enqueue(elsewhere));
  EXPECT_TRUE(store().Enqueue(first).value().existing);
  // Once the holder is done, the key is free.
  ASSERT_TRUE(store().Complete(std::vector<std::string>{"mail-1"}));
  EXPECT_TRUE(store().Enqueue(second));
}

TEST_P(QueueStoreConformance, ADelayedItemIsClaimedOnlyWhenDue) {
  EnqueueRequest later = Req("later");
  later.delay_ms = 300;
  ASSERT_TRUE(store().Enqueue(later));
  ASSERT_TRUE(store().Enqueue(Req("now")));
  EXPECT_EQ(Ids(Claim(store(), 10)), (std::vector<std::string>{"now"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(Ids(Claim(store(), 10)), (std::vector<std::string>{"later"}));
}

TEST_P(QueueStoreConformance, TheGlobalAndPerNodeLimitsHold) {
  ASSERT_TRUE(
      store().Configure({.name = "q", .concurrency_max = 5, .per_node_concurrency_max = 3}));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store().Enqueue(Req("e" + std::to_string(i))));
  EXPECT_EQ(Claim(store(), 10, "n1").size(), 3u);  // the per-node limit
  EXPECT_EQ(Claim(store(), 10, "n1").size(), 0u);
  EXPECT_EQ(Claim(store(), 10, "n2").size(), 2u);  // the global limit
  EXPECT_EQ(Claim(store(), 10, "n3").size(), 0u);
  ASSERT_TRUE(store().Complete(std::vector<std::string>{"e0", "e1"}));  // two of n1's
  EXPECT_EQ(Claim(store(), 10, "n3").size(), 2u);
  auto configs = store().Queues().value();
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(configs[0].concurrency_max, 5u);
  EXPECT_EQ(configs[0].per_node_concurrency_max, 3u);
}

TEST_P(QueueStoreConformance, TheRateLimitHoldsPerWindow) {
  ASSERT_TRUE(store().Configure({.name = "q", .rate_max = 3, .rate_period_ms = 500}));
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(store().Enqueue(Req("e" + std::to_string(i))));
  // Claims in one window never pass 3; the windows are aligned, so wait for
  // a fresh one first.
  int64_t now = store().NowMs().value();
  std::this_thread::sleep_for(std::chrono::milliseconds(500 - now % 500 + 20));
  size_t first = Claim(store(), 10).size() + Claim(store(), 10).size();
  EXPECT_EQ(first, 3u);
  std::this_thread::sleep_for(std::chrono::milliseconds(520));
  EXPECT_EQ(Claim(store(), 10).size(), 3u);
}

TEST_P(QueueStoreConformance, ReleaseMakesItemsClaimableAgain) {
  ASSERT_TRUE(store().Enqueue(Req("a")));
  ASSERT_EQ(Claim(store(), 10, "n1").size(), 1u);
  auto claimed = store().Claimed("", 10).value();
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].claimed_by, "n1");
  ASSERT_TRUE(store().Release(std::vector<std::string>{"a", "unknown"}));
  EXPECT_TRUE(store().Claimed("", 10).value().empty());
  EXPECT_EQ(Ids(Claim(store(), 10, "n2")), (std::vector<std::string>{"a"}));
}

TEST_P(QueueStoreConformance, ItemsListsOneQueuePaged) {
  for (std::string id : {"c", "a", "b"}) ASSERT_TRUE(store().Enqueue(Req(id)));
  ASSERT_TRUE(store().Enqueue(Req("x", 0, "other")));
  EXPECT_EQ(Ids(store().Items("q", "", 2).value()), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(Ids(store().Items("q", "b", 2).value()), (std::vector<std::string>{"c"}));
}

TEST_P(QueueStoreConformance, EnqueueManyJudgesEachRequest) {
  EnqueueRequest held = Req("h");
  held.dedup_key = "k";
  ASSERT_TRUE(store().Enqueue(held));
  EnqueueRequest dup = Req("d");
  dup.dedup_key = "k";
  EnqueueRequest bad = Req("");
  std::vector<EnqueueRequest> batch = {Req("m1"), dup, bad, Req("m2")};
  auto results = store().EnqueueMany(batch).value();
  ASSERT_EQ(results.size(), 4u);
  EXPECT_TRUE(results[0]);
  EXPECT_EQ(results[1].error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(results[2].error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(results[3]);
  EXPECT_EQ(Ids(store().Items("q", "", 10).value()), (std::vector<std::string>{"h", "m1", "m2"}));
}

TEST_P(QueueStoreConformance, ConcurrentClaimersNeverExceedTheLimitNorShareAnItem) {
  constexpr size_t kLimit = 4;
  constexpr int kItems = 60;
  constexpr int kClaimers = 6;
  ASSERT_TRUE(store().Configure({.name = "q", .concurrency_max = kLimit}));
  for (int i = 0; i < kItems; ++i) ASSERT_TRUE(store().Enqueue(Req("e" + std::to_string(i))));
  std::atomic<int> in_flight{0}, peak{0}, done{0}, errors{0};
  std::mutex mu;
  std::multiset<std::string> claimed_ids;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClaimers; ++c) {
    threads.emplace_back([&, c] {
      std::string node = "n" + std::to_string(c);
      while (done.load() < kItems) {
        Result<std::vector<QueueItem>> got =
            store().Claim({.queue = "q", .node = node, .limit = 3});
        if (!got) {
          ++errors;
          continue;
        }
        int now = in_flight += static_cast<int>(got->size());
        for (int p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
        }
        std::vector<std::string> ids;
        {
          std::lock_guard lock(mu);
          for (const QueueItem& i : *got) {
            claimed_ids.insert(i.execution_id);
            ids.push_back(i.execution_id);
          }
        }
        if (ids.empty()) {
          std::this_thread::yield();
          continue;
        }
        // Hold the items a moment (the work), so that claims overlap; the
        // count drops before the items stop counting at the store.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        in_flight -= static_cast<int>(ids.size());
        if (!store().Complete(ids)) ++errors;
        done += static_cast<int>(ids.size());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(peak.load(), static_cast<int>(kLimit));
  EXPECT_EQ(claimed_ids.size(), static_cast<size_t>(kItems));
  EXPECT_EQ(std::set<std::string>(claimed_ids.begin(), claimed_ids.end()).size(),
            static_cast<size_t>(kItems));
}

TEST_P(QueueStoreConformance, SchedulesKeepTheirLastTickAndAdvanceOnce) {
  queues::ScheduleRow row{.name = "nightly", .cron = "0 3 * * *", .workflow = "w", .queue = "q"};
  ASSERT_TRUE(store().PutSchedule(row));
  ASSERT_TRUE(store().AdvanceSchedule("nightly", 0, 1'000).value());
  EXPECT_FALSE(store().AdvanceSchedule("nightly", 0, 2'000).value());  // moved by another
  row.cron = "0 4 * * *";
  row.last_tick_ms = 77;  // ignored
  ASSERT_TRUE(store().PutSchedule(row));
  auto rows = store().Schedules().value();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].cron, "0 4 * * *");
  EXPECT_EQ(rows[0].last_tick_ms, 1'000);
  EXPECT_FALSE(store().AdvanceSchedule("unknown", 0, 1).value());
}

TEST_P(QueueStoreConformance, BadInputIsRefused) {
  EXPECT_EQ(store().Enqueue(Req("")).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store().Enqueue(Req("a\nb")).error().code, ErrorCode::kInvalidArgument);
  EnqueueRequest no_queue = Req("a", 0, "");
  EXPECT_EQ(store().Enqueue(no_queue).error().code, ErrorCode::kInvalidArgument);
  EnqueueRequest big = Req("big");
  big.input = std::string(store().limits().input_bytes_max, 'x');
  EXPECT_EQ(store().Enqueue(big).error().code, ErrorCode::kLimitExceeded);
  EnqueueRequest negative = Req("neg");
  negative.delay_ms = -1;
  EXPECT_EQ(store().Enqueue(negative).error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(store().Claim({.queue = "q", .node = "n", .limit = 0}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(store().Configure({.name = "q", .rate_period_ms = 0}).error().code,
            ErrorCode::kInvalidArgument);
  std::vector<std::string> too_many(store().limits().batch_items_max + 1, "x");
  EXPECT_EQ(store().Complete(too_many).error().code, ErrorCode::kLimitExceeded);
  EXPECT_TRUE(store().Items("q", "", 10).value().empty());
}

}  // namespace
}  // namespace once::queues_testing
