// AnswerParks: a batch of timer wakes in two store round trips. The
// conditional acquires of every park go to the store in one call (the
// whole log comes back with each token), the bodies run one after another
// on the calling thread with their ending appends held back, and those
// appends are written together. A wake that cannot go on in the batch (its
// acquire or its ending append lost to a rival) goes on alone through
// AnswerPark, which judges it exactly as a single wake is judged.
#include <algorithm>
#include <iterator>

#include "fence_protocol.h"
#include "once/runtime/runtime.h"
#include "run_state.h"

namespace once::runtime {

using internal::RunState;
using store::AppendRequest;
using store::Capability;

struct Runtime::BatchedWake {
  const ParkWake* wake = nullptr;
  std::shared_ptr<void> running;     // marked running here from before the acquire
  std::optional<OwnRowWatch> watch;  // armed from the acquire until the body runs
  RunState run;
  // Goes on alone after the batch (AnswerAlone), expecting this token
  // first when set.
  bool alone = false;
  std::optional<int64_t> alone_expect;
  Result<ParkAnswered> answer = ParkAnswered{.conditional_resumes = 1, .attempts = 1};
};

namespace {

// A refusal is the noop verdict; any other error is the wake's answer.
Result<ParkAnswered> NoopOrError(Result<ParkAnswered> answer, const Error& e) {
  if (e.code != ErrorCode::kResumeRefused) return std::unexpected(e);
  answer->verdict = ParkVerdict::kNoop;
  return answer;
}

}  // namespace

std::vector<Result<ParkAnswered>> Runtime::AnswerParks(std::span<const ParkWake> wakes) {
  Outermost outermost(*this);
  std::vector<Result<ParkAnswered>> out;
  out.reserve(wakes.size());
  if (wakes.size() < 2 || !store_.Supports(Capability::kAcquireFenceIfReadTail)) {
    for (const ParkWake& w : wakes) out.push_back(AnswerAlone(w, w.park_fence, false));
    return out;
  }
  std::vector<BatchedWake> batch(wakes.size());
  std::vector<store::AcquireIfRead> requests;
  requests.reserve(wakes.size());
  const std::string_view owner = Owner();
  for (size_t i = 0; i < wakes.size(); ++i) {
    batch[i].wake = &wakes[i];
    // Running here from before the acquire (which names this node), as in
    // ResumeImpl: this node's own takeover must not claim the run.
    batch[i].running = HoldRunningHere(wakes[i].execution_id);
    requests.push_back(
        {.execution_id = wakes[i].execution_id,
         .expect = {.fence = wakes[i].park_fence, .park_seq = wakes[i].park_seq, .owner = owner},
         .read_after = 0});
  }
  std::vector<Result<store::AcquireWithTail>> acquired = store_.AcquireFencesIfReadTail(requests);
  for (size_t i = 0; i < batch.size(); ++i) BeginBatchedWake(batch[i], std::move(acquired[i]));
  WriteBatchedEnds(batch);
  for (BatchedWake& b : batch) {
    b.running.reset();
    if (b.alone) b.answer = AnswerAlone(*b.wake, b.alone_expect, true);
    out.push_back(std::move(b.answer));
  }
  return out;
}

// The wake's acquire answered: judge the park on the log that came with
// it, and run the body with its end held back.
void Runtime::BeginBatchedWake(BatchedWake& b, Result<store::AcquireWithTail> got) {
  const ParkWake& w = *b.wake;
  if (!got) {
    b.answer = std::unexpected(got.error());
    return;
  }
  std::vector<Envelope> log;
  if (Status s = internal::AdvanceByTail(store_, w.execution_id, log, std::move(got->tail)); !s) {
    b.answer = std::unexpected(s.error());
    return;
  }
  const bool owned = !Owner().empty();
  if (!got->acquire.stale) b.watch.emplace(*this, owned);  // the row may name this node now
  Result<ExecutionState> st =
      internal::CheckResumable(w.execution_id, log, internal::ResumeTarget{.park_seq = w.park_seq});
  if (!st) {
    b.answer = NoopOrError(std::move(b.answer), st.error());
    return;
  }
  if (got->acquire.stale) {  // the same park, still open: a rival acquired and never appended
    b.alone = true;
    b.alone_expect = got->acquire.fence;
    return;
  }
  Result<const Def*> def = WorkflowOf(w.execution_id, *st);
  if (!def) {
    b.answer = std::unexpected(def.error());
    return;
  }
  const internal::Fenced fenced{
      .token = got->acquire.fence, .fresh = true, .owner_recorded = owned};
  Status prepared =
      PrepareResumedRun(b.run, w.execution_id, std::move(*st), **def, "", std::move(log), fenced,
                        RunOptions{.fence_if_parked_at = w.park_seq}, {});
  if (!prepared) {
    b.answer = std::unexpected(prepared.error());
    return;
  }
  b.watch->Disarm();  // the body releases the row, or marks it unsure
  b.run.defer_end = true;
  Result<RunOutcome> ran = Execute(b.run);
  if (!b.run.end) SettleBatchedWake(b, std::move(ran));  // ended without a held-back append
}

void Runtime::WriteBatchedEnds(std::span<BatchedWake> batch) {
  std::vector<BatchedWake*> ending;
  std::vector<AppendRequest> appends;
  std::vector<RunRowWrite> rows;
  rows.reserve(batch.size());
  for (BatchedWake& b : batch) {
    if (!b.run.end) continue;
    if (b.run.pending.empty()) {  // parked again with nothing to write
      SettleBatchedWake(b, EndWritten(b.run, RunRowWrite{}, b.run.head));
      continue;
    }
    ending.push_back(&b);
    appends.push_back(TakePending(b.run, rows.emplace_back()));
  }
  std::vector<Result<int64_t>> heads = CommitMany(appends);
  for (size_t k = 0; k < ending.size(); ++k) {
    SettleBatchedWake(*ending[k], EndWritten(ending[k]->run, rows[k], std::move(heads[k])));
  }
}

// The run's result as the wake's verdict, as AnswerPark judges it; a lost
// append goes on alone.
void Runtime::SettleBatchedWake(BatchedWake& b, Result<RunOutcome> ran) {
  if (std::optional<ParkVerdict> v = internal::VerdictOf(ran)) {
    b.answer->verdict = *v;
    if (ran) b.answer->outcome = std::move(*ran);
    return;
  }
  const ErrorCode code = ran.error().code;
  if (code != ErrorCode::kStaleFence && code != ErrorCode::kSequenceConflict) {
    b.answer = std::unexpected(ran.error());
    return;
  }
  // A rival fenced behind our acquire: expect its token next; one that
  // appended first moved no token (AnswerPark reads the log).
  const StaleFenceDetail* stale = ran.error().As<StaleFenceDetail>();
  b.alone = true;
  b.alone_expect = stale ? std::optional<int64_t>(stale->current) : std::nullopt;
}

Result<ParkAnswered> Runtime::AnswerAlone(const ParkWake& w, std::optional<int64_t> expect_fence,
                                          bool after_batch) {
  ParkAnswer request{.park_seq = w.park_seq};
  if (expect_fence) request.park_fence = *expect_fence;
  if (after_batch) request.attempts_max = std::max(1, options_.resume_attempts_max - 1);
  Result<ParkAnswered> answered = AnswerPark(w.execution_id, request);
  if (answered && after_batch) {  // the batch's acquire and resume count too
    answered->attempts += 1;
    answered->conditional_resumes += 1;
  }
  return answered;
}

}  // namespace once::runtime
