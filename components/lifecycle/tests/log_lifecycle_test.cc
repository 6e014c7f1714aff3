#include "once/lifecycle/log_lifecycle.h"

#include <gtest/gtest.h>

#include <set>

#include "once/store/memory_store.h"

namespace once::lifecycle {
namespace {

using events::KernelEvent;
using events::KernelKind;
using store::MemoryEventStore;

constexpr int64_t kDayMs = 86'400'000;

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
  EXPECT_EQ(r.examined, 3u);
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
  EXPECT_EQ(r.examined, 6u);
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
