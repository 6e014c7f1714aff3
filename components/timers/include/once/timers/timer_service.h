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
// Firing many rows due at once (the defaults are sized for a burst; what
// 10,000 rows due at one instant measure per backend, and what bounds them,
// is in BENCHMARKS.md "Timers: lateness"):
//   * claim_rows_max (1,000) rows are claimed per poll (the store caps it
//     too, TimerLimits::claim_rows_max), and at most that many are in hand.
//   * fire_concurrency (128): one poll's rows are fired on up to that many
//     threads started for the poll (the rows of one execution stay on one
//     thread, in order); PollOnce returns when all of them are fired. A wake
//     waits on store round trips (the log read, the acquire, the append)
//     that the SQL stores share among concurrent callers, so more wakes in
//     flight fill those shared trips (BENCHMARKS.md: 128 against 32 on
//     PostgreSQL and SQLite). The Waker and the Redrivers must then be
//     callable from several threads at once (RuntimeWaker, ChildSupervisor
//     and Inbox are); 1 fires in order on the poll thread.
//   * wake_batch_max (64), with a Waker that WakesTogether (RuntimeWaker):
//     each firing thread takes that many executions of the poll at once and
//     wakes their first rows in one WakeMany (the runtime answers the batch
//     with one grouped acquire and one grouped write of the runs' ends, on
//     that thread: no hand-off to another thread a wake); so a poll of
//     1,000 rows runs on 16 threads, not 128. A later row of one of those
//     executions is woken alone after the batch. Other wakers get one row
//     at a time, fire_concurrency at once, as before.
//   * retiring is batched: the rows a poll is done with (resumed, obsolete,
//     exhausted, re-driven) are retired together by CompleteMany after the
//     poll's firing, one commit per complete_keys_max rows, instead of one
//     commit per row. A re-drive row's successor is still written before its
//     batch is retired; a crash before the retire leaves rows that fire again
//     after their lease (timers are at-least-once; the resume is fenced).
//   * repoll_when_full (on): a poll whose claim came back full (or that had
//     no room to claim) and fired something is followed by the next poll at
//     once instead of after poll_interval_ms: more rows may be due.
//   * overlap_polls (on; Start's thread only, with repoll_when_full and
//     fire_concurrency > 1): the next poll of a full claim starts as soon as
//     the poll before has handed its last row to a firing thread, while that
//     poll's last wakes and its retire finish: a burst's claims, retires and
//     the tail of each batch (fewer wakes in flight as a batch ends) no longer
//     stand between batches. At most two polls run at once (each with up to
//     fire_concurrency threads), so at most claim_rows_max + fire_concurrency
//     rows are in hand. Two rows of one execution may then fire at once (one
//     in each poll); they contend for its fence, and the loser backs off as
//     any contended wake does.
//   * claim_ahead_ms (250, below lease_ms): a poll also claims rows due
//     within that time and holds them (at most claim_rows_max in hand, still
//     leased to this node); each is fired by the first poll at or after its
//     own wake, and the polling thread sleeps until the earliest held wake,
//     so a row due between two polls is not late by up to poll_interval_ms.
//     Stop() hands held rows back (Defer to their own wake), so another
//     node, or this one after a restart, fires them on time.
//
// Threads: PollOnce must not run concurrently with itself, nor with Start's
// thread; Start runs polls on one background thread (two at once with
// overlap_polls). AddRedriver before Start.

#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
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
  // Wake for each row (plain rows of distinct executions), answered in
  // order. The default wakes them one after another; a waker may wake them
  // together (RuntimeWaker: one acquire and one write for the batch).
  virtual std::vector<Result<WakeVerdict>> WakeMany(std::span<const TimerRow* const> rows);
  // Whether WakeMany wakes a batch together (cheaper than one at a time):
  // then the service hands each firing thread wake_batch_max rows at once,
  // else one (and keeps fire_concurrency wakes in flight).
  virtual bool WakesTogether() const { return false; }
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
  size_t claim_rows_max = 1'000;  // rows claimed per poll; rows in hand at most
  // Threads firing one poll's rows at most (1: in order, on the poll thread).
  size_t fire_concurrency = 128;
  // With a Waker that WakesTogether: rows a firing thread takes at once and
  // wakes together (WakeMany: the first row of each execution; a later row
  // of one of them after, alone); 1: one at a time.
  size_t wake_batch_max = 64;
  bool repoll_when_full = true;  // a full claim is followed by the next poll at once
  bool overlap_polls = true;     // ...which starts once the poll before has handed out its rows
  int64_t claim_ahead_ms = 250;  // also claim rows due this soon, fired at their wake; < lease_ms
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

  // One poll: fire the held rows now due, claim more (those due within
  // claim_ahead_ms are held), fire the due ones, retire the finished ones.
  // Returns the rows fired.
  Result<size_t> PollOnce();

  void Start();
  void Stop();

  TimerServiceStats stats() const;
  size_t backoff_entries() const;
  // Rows claimed ahead of their wake and not fired yet.
  size_t held_rows() const;

 private:
  // What firing one row left to do.
  struct Fired {
    bool retire = false;  // done with: retire it with the poll's batch
    Status status;        // an error for on_error (the row may still be retired)
  };
  Fired Fire(const TimerRow& row);
  Fired FirePlain(const TimerRow& row);
  // Fires the rows (one execution each) of one thread's share: plain rows
  // not backing off are woken together, the others one at a time.
  void FireBatch(std::span<const TimerRow* const> rows, std::vector<TimerKey>& done);
  // A plain row's backoff: the attempts so far, and whether to defer it.
  struct BackoffState {
    int attempts = 0;
    int64_t defer_until_ms = 0;  // > 0: not tried before then
  };
  BackoffState BackoffOf(const TimerRow& row, int64_t now_ms);
  // What a plain row's wake verdict leaves to do.
  Fired Judge(const TimerRow& row, int attempts_before, int64_t now_ms,
              Result<WakeVerdict> verdict);
  Fired FireRedrive(const TimerRow& row);
  RedriveAnswer AskRedrivers(const TimerRow& row);
  void ReportError(Error e);
  void Count(int64_t TimerServiceStats::*field);
  void RememberBackoff(const std::string& id, int attempt, int64_t next_ms);
  int64_t DelayMs(int attempt);
  void Forget(const std::string& id);
  // One poll; `all_handed_out` (may be null) is called once, from a firing
  // thread, when every claimed row has been handed to a firing thread (not
  // called when the rows are fired on the calling thread alone).
  Result<size_t> Poll(const std::function<void()>& all_handed_out);
  std::vector<TimerKey> FireAll(const std::vector<TimerRow>& rows);
  std::vector<TimerKey> FireConcurrently(const std::vector<TimerRow>& rows,
                                         const std::function<void()>& all_handed_out);
  void RunLoop();
  void Retire(std::span<const TimerKey> keys);
  Result<std::vector<TimerRow>> TakeDue(int64_t now_ms);
  int64_t WaitMs(bool fired_any);
  void ReleaseHeld();

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

  mutable std::mutex held_mu_;
  std::vector<TimerRow> held_;  // GUARDED_BY(held_mu_); claimed ahead, by wake
  bool more_due_ = false;       // GUARDED_BY(held_mu_); the last claim was full

  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace once::timers
