// D2: resume under fenceIfParkedAt, every case of the design record's tests.
#include <gtest/gtest.h>

#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "test_stores.h"

namespace once::runtime {
namespace {

using store::MemoryEventStore;
using testing::HookSeparateTailStore;
using testing::HookStore;
using testing::NoFenceIfStore;
using testing::NonFencingStore;

std::vector<Envelope> Log(store::EventStore& s, std::string_view id) {
  return s.ReadRange(id, 1, store::kToEnd).value();
}

int Count(store::EventStore& s, std::string_view id, std::string_view kind) {
  int n = 0;
  for (const auto& e : Log(s, id)) n += e.kind == kind;
  return n;
}

// sleep; step; sleep; step; complete. Parks twice.
Status RegisterSleeper(Runtime& rt, int& steps) {
  return rt.Register("sleeper", [&steps](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    ONCE_RETURN_IF_ERROR(ctx.Step("one", [&]() -> Result<Json> { return ++steps; }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    ONCE_RETURN_IF_ERROR(ctx.Step("two", [&]() -> Result<Json> { return ++steps; }));
    return "done";
  });
}

// Hooked: HookStore (the combined acquire returns the tail) or
// HookSeparateTailStore (the runtime reads the tail itself).
template <class Hooked>
class ResumeFenceFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterSleeper(rt_, steps_));
    Result<RunOutcome> out = rt_.Start("sleeper", "ex", Json::object());
    ASSERT_TRUE(out) << out.error().ToString();
    ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
    park_seq_ = *out->park_seq;
    park_fence_ = out->park_fence;
  }

  ManualClock clock_;
  MemoryEventStore memory_{store::Limits{}, clock_};
  Hooked store_{memory_};
  Runtime rt_{store_, clock_};
  int steps_ = 0;
  int64_t park_seq_ = 0;
  std::optional<int64_t> park_fence_;
};
using ResumeFenceTest = ResumeFenceFixture<HookStore>;
using ResumeFenceSeparateTailTest = ResumeFenceFixture<HookSeparateTailStore>;

// RunOptions::park_fence, the park's token as the outcome that parked gave
// it: the resume answers first. It reads the log and runs under the park's
// own token with no acquire; its first append (the answer, before the step)
// is the conditional step. The token never moves, so each park's outcome
// carries the same one.
TEST_F(ResumeFenceTest, TheParksTokenLetsTheResumeAnswerFirstWithNoAcquire) {
  ASSERT_EQ(park_fence_, 0);  // a start that never acquired parks under no token
  Result<RunOutcome> out =
      rt_.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = park_fence_});
  ASSERT_TRUE(out) << out.error().ToString();
  ASSERT_EQ(out->status, ExecutionStatus::kSuspended);  // the second sleep
  EXPECT_EQ(store_.acquire_if_calls.load(), 0);
  EXPECT_EQ(steps_, 1);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 0);
  EXPECT_EQ(out->park_fence, 0);  // parked again under the park's token
  Result<RunOutcome> done =
      rt_.Resume("ex", {.fence_if_parked_at = *out->park_seq, .park_fence = out->park_fence});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(store_.acquire_if_calls.load(), 0);
  EXPECT_EQ(steps_, 2);
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 2);
}

// With resume_answers_first off, the park's token lets the conditional
// acquire go first: it brings the whole log, so the resume reads nothing.
TEST_F(ResumeFenceTest, AcquiringFirstTheParksTokenSparesTheRead) {
  Runtime acquiring{store_, clock_, {.resume_answers_first = false}};
  ASSERT_TRUE(RegisterSleeper(acquiring, steps_));
  store_.reads = 0;
  Result<RunOutcome> out =
      acquiring.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = park_fence_});
  ASSERT_TRUE(out) << out.error().ToString();
  ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(store_.reads.load(), 0);
  EXPECT_EQ(store_.acquire_if_calls.load(), 1);
  EXPECT_EQ(steps_, 1);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 1);
  EXPECT_EQ(out->park_fence, 1);  // parked again under the token it took
  Result<RunOutcome> done =
      acquiring.Resume("ex", {.fence_if_parked_at = *out->park_seq, .park_fence = out->park_fence});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(done->park_fence, std::nullopt);
  EXPECT_EQ(store_.reads.load(), 0);
  EXPECT_EQ(store_.acquire_if_calls.load(), 2);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 2);
}

// The control: without the token the same resume reads the log first.
TEST_F(ResumeFenceTest, WithoutTheParksTokenTheResumeReadsFirst) {
  store_.reads = 0;
  ASSERT_TRUE(rt_.Resume("ex", {.fence_if_parked_at = park_seq_}));
  EXPECT_GE(store_.reads.load(), 1);
  EXPECT_EQ(store_.acquire_if_calls.load(), 1);
}

// A token that is not the park envelope's (a wrong one, or a rival's that a
// stale answer reported) is not answered under: no body runs on it; the
// conditional acquire expects it on the log read, costs one stale acquire,
// and goes on from the store's current token.
TEST_F(ResumeFenceTest, ATokenNotTheParksIsExpectedByTheAcquire) {
  store_.reads = 0;
  Result<RunOutcome> out = rt_.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = 7});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(store_.acquire_if_calls.load(), 2);
  EXPECT_GE(store_.reads.load(), 1);
  EXPECT_EQ(steps_, 1);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 1);
}

// Acquiring first, a wrong token costs one stale acquire: the park, judged
// on the log that acquire brought, is still the same open one, so the
// acquire is retried on the current token; nothing else changes.
TEST_F(ResumeFenceTest, AcquiringFirstAWrongParkTokenCostsOneStaleAcquire) {
  Runtime acquiring{store_, clock_, {.resume_answers_first = false}};
  ASSERT_TRUE(RegisterSleeper(acquiring, steps_));
  store_.reads = 0;
  Result<RunOutcome> out =
      acquiring.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = 7});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(store_.acquire_if_calls.load(), 2);
  EXPECT_EQ(store_.reads.load(), 0);
  EXPECT_EQ(steps_, 1);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 1);
}

// The token of a park already answered: the resume sees the answer, takes
// nothing, and is refused (not-suspended) with the log untouched.
TEST_F(ResumeFenceTest, TheParksTokenOnAnAnsweredParkIsRefused) {
  ASSERT_TRUE(rt_.Resume("ex", {.fence_if_parked_at = park_seq_}));  // token 1, parked again
  const size_t events = Log(memory_, "ex").size();
  Result<RunOutcome> again =
      rt_.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = park_fence_});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kResumeRefused);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 1);
  EXPECT_EQ(Log(memory_, "ex").size(), events);
  EXPECT_EQ(steps_, 1);
}

// A fenced start's park carries the start's token, and a resume answering
// first runs (and parks again) under it.
TEST_F(ResumeFenceTest, AFencedParkCarriesItsToken) {
  const int64_t token = memory_.AcquireFence("fenced").value();
  Result<RunOutcome> out =
      rt_.Start("sleeper", "fenced", Json::object(), StartOptions{.fence = token});
  ASSERT_TRUE(out) << out.error().ToString();
  ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(out->park_fence, token);
  Result<RunOutcome> resumed =
      rt_.Resume("fenced", {.fence_if_parked_at = *out->park_seq, .park_fence = out->park_fence});
  ASSERT_TRUE(resumed) << resumed.error().ToString();
  EXPECT_EQ(resumed->park_fence, token);
  EXPECT_EQ(memory_.ReadFence("fenced").value(), token);
  EXPECT_EQ(Log(memory_, "fenced").back().fence(), token);
}

// Answering first after a dead acquirer (it took token 1 after the park and
// never appended): the answer is refused as stale before any step ran; the
// park is still open, so the conditional acquire takes over, expecting the
// token the refusal reported, and the step runs once.
TEST_F(ResumeFenceTest, AnsweringFirstAfterADeadAcquirerTheAcquireTakesOver) {
  ASSERT_EQ(memory_.AcquireFence("ex").value(), 1);
  Result<RunOutcome> out =
      rt_.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = park_fence_});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(store_.acquire_if_calls.load(), 1);  // {1, park}: the reported token
  EXPECT_EQ(memory_.ReadFence("ex").value(), 2);
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 1);
  EXPECT_EQ(Log(memory_, "ex")[park_seq_].fence(), 2);
  EXPECT_EQ(steps_, 1);
}

// A rival acquires between the answer-first resume's read and its answer
// (the rival then dies): the answer is refused, the step has not run, and
// the conditional acquire takes over from the rival's token.
TEST_F(ResumeFenceTest, ARivalAcquireBeforeTheAnswerRefusesItBeforeAnyStep) {
  store_.before_next_append = [&] {
    EXPECT_EQ(steps_, 0);  // the answer goes before the step's effect
    ASSERT_EQ(memory_.AcquireFence("ex").value(), 1);
  };
  Result<RunOutcome> out =
      rt_.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = park_fence_});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(steps_, 1);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 2);
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 1);
}

// A rival's whole resume lands between the answer-first resume's read and
// its answer: the answer is refused, the park is answered, so the resume is
// not-suspended; the rival's body is not fenced out (no token was taken)
// and its step ran once.
TEST_F(ResumeFenceTest, ARivalAnswerBeforeOursLeavesUsNotSuspended) {
  Runtime rival_rt{store_, clock_};  // another process: its own committer
  ASSERT_TRUE(RegisterSleeper(rival_rt, steps_));
  Result<RunOutcome> rival;
  store_.before_next_append = [&] {
    rival = rival_rt.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = park_fence_});
  };
  Result<RunOutcome> out =
      rt_.Resume("ex", {.fence_if_parked_at = park_seq_, .park_fence = park_fence_});
  ASSERT_TRUE(rival) << rival.error().ToString();
  EXPECT_EQ(rival->status, ExecutionStatus::kSuspended);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kResumeRefused);
  EXPECT_EQ(out.error().As<ResumeRefusedDetail>()->reason, "not-suspended");
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 1);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 0);
  EXPECT_EQ(steps_, 1);
  // The rival's park is the open one, under the same token.
  Result<RunOutcome> done =
      rt_.Resume("ex", {.fence_if_parked_at = *rival->park_seq, .park_fence = rival->park_fence});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(steps_, 2);
}

TEST_F(ResumeFenceTest, DeadAcquirerThenResumeSucceedsViaTheCurrentTokenRetry) {
  ASSERT_EQ(memory_.AcquireFence("ex").value(), 1);  // acquired, never appended
  Result<RunOutcome> out = rt_.Resume("ex", {.fence_if_parked_at = park_seq_});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);  // the second sleep
  EXPECT_EQ(store_.acquire_if_calls, 2);                // {0, park} stale, then {1, park}
  EXPECT_EQ(memory_.ReadFence("ex").value(), 2);
  auto log = Log(memory_, "ex");
  EXPECT_EQ(log[park_seq_].kind, "EXECUTION_RESUMED");
  EXPECT_EQ(log[park_seq_].fence(), 2);
  EXPECT_EQ(log.back().fence(), 2);
  EXPECT_EQ(steps_, 1);
}

TEST_F(ResumeFenceTest, ThreeDeadAcquirersIsContendedRetryableAndTheLogIsUntouched) {
  auto before = Log(memory_, "ex");
  store_.before_acquire_if = [&](int) { ASSERT_TRUE(memory_.AcquireFence("ex")); };
  Result<RunOutcome> out = rt_.Resume("ex", {.fence_if_parked_at = park_seq_});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kResumeContended);
  EXPECT_TRUE(out.error().retryable());
  EXPECT_EQ(out.error().subject, "ex");
  ASSERT_NE(out.error().As<ResumeContendedDetail>(), nullptr);
  EXPECT_EQ(out.error().As<ResumeContendedDetail>()->attempts, 3);
  EXPECT_EQ(out.error().As<ResumeRefusedDetail>(), nullptr);
  EXPECT_EQ(Log(memory_, "ex"), before);
  EXPECT_EQ(store_.acquire_if_calls, 3);

  // The rivals gone, a retry succeeds.
  store_.before_acquire_if = nullptr;
  ASSERT_TRUE(rt_.Resume("ex", {.fence_if_parked_at = park_seq_}));
}

// The design record's round-3 interleaving: a dead acquirer leaves token 1;
// A and B both resume; B's first acquire is stale, B re-reads the park
// (unanswered); A's resume commits between B's re-read and B's retry.
TEST_F(ResumeFenceTest, RivalResumeCommittingBeforeTheRetryLeavesTheLoserNotSuspended) {
  ASSERT_EQ(memory_.AcquireFence("ex").value(), 1);
  Result<RunOutcome> a_out;
  store_.before_acquire_if = [&](int call) {
    if (call != 2) return;  // B's retry, after B's re-read
    store_.before_acquire_if = nullptr;
    a_out = rt_.Resume("ex", {.fence_if_parked_at = park_seq_});  // A, start to finish
  };
  Result<RunOutcome> b_out = rt_.Resume("ex", {.fence_if_parked_at = park_seq_});
  ASSERT_TRUE(a_out) << a_out.error().ToString();
  EXPECT_EQ(a_out->status, ExecutionStatus::kSuspended);  // A's body ran and parked again
  ASSERT_FALSE(b_out);
  EXPECT_EQ(b_out.error().code, ErrorCode::kResumeRefused);
  EXPECT_EQ(b_out.error().As<ResumeRefusedDetail>()->reason, "not-suspended");
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 1);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 2);  // B never acquired: A is not fenced out
  EXPECT_EQ(steps_, 1);
  // A's token still writes: the next resume of A's park succeeds from it.
  Result<RunOutcome> next = rt_.Resume("ex", {.fence = 2});
  ASSERT_TRUE(next) << next.error().ToString();
  EXPECT_EQ(next->status, ExecutionStatus::kCompleted);
}

// P2-1: an ignorable append between the caller's fold and the acquire must
// not make the run append at a stale sequence. On both paths: the tail
// returned by the combined acquire, and the separate read after it.
template <class Hooked>
void CheckIgnorableAppendsDoNotRefuseOrDuplicate(Runtime& rt, Hooked& store,
                                                 MemoryEventStore& memory, int64_t park_seq) {
  ASSERT_TRUE(rt.RecordExecutionDenied("ex", "eve", "before the resume"));
  store.before_acquire_if = [&](int call) {
    if (call != 1) return;
    ASSERT_TRUE(rt.RecordExecutionDenied("ex", "eve", "between fold and acquire"));
    int64_t head = memory.Head("ex").value();
    ASSERT_TRUE(memory.Append({.execution_id = "ex",
                               .expected_next = head + 1,
                               .events = {events::AppEvent("sibling.output", Json(1))}}));
  };
  Result<RunOutcome> out = rt.Resume("ex", {.fence_if_parked_at = park_seq});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);
  auto log = Log(memory, "ex");
  for (size_t i = 0; i < log.size(); ++i) EXPECT_EQ(log[i].sequence, static_cast<int64_t>(i + 1));
  EXPECT_EQ(log[park_seq + 3].kind, "EXECUTION_RESUMED");
  EXPECT_EQ(Count(memory, "ex", "EXECUTION_RESUMED"), 1);
  EXPECT_EQ(memory.ReadFence("ex").value(), 1);  // one token, not burned twice
}

TEST_F(ResumeFenceTest, IgnorableAppendsAfterTheParkDoNotRefuseOrDuplicate) {
  CheckIgnorableAppendsDoNotRefuseOrDuplicate(rt_, store_, memory_, park_seq_);
}

TEST_F(ResumeFenceSeparateTailTest, IgnorableAppendsAfterTheParkDoNotRefuseOrDuplicate) {
  CheckIgnorableAppendsDoNotRefuseOrDuplicate(rt_, store_, memory_, park_seq_);
}

// The combined acquire saves the tail's round trip: the resume reads the log
// once; without it, once more after the acquire.
TEST_F(ResumeFenceTest, TheCombinedAcquireReadsTheLogOnce) {
  store_.reads = 0;
  ASSERT_TRUE(rt_.Resume("ex", {.fence_if_parked_at = park_seq_}));
  EXPECT_EQ(store_.acquire_if_calls, 1);
  EXPECT_EQ(store_.reads, 1);
}

TEST_F(ResumeFenceSeparateTailTest, WithoutTheCombinedAcquireTheTailIsASecondRead) {
  store_.reads = 0;
  ASSERT_TRUE(rt_.Resume("ex", {.fence_if_parked_at = park_seq_}));
  EXPECT_EQ(store_.acquire_if_calls, 1);
  EXPECT_EQ(store_.reads, 2);
}

// ResumeWithLog: the caller's read is the only one; the acquire brings the
// tail along.
TEST_F(ResumeFenceTest, ResumeWithLogReadsNothingBeforeTheAcquire) {
  std::vector<Envelope> log = Log(store_, "ex");
  store_.reads = 0;
  Result<RunOutcome> out =
      rt_.ResumeWithLog("ex", std::move(log), {.fence_if_parked_at = park_seq_});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(store_.acquire_if_calls, 1);
  EXPECT_EQ(store_.reads, 0);
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 1);
  EXPECT_EQ(memory_.ReadFence("ex").value(), 1);
}

TEST_F(ResumeFenceSeparateTailTest, ResumeWithLogReadsOnlyTheTailUnderTheNewToken) {
  std::vector<Envelope> log = Log(store_, "ex");
  store_.reads = 0;
  ASSERT_TRUE(rt_.ResumeWithLog("ex", std::move(log), {.fence_if_parked_at = park_seq_}));
  EXPECT_EQ(store_.reads, 1);
}

// A stale, short log (read before the park landed): the refusal it shows is
// re-checked on the current log, and the resume acts on the park.
TEST_F(ResumeFenceTest, ResumeWithAStaleShortLogActsOnTheAdvancedView) {
  std::vector<Envelope> prefix = Log(store_, "ex");
  prefix.resize(1);  // EXECUTION_STARTED only: running, no park
  Result<RunOutcome> out =
      rt_.ResumeWithLog("ex", std::move(prefix), {.fence_if_parked_at = park_seq_});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kSuspended);  // the second sleep
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 1);
  EXPECT_EQ(Log(memory_, "ex")[park_seq_].kind, "EXECUTION_RESUMED");
  EXPECT_EQ(memory_.ReadFence("ex").value(), 1);
}

// A stale log whose park a rival has answered since: the conditional acquire
// and the re-check under it refuse; nothing is appended.
TEST_F(ResumeFenceTest, ResumeWithAStaleLogOfAnAnsweredParkIsRefused) {
  std::vector<Envelope> stale = Log(store_, "ex");
  ASSERT_TRUE(rt_.Resume("ex", {.fence_if_parked_at = park_seq_}));  // the rival
  auto before = Log(memory_, "ex");
  int64_t token = memory_.ReadFence("ex").value();
  Result<RunOutcome> out =
      rt_.ResumeWithLog("ex", std::move(stale), {.fence_if_parked_at = park_seq_});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kResumeRefused);
  EXPECT_EQ(out.error().As<ResumeRefusedDetail>()->reason, "not-suspended");
  EXPECT_EQ(Log(memory_, "ex"), before);
  EXPECT_EQ(memory_.ReadFence("ex").value(), token);
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 1);
}

// A stale log missing ignorable appends made after the park: the run
// appends after them (the tail under the new token), no sequence conflict.
TEST_F(ResumeFenceTest, ResumeWithAStaleLogAppendsAfterWhatLandedSince) {
  std::vector<Envelope> stale = Log(store_, "ex");
  ASSERT_TRUE(rt_.RecordExecutionDenied("ex", "mallory", "no"));
  Result<RunOutcome> out =
      rt_.ResumeWithLog("ex", std::move(stale), {.fence_if_parked_at = park_seq_});
  ASSERT_TRUE(out) << out.error().ToString();
  auto log = Log(memory_, "ex");
  EXPECT_EQ(log[park_seq_].kind, "EXECUTION_DENIED");
  EXPECT_EQ(log[park_seq_ + 1].kind, "EXECUTION_RESUMED");
}

TEST_F(ResumeFenceTest, ResumeWithLogRefusesALogThatIsNotOneContiguousRun) {
  std::vector<Envelope> gap = Log(store_, "ex");
  ASSERT_EQ(gap.size(), 2u);  // started, the park
  gap[1].sequence += 1;       // 1, 3
  std::vector<Envelope> other = Log(store_, "ex");
  other[0].execution_id = "someone-else";
  store_.reads = 0;
  for (auto* log : {&gap, &other}) {
    Result<RunOutcome> out =
        rt_.ResumeWithLog("ex", std::move(*log), {.fence_if_parked_at = park_seq_});
    ASSERT_FALSE(out);
    EXPECT_EQ(out.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(store_.reads, 0);
  EXPECT_EQ(store_.acquire_if_calls, 0);
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 0);
}

TEST_F(ResumeFenceTest, ResumeWithAnEmptyLogReadsItAndResumes) {
  ASSERT_TRUE(rt_.ResumeWithLog("ex", {}, {.fence_if_parked_at = park_seq_}));
  EXPECT_EQ(Count(memory_, "ex", "EXECUTION_RESUMED"), 1);
  Result<RunOutcome> unknown = rt_.ResumeWithLog("nobody", {}, {.fence_if_parked_at = 2});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().As<ResumeRefusedDetail>()->reason, "unknown-execution");
}

TEST_F(ResumeFenceTest, AnsweredParkOrNonParkSequenceIsNotSuspendedAndTakesNoToken) {
  ASSERT_TRUE(rt_.Resume("ex", {.fence_if_parked_at = park_seq_}));
  auto before = Log(memory_, "ex");
  int64_t token = memory_.ReadFence("ex").value();
  for (int64_t seq : {park_seq_, int64_t{1}, int64_t{999}}) {
    Result<RunOutcome> out = rt_.Resume("ex", {.fence_if_parked_at = seq});
    ASSERT_FALSE(out) << seq;
    EXPECT_EQ(out.error().code, ErrorCode::kResumeRefused);
    EXPECT_EQ(out.error().As<ResumeRefusedDetail>()->reason, "not-suspended");
    EXPECT_EQ(memory_.ReadFence("ex").value(), token);
    EXPECT_EQ(Log(memory_, "ex"), before);
  }
}

TEST_F(ResumeFenceTest, FenceIfParkedAtTakesPrecedenceOverFence) {
  Result<RunOutcome> out = rt_.Resume("ex", {.fence = 7, .fence_if_parked_at = park_seq_});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(Log(memory_, "ex")[park_seq_].fence(), 1);
}

TEST_F(ResumeFenceTest, ResumeUnderAHeldToken) {
  int64_t held = memory_.AcquireFence("ex").value();
  Result<RunOutcome> unfenced = rt_.Resume("ex");
  ASSERT_FALSE(unfenced);
  EXPECT_EQ(unfenced.error().code, ErrorCode::kStaleFence);
  Result<RunOutcome> out = rt_.Resume("ex", {.fence = held});
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(Log(memory_, "ex")[park_seq_].fence(), held);
}

// An unfenced resume of an execution someone fenced is refused BEFORE its
// first step's effect: its EXECUTION_RESUMED is made durable first. (The
// chaos test found the parent answer's unfenced try running the parent's
// next step, refused at its append, and the conditional try running it
// again: one effect twice in one live process, no crash.)
TEST_F(ResumeFenceTest, RefusedUnfencedResumeRunsNoStep) {
  ASSERT_TRUE(memory_.AcquireFence("ex"));
  Result<RunOutcome> unfenced = rt_.Resume("ex");
  ASSERT_FALSE(unfenced);
  EXPECT_EQ(unfenced.error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(steps_, 0);
}

TEST_F(ResumeFenceTest, AnswerParkRunsTheStepOnceWhenItsUnfencedTryIsRefused) {
  ASSERT_TRUE(memory_.AcquireFence("ex"));
  Result<ParkAnswered> answered =
      rt_.AnswerPark("ex", {.park_seq = park_seq_, .unfenced_first = true});
  ASSERT_TRUE(answered) << answered.error().ToString();
  EXPECT_EQ(answered->verdict, ParkVerdict::kResumed);
  EXPECT_EQ(answered->conditional_resumes, 1);
  EXPECT_EQ(steps_, 1);
}

// Two resumers of one park, both alive: the second comes while the first
// runs its first step after the answer. The first's EXECUTION_RESUMED is
// durable before that step, so the second finds the park answered and runs
// nothing. (The chaos test on PostgreSQL saw two nodes answer one parent's
// child-done park in turn, each acquire fencing out the other's run after
// its step: the step ran six times.)
TEST(ResumeRaceTest, ARivalResumeOfTheSameParkRunsNoStep) {
  ManualClock clock;
  MemoryEventStore store(store::Limits{}, clock);
  Runtime first(store, clock), rival(store, clock);
  int steps = 0;
  int64_t park_seq = 0;
  std::optional<Result<RunOutcome>> rival_out;
  auto body = [&](Runtime* other) {
    return [&, other](Context& ctx, const Json&) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
      ONCE_RETURN_IF_ERROR(ctx.Step("one", [&]() -> Result<Json> {
        ++steps;
        if (other && !rival_out) rival_out = other->Resume("ex", {.fence_if_parked_at = park_seq});
        return steps;
      }));
      return "done";
    };
  };
  ASSERT_TRUE(first.Register("w", body(&rival)));
  ASSERT_TRUE(rival.Register("w", body(nullptr)));
  Result<RunOutcome> started = first.Start("w", "ex", Json::object());
  ASSERT_TRUE(started);
  park_seq = *started->park_seq;
  Result<RunOutcome> resumed = first.Resume("ex", {.fence_if_parked_at = park_seq});
  EXPECT_EQ(steps, 1);
  ASSERT_TRUE(rival_out);
  EXPECT_FALSE(*rival_out);  // the park was answered
  ASSERT_TRUE(resumed) << resumed.error().ToString();
  EXPECT_EQ(resumed->status, ExecutionStatus::kCompleted);
}

TEST(ResumeFallbackTest, WithoutAcquireFenceIfFallsBackToAcquireFence) {
  ManualClock clock;
  MemoryEventStore memory(store::Limits{}, clock);
  NoFenceIfStore store(memory);
  Runtime rt(store, clock);
  int steps = 0;
  ASSERT_TRUE(RegisterSleeper(rt, steps));
  Result<RunOutcome> out = rt.Start("sleeper", "ex", Json::object());
  ASSERT_TRUE(out);
  ASSERT_TRUE(memory.AcquireFence("ex"));  // a dead acquirer: the fallback does not care
  Result<RunOutcome> resumed = rt.Resume("ex", {.fence_if_parked_at = out->park_seq});
  ASSERT_TRUE(resumed) << resumed.error().ToString();
  EXPECT_EQ(memory.ReadFence("ex").value(), 2);
  EXPECT_EQ(Log(memory, "ex")[*out->park_seq].fence(), 2);
}

TEST(ResumeFallbackTest, ANonFencingStoreIgnoresTheOptions) {
  ManualClock clock;
  MemoryEventStore memory(store::Limits{}, clock);
  NonFencingStore store(memory);
  Runtime rt(store, clock);
  int steps = 0;
  ASSERT_TRUE(RegisterSleeper(rt, steps));
  Result<RunOutcome> out = rt.Start("sleeper", "ex", Json::object());
  ASSERT_TRUE(out);
  Result<RunOutcome> first = rt.Resume("ex", {.fence_if_parked_at = out->park_seq});
  ASSERT_TRUE(first) << first.error().ToString();
  Result<RunOutcome> second = rt.Resume("ex", {.fence = 41});
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_EQ(second->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(memory.ReadFence("ex").value(), 0);
  for (const auto& e : Log(memory, "ex")) EXPECT_EQ(e.fence(), 0) << e.kind;
}

}  // namespace
}  // namespace once::runtime
