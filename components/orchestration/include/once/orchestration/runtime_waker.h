// File: runtime_waker.h
//
// The timer half of orchestration: RuntimeWaker fires plain timer rows into a
// Runtime, and ParkTimers writes those rows when an execution parks.
//
// RuntimeWaker::Wake(row) (the TimerService's Waker):
//   * a row that carries its park (TimerRow::park, written by ParkTimers):
//     Runtime::AnswerPark with park_seq and park_fence, so the conditional
//     acquire is the wake's first store call and returns the whole log
//     under the new token (on a store with AcquireFenceIfReadTail; the
//     PostgreSQL store shares one group of statements among concurrent
//     acquires): a wake is that acquire and the run's append. resumed and
//     contended are the verdict; a park already answered (or gone) burns no
//     token and goes on as a row without a park (below): the row is keyed
//     by (id, wake_at_ms), so a newer park of the same instant may share it;
//   * a row without a park reads the log once and finds the open park in it. No unanswered park, or
//   a
//     park that does not wait on THIS timer ({"type":"timer","wake_at_ms"}
//     equal to row.wake_at_ms): kObsolete (the service retires the row);
//   * otherwise resumes with fence_if_parked_at = the park's sequence and the
//     timer wait as the answer: success kResumed; kResumeRefused (the park
//     was answered or replaced meanwhile) kObsolete; kResumeContended, and a
//     kStaleFence / kSequenceConflict of the run after the acquire (a rival
//     took the park in between), kContended (the service backs off in
//     process and never retires it for that). Other errors are returned.
//     The resume is Runtime::ResumeWithLog on the log already read, so a
//     wake costs one log read, the conditional acquire (which brings the
//     tail read under the new token along, where the store can) and the
//     run's append.
//   On a store that does not fence the fence option is ignored.
//
// ParkTimers (scheduling; DECIDED: a park hook plus a boot sweep). OnPark is
// wired as RuntimeOptions::on_park: after a park is durable, every timer
// wait of it becomes a row (execution id, wake_at_ms) carrying the park
// (its sequence and metadata.fence: TimerRow::park); Schedule is an
// idempotent upsert, so a replayed park writes nothing new. A crash between
// the durable park and the row leaves a park with no row: Sweep() (run at
// boot, paged over ListExecutions) writes the row of every open timer park.
// A park scan alone was rejected: it costs a full pass per interval and
// makes every timer late by up to that interval.
//
//   RuntimeWaker waker(rt);
//   ParkTimers park_timers(store, timers, on_error);
//   options.on_park = [&](auto& id, int64_t seq, auto& park) { park_timers.OnPark(id, seq, park);
//   }; TimerService service(timers, waker, clock, rng, {.owner = "node-a"});
//
// Threads: both are thread-safe when the runtime and stores are.

#pragma once

#include <functional>
#include <string>

#include "once/runtime/runtime.h"
#include "once/timers/timer_service.h"
#include "once/timers/timer_store.h"

namespace once::orchestration {

class RuntimeWaker final : public timers::Waker {
 public:
  // `runtime` must outlive the waker.
  explicit RuntimeWaker(runtime::Runtime& runtime) : runtime_(runtime) {}
  Result<timers::WakeVerdict> Wake(const timers::TimerRow& row) override;
  // The rows that carry their park are answered together
  // (Runtime::AnswerParks: one acquire call and one write for the batch);
  // each is then judged as Wake judges it (a park answered or gone: the log
  // decides). Rows without a park are woken one at a time.
  std::vector<Result<timers::WakeVerdict>> WakeMany(
      std::span<const timers::TimerRow* const> rows) override;
  bool WakesTogether() const override { return true; }

 private:
  // A carried park's answer as the row's verdict (a noop: the log decides).
  Result<timers::WakeVerdict> Judge(const timers::TimerRow& row,
                                    Result<runtime::ParkAnswered> answered);
  // The wake of a row without a park: the park found in one log read.
  Result<timers::WakeVerdict> WakeFromLog(const timers::TimerRow& row);

  runtime::Runtime& runtime_;
};

class ParkTimers {
 public:
  // References must outlive this. on_error receives failed row writes.
  ParkTimers(store::EventStore& store, timers::TimerStore& timers,
             std::function<void(const Error&)> on_error = nullptr)
      : store_(store), timers_(timers), on_error_(std::move(on_error)) {}

  // The on_park listener.
  void OnPark(const std::string& id, int64_t park_seq, const store::Envelope& park);
  // Writes the rows of `park`'s timer waits, carrying the park when its
  // sequence is set; returns how many it wrote.
  Result<size_t> Schedule(const std::string& id, const store::Envelope& park);
  // Writes the row of every open timer park in the store. Returns rows
  // written. A log that cannot be read goes to on_error and is skipped.
  Result<size_t> Sweep();

 private:
  Result<size_t> ScheduleAt(const std::string& id, int64_t park_seq, const store::Envelope& park);

  store::EventStore& store_;
  timers::TimerStore& timers_;
  std::function<void(const Error&)> on_error_;
};

}  // namespace once::orchestration
