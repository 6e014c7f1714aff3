#include "once/runtime/runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "once/store/memory_store.h"
#include "test_stores.h"

namespace once::runtime {
namespace {

using events::KernelKind;
using store::MemoryEventStore;
using testing::DurableLikeStore;
using testing::HookStore;

std::vector<std::string> Kinds(store::EventStore& s, std::string_view id) {
  std::vector<std::string> out;
  std::vector<Envelope> log = s.ReadRange(id, 1, store::kToEnd).value();
  for (const auto& e : log) out.push_back(e.kind.str());
  return out;
}

std::vector<Envelope> Log(store::EventStore& s, std::string_view id) {
  return s.ReadRange(id, 1, store::kToEnd).value();
}

class RuntimeTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  MemoryEventStore store_{store::Limits{}, clock_};
  int a_calls_ = 0;
  int b_calls_ = 0;

  // step a, sleep 5s, step b; returns a + b.
  WorkflowFn TwoStepsWithSleep() {
    return [this](Context& ctx, const Json& in) -> Result<Json> {
      ONCE_ASSIGN_OR_RETURN(Json a, ctx.Step("a", [&]() -> Result<Json> {
        ++a_calls_;
        return in.value("x", 0) + 1;
      }));
      ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(5)));
      ONCE_ASSIGN_OR_RETURN(Json b, ctx.Step("b", [&]() -> Result<Json> {
        ++b_calls_;
        return 10;
      }));
      return a.get<int>() + b.get<int>();
    };
  }
};

// Issue 15: a Start the store is certain to refuse ran its first step (an
// effect) and was refused only at the first append. Refused before it now.
TEST_F(RuntimeTest, AStartTheStoreWouldRefuseRunsNoStep) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("one", TwoStepsWithSleep()));
  const size_t id_max = store_.limits().execution_id_bytes_max;
  const std::vector<std::tuple<std::string, std::string, Json, ErrorCode>> cases = {
      {"an empty id", "", Json::object(), ErrorCode::kInvalidArgument},
      {"an id over the limit", std::string(id_max + 1, 'x'), Json::object(),
       ErrorCode::kInvalidArgument},
      {"an id with a newline", "a\nb", Json::object(), ErrorCode::kInvalidArgument},
      {"an id that is not UTF-8", "bad\xff", Json::object(), ErrorCode::kInvalidArgument},
      {"an input over event_bytes_max", "big",
       Json{{"blob", std::string(store_.limits().event_bytes_max, 'b')}},
       ErrorCode::kLimitExceeded},
  };
  for (const auto& [what, id, input, code] : cases) {
    SCOPED_TRACE(what);
    Result<RunOutcome> out = rt.Start("one", id, input);
    ASSERT_FALSE(out);
    EXPECT_EQ(out.error().code, code) << out.error().ToString();
  }
  EXPECT_EQ(a_calls_, 0);
  // A malformed parent is refused the same way.
  Result<RunOutcome> orphan =
      rt.Start("one", "child", Json::object(), {.parent = Json{{"execution_id", 7}}});
  ASSERT_FALSE(orphan);
  EXPECT_EQ(orphan.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(a_calls_, 0);
  EXPECT_EQ(store_.Head("big").value(), 0);
  // At the limits it runs.
  ASSERT_TRUE(rt.Start("one", std::string(id_max, 'x'), Json::object()));
  EXPECT_EQ(a_calls_, 1);
}

TEST_F(RuntimeTest, StartStepCompleteRecordsKernelEvents) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("one", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(
        Json v, ctx.Step("double", [&]() -> Result<Json> { return in["n"].get<int>() * 2; }));
    return v;
  }));
  Result<RunOutcome> out = rt.Start("one", "ex-1", Json{{"n", 21}});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(out->value, 42);
  EXPECT_EQ(Kinds(store_, "ex-1"), (std::vector<std::string>{"EXECUTION_STARTED", "STEP_COMPLETED",
                                                             "EXECUTION_COMPLETED"}));
  for (const Envelope& e : Log(store_, "ex-1")) {
    EXPECT_TRUE(e.is_kernel()) << e.kind;
    EXPECT_EQ(e.fence(), 0);
  }
  auto log = Log(store_, "ex-1");
  EXPECT_EQ(log[0].payload["workflow"], "one");
  EXPECT_EQ(log[1].payload, (Json{{"name", "double"}, {"value", 42}}));
  EXPECT_EQ(log[2].payload["value"], 42);
}

// A start's input is lent to its EXECUTION_STARTED and an end's value to
// its EXECUTION_COMPLETED or EXECUTION_FAILED, not copied into them. The body
// reads its input after an append took that event (step a's result is
// appended before b runs), every event records what it should, and the
// outcome carries the end's value: over the bare memory store (the events
// come back from the append), a decorated one (the store's Append) and one
// with group commit (the Committer takes the events; the runtime copies).
TEST_F(RuntimeTest, ALentInputAndEndValueOutliveTheAppendsThatTakeThem) {
  const Json input = {{"n", 7}, {"list", {1, 2, 3}}, {"text", std::string(40, 't')}};
  MemoryEventStore bare{store::Limits{}, clock_};
  MemoryEventStore behind_hook{store::Limits{}, clock_};
  MemoryEventStore behind_committer{store::Limits{}, clock_};
  HookStore hooked(behind_hook);
  DurableLikeStore grouped(behind_committer);
  for (store::EventStore* s : std::vector<store::EventStore*>{&bare, &hooked, &grouped}) {
    Runtime rt(*s, clock_);
    ASSERT_TRUE(rt.Register("late", [](Context& ctx, const Json& in) -> Result<Json> {
      ONCE_ASSIGN_OR_RETURN(Json a, ctx.Step("a", [&]() -> Result<Json> { return in["n"]; }));
      ONCE_ASSIGN_OR_RETURN(Json b, ctx.Step("b", [&]() -> Result<Json> { return in; }));
      return Json{{"a", a}, {"b", b}, {"in", in}};
    }));
    ASSERT_TRUE(rt.Register("fails", [](Context& ctx, const Json& in) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return 1; }));
      return MakeError(ErrorCode::kInvalidArgument, in["text"].get<std::string>());
    }));
    Result<RunOutcome> out = rt.Start("late", "late-1", input);
    ASSERT_TRUE(out) << out.error().ToString();
    const Json expected = {{"a", 7}, {"b", input}, {"in", input}};
    EXPECT_EQ(out->value, expected);
    std::vector<Envelope> log = Log(*s, "late-1");
    ASSERT_EQ(log.size(), 4u);
    EXPECT_EQ(log[0].payload["input"], input);
    EXPECT_EQ(log[2].payload["value"], input);
    EXPECT_EQ(log[3].payload["value"], expected);

    Result<RunOutcome> failed = rt.Start("fails", "fails-1", input);
    ASSERT_TRUE(failed) << failed.error().ToString();
    EXPECT_EQ(failed->status, ExecutionStatus::kFailed);
    EXPECT_NE(failed->value.dump().find(std::string(40, 't')), std::string::npos)
        << failed->value.dump();
    log = Log(*s, "fails-1");
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(log[0].payload["input"], input);
    EXPECT_EQ(log[2].payload["error"], failed->value);
  }
}

// The start is not made durable on its own before the first step: it rides
// in the append with that step's result (one commit per execution). So a
// Start of an id that exists runs its first step (at-least-once execution,
// like a crash inside it) and records nothing: the append conflicts.
TEST_F(RuntimeTest, StartOfExistingIdConflictsAndRecordsNothing) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("w", TwoStepsWithSleep()));
  ASSERT_TRUE(rt.Start("w", "dup", Json::object()));
  auto before = Log(store_, "dup");
  Result<RunOutcome> again = rt.Start("w", "dup", Json::object());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(Log(store_, "dup"), before);
  EXPECT_EQ(a_calls_, 2);
}

// Two idempotent starts of one id at once in one runtime run one body: the
// step runs once and both callers get the execution's outcome.
TEST_F(RuntimeTest, TwoIfAbsentStartsOfOneIdAtOnceRunOneBody) {
  Runtime rt(store_, clock_);
  std::atomic<int> step_runs{0};
  std::atomic<bool> in_step{false};
  std::atomic<bool> release{false};
  ASSERT_TRUE(rt.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    return ctx.Step("s", [&]() -> Result<Json> {
      ++step_runs;
      in_step = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return Json("done");
    });
  }));
  Result<RunOutcome> first, second;
  std::thread a([&] { first = rt.Start("w", "once", Json::object(), {.if_absent = true}); });
  while (!in_step) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread b([&] { second = rt.Start("w", "once", Json::object(), {.if_absent = true}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // b is waiting, not running
  EXPECT_EQ(step_runs.load(), 1);
  release = true;
  a.join();
  b.join();
  ASSERT_TRUE(first) << first.error().ToString();
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_EQ(step_runs.load(), 1);
  EXPECT_EQ(first->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(second->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(first->value, Json("done"));
  EXPECT_EQ(second->value, first->value);
}

// ---- Pipelined starts (Runtime::StartPipelined) ------------------------------

// Without group commit (the memory store itself) the last append is written
// on the calling thread: done has run when StartPipelined returns, with what
// Start returns. A start refused before its body answers the same way.
TEST_F(RuntimeTest, APipelinedStartWithoutGroupCommitIsAnsweredBeforeItReturns) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("one", TwoStepsWithSleep()));
  std::optional<Result<RunOutcome>> parked, unknown;
  rt.StartPipelined("one", "p-1", Json{{"x", 1}},
                    [&](Result<RunOutcome> out) { parked = std::move(out); });
  ASSERT_TRUE(parked.has_value());
  ASSERT_TRUE(*parked) << parked->error().ToString();
  EXPECT_EQ((*parked)->status, ExecutionStatus::kSuspended);
  EXPECT_EQ((*parked)->park_seq, 3);
  EXPECT_EQ(Kinds(store_, "p-1"), (std::vector<std::string>{"EXECUTION_STARTED", "STEP_COMPLETED",
                                                            "EXECUTION_SUSPENDED"}));
  rt.StartPipelined("none", "p-2", Json::object(),
                    [&](Result<RunOutcome> out) { unknown = std::move(out); });
  ASSERT_TRUE(unknown.has_value());
  ASSERT_FALSE(*unknown);
  EXPECT_EQ(unknown->error().code, ErrorCode::kNotFound);
}

// So with a DoneQueue too: nothing goes through the queue, the done has run
// when StartPipelined returns.
TEST_F(RuntimeTest, APipelinedStartWithoutGroupCommitIgnoresItsDoneQueue) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("one", TwoStepsWithSleep()));
  DoneQueue dones;
  std::optional<Result<RunOutcome>> parked;
  rt.StartPipelined(
      "one", "p-3", Json{{"x", 1}}, [&](Result<RunOutcome> out) { parked = std::move(out); }, {},
      &dones);
  ASSERT_TRUE(parked.has_value());
  ASSERT_TRUE(*parked) << parked->error().ToString();
  EXPECT_EQ((*parked)->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(dones.outstanding(), 0u);
  EXPECT_EQ(dones.Drain(/*wait=*/true), 0u);
}

// An if_absent pipelined start holds its id until its last append is
// written, not only until its body returns: a second if_absent start of
// the id in this runtime waits, then answers with the first one's outcome,
// and the step runs once. (Holding it only while the body ran, the second
// read an empty log and ran the body again.)
TEST_F(RuntimeTest, APipelinedIfAbsentStartHoldsItsIdUntilItsAppendIsWritten) {
  DurableLikeStore durable(store_);  // group commit, as on SQLite or PostgreSQL
  HookStore hooked(durable);
  Runtime rt(hooked, clock_);
  std::atomic<int> step_runs{0};
  ASSERT_TRUE(rt.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    return ctx.Step("s", [&]() -> Result<Json> { return ++step_runs; });
  }));
  std::atomic<bool> in_append{false}, release{false};
  hooked.before_next_append = [&] {
    in_append = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<RunOutcome>> first;  // GUARDED_BY(mu)
  rt.StartPipelined("w", "once", Json::object(),
                    [&](Result<RunOutcome> out) {
                      std::lock_guard lock(mu);
                      first = std::move(out);
                      cv.notify_all();
                    },
                    {.if_absent = true});
  while (!in_append) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> second_returned{false};
  Result<RunOutcome> second;
  std::thread b([&] {
    second = rt.Start("w", "once", Json::object(), {.if_absent = true});
    second_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // b waits for the hold
  EXPECT_FALSE(second_returned.load());
  EXPECT_EQ(step_runs.load(), 1);
  release = true;
  b.join();
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return first.has_value(); });
  ASSERT_TRUE(*first) << first->error().ToString();
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_EQ(step_runs.load(), 1);
  EXPECT_EQ((*first)->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(second->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(second->value, (*first)->value);
}

// One append per boundary: start + step + park is one write, the resume's
// {resumed, step, complete} one more; a step result is durable before the
// next step runs.
TEST_F(RuntimeTest, AppendsOnlyAtBoundaries) {
  HookStore counted(store_);
  Runtime rt(counted, clock_, {.group_commit = false});
  ASSERT_TRUE(rt.Register("w", TwoStepsWithSleep()));
  Result<RunOutcome> out = rt.Start("w", "ex", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(counted.appends, 1);
  // A resume's answer is durable before the body's first effect (a step
  // here): one append for EXECUTION_RESUMED, one for the step and the end
  // (RunState::answer_unconfirmed: a rival resumer then finds the park
  // answered instead of running the step beside this one).
  ASSERT_TRUE(rt.Resume("ex", {.fence_if_parked_at = out->park_seq}));
  EXPECT_EQ(counted.appends, 3);
  EXPECT_EQ(rt.commit_stats().store_writes, 3u);

  int durable_before_b = 0;
  ASSERT_TRUE(rt.Register("two", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return 1; }));
    ONCE_RETURN_IF_ERROR(ctx.Step("b", [&]() -> Result<Json> {
      durable_before_b = static_cast<int>(Log(store_, "two").size());
      return 2;
    }));
    return 3;
  }));
  ASSERT_TRUE(rt.Start("two", "two", Json::object()));
  EXPECT_EQ(durable_before_b, 2);  // STARTED and step a's result
  EXPECT_EQ(counted.appends, 5);
}

TEST_F(RuntimeTest, ParkOnSleepThenResumeReplaysWithoutRerunningSteps) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("w", TwoStepsWithSleep()));
  Result<RunOutcome> out = rt.Start("w", "ex", Json{{"x", 1}});
  ASSERT_TRUE(out) << out.error().ToString();
  ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(*out->park_seq, 3);
  EXPECT_EQ(a_calls_, 1);
  EXPECT_EQ(b_calls_, 0);
  Envelope park = Log(store_, "ex")[2];
  EXPECT_EQ(park.kind, "EXECUTION_SUSPENDED");
  EXPECT_EQ(park.payload["call"], "sleep");
  EXPECT_EQ(park.payload["waits"][0]["type"], "timer");
  EXPECT_EQ(park.payload["waits"][0]["wake_at_ms"], clock_.NowUnixMillis() + 5000);

  clock_.Advance(std::chrono::seconds(5));
  Result<RunOutcome> done = rt.Resume("ex", RunOptions{.fence_if_parked_at = out->park_seq});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(done->value, 12);
  EXPECT_EQ(a_calls_, 1);
  EXPECT_EQ(b_calls_, 1);
  auto log = Log(store_, "ex");
  EXPECT_EQ(
      Kinds(store_, "ex"),
      (std::vector<std::string>{"EXECUTION_STARTED", "STEP_COMPLETED", "EXECUTION_SUSPENDED",
                                "EXECUTION_RESUMED", "STEP_COMPLETED", "EXECUTION_COMPLETED"}));
  EXPECT_EQ(log[3].payload["wait"]["type"], "timer");
  EXPECT_EQ(log[3].payload["park_seq"], 3);
  EXPECT_EQ(log[3].fence(), 1);  // the token the conditional acquire took
}

TEST_F(RuntimeTest, CrashMidwayThenRecoverDoesNotRerunRecordedSteps) {
  HookStore faulty(store_);
  {
    Runtime crashed(faulty, clock_);
    ASSERT_TRUE(crashed.Register("w", [this](Context& ctx, const Json&) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return ++a_calls_; }));
      ONCE_RETURN_IF_ERROR(ctx.Step("b", [&]() -> Result<Json> { return ++b_calls_; }));
      return "done";
    }));
    faulty.writes_left = 1;  // {STARTED, STEP a} before b runs; {STEP b, ...} "crashes"
    Result<RunOutcome> out = crashed.Start("w", "ex", Json::object());
    ASSERT_FALSE(out);
    EXPECT_EQ(out.error().code, ErrorCode::kUnavailable);
  }
  EXPECT_EQ(Kinds(store_, "ex"), (std::vector<std::string>{"EXECUTION_STARTED", "STEP_COMPLETED"}));
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("w", [this](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return ++a_calls_; }));
    ONCE_RETURN_IF_ERROR(ctx.Step("b", [&]() -> Result<Json> { return ++b_calls_; }));
    return "done";
  }));
  // An ownerless run is left alone until its newest event is older than
  // ownerless_lease_ms (its writer may still be running it).
  Result<RecoverReport> early = rt.Recover();
  ASSERT_TRUE(early) << early.error().ToString();
  EXPECT_EQ(early->redriven, 0u);
  EXPECT_EQ(early->left_alive, 1u);
  EXPECT_EQ(b_calls_, 1);
  clock_.Advance(std::chrono::milliseconds(RuntimeOptions{}.ownerless_lease_ms + 1));
  Result<RecoverReport> report = rt.Recover();
  ASSERT_TRUE(report) << report.error().ToString();
  EXPECT_EQ(report->redriven, 1u);
  EXPECT_TRUE(report->errors.empty());
  EXPECT_EQ(a_calls_, 1);  // recorded: not re-run
  EXPECT_EQ(b_calls_, 2);  // ran, crashed before its record: at-least-once
  auto log = Log(store_, "ex");
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[3].kind, "EXECUTION_COMPLETED");
  EXPECT_EQ(log[3].fence(), 1);  // Recover fenced out the crashed writer
  EXPECT_EQ(store_.ReadFence("ex").value(), 1);
}

TEST_F(RuntimeTest, NondeterminismIsTypedAndLeavesTheLogUntouched) {
  Runtime rt(store_, clock_);
  std::string step_name = "a";
  ASSERT_TRUE(rt.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step(step_name, [&]() -> Result<Json> { return 1; }));
    ONCE_RETURN_IF_ERROR(ctx.Emit("note", Json{{"n", 1}}));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return 0;
  }));
  ASSERT_TRUE(rt.Start("w", "ex", Json::object()));
  auto before = Log(store_, "ex");
  step_name = "renamed";
  Result<RunOutcome> out = rt.Resume("ex");
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kNondeterminism);
  EXPECT_EQ(Log(store_, "ex"), before);

  // A body that ends before its log does is nondeterministic too.
  step_name = "a";
  ASSERT_TRUE(rt.Register("short", [](Context&, const Json&) -> Result<Json> { return 0; }));
  MemoryEventStore other(store::Limits{}, clock_);
  for (auto e : before) {
    if (e.Is(KernelKind::kExecutionStarted)) e.payload["workflow"] = "short";
    ASSERT_TRUE(other.Append({.execution_id = "ex", .expected_next = e.sequence, .events = {e}}));
  }
  Runtime rt2(other, clock_);
  ASSERT_TRUE(rt2.Register("short", [](Context&, const Json&) -> Result<Json> { return 0; }));
  Result<RunOutcome> short_out = rt2.Resume("ex");
  ASSERT_FALSE(short_out);
  EXPECT_EQ(short_out.error().code, ErrorCode::kNondeterminism);
  EXPECT_EQ(Log(other, "ex").size(), before.size());
}

TEST_F(RuntimeTest, AParkCannotBeSwallowed) {
  Runtime rt(store_, clock_);
  int after_park_steps = 0;
  ASSERT_TRUE(rt.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    Status ignored = ctx.Sleep(std::chrono::seconds(1));  // the body ignores the park
    EXPECT_FALSE(ignored);
    Result<Json> s = ctx.Step("x", [&]() -> Result<Json> {
      ++after_park_steps;
      return 1;
    });
    EXPECT_FALSE(s);
    return Json("pretend done");
  }));
  Result<RunOutcome> out = rt.Start("w", "ex", Json::object());
  ASSERT_TRUE(out);
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(after_park_steps, 0);
  EXPECT_EQ(Kinds(store_, "ex"),
            (std::vector<std::string>{"EXECUTION_STARTED", "EXECUTION_SUSPENDED"}));
}

TEST_F(RuntimeTest, StepFailureIsRecordedAndReplayed) {
  Runtime rt(store_, clock_);
  int calls = 0;
  ASSERT_TRUE(rt.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    Result<Json> r = ctx.Step("flaky", [&]() -> Result<Json> {
      ++calls;
      return MakeError(ErrorCode::kUnavailable, "down");
    });
    EXPECT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return std::unexpected(r.error());
  }));
  ASSERT_TRUE(rt.Start("w", "ex", Json::object()));
  Result<RunOutcome> out = rt.Resume("ex");
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kFailed);
  EXPECT_EQ(out->value["code"], "Unavailable");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(Kinds(store_, "ex")[1], "STEP_FAILED");
  EXPECT_EQ(Kinds(store_, "ex").back(), "EXECUTION_FAILED");
}

TEST_F(RuntimeTest, ContinueAsNewStartsTheNextGeneration) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("loop", [](Context& ctx, const Json& in) -> Result<Json> {
    int n = in.value("n", 0);
    if (n < 2) {
      ONCE_RETURN_IF_ERROR(ctx.ContinueAsNew(Json{{"n", n + 1}}));
      return Json();
    }
    return n;
  }));
  Result<RunOutcome> out = rt.Start("loop", "c", Json{{"n", 0}});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kContinued);
  EXPECT_EQ(out->value["next"], "c~2");
  auto first = Log(store_, "c");
  EXPECT_EQ(first.back().kind, "EXECUTION_CONTINUED");
  EXPECT_EQ(first.back().payload["input"]["n"], 1);
  ExecutionState second = rt.Inspect("c~2").value();
  EXPECT_EQ(second.status, ExecutionStatus::kContinued);
  ExecutionState third = rt.Inspect("c~3").value();
  EXPECT_EQ(third.status, ExecutionStatus::kCompleted);
  EXPECT_EQ(third.result["value"], 2);
  EXPECT_EQ(Log(store_, "c~3")[0].payload["continued_from"], "c~2");
}

// An id whose generation suffix is the largest int64 has no next number: it
// gets a suffix of its own (the old +1 overflowed, undefined behaviour).
TEST_F(RuntimeTest, ContinueAsNewPastTheLargestGenerationGetsASuffix) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("once_more", [](Context& ctx, const Json& in) -> Result<Json> {
    if (in.value("again", false)) ONCE_RETURN_IF_ERROR(ctx.ContinueAsNew(Json::object()));
    return Json();
  }));
  for (const auto& [id, next] : std::vector<std::pair<std::string, std::string>>{
           {"a~9223372036854775806", "a~9223372036854775807"},
           {"b~9223372036854775807", "b~9223372036854775807~2"},
           {"c~99999999999999999999", "c~99999999999999999999~2"},
           {"d~", "d~~2"}}) {
    Result<RunOutcome> out = rt.Start("once_more", id, Json{{"again", true}});
    ASSERT_TRUE(out) << out.error().ToString();
    EXPECT_EQ(out->value["next"], next) << id;
  }
}

class ChildrenTest : public RuntimeTest {
 protected:
  void RegisterChild(Runtime& rt) {
    ASSERT_TRUE(rt.Register("child", [](Context& ctx, const Json& in) -> Result<Json> {
      ONCE_ASSIGN_OR_RETURN(Json v, ctx.Step("work", [&]() -> Result<Json> {
        if (in.value("fail", false)) return MakeError(ErrorCode::kInvalidArgument, "bad child");
        return in["x"].get<int>() * 2;
      }));
      return v;
    }));
  }
  // "parent": starts child "k" with x = 21 and returns what it returns.
  void RegisterParent(Runtime& rt) {
    ASSERT_TRUE(rt.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(ctx.StartChild("child", "k", Json{{"x", 21}}));
      ONCE_ASSIGN_OR_RETURN(Json v, ctx.AwaitChild("k"));
      return v;
    }));
  }
};

TEST_F(ChildrenTest, AwaitChildParksAndTheChildsCompletionResumesTheParent) {
  Runtime rt(store_, clock_);
  RegisterChild(rt);
  RegisterParent(rt);
  Result<RunOutcome> out = rt.Start("parent", "p", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);
  // Inline mode: the child ran and the parent was resumed before Start returned.
  auto child_log = Log(store_, "p/k");
  ASSERT_FALSE(child_log.empty());
  EXPECT_EQ(child_log[0].payload["parent"], (Json{{"execution_id", "p"}, {"key", "k"}}));
  EXPECT_EQ(child_log.back().kind, "EXECUTION_COMPLETED");
  EXPECT_EQ(Kinds(store_, "p"),
            (std::vector<std::string>{"EXECUTION_STARTED", "CHILD_STARTED", "EXECUTION_SUSPENDED",
                                      "EXECUTION_RESUMED", "EXECUTION_COMPLETED"}));
  auto log = Log(store_, "p");
  EXPECT_EQ(log[1].payload["child_id"], "p/k");
  EXPECT_EQ(log[2].payload["waits"][0], (Json{{"type", "child"}, {"key", "k"}}));
  EXPECT_EQ(log[4].payload["value"], 42);
}

// A parent replays the start of a child that exists and that someone fenced
// since (its parent's CHILD_STARTED was lost in a crash, and a takeover
// claimed the child meanwhile): the token-0 start is refused on the token,
// and the child is taken as started, driven by its fence holder. Before, the
// refusal failed the parent's body on every replay and the parent never
// ended (the chaos test on PostgreSQL, 2026-12-03).
TEST_F(ChildrenTest, AReplayedStartOfAChildFencedSinceTakesItAsStarted) {
  Runtime rt(store_, clock_);
  RegisterChild(rt);
  RegisterParent(rt);
  // The child as the crashed parent's first run left it, then claimed.
  store::AppendRequest started{.execution_id = "p/k", .expected_next = 1};
  started.events.push_back(events::KernelEvent(
      KernelKind::kExecutionStarted, Json{{"workflow", "child"},
                                          {"input", Json{{"x", 21}}},
                                          {"parent", Json{{"execution_id", "p"}, {"key", "k"}}}}));
  ASSERT_TRUE(store_.Append(started));
  ASSERT_EQ(store_.AcquireFence("p/k").value(), 1);
  Result<RunOutcome> out = rt.Start("parent", "p", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);  // waiting for the child
  EXPECT_EQ(Kinds(store_, "p"), (std::vector<std::string>{"EXECUTION_STARTED", "CHILD_STARTED",
                                                          "EXECUTION_SUSPENDED"}));
  EXPECT_EQ(Kinds(store_, "p/k"), (std::vector<std::string>{"EXECUTION_STARTED"}));
  // Its fence holder ends it; the parent's resume then takes its result.
  store::AppendRequest ended{.execution_id = "p/k", .expected_next = 2, .fence = 1};
  ended.events.push_back(
      events::KernelEvent(KernelKind::kExecutionCompleted, Json{{"value", 42}}, 1));
  ASSERT_TRUE(store_.Append(ended));
  Result<RunOutcome> done = rt.Resume("p", {.fence_if_parked_at = out->park_seq});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(done->value, 42);
}

TEST_F(ChildrenTest, AwaitChildrenWaitsForTheWholeGroup) {
  Runtime rt(store_, clock_);
  RegisterChild(rt);
  ASSERT_TRUE(rt.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
    for (int i = 0; i < 3; ++i) {
      ONCE_RETURN_IF_ERROR(
          ctx.StartChild("child", "c" + std::to_string(i), Json{{"x", i}, {"fail", i == 2}}, "g"));
    }
    ONCE_ASSIGN_OR_RETURN(Json all, ctx.AwaitChildren("g"));
    return all;
  }));
  ASSERT_TRUE(rt.Start("parent", "p", Json::object()));
  ExecutionState st = rt.Inspect("p").value();
  ASSERT_EQ(st.status, ExecutionStatus::kCompleted);
  Json v = st.result["value"];
  EXPECT_EQ(v["c0"], (Json{{"status", "completed"}, {"value", 0}}));
  EXPECT_EQ(v["c1"], (Json{{"status", "completed"}, {"value", 2}}));
  EXPECT_EQ(v["c2"]["status"], "failed");
  int resumes = 0;
  for (const auto& k : Kinds(store_, "p")) resumes += k == "EXECUTION_RESUMED";
  EXPECT_EQ(resumes, 1);  // parked once; earlier children's notices found it incomplete
}

TEST_F(RuntimeTest, ReceiveParksOnTheTopicUntilDelivered) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("inbox", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json m, ctx.Receive("approve"));
    return m;
  }));
  Result<RunOutcome> out = rt.Start("inbox", "i", Json::object());
  ASSERT_TRUE(out);
  ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(Log(store_, "i")[1].payload["waits"][0],
            (Json{{"type", "message"}, {"topic", "approve"}}));
  Result<RunOutcome> wrong = rt.Deliver("i", "other", Json("x"));
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().As<ResumeRefusedDetail>()->reason, "not-suspended");
  Result<RunOutcome> done = rt.Deliver("i", "approve", Json{{"ok", true}});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->value, (Json{{"ok", true}}));
  EXPECT_EQ(Kinds(store_, "i"), (std::vector<std::string>{
                                    "EXECUTION_STARTED", "EXECUTION_SUSPENDED", "MESSAGE_CONSUMED",
                                    "EXECUTION_RESUMED", "EXECUTION_COMPLETED"}));
}

TEST_F(RuntimeTest, RecordExecutionDeniedIsUnfenced) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("w", TwoStepsWithSleep()));
  ASSERT_TRUE(rt.Start("w", "ex", Json::object()));
  ASSERT_EQ(store_.AcquireFence("ex").value(), 1);
  ASSERT_EQ(store_.AcquireFence("ex").value(), 2);
  Result<int64_t> head = rt.RecordExecutionDenied("ex", "mallory", "no grant");
  ASSERT_TRUE(head) << head.error().ToString();
  Envelope denied = Log(store_, "ex").back();
  EXPECT_EQ(denied.kind, "EXECUTION_DENIED");
  EXPECT_TRUE(denied.is_kernel());
  EXPECT_EQ(denied.fence(), 0);
  EXPECT_EQ(denied.payload["principal"], "mallory");
  // A runtime writer without the token is refused where the audit append was not.
  Result<RunOutcome> unfenced = rt.Resume("ex");
  ASSERT_FALSE(unfenced);
  EXPECT_EQ(unfenced.error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(Log(store_, "ex").size(), 4u);
}

TEST_F(RuntimeTest, LocateParkAndParkedAtSequence) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("w", TwoStepsWithSleep()));
  EXPECT_FALSE(rt.ParkedAtSequence("ex").value().has_value());
  ASSERT_TRUE(rt.Start("w", "ex", Json::object()));
  ASSERT_TRUE(rt.RecordExecutionDenied("ex", "p", "r"));  // ignorable: the park stays open
  std::optional<Park> park = rt.LocatePark("ex").value();
  ASSERT_TRUE(park);
  EXPECT_EQ(park->sequence, 3);
  EXPECT_EQ(park->envelope.kind, "EXECUTION_SUSPENDED");
  EXPECT_EQ(rt.ParkedAtSequence("ex").value(), std::optional<int64_t>(3));
  ASSERT_TRUE(rt.Resume("ex", {.fence_if_parked_at = 3}));
  EXPECT_FALSE(rt.ParkedAtSequence("ex").value().has_value());
  ASSERT_TRUE(rt.RecordOutcome("ex", Json{{"shipped", true}}));
  EXPECT_EQ(Log(store_, "ex").back().kind, "OUTCOME_RECORDED");
}

TEST_F(RuntimeTest, EmittedEventsReplayWithoutDuplicates) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("w", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Emit("progress", Json{{"pct", 50}}));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    ONCE_RETURN_IF_ERROR(ctx.Emit("progress", Json{{"pct", 100}}));
    return 0;
  }));
  ASSERT_TRUE(rt.Start("w", "ex", Json::object()));
  ASSERT_TRUE(rt.Resume("ex"));
  auto log = Log(store_, "ex");
  int emitted = 0;
  for (const auto& e : log) {
    if (e.kind == "progress") {
      ++emitted;
      EXPECT_FALSE(e.is_kernel());
      EXPECT_FALSE(e.answering());
    }
  }
  EXPECT_EQ(emitted, 2);
  EXPECT_EQ(log.back().kind, "EXECUTION_COMPLETED");
}

TEST_F(RuntimeTest, CancelEndsAParkedExecution) {
  Runtime rt(store_, clock_);
  ASSERT_TRUE(rt.Register("w", TwoStepsWithSleep()));
  ASSERT_TRUE(rt.Start("w", "ex", Json::object()));
  Result<RunOutcome> out = rt.Cancel("ex", "user");
  ASSERT_TRUE(out);
  EXPECT_EQ(rt.Inspect("ex")->status, ExecutionStatus::kCancelled);
  Result<RunOutcome> again = rt.Resume("ex");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().As<ResumeRefusedDetail>()->reason, "terminal");
}

TEST(TransactionTest, AStoreWithoutTransactionsAnswersUnsupportedAndTheRunGoesOn) {
  store::MemoryEventStore store;
  ManualClock clock;
  Runtime rt(store, clock);
  int runs = 0;
  ASSERT_TRUE(rt.Register("pay", [&](Context& ctx, const Json&) -> Result<Json> {
    Result<Json> r = ctx.Transaction("pay", [&](store::SqlTransaction&) -> Result<Json> {
      ++runs;
      return Json(1);
    });
    if (r) return MakeError(ErrorCode::kInternal, "ran on a memory store");
    EXPECT_EQ(r.error().code, ErrorCode::kUnsupported) << r.error().ToString();
    // Not latched: the body goes on.
    return ctx.Step("after", [&]() -> Result<Json> { return Json("after"); });
  }));
  Result<RunOutcome> out = rt.Start("pay", "order-7", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(out->value, "after");
  EXPECT_EQ(runs, 0);
  auto log = store.ReadRange("order-7", 1, store::kToEnd).value();
  ASSERT_EQ(log.size(), 3u);  // started, step "after", completed: nothing for "pay"
  EXPECT_EQ(log[1].payload["name"], "after");
}

}  // namespace
}  // namespace once::runtime
