// The chaos checker: its invariants and its negative controls, on ledgers
// made by hand.
#include "chaos_check.h"

#include <gtest/gtest.h>

namespace once::loom_app {
namespace {

LedgerLine Effect(int64_t t_ns, int64_t pid, std::string id, std::string step) {
  return {.t_ns = t_ns,
          .pid = pid,
          .node = "n",
          .what = "effect",
          .execution_id = std::move(id),
          .step = std::move(step)};
}

// Three node processes, each killed after its effects; one job, three cron
// ticks and a queue sampled at its limit.
struct ChaosRun {
  std::vector<LedgerLine> ledger;
  ChaosFacts facts;
};

ChaosRun EveryProcessKilled() {
  ChaosRun r;
  r.facts.pids = {101, 102, 103};
  r.facts.kills = {
      {.pid = 101, .t_ns = 1'000}, {.pid = 102, .t_ns = 2'000}, {.pid = 103, .t_ns = 3'000}};
  r.ledger = {Effect(500, 101, "job-1", "s1"), Effect(1'500, 102, "job-1", "s2"),
              Effect(1'600, 102, "tick@0", "s1"), Effect(1'700, 102, "tick@60000", "s1"),
              Effect(2'500, 103, "tick@120000", "s1")};
  r.facts.logs = {
      {"job-1", {.workflow = "job", .terminal_events = 1, .status = "EXECUTION_COMPLETED"}},
      {"tick@0", {.workflow = "tick", .terminal_events = 1, .status = "EXECUTION_COMPLETED"}},
      {"tick@60000", {.workflow = "tick", .terminal_events = 1, .status = "EXECUTION_COMPLETED"}},
      {"tick@120000", {.workflow = "tick", .terminal_events = 1, .status = "EXECUTION_COMPLETED"}}};
  r.facts.tx_rows = {{"job-1", 1}};
  r.facts.queues = {{"q", {.concurrency_max = 2, .claimed_max = 2, .samples = 10}}};
  return r;
}

TEST(ChaosCheckTest, ACleanRunHasNoBreach) {
  ChaosRun r = EveryProcessKilled();
  ChaosVerdict v = CheckChaos(r.ledger, r.facts);
  EXPECT_TRUE(v.breaches.empty()) << v.breaches.front();
  EXPECT_EQ(v.effects, 5u);
  EXPECT_EQ(v.ticks, 3u);
  EXPECT_EQ(v.tx_exactly_once, 1u);
}

// A run whose every process was killed (its last kills left every slot down
// when the load ended) still doctors two live processes: the controls must
// not depend on one the run happened to spare. This failed before the
// controls made up their own processes.
TEST(ChaosCheckTest, TheControlsAreCaughtWhenEveryProcessWasKilled) {
  ChaosRun r = EveryProcessKilled();
  std::vector<std::string> missed = CheckChaosControls(r.ledger, r.facts);
  EXPECT_TRUE(missed.empty()) << missed.front();
}

TEST(ChaosCheckTest, AStepRunAgainByALiveProcessIsABreach) {
  ChaosRun r = EveryProcessKilled();
  r.facts.kills.pop_back();  // 103 lives
  r.ledger.push_back(Effect(2'600, 103, "tick@120000", "s1"));
  ChaosVerdict v = CheckChaos(r.ledger, r.facts);
  ASSERT_EQ(v.breaches.size(), 1u);
  EXPECT_NE(v.breaches[0].find("twice by one live process"), std::string::npos);
}

TEST(ChaosCheckTest, ARerunAfterAKillIsExplained) {
  ChaosRun r = EveryProcessKilled();
  r.ledger.push_back(Effect(1'200, 102, "job-1", "s1"));  // after 101's kill at 1,000
  ChaosVerdict v = CheckChaos(r.ledger, r.facts);
  EXPECT_TRUE(v.breaches.empty()) << v.breaches.front();
  EXPECT_EQ(v.duplicates, 1u);
  EXPECT_EQ(v.duplicates_by_kill, 1u);
}

TEST(ChaosCheckTest, ARunWithNoEffectSaysSo) {
  ChaosRun r = EveryProcessKilled();
  r.ledger.clear();
  std::vector<std::string> missed = CheckChaosControls(r.ledger, r.facts);
  ASSERT_EQ(missed.size(), 1u);
  EXPECT_EQ(missed[0], "no step effect to doctor");
}

}  // namespace
}  // namespace once::loom_app
