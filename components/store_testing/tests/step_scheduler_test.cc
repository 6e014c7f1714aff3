#include "once/store_testing/step_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <set>
#include <thread>

#include "once/events/envelope.h"

namespace once::store_testing {
namespace {

using events::AppEvent;
using events::Envelope;
using events::Json;
using events::KernelEvent;
using events::KernelKind;
using store::AppendRequest;

Schedule S(std::string_view text) {
  Result<Schedule> s = Schedule::Parse(text);
  EXPECT_TRUE(s) << s.error().ToString();
  return s.value_or(Schedule());
}

std::vector<std::string> Split(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::vector<std::string> Writers(EventStore& store, std::string_view id) {
  std::vector<std::string> out;
  std::vector<Envelope> events = store.ReadRange(id, 1, store::kToEnd).value();
  for (const Envelope& e : events) {
    out.push_back(e.payload["by"].get<std::string>());
  }
  return out;
}

// Appends one event naming `who` at the head it reads (Head, then Append),
// re-reading after a sequence conflict. Counts its conflicts.
Actor HeadThenAppend(std::string who, std::shared_ptr<std::atomic<int>> conflicts) {
  return [who, conflicts](EventStore& s) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      Result<int64_t> head = s.Head("log");
      if (!head) return;
      Result<int64_t> r = s.Append(AppendRequest{.execution_id = "log",
                                                 .expected_next = *head + 1,
                                                 .events = {AppEvent("wrote", {{"by", who}})}});
      if (r) return;
      if (r.error().code != ErrorCode::kSequenceConflict) return;
      conflicts->fetch_add(1);
    }
  };
}

class StepSchedulerTest : public testing::Test {
 protected:
  ManualClock clock_;
  StoreMaker fresh_ = FreshStores(MemoryFactory(), {.clock = &clock_});
};

TEST(ScheduleTest, ParsesAndPrints) {
  Schedule s = S("AB B!A");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s.steps()[0], (ScheduleStep{.actor = 0}));
  EXPECT_EQ(s.steps()[2], (ScheduleStep{.actor = 1, .crash = true}));
  EXPECT_EQ(s.ToString(), "ABB!A");
  EXPECT_EQ(S(s.ToString()), s);
  EXPECT_EQ(S("").size(), 0u);
  for (std::string_view bad : {"a", "!A", "A!!", "A?", "A-B"}) {
    EXPECT_EQ(Schedule::Parse(bad).error().code, ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ScheduleTest, EnumeratesEveryScheduleOnceShortestFirst) {
  std::vector<Schedule> all = EnumerateSchedules(2, 7);
  EXPECT_EQ(all.size(), 255u);
  std::set<std::string> distinct;
  for (const Schedule& s : all) distinct.insert(s.ToString());
  EXPECT_EQ(distinct.size(), 255u);
  EXPECT_EQ(all[0].ToString(), "");
  EXPECT_EQ(all[1].ToString(), "A");
  EXPECT_EQ(all[2].ToString(), "B");
  EXPECT_EQ(all[3].ToString(), "AA");
  EXPECT_EQ(all.back().ToString(), "BBBBBBB");
  EXPECT_EQ(EnumerateSchedules(3, 2).size(), 1u + 3 + 9);
  std::vector<Schedule> crashes = EnumerateSchedules(2, 2, /*with_crashes=*/true);
  EXPECT_EQ(crashes.size(), 1u + 4 + 16);
  EXPECT_EQ(crashes[3].ToString(), "A!");
}

TEST_F(StepSchedulerTest, TheScheduleDecidesWhoWinsTheRace) {
  // A and B both read head 0; B appends first; A's append conflicts, and A
  // (run to completion after the schedule) re-reads and appends second.
  auto conflicts = std::make_shared<std::atomic<int>>(0);
  std::vector<Actor> actors = {HeadThenAppend("A", conflicts), HeadThenAppend("B", conflicts)};
  auto h = fresh_();
  ASSERT_TRUE(h);
  StepRun run = RunActors(*h->store, S("ABBA"), actors);
  EXPECT_EQ(run.trace, Split("A:Head B:Head B:Append A:Append A:Head A:Append"));
  EXPECT_EQ(Writers(*h->store, "log"), (std::vector<std::string>{"B", "A"}));
  EXPECT_EQ(conflicts->load(), 1);
  EXPECT_FALSE(run.timed_out);

  auto h2 = fresh_();
  ASSERT_TRUE(h2);
  StepRun serial = RunActors(*h2->store, S("AABB"), actors);
  EXPECT_EQ(serial.trace, Split("A:Head A:Append B:Head B:Append"));
  EXPECT_EQ(Writers(*h2->store, "log"), (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(conflicts->load(), 1);
}

TEST_F(StepSchedulerTest, ACrashedActorMakesNoMoreCalls) {
  auto conflicts = std::make_shared<std::atomic<int>>(0);
  std::vector<Actor> actors = {HeadThenAppend("A", conflicts), HeadThenAppend("B", conflicts)};
  auto h = fresh_();
  ASSERT_TRUE(h);
  StepRun run = RunActors(*h->store, S("BAB!A"), actors);
  EXPECT_EQ(run.trace, Split("B:Head A:Head B! A:Append"));
  EXPECT_EQ(run.crashed, (std::vector<bool>{false, true}));
  EXPECT_EQ(Writers(*h->store, "log"), (std::vector<std::string>{"A"}));
}

TEST_F(StepSchedulerTest, CrashAllStopsEveryoneWhenTheScheduleEnds) {
  auto conflicts = std::make_shared<std::atomic<int>>(0);
  std::vector<Actor> actors = {HeadThenAppend("A", conflicts), HeadThenAppend("B", conflicts)};
  auto h = fresh_();
  ASSERT_TRUE(h);
  StepRun run = RunActors(*h->store, S("AB"), actors, {.after = AfterSchedule::kCrashAll});
  EXPECT_EQ(run.trace, Split("A:Head B:Head A! B!"));
  EXPECT_EQ(run.crashed, (std::vector<bool>{true, true}));
  EXPECT_TRUE(Writers(*h->store, "log").empty());
}

TEST_F(StepSchedulerTest, StepsOfAFinishedActorAreSkipped) {
  auto conflicts = std::make_shared<std::atomic<int>>(0);
  std::vector<Actor> actors = {HeadThenAppend("A", conflicts), HeadThenAppend("B", conflicts)};
  auto h = fresh_();
  ASSERT_TRUE(h);
  StepRun run = RunActors(*h->store, S("AAAAB"), actors);
  EXPECT_EQ(run.trace, Split("A:Head A:Append A- A- B:Head B:Append"));
  EXPECT_EQ(Writers(*h->store, "log"), (std::vector<std::string>{"A", "B"}));
}

TEST_F(StepSchedulerTest, EveryScheduleUpToThreeRunsToCompletionDeterministically) {
  std::vector<Schedule> all = EnumerateSchedules(2, 3);
  std::vector<std::string> first_traces;
  for (int pass = 0; pass < 2; ++pass) {
    size_t index = 0;
    size_t runs = RunEverySchedule(all, fresh_, [&](EventStore&) {
      auto conflicts = std::make_shared<std::atomic<int>>(0);
      return ScenarioRun{.actors = {HeadThenAppend("A", conflicts), HeadThenAppend("B", conflicts)},
                         .check = [&, conflicts](EventStore& store, const StepRun& run) {
                           std::vector<std::string> writers = Writers(store, "log");
                           std::sort(writers.begin(), writers.end());
                           EXPECT_EQ(writers, (std::vector<std::string>{"A", "B"}));
                           EXPECT_EQ(run.crashed, (std::vector<bool>{false, false}));
                           if (pass == 0) {
                             first_traces.push_back(run.TraceText());
                           } else {
                             EXPECT_EQ(run.TraceText(), first_traces[index])
                                 << "same schedule, other trace";
                           }
                           ++index;
                         }};
    });
    EXPECT_EQ(runs, all.size());
  }
}

TEST_F(StepSchedulerTest, AnActorBlockedOutsideTheStoreAbandonsTheRun) {
  // B waits for A outside the store, but the schedule gives the first step
  // to B: nobody can move, so the run is abandoned instead of hanging.
  std::atomic<bool> a_called{false};
  std::vector<Actor> actors = {[&](EventStore& s) {
                                 (void)s.Head("x");
                                 a_called = true;
                               },
                               [&](EventStore& s) {
                                 while (!a_called) std::this_thread::yield();
                                 EXPECT_EQ(s.Head("x").error().code, ErrorCode::kTimeout);
                               }};
  auto h = fresh_();
  ASSERT_TRUE(h);
  StepRun run =
      RunActors(*h->store, S("BA"), actors, {.gate_timeout = std::chrono::milliseconds(100)});
  EXPECT_TRUE(run.timed_out);
  EXPECT_TRUE(run.trace.empty());
}

TEST_F(StepSchedulerTest, StepStoreGatesEveryCapabilityAndForwardsSupport) {
  auto h = fresh_();
  ASSERT_TRUE(h);
  std::vector<Actor> actors = {[](EventStore& s) {
    EXPECT_TRUE(s.Supports(store::Capability::kAcquireFenceIf));
    ASSERT_TRUE(s.Append({.execution_id = "e", .events = {AppEvent("k", 1)}}));
    EXPECT_EQ(s.AcquireFence("e").value(), 1);
    EXPECT_EQ(s.ReadFence("e").value(), 1);
    EXPECT_FALSE(s.AcquireFenceIf("e", {1, 1}).value().stale);
    EXPECT_EQ(s.AppendIfUnchanged(
                   {.execution_id = "e", .expected_next = 2, .events = {AppEvent("k", 2)}}, 2)
                  .value(),
              2);
    EXPECT_TRUE(s.CopyPrefix("e", "f", 2));
    EXPECT_TRUE(s.TruncatePrefixKeeping("f", 2));
    EXPECT_EQ(s.ReadRange("f", 1, store::kToEnd).value().size(), 1u);
    EXPECT_EQ(s.ListExecutions("", 10).value().execution_ids.size(), 2u);
    EXPECT_TRUE(s.DeleteExecution("f"));
  }};
  StepRun run = RunActors(*h->store, S(""), actors);
  EXPECT_EQ(run.trace, Split("A:Append A:AcquireFence A:ReadFence A:AcquireFenceIf "
                             "A:AppendIfUnchanged A:CopyPrefix A:TruncatePrefixKeeping "
                             "A:ReadRange A:ListExecutions A:DeleteExecution"));
}

// ---- Two resumers over every interleaving (ADR 0118, store level) -----------

constexpr int64_t kPark = 2;

struct ResumerOutcome {
  bool resumed = false;          // its EXECUTION_RESUMED landed
  bool body_fenced_out = false;  // a later append of its body was refused stale
};

// A resumer: read the park's tail, take the fence, append the resume, then
// run a two-append body. `conditional` uses AcquireFenceIf (with D2's retry on
// the returned token); otherwise the unconditional AcquireFence (the negative
// control). Stops at the first error it cannot act on (a crash included).
Actor Resumer(bool conditional, ResumerOutcome* out) {
  return [conditional, out](EventStore& s) {
    int64_t expect = 0;
    int64_t token = 0;
    for (int attempt = 0;; ++attempt) {
      if (attempt == 3) return;  // contended
      Result<std::vector<Envelope>> tail = s.ReadRange("ex", kPark + 1, store::kToEnd);
      if (!tail) return;
      for (const Envelope& e : *tail) {
        if (e.answering()) return;  // not suspended any more
      }
      if (!conditional) {
        Result<int64_t> t = s.AcquireFence("ex");
        if (!t) return;
        token = *t;
        break;
      }
      Result<store::ConditionalAcquire> c = s.AcquireFenceIf("ex", {expect, kPark});
      if (!c) return;
      if (!c->stale) {
        token = c->fence;
        break;
      }
      expect = c->fence;
    }
    Result<int64_t> head = s.Head("ex");
    if (!head) return;
    auto append = [&](KernelKind kind) {
      return s.Append({.execution_id = "ex",
                       .expected_next = *head + 1,
                       .events = {KernelEvent(kind,
                                              kind == KernelKind::kExecutionResumed
                                                  ? nlohmann::json()
                                                  : nlohmann::json{{"name", "s"}},
                                              token)},
                       .fence = token});
    };
    Result<int64_t> resumed = append(KernelKind::kExecutionResumed);
    if (!resumed) return;
    out->resumed = true;
    for (KernelKind k : {KernelKind::kStepCompleted, KernelKind::kExecutionCompleted}) {
      ++*head;
      Result<int64_t> r = append(k);
      if (!r) {
        out->body_fenced_out = r.error().code == ErrorCode::kStaleFence;
        return;
      }
    }
  };
}

struct ResumeRaceTotals {
  int schedules = 0;
  int fenced_out_bodies = 0;
  int max_resumes = 0;
};

ResumeRaceTotals RaceTwoResumers(const StoreMaker& fresh, bool conditional, AfterSchedule after) {
  ResumeRaceTotals totals;
  std::vector<Schedule> all = EnumerateSchedules(2, 7);
  RunEverySchedule(
      all, fresh,
      [&](EventStore& store) {
        EXPECT_TRUE(store.Append(
            {.execution_id = "ex",
             .events = {KernelEvent(KernelKind::kExecutionStarted, nlohmann::json::object()),
                        KernelEvent(KernelKind::kExecutionSuspended, nlohmann::json::object())}}));
        auto outcomes = std::make_shared<std::array<ResumerOutcome, 2>>();
        return ScenarioRun{.actors = {Resumer(conditional, &(*outcomes)[0]),
                                      Resumer(conditional, &(*outcomes)[1])},
                           .check = [&, outcomes](EventStore& store, const StepRun& run) {
                             int resumes = 0;
                             std::vector<Envelope> log =
                                 store.ReadRange("ex", 1, store::kToEnd).value();
                             for (const Envelope& e : log) {
                               resumes += e.Is(KernelKind::kExecutionResumed);
                             }
                             ++totals.schedules;
                             totals.max_resumes = std::max(totals.max_resumes, resumes);
                             for (const ResumerOutcome& o : *outcomes)
                               totals.fenced_out_bodies += o.body_fenced_out;
                             if (conditional) {
                               EXPECT_LE(resumes, 1) << run.TraceText();
                               for (const ResumerOutcome& o : *outcomes) {
                                 EXPECT_FALSE(o.body_fenced_out) << run.TraceText();
                               }
                             }
                           }};
      },
      {.after = after, .stop_at_first_failure = true});
  return totals;
}

TEST_F(StepSchedulerTest, TwoConditionalResumersNeverFenceOutARunningBody) {
  for (AfterSchedule after : {AfterSchedule::kRunToCompletion, AfterSchedule::kCrashAll}) {
    ResumeRaceTotals t = RaceTwoResumers(fresh_, /*conditional=*/true, after);
    EXPECT_EQ(t.schedules, 255);
    EXPECT_EQ(t.fenced_out_bodies, 0);
    EXPECT_LE(t.max_resumes, 1);
  }
}

TEST_F(StepSchedulerTest, TheUnconditionalAcquireFencesOutARunningBody) {
  // Negative control: the same race with AcquireFence has schedules where
  // the loser's acquire lands after the winner's resume.
  ResumeRaceTotals t =
      RaceTwoResumers(fresh_, /*conditional=*/false, AfterSchedule::kRunToCompletion);
  EXPECT_EQ(t.schedules, 255);
  EXPECT_GT(t.fenced_out_bodies, 0);
}

}  // namespace
}  // namespace once::store_testing
