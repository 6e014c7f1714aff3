#include "once/orchestration/runtime_waker.h"

#include "log_read.h"

namespace once::orchestration {

using internal::Member;
using timers::WakeVerdict;

namespace {

const events::Json* TimerWait(const store::Envelope& park, int64_t wake_at_ms) {
  for (const events::Json& wait : Member(park.payload, "waits")) {
    if (Member(wait, "type") == "timer" && Member(wait, "wake_at_ms") == wake_at_ms) return &wait;
  }
  return nullptr;
}

WakeVerdict VerdictOf(runtime::ParkVerdict verdict) {
  switch (verdict) {
    case runtime::ParkVerdict::kResumed:
      return WakeVerdict::kResumed;
    case runtime::ParkVerdict::kNoop:
      return WakeVerdict::kObsolete;
    case runtime::ParkVerdict::kContended:
      break;
  }
  return WakeVerdict::kContended;
}

}  // namespace

Result<WakeVerdict> RuntimeWaker::Wake(const timers::TimerRow& row) {
  if (!row.park) return WakeFromLog(row);
  // The row names its park and the park's token: the acquire goes first
  // and brings the log (no read before it). The answer is the park's
  // timer wait (a Sleep park has exactly one).
  return Judge(row, runtime_.AnswerPark(row.execution_id, {.park_seq = row.park->sequence,
                                                           .park_fence = row.park->fence}));
}

std::vector<Result<WakeVerdict>> RuntimeWaker::WakeMany(
    std::span<const timers::TimerRow* const> rows) {
  std::vector<Result<WakeVerdict>> out(rows.size(), WakeVerdict::kObsolete);
  std::vector<runtime::ParkWake> parks;
  std::vector<size_t> positions;
  for (size_t i = 0; i < rows.size(); ++i) {
    const timers::TimerRow& row = *rows[i];
    if (!row.park) {
      out[i] = WakeFromLog(row);
      continue;
    }
    parks.push_back({.execution_id = row.execution_id,
                     .park_seq = row.park->sequence,
                     .park_fence = row.park->fence});
    positions.push_back(i);
  }
  std::vector<Result<runtime::ParkAnswered>> answered = runtime_.AnswerParks(parks);
  for (size_t k = 0; k < positions.size(); ++k) {
    out[positions[k]] = Judge(*rows[positions[k]], std::move(answered[k]));
  }
  return out;
}

Result<WakeVerdict> RuntimeWaker::Judge(const timers::TimerRow& row,
                                        Result<runtime::ParkAnswered> answered) {
  if (!answered) return std::unexpected(answered.error());
  if (answered->verdict != runtime::ParkVerdict::kNoop) return VerdictOf(answered->verdict);
  // That park is answered or gone. The row is shared by every park of the
  // execution that waits on this instant, and a newer one may not have
  // written its park into the row yet: the log decides, as for a row
  // without a park.
  return WakeFromLog(row);
}

Result<WakeVerdict> RuntimeWaker::WakeFromLog(const timers::TimerRow& row) {
  // One read: the park is found in it, and the resume takes it over (the
  // acquire and the tail read under the new token still decide).
  ONCE_ASSIGN_OR_RETURN(std::vector<store::Envelope> log,
                        store::ReadLog(runtime_.store(), row.execution_id));
  const store::Envelope* park = runtime::FindOpenPark(log);
  if (!park) return WakeVerdict::kObsolete;
  const events::Json* wait = TimerWait(*park, row.wake_at_ms);
  if (!wait) return WakeVerdict::kObsolete;
  ONCE_ASSIGN_OR_RETURN(
      runtime::ParkAnswered answered,
      runtime_.AnswerPark(row.execution_id, {.park_seq = park->sequence,
                                             .answer = runtime::Answer{*wait, events::Json()},
                                             .log_in_hand = &log}));
  return VerdictOf(answered.verdict);
}

Result<size_t> ParkTimers::Schedule(const std::string& id, const store::Envelope& park) {
  return ScheduleAt(id, park.sequence, park);
}

Result<size_t> ParkTimers::ScheduleAt(const std::string& id, int64_t park_seq,
                                      const store::Envelope& park) {
  // The park rides along when its sequence is known (the waker's
  // acquire-first); a row without it is woken from the log.
  std::optional<timers::TimerPark> carried;
  if (park_seq >= 1 && park.fence() >= 0) carried = timers::TimerPark{park_seq, park.fence()};
  size_t written = 0;
  for (const events::Json& wait : Member(park.payload, "waits")) {
    if (Member(wait, "type") != "timer") continue;
    const events::Json& wake = Member(wait, "wake_at_ms");
    if (!wake.is_number_integer()) continue;
    ONCE_RETURN_IF_ERROR(timers_.Schedule({id, wake.get<int64_t>(), std::nullopt, carried}));
    ++written;
  }
  return written;
}

void ParkTimers::OnPark(const std::string& id, int64_t park_seq, const store::Envelope& park) {
  Result<size_t> r = ScheduleAt(id, park_seq, park);
  if (!r && on_error_) on_error_(r.error());
}

Result<size_t> ParkTimers::Sweep() {
  size_t written = 0;
  std::string after;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(store::ExecutionPage page,
                          store_.ListExecutions(after, store_.limits().list_page_executions_max));
    for (const std::string& id : page.execution_ids) {
      // An unreadable log is that execution's problem: reported, skipped.
      Result<std::vector<store::Envelope>> log = store::ReadLog(store_, id);
      Result<runtime::ExecutionState> st =
          log ? runtime::Fold(*log) : Result<runtime::ExecutionState>(std::unexpected(log.error()));
      if (!st) {
        if (on_error_) on_error_(st.error());
        continue;
      }
      const store::Envelope* park = runtime::FindOpenPark(*log);
      if (!park) continue;
      ONCE_ASSIGN_OR_RETURN(size_t n, Schedule(id, *park));
      written += n;
    }
    if (page.next_after.empty()) break;
    after = page.next_after;
  }
  return written;
}

}  // namespace once::orchestration
