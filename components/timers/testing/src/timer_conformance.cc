#include "once/timers_testing/timer_conformance.h"

#include <atomic>
#include <set>
#include <thread>

namespace once::timers_testing {

using timers::ClaimRequest;
using timers::Redrive;
using timers::TimerRow;

void TimerStoreConformance::SetUp() {
  auto made = GetParam().make();
  if (!made) GTEST_SKIP() << made.error().ToString();
  store_ = std::move(made).value();
}

TEST_P(TimerStoreConformance, RoundTripAndComplete) {
  ASSERT_TRUE(store_->Schedule({"a", 100, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"b", 50, Redrive{3}}));
  auto due = store_->Due(100, 10, true).value();
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0], (TimerRow{"b", 50, Redrive{3}}));  // oldest first
  EXPECT_EQ(due[1], (TimerRow{"a", 100, std::nullopt}));
  EXPECT_TRUE(store_->Due(49, 10, true).value().empty());
  ASSERT_TRUE(store_->Complete({"b", 50}));
  ASSERT_TRUE(store_->Complete({"b", 50}));  // idempotent
  EXPECT_EQ(store_->Due(100, 10, true).value().size(), 1u);
}

TEST_P(TimerStoreConformance, IdempotentPerKey) {
  ASSERT_TRUE(store_->Schedule({"a", 100, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"a", 100, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"a", 200, std::nullopt}));
  EXPECT_EQ(store_->RowsOf("a").value().size(), 2u);
}

TEST_P(TimerStoreConformance, PlainScheduleNeverClearsTheFlag) {
  ASSERT_TRUE(store_->Schedule({"a", 100, Redrive{2}}));
  ASSERT_TRUE(store_->Schedule({"a", 100, std::nullopt}));
  auto rows = store_->RowsOf("a").value();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].redrive, Redrive{2});
}

TEST_P(TimerStoreConformance, FlaggedScheduleUpgradesAPlainRow) {
  ASSERT_TRUE(store_->Schedule({"a", 100, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"a", 100, Redrive{0}}));
  auto rows = store_->RowsOf("a").value();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].redrive, Redrive{0});
  ASSERT_TRUE(store_->Schedule({"a", 100, Redrive{4}}));  // the new flag wins
  EXPECT_EQ(store_->RowsOf("a").value()[0].redrive, Redrive{4});
}

TEST_P(TimerStoreConformance, RedriveRowsExcludedBeforeTheLimit) {
  // Three re-drive rows due first, then two plain ones: a limit of 2 without
  // re-drive rows must still return both plain rows.
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(store_->Schedule({"r" + std::to_string(i), 10 + i, Redrive{0}}));
  ASSERT_TRUE(store_->Schedule({"p0", 20, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"p1", 21, std::nullopt}));
  auto plain = store_->Due(100, 2, false).value();
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[0].execution_id, "p0");
  EXPECT_EQ(plain[1].execution_id, "p1");
  auto claimed = store_
                     ->Claim({.now_ms = 100,
                              .limit = 2,
                              .include_redrive = false,
                              .owner = "n1",
                              .lease_ms = 1000})
                     .value();
  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_FALSE(claimed[0].redrive.has_value());
  EXPECT_EQ(store_->Due(100, 10, true).value().size(), 5u);
}

TEST_P(TimerStoreConformance, LeaseKeepsTwoNodesApart) {
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"b", 11, std::nullopt}));
  auto first = store_->Claim({.now_ms = 100, .limit = 10, .owner = "n1", .lease_ms = 50}).value();
  EXPECT_EQ(first.size(), 2u);
  EXPECT_TRUE(
      store_->Claim({.now_ms = 120, .limit = 10, .owner = "n2", .lease_ms = 50}).value().empty());
  EXPECT_TRUE(
      store_->Claim({.now_ms = 120, .limit = 10, .owner = "n1", .lease_ms = 50}).value().empty());
  // The lease ends: the row comes due again for whoever asks.
  auto again = store_->Claim({.now_ms = 151, .limit = 10, .owner = "n2", .lease_ms = 50}).value();
  EXPECT_EQ(again.size(), 2u);
}

TEST_P(TimerStoreConformance, DeferKeepsTheLeaseUntilTheGivenTime) {
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt}));
  ASSERT_EQ(store_->Claim({.now_ms = 100, .owner = "n1", .lease_ms = 50}).value().size(), 1u);
  ASSERT_TRUE(store_->Defer({"a", 10}, "n2", 1000));  // not n2's lease: no effect
  ASSERT_TRUE(store_->Defer({"a", 10}, "n1", 500));
  EXPECT_TRUE(store_->Claim({.now_ms = 499, .owner = "n2", .lease_ms = 50}).value().empty());
  EXPECT_EQ(store_->Claim({.now_ms = 500, .owner = "n2", .lease_ms = 50}).value().size(), 1u);
  ASSERT_TRUE(store_->Defer({"gone", 1}, "n1", 5));  // a missing row is a no-op
}

TEST_P(TimerStoreConformance, ConcurrentClaimersNeverShareARow) {
  constexpr int kRows = 200;
  for (int i = 0; i < kRows; ++i)
    ASSERT_TRUE(store_->Schedule({"e" + std::to_string(i), i, std::nullopt}));
  std::vector<std::vector<TimerRow>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        auto rows = store_->Claim(
            {.now_ms = 1000, .limit = 7, .owner = "n" + std::to_string(t), .lease_ms = 100'000});
        if (rows) got[t].insert(got[t].end(), rows->begin(), rows->end());
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::string> seen;
  size_t total = 0;
  for (auto& rows : got) {
    for (auto& r : rows) {
      EXPECT_TRUE(seen.insert(r.execution_id).second) << r.execution_id << " claimed twice";
      ++total;
    }
  }
  EXPECT_EQ(total, static_cast<size_t>(kRows));
}

// Schedules from many threads at once (which a backend may write together)
// all land, each under the merge rules: the newest park of a shared key
// wins whatever order the writes took, and a re-drive flag is never lost.
TEST_P(TimerStoreConformance, ConcurrentSchedulesAllLandUnderTheMergeRules) {
  using timers::TimerPark;
  constexpr int kThreads = 8;
  constexpr int kRowsPerThread = 100;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRowsPerThread; ++i) {
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        if (!store_->Schedule({id, 1'000 + i, std::nullopt, TimerPark{i + 1, t}})) ++failures;
        // Every thread also writes the shared rows.
        if (!store_->Schedule({"shared", 5, std::nullopt, TimerPark{t * 100 + i + 1, t}})) {
          ++failures;
        }
        if (i == 0 && !store_->Schedule({"flagged", 6, Redrive{2}})) ++failures;
        if (!store_->Schedule({"flagged", 6, std::nullopt})) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto due = store_->Due(5'000, 1'000, true).value();
  EXPECT_EQ(due.size(), static_cast<size_t>(kThreads * kRowsPerThread + 2));
  auto shared = store_->RowsOf("shared").value();
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].park, (TimerPark{(kThreads - 1) * 100 + kRowsPerThread, kThreads - 1}));
  EXPECT_EQ(store_->RowsOf("flagged").value()[0].redrive, Redrive{2});
  auto one = store_->RowsOf("t3-7").value();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0], (TimerRow{"t3-7", 1'007, std::nullopt, TimerPark{8, 3}}));
}

TEST_P(TimerStoreConformance, CompleteManyRetiresTheListedRowsAtOnce) {
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_TRUE(store_->Schedule({id, 10, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"a", 20, Redrive{1}}));
  std::vector<timers::TimerKey> keys = {{"a", 10}, {"c", 10}, {"gone", 10}, {"a", 10}, {"a", 20}};
  ASSERT_TRUE(store_->CompleteMany(keys));
  auto left = store_->Due(100, 10, true).value();
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], (TimerRow{"b", 10, std::nullopt}));
  EXPECT_EQ(left[1], (TimerRow{"d", 10, std::nullopt}));
  ASSERT_TRUE(store_->CompleteMany({}));    // nothing to do
  ASSERT_TRUE(store_->CompleteMany(keys));  // idempotent
  EXPECT_EQ(store_->Due(100, 10, true).value().size(), 2u);
}

TEST_P(TimerStoreConformance, CompleteManyTakesAtMostCompleteKeysMax) {
  const size_t max = store_->limits().complete_keys_max;
  ASSERT_TRUE(store_->Schedule({"x", 1, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"y", 2, std::nullopt}));
  // One key over the limit: refused as a whole, nothing retired.
  std::vector<timers::TimerKey> keys = {{"x", 1}, {"y", 2}};
  for (size_t i = keys.size(); i < max + 1; ++i) keys.push_back({"none" + std::to_string(i), 1});
  EXPECT_EQ(store_->CompleteMany(keys).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->Due(100, 10, true).value().size(), 2u);
  // Exactly at the limit: every listed row retired.
  keys.pop_back();
  ASSERT_EQ(keys.size(), max);
  ASSERT_TRUE(store_->CompleteMany(keys));
  EXPECT_TRUE(store_->Due(100, 10, true).value().empty());
}

TEST_P(TimerStoreConformance, ClaimAheadTakesRowsDueSoonButNeverALiveLease) {
  ASSERT_TRUE(store_->Schedule({"now", 100, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"soon", 150, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"later", 301, std::nullopt}));
  auto ahead =
      store_->Claim({.now_ms = 100, .limit = 10, .owner = "n1", .lease_ms = 1000, .ahead_ms = 200})
          .value();
  ASSERT_EQ(ahead.size(), 2u);  // due by 300: "now" and "soon", oldest first
  EXPECT_EQ(ahead[0].execution_id, "now");
  EXPECT_EQ(ahead[1].execution_id, "soon");
  // Leases are judged at now_ms, not at now_ms + ahead_ms: n1's lease (to
  // 1100) is live at 1000 even though 1000 + 200 is past it.
  auto other =
      store_->Claim({.now_ms = 1000, .limit = 10, .owner = "n2", .lease_ms = 1000, .ahead_ms = 200})
          .value();
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(other[0].execution_id, "later");
  auto freed =
      store_->Claim({.now_ms = 1100, .limit = 10, .owner = "n2", .lease_ms = 1000}).value();
  EXPECT_EQ(freed.size(), 2u);
  // ahead_ms is 0 <= ahead_ms < lease_ms.
  EXPECT_EQ(store_->Claim({.now_ms = 1, .owner = "n", .lease_ms = 50, .ahead_ms = 50}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->Claim({.now_ms = 1, .owner = "n", .lease_ms = 50, .ahead_ms = -1}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(store_->Claim({.now_ms = 1, .owner = "n", .lease_ms = 50, .ahead_ms = 49}));
}

// A row carries its park through every read (Due, Claim, RowsOf); the
// newest park of the key wins, and a schedule without one keeps it.
TEST_P(TimerStoreConformance, ARowCarriesTheNewestParkOfItsKey) {
  using timers::TimerPark;
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt, TimerPark{4, 2}}));
  ASSERT_TRUE(store_->Schedule({"b", 11, std::nullopt}));
  EXPECT_EQ(store_->Due(100, 10, true).value()[0].park, (TimerPark{4, 2}));
  EXPECT_EQ(store_->RowsOf("b").value()[0].park, std::nullopt);
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt}));                   // an older writer: kept
  ASSERT_TRUE(store_->Schedule({"a", 10, Redrive{1}}));                     // a re-drive flag: kept
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt, TimerPark{3, 9}}));  // an older park
  EXPECT_EQ(store_->RowsOf("a").value()[0], (TimerRow{"a", 10, Redrive{1}, TimerPark{4, 2}}));
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt, TimerPark{7, 5}}));  // a newer park wins
  ASSERT_TRUE(store_->Schedule({"b", 11, std::nullopt, TimerPark{1, 0}}));  // a plain row gains one
  auto claimed = store_->Claim({.now_ms = 100, .limit = 10, .owner = "n1"}).value();
  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_EQ(claimed[0], (TimerRow{"a", 10, Redrive{1}, TimerPark{7, 5}}));
  EXPECT_EQ(claimed[1], (TimerRow{"b", 11, std::nullopt, TimerPark{1, 0}}));
  EXPECT_EQ(store_->Schedule({"c", 1, std::nullopt, TimerPark{0, 0}}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->Schedule({"c", 1, std::nullopt, TimerPark{1, -1}}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(store_->RowsOf("c").value().empty());
}

// A claim's retire (the key from its row) removes only what the claim saw:
// a newer park written into the same row after the claim (the resumed body
// parked again on the same instant) survives it and is claimable at once,
// not only after the claim's lease. A key without the claim's view
// (TimerKey{id, wake}) still retires the row whatever it holds.
TEST_P(TimerStoreConformance, ARetireSparesANewerParkWrittenAfterTheClaim) {
  using timers::TimerPark;
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt, TimerPark{4, 2}}));
  ASSERT_TRUE(store_->Schedule({"b", 10, std::nullopt}));
  ASSERT_TRUE(store_->Schedule({"c", 10, std::nullopt, TimerPark{2, 1}}));
  auto claimed =
      store_->Claim({.now_ms = 100, .limit = 10, .owner = "n1", .lease_ms = 30'000}).value();
  ASSERT_EQ(claimed.size(), 3u);
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt, TimerPark{9, 3}}));  // parked again
  ASSERT_TRUE(store_->Schedule({"b", 10, std::nullopt, TimerPark{5, 0}}));  // a plain row gains one
  ASSERT_TRUE(store_->Schedule({"c", 10, std::nullopt, TimerPark{2, 1}}));  // the same park again
  std::vector<timers::TimerKey> keys;
  for (const TimerRow& row : claimed) keys.push_back(row.key());
  ASSERT_TRUE(store_->CompleteMany(keys));
  auto left = store_->Due(100, 10, true).value();
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], (TimerRow{"a", 10, std::nullopt, TimerPark{9, 3}}));
  EXPECT_EQ(left[1], (TimerRow{"b", 10, std::nullopt, TimerPark{5, 0}}));
  // The newer parks are not held by n1's lease: another node claims them now.
  auto again =
      store_->Claim({.now_ms = 101, .limit = 10, .owner = "n2", .lease_ms = 30'000}).value();
  EXPECT_EQ(again.size(), 2u);
  // The same through Complete; and a key without a view retires anything.
  ASSERT_TRUE(store_->Schedule({"a", 10, std::nullopt, TimerPark{12, 3}}));
  ASSERT_TRUE(store_->Complete(again[0].key()));
  EXPECT_EQ(store_->RowsOf("a").value().size(), 1u);
  ASSERT_TRUE(store_->Complete({"a", 10}));
  ASSERT_TRUE(store_->CompleteMany(std::vector<timers::TimerKey>{{"b", 10}}));
  EXPECT_TRUE(store_->Due(100, 10, true).value().empty());
}

TEST_P(TimerStoreConformance, RejectsBadInput) {
  EXPECT_EQ(store_->Schedule({"", 1, std::nullopt}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->Schedule({"a\n", 1, std::nullopt}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->Schedule({"a", 1, Redrive{-1}}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->Claim({.now_ms = 1, .owner = ""}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(store_->Due(1'000'000, 10, true).value().empty());
}

}  // namespace once::timers_testing
