#include "once/lifecycle/log_lifecycle.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "once/store/memory_store.h"
#include "once/store/wrapper.h"

namespace once::lifecycle {
namespace {

using events::KernelEvent;
using events::KernelKind;
using store::MemoryEventStore;

constexpr int64_t kDayMs = 86'400'000;

// prefix + n, zero-padded to `digits` (ids sort as the numbers do).
std::string Numbered(const char* prefix, int n, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%0*d", prefix, digits, n);
  return buf;
}

class LogLifecycleTest : public ::testing::Test {
 protected:
  // started; (optionally) completed at the clock's now.
  void Write(const std::string& id, bool terminal) {
    store::AppendRequest req{.execution_id = id, .expected_next = 1};
    req.events.push_back(KernelEvent(KernelKind::kExecutionStarted, {{"workflow", "w"}}));
    req.events.push_back(KernelEvent(KernelKind::kStepCompleted, {{"name", "s"}, {"value", 1}}));
    if (terminal)
      req.events.push_back(KernelEvent(KernelKind::kExecutionCompleted, {{"value", 1}}));
    ASSERT_TRUE(store_.Append(req));
  }
  bool Exists(store::EventStore& s, const std::string& id) { return s.Head(id).value() > 0; }

  ManualClock clock_;
  MemoryEventStore store_{store::Limits{}, clock_};
  MemoryEventStore archive_{store::Limits{}, clock_};
  RetentionPolicy policy_{.age_ms_min = 7 * kDayMs, .mode = RetentionMode::kDelete};
};

TEST_F(LogLifecycleTest, DeletesOnlyTerminalExecutionsOlderThanThePolicy) {
  Write("old-done", true);
  Write("old-running", false);
  clock_.Advance(std::chrono::milliseconds(7 * kDayMs - 1));
  Write("young-done", true);
  LogLifecycle lifecycle(store_, clock_, {.policy = policy_});
  RetentionReport r = lifecycle.ApplyRetention().value();
  EXPECT_EQ(r.examined, 0u);  // only ended executions are listed
  EXPECT_EQ(r.eligible, 0u);  // one millisecond short of the policy
  clock_.Advance(std::chrono::milliseconds(1));
  r = lifecycle.ApplyRetention().value();
  EXPECT_EQ(r.eligible, 1u);
  EXPECT_EQ(r.deleted, 1u);
  EXPECT_FALSE(Exists(store_, "old-done"));
  EXPECT_TRUE(Exists(store_, "old-running"));
  EXPECT_TRUE(Exists(store_, "young-done"));
}

TEST_F(LogLifecycleTest, ArchiveCopiesTheIdenticalLogThenDeletes) {
  Write("a", true);
  auto before = store_.ReadRange("a", 1, store::kToEnd).value();
  clock_.Advance(std::chrono::milliseconds(8 * kDayMs));
  policy_.mode = RetentionMode::kArchive;
  LogLifecycle lifecycle(store_, clock_, {.policy = policy_, .archive = &archive_});
  RetentionReport r = lifecycle.ApplyRetention().value();
  EXPECT_EQ(r.archived, 1u);
  EXPECT_FALSE(Exists(store_, "a"));
  EXPECT_EQ(archive_.ReadRange("a", 1, store::kToEnd).value(), before);
}

TEST_F(LogLifecycleTest, ArchiveWithoutAnArchiveStoreIsInvalid) {
  policy_.mode = RetentionMode::kArchive;
  LogLifecycle lifecycle(store_, clock_, {.policy = policy_});
  EXPECT_EQ(lifecycle.ApplyRetention().error().code, ErrorCode::kInvalidArgument);
}

TEST_F(LogLifecycleTest, AnArchiveCopyLeftByACrashedRunIsReusedAndADifferentOneRefused) {
  Write("a", true);
  Write("b", true);
  // A crashed run copied "a" and died before the delete.
  auto a_log = store_.ReadRange("a", 1, store::kToEnd).value();
  ASSERT_TRUE(archive_.Append(
      {.execution_id = "a", .expected_next = 1, .events = a_log, .fence = std::nullopt}));
  // Someone else's "b" sits in the archive.
  ASSERT_TRUE(archive_.Append(
      {.execution_id = "b",
       .expected_next = 1,
       .events = {KernelEvent(KernelKind::kExecutionStarted, nlohmann::json::object())}}));
  clock_.Advance(std::chrono::milliseconds(8 * kDayMs));
  policy_.mode = RetentionMode::kArchive;
  LogLifecycle lifecycle(store_, clock_, {.policy = policy_, .archive = &archive_});
  Result<RetentionReport> r = lifecycle.ApplyRetention();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCorruption);
  EXPECT_FALSE(Exists(store_, "a"));  // identical copy: only deleted
  EXPECT_TRUE(Exists(store_, "b"));   // kept
}

TEST_F(LogLifecycleTest, PinnedExecutionsStayAndThePinIsAskedOnlyForEligibleOnes) {
  for (int i = 0; i < 5; ++i) Write("done-" + std::to_string(i), true);
  Write("running", false);
  clock_.Advance(std::chrono::milliseconds(8 * kDayMs));
  std::set<std::string> asked;
  policy_.page_executions = 2;  // three pages
  LogLifecycle lifecycle(store_, clock_,
                         {.policy = policy_, .pinned = [&](std::string_view id) -> Result<bool> {
                            asked.insert(std::string(id));
                            return id == "done-3";
                          }});
  RetentionReport r = lifecycle.ApplyRetention().value();
  EXPECT_EQ(r.examined, 5u);  // the running one is not listed
  EXPECT_EQ(r.eligible, 5u);
  EXPECT_EQ(r.pinned, 1u);
  EXPECT_EQ(r.deleted, 4u);
  EXPECT_FALSE(asked.contains("running"));
  EXPECT_EQ(asked.size(), 5u);
  EXPECT_TRUE(Exists(store_, "done-3"));
  EXPECT_TRUE(Exists(store_, "running"));
}

TEST_F(LogLifecycleTest, APinErrorFailsTheRunVisiblyAndKeepsTheLog) {
  Write("a", true);
  clock_.Advance(std::chrono::milliseconds(8 * kDayMs));
  LogLifecycle lifecycle(store_, clock_,
                         {.policy = policy_, .pinned = [](std::string_view) -> Result<bool> {
                            return MakeError(ErrorCode::kUnavailable, "pin read failed");
                          }});
  Result<RetentionReport> r = lifecycle.ApplyRetention();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(Exists(store_, "a"));
}

// Before each list call returns, `before_list` runs (the test lets a live
// writer add executions there).
class PacedStore final : public store::EventStoreWrapper<PacedStore, store::ForwardEverything> {
 public:
  PacedStore(store::EventStore& target, std::function<void()> before_list)
      : EventStoreWrapper(target), before_list_(std::move(before_list)) {}
  Result<store::ExecutionPage> ListExecutions(std::string_view after, size_t limit) override {
    before_list_();
    return target().ListExecutions(after, limit);
  }
  Result<store::EndedPage> ListEnded(int64_t ended_ms_max, const store::EndedCursor& after,
                                     size_t limit) override {
    before_list_();
    return target().ListEnded(ended_ms_max, after, limit);
  }

 private:
  std::function<void()> before_list_;
};

// Another thread keeps starting and finishing executions (ids after the old
// ones, the clock 10 ms further each) and adds two pages of them before
// every page the pass reads: a pass that followed every new id would never
// catch up. The pass ends while they keep arriving, deletes every old one,
// and none that finished after its start's cutoff, though the clock makes
// them old enough while it runs.
TEST_F(LogLifecycleTest, APassEndsWhileNewExecutionsKeepFinishingAndSparesTheNewOnes) {
  constexpr int kOld = 20;
  constexpr int kLiveMax = 2'000;
  constexpr size_t kPage = 4;
  for (int i = 0; i < kOld; ++i) Write(Numbered("old-", i, 3), true);
  clock_.Advance(std::chrono::milliseconds(1'000));
  std::mutex mu;
  std::condition_variable cv;
  int written = 0, wanted = 0;  // GUARDED_BY(mu)
  bool pass_ended = false;      // GUARDED_BY(mu)
  std::thread live([&] {
    for (int n = 0; n < kLiveMax; ++n) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return pass_ended || written < wanted; });
        if (pass_ended) return;
      }
      clock_.Advance(std::chrono::milliseconds(10));
      Write(Numbered("new-", n, 6), true);
      std::lock_guard<std::mutex> lock(mu);
      ++written;
      cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu);
    written = kLiveMax;  // the writer is done: lists stop waiting for it
    cv.notify_all();
  });
  PacedStore paced(store_, [&] {
    std::unique_lock<std::mutex> lock(mu);
    wanted = std::min(written + 2 * static_cast<int>(kPage), kLiveMax);
    cv.notify_all();
    cv.wait(lock, [&] { return written >= wanted; });
  });
  policy_.age_ms_min = 100;
  policy_.page_executions = kPage;
  policy_.batch_executions = 3;
  LogLifecycle lifecycle(paced, clock_, {.policy = policy_});
  Result<RetentionReport> r = lifecycle.ApplyRetention();
  int written_when_ended = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    pass_ended = true;
    written_when_ended = written;
    cv.notify_all();
  }
  live.join();
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_LT(written_when_ended, kLiveMax);  // it ended while they kept arriving
  EXPECT_EQ(r->deleted, static_cast<size_t>(kOld));
  EXPECT_EQ(r->batches, 7u);  // 20 in batches of 3
  for (int i = 0; i < kOld; ++i) EXPECT_FALSE(Exists(store_, Numbered("old-", i, 3)));
  for (int n = 0; n < written_when_ended; ++n) {
    EXPECT_TRUE(Exists(store_, Numbered("new-", n, 6))) << n;
  }
}

// Deletes what the store refuses in the middle of a pass: the ids it names
// are deleted and started again between the list and the batch.
class RestartingStore final
    : public store::EventStoreWrapper<RestartingStore, store::ForwardEverything> {
 public:
  RestartingStore(store::EventStore& target, std::function<void()> before_delete)
      : EventStoreWrapper(target), before_delete_(std::move(before_delete)) {}
  Result<std::vector<Status>> DeleteEnded(std::span<const std::string> ids,
                                          int64_t ended_ms_max) override {
    before_delete_();
    return target().DeleteEnded(ids, ended_ms_max);
  }

 private:
  std::function<void()> before_delete_;
};

// An execution deleted and started again under its id after it was listed is
// refused by the batch's re-check (kNotFound): the new one stays, counted
// as gone; the rest of the batch is deleted.
TEST_F(LogLifecycleTest, AnIdStartedAgainAfterTheListIsLeftAloneAndTheBatchGoesOn) {
  Write("a", true);
  Write("b", true);
  Write("c", true);
  clock_.Advance(std::chrono::milliseconds(8 * kDayMs));
  bool once = false;
  RestartingStore restarting(store_, [&] {
    if (std::exchange(once, true)) return;
    ASSERT_TRUE(store_.DeleteExecution("b"));
    Write("b", false);  // running again
  });
  LogLifecycle lifecycle(restarting, clock_, {.policy = policy_});
  RetentionReport r = lifecycle.ApplyRetention().value();
  EXPECT_EQ(r.eligible, 3u);
  EXPECT_EQ(r.deleted, 2u);
  EXPECT_EQ(r.gone, 1u);
  EXPECT_EQ(r.batches, 1u);
  EXPECT_FALSE(Exists(store_, "a"));
  EXPECT_TRUE(Exists(store_, "b"));
  EXPECT_FALSE(Exists(store_, "c"));
}

// A failure of the batch other than the re-check ends the pass with it.
TEST_F(LogLifecycleTest, ABatchFailureEndsThePassVisibly) {
  Write("a", true);
  clock_.Advance(std::chrono::milliseconds(8 * kDayMs));
  struct Failing final : store::EventStoreWrapper<Failing, store::ForwardEverything> {
    using EventStoreWrapper::EventStoreWrapper;
    Result<std::vector<Status>> DeleteEnded(std::span<const std::string>, int64_t) override {
      return MakeError(ErrorCode::kUnavailable, "connection lost");
    }
  } failing(store_);
  LogLifecycle lifecycle(failing, clock_, {.policy = policy_});
  Result<RetentionReport> r = lifecycle.ApplyRetention();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(Exists(store_, "a"));
}

TEST_F(LogLifecycleTest, AnyPinIsTrueWhenEitherIs) {
  PinPredicate a = [](std::string_view id) -> Result<bool> { return id == "a"; };
  PinPredicate b = [](std::string_view id) -> Result<bool> { return id == "b"; };
  PinPredicate both = AnyPin(a, b);
  EXPECT_TRUE(both("a").value());
  EXPECT_TRUE(both("b").value());
  EXPECT_FALSE(both("c").value());
  EXPECT_TRUE(AnyPin(nullptr, a)("a").value());
}

}  // namespace
}  // namespace once::lifecycle
