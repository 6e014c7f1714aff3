// File: timer_service.h
//
// TimerService polls due timer rows and fires them; nothing waits for an
// operator.
//
// A PLAIN row is a wake-up: the Waker (the runtime side) resumes the execution
// under the conditional fence (fenceIfParkedAt the park's sequence) and
// answers resumed | obsolete | contended. resumed and obsolete retire the
// row. contended backs off IN PROCESS: no new acquire is made for that
// execution before its next-try time (exponential backoff with full jitter:
// random * min(cap, base * 2^attempt), the draw from the injected Rng; the row
// stays leased to this node until then, see TimerStore::Defer); after
// max_attempts contended wakes, one RedriveExhausted goes to on_error, the row
// is retired and the execution is left to Recover(). The next-try map is
// bounded (backoff_entries_max); when full, the entry due soonest is dropped
// (that execution is simply tried again on the next poll).
//
// A RE-DRIVE row (row.redrive set) is not judged by the park: the registered
// Redrivers are asked in order, each answering done | noop | contended; the
// first non-noop answer wins. contended (or a redriver error) writes the next
// row {attempt + 1} due after the backoff, never at the same key (its wake is
// at least the fired wake + 1 ms), BEFORE retiring this one; when the fired
// row's attempt + 1 reaches max_attempts, one RedriveExhausted goes to
// on_error and the row is retired. A service with no redriver registered
// leaves re-drive rows alone and claims plain rows only (a node that cannot
// judge a row must not retire it: another node may).
//
//   TimerService service(timers, waker, clock, rng, {.owner = "node-a"});
//   service.AddRedriver(&supervisor_redriver);
//   service.Start();              // a thread polling every poll_interval_ms
//   ...
//   service.Stop();
//   // Or, in deterministic tests: service.PollOnce();
//
// Firing many rows due at once (fire_concurrency, repoll_when_full; both off
// by default): with fire_concurrency = n > 1, one poll's rows are fired on up
// to n threads started for that poll (the rows of one execution stay on one
// thread, in order), and PollOnce returns when all of them are fired; the
// Waker and the Redrivers must then be callable from several threads at once
// (RuntimeWaker, ChildSupervisor and Inbox are). With repoll_when_full, a
// poll that claimed a full batch (claim_rows_max, or the store's own cap)
// is followed by the next one at once instead of after poll_interval_ms: a
// full batch means more rows may be due.
//
// Threads: PollOnce must not run concurrently with itself; Start runs it on
// one background thread. AddRedriver before Start.

#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "once/base/clock.h"
#include "once/base/rng.h"
#include "once/timers/timer_store.h"

namespace once::timers {

enum class WakeVerdict { kResumed, kObsolete, kContended };
enum class RedriveAnswer { kDone, kNoop, kContended };

// Resumes an execution for a plain timer row.
class Waker {
 public:
  virtual ~Waker() = default;
  virtual Result<WakeVerdict> Wake(const TimerRow& row) = 0;
};

// Re-derives a resume from the log for a re-drive row.
class Redriver {
 public:
  virtual ~Redriver() = default;
  virtual Result<RedriveAnswer> Redrive(const TimerRow& row) = 0;
};

struct BackoffPolicy {
  int64_t base_ms = 200;
  int64_t cap_ms = 30'000;
  int max_attempts = 8;
  // Full jitter: the delay before attempt n (0-based) is
  // floor(random * min(cap, base * 2^n)).
  int64_t DelayMs(int attempt, Rng& rng) const;
};

struct TimerServiceOptions {
  std::string owner = "node";  // the lease owner name; unique per node
  int64_t poll_interval_ms = 250;
  size_t claim_rows_max = 256;  // rows claimed per poll
  size_t fire_concurrency = 1;  // rows of one poll fired at once (1: in order, on the poll thread)
  bool repoll_when_full = false;  // a full batch is followed by the next poll at once
  int64_t lease_ms = 30'000;
  size_t backoff_entries_max = 1'024;
  BackoffPolicy backoff;
  // RedriveExhausted and store errors; called from the firing threads when
  // fire_concurrency > 1.
  std::function<void(const Error&)> on_error;
};

struct TimerServiceStats {
  int64_t fired = 0;
  int64_t resumed = 0;
  int64_t obsolete = 0;
  int64_t contended = 0;
  int64_t redrive_rows_written = 0;
  int64_t exhausted = 0;
};

class TimerService {
 public:
  // Every reference must outlive the service.
  TimerService(TimerStore& timers, Waker& waker, const Clock& clock, Rng& rng,
               TimerServiceOptions options);
  ~TimerService();

  void AddRedriver(Redriver* redriver);

  // One poll: claim due rows and fire each. Returns the rows fired.
  Result<size_t> PollOnce();

  void Start();
  void Stop();

  TimerServiceStats stats() const;
  size_t backoff_entries() const;

 private:
  Status FirePlain(const TimerRow& row);
  Status FireRedrive(const TimerRow& row);
  RedriveAnswer AskRedrivers(const TimerRow& row);
  void ReportError(Error e);
  void Count(int64_t TimerServiceStats::*field);
  void RememberBackoff(const std::string& id, int attempt, int64_t next_ms);
  int64_t DelayMs(int attempt);
  void Forget(const std::string& id);
  void FireConcurrently(const std::vector<TimerRow>& rows);
  size_t FullBatch() const;

  TimerStore& timers_;
  Waker& waker_;
  const Clock& clock_;
  Rng& rng_;
  TimerServiceOptions options_;
  std::vector<Redriver*> redrivers_;

  struct Backoff {
    int attempts = 0;
    int64_t next_try_ms = 0;
  };
  mutable std::mutex backoff_mu_;           // the firing threads share the map and the rng
  std::map<std::string, Backoff> backoff_;  // GUARDED_BY(backoff_mu_)
  mutable std::mutex stats_mu_;
  TimerServiceStats stats_;

  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace once::timers
