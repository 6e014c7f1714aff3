// File: committer.h
//
// Committer: group commit. Many threads (one per running execution) hand it
// their appends; it writes them to the store in shared AppendBatch calls
// (leader/follower: whoever finds fewer than `flushes_in_flight_max` flushes
// in flight leads the next one and takes everything pending; those who arrive
// while the limit is reached wait). Each caller gets its own result: a row
// refused by its fence or its sequence fails only that caller.
//
//   Committer committer(store, {.flush_requests_min = 8, .linger_us_max = 200});
//   Result<int64_t> head = committer.Commit(std::move(request));
//
// A flush takes at most `batch_executions_max` requests and never two for the
// same execution, nor one for an execution that another flush in flight is
// writing (a later one waits for a later flush, keeping its order). With
// more than one flush in flight, a store write no longer waits for the
// previous one to finish (the SQL backends then share their disk flushes);
// by default the committer allows as many as the store says help it
// (EventStore::AppendBatchesInFlightUseful).
// The leader may linger up to `linger_us_max` for `flush_requests_min`
// requests to gather (0: never linger).
//
// Threads: Commit may be called from any number of threads; it blocks until
// the request's flush is done. The store must outlive the committer.
//
// Without waiting. CommitPipelined queues a request and returns at once; its
// `done` runs with the result once the request's flush is written. A thread
// that queues many requests this way keeps many in flight without a thread
// asleep for each (a sleeping thread per request costs a wake-up, and on a
// small machine the scheduler's share of the client's CPU was larger than
// the store's encoding: BENCHMARKS.md). Its flushes are led by the
// committer's own flusher threads, as many as flushes_in_flight_max, started
// at the first such call; callers of Commit still lead their own. `done`
// runs on a flusher thread (or on a thread of Commit that led the flush),
// so it must not block or throw: the flush's other answers wait behind it.
//
// Waking. A flush's end answers its callers without the committer's lock,
// each through its own GroupWait (once/base/group_wait.h says why), then asks
// the next leader.
//
// Dones on the caller's thread. CommitPipelined with a DoneQueue does not run
// `done` on the flusher: the flush hands all of its answers for that queue
// over at once (one lock, at most one wake-up), and they run, and their
// requests are freed, on the thread that drains the queue. A request's
// memory is then allocated and freed by one thread: freed on a flusher, it
// went through the allocator's shared lists twice (returned there by the
// flusher's cache, fetched back by the caller's), a fifth of a pipelined
// client's CPU on PostgreSQL (BENCHMARKS.md, "Dones where they were made").
//
// The drainer is the flusher. A request queued with a DoneQueue wakes no
// flusher thread: a drainer that would wait (Drain(true)) leads the next
// flush itself, when one may start, and sleeps only when none may; a drainer
// that does not wait (Drain(false)) wakes a flusher for what is waiting. A
// woken flusher is a context switch, and on this project's VMs one costs
// more client CPU than everything else the client does for an execution
// (the same section). Requests still never wait for no one: a flush's end
// asks the next leader as before, and Drain (the destructors) wakes the
// flushers.
//
//   DoneQueue dones;
//   committer.CommitPipelined(std::move(req), [&](Result<int64_t> r) { ... }, &dones);
//   while (dones.Drain(/*wait=*/true) > 0) { ... queue more ... }
//
// A flush gives such a request its events back before it answers, so that
// they too are freed by the drainer.

#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "once/base/group_wait.h"
#include "once/store/event_store.h"

namespace once::runtime {

struct CommitterOptions {
  size_t batch_executions_max = 256;  // requests per AppendBatch
  size_t flush_requests_min = 1;      // linger until this many are pending ...
  int64_t linger_us_max = 0;          // ... or the leader has waited this long
  // Concurrent store writes; 0: the store's AppendBatchesInFlightUseful()
  // (2 on PostgreSQL, 1 on SQLite).
  size_t flushes_in_flight_max = 0;
};

class Committer;

// Pipelined dones waiting for the thread that drains them (see "Dones on the
// caller's thread" above). Any thread may drain; one at a time is the
// intended use (a driver thread and its queue). A queue serves one committer
// (checked). Destroying a queue first drains it until every done queued to
// it has run, so it must not outlive the committer (the runtime) it was
// given to, and a committer's destructor checks that no queue still holds
// one of its dones.
class DoneQueue {
 public:
  // One queued done (the committer's): Run calls it, then frees it.
  struct Entry {
    virtual ~Entry() = default;
    virtual void Run() = 0;
    Entry* next = nullptr;
  };

  DoneQueue() = default;
  ~DoneQueue();
  DoneQueue(const DoneQueue&) = delete;
  DoneQueue& operator=(const DoneQueue&) = delete;

  // Runs, on this thread and in the order they arrived, every done that has
  // arrived; with `wait`, first waits for one if any is still to come,
  // leading flushes meanwhile when one may start ("The drainer is the
  // flusher"). Returns how many ran (0 with `wait` only when none is to
  // come).
  size_t Drain(bool wait);
  // Dones queued to this queue and not run yet (arrived or still in flight).
  size_t outstanding() const { return outstanding_.load(std::memory_order_acquire); }

 private:
  friend class Committer;
  // One more done to come from `committer` (counted here and there).
  void Expect(Committer& committer);
  // Appends the chain first..last and wakes a waiting drainer.
  void Push(Entry* first, Entry* last);
  // `n` entries have run (and are freed): counted here and in the committer.
  void Ran(size_t n);

  std::atomic<Committer*> committer_{nullptr};  // set by the first Expect
  std::mutex mu_;
  std::condition_variable cv_;
  Entry* head_ = nullptr;  // GUARDED_BY(mu_)
  Entry* tail_ = nullptr;  // GUARDED_BY(mu_)
  bool waiting_ = false;   // GUARDED_BY(mu_): a drainer sleeps on cv_
  std::atomic<size_t> outstanding_{0};
};

struct CommitterStats {
  uint64_t requests = 0;              // Commit calls
  uint64_t store_writes = 0;          // Append + AppendBatch calls made
  size_t flushes_in_flight_peak = 0;  // the most store writes ever in flight at once
  size_t flushes_in_flight_max = 0;   // the limit in force (the option, or the store's);
                                      // 0: no Committer (Runtime::commit_stats, each
                                      // append the caller's own store call)
};

class Committer {
 public:
  // A pipelined request's result: the new head or its error.
  using CommitDone = std::move_only_function<void(Result<int64_t>)>;

  Committer(store::EventStore& store, CommitterOptions options = {});
  // Answers every pipelined request first (Drain), then stops the flushers.
  ~Committer();
  Committer(const Committer&) = delete;
  Committer& operator=(const Committer&) = delete;

  // Appends req (as EventStore::Append would) in some shared flush. Returns
  // the new head, or this request's own error (kStaleFence,
  // kSequenceConflict, ...), or the flush's outer error.
  Result<int64_t> Commit(store::AppendRequest req);
  // Commit for each request, queued together (so that they share flushes)
  // and answered in request order; returns once all are. The requests are
  // moved from.
  std::vector<Result<int64_t>> CommitMany(std::span<store::AppendRequest> reqs);
  // Queues req and returns; `done` gets what Commit would have returned (see
  // "Without waiting" above), on a flusher thread, or with `dones` on the
  // thread that drains that queue ("Dones on the caller's thread"). Requests
  // of one execution are written in the order they were queued, as with
  // Commit.
  void CommitPipelined(store::AppendRequest req, CommitDone done, DoneQueue* dones = nullptr);
  // Returns once every pipelined request queued before the call has been
  // answered: its `done` has returned, or (a DoneQueue's) it is in its
  // queue. Wakes the flushers first (a queue's requests may wait for one).
  // Not from inside a `done`.
  void Drain();
  // After Drain: checks that no DoneQueue still holds a done of this
  // committer (its done would outlive the runtime it reports to).
  void CheckDoneQueuesDrained() const;

  CommitterStats stats() const;

 private:
  friend class DoneQueue;  // LeadOrWake, in_done_queues_
  struct Pipelined;
  struct Slot {
    store::AppendRequest* req = nullptr;
    Result<int64_t> result = 0;      // written by the flush, read once answered
    GroupWait* wait = nullptr;       // its caller's; alive while the slot is unanswered
    Pipelined* pipelined = nullptr;  // or the pipelined request that owns it
  };
  // Queues the slots (of one caller, sharing `wait`) and returns once all
  // are answered, leading flushes when it may.
  void CommitSlots(std::span<Slot> slots, GroupWait& wait);
  void LeadFlush(std::unique_lock<std::mutex>& lock);
  bool CanLead() const;  // requires mu_
  // Requires mu_: when another flush may start, asks the oldest caller that
  // could lead it (one thread, not every waiter: a flush's end used to wake
  // all of them, and most went back to sleep).
  void WakeNextLeader();
  // Without mu_: one store write for `batch`; results into `taken`.
  void Write(std::span<const store::AppendRequest> batch, std::span<Slot*> taken);
  // Without mu_: each slot's caller gets its result (a pipelined one, its
  // done, or its entry in its DoneQueue, one hand-over per queue, with its
  // events back from `batch`, the flush's requests in slot order).
  void Answer(std::span<Slot*> taken, std::span<store::AppendRequest> batch);
  void Linger(std::unique_lock<std::mutex>& lock);
  // A flusher thread: leads flushes while pipelined requests wait.
  void Flusher();
  // For a DoneQueue's drainer: leads a flush if pipelined requests wait and
  // one may start (true), or (`lead` false) wakes a flusher for them.
  bool LeadOrWake(bool lead);
  bool PipelinedWaiting() const;  // requires mu_

  store::EventStore& store_;
  const CommitterOptions options_;
  mutable std::mutex mu_;
  std::condition_variable linger_cv_;             // wakes a lingering leader
  std::deque<Slot*> queue_;                       // GUARDED_BY(mu_)
  size_t flushes_in_flight_ = 0;                  // GUARDED_BY(mu_)
  size_t flushes_in_flight_peak_ = 0;             // GUARDED_BY(mu_)
  std::unordered_set<std::string_view> writing_;  // GUARDED_BY(mu_): ids in flushes in flight
  std::condition_variable flusher_cv_;            // a pipelined request may be led
  std::condition_variable drained_cv_;            // pipelined_unanswered_ fell to 0
  size_t pipelined_queued_ = 0;                   // GUARDED_BY(mu_): pipelined slots in queue_
  size_t pipelined_unanswered_ = 0;               // GUARDED_BY(mu_): queued, in flight, or in done
  bool stopping_ = false;                         // GUARDED_BY(mu_)
  std::vector<std::thread> flushers_;  // GUARDED_BY(mu_): started at the first pipelined call
  // Pipelined dones handed to a DoneQueue and not run yet.
  std::atomic<size_t> in_done_queues_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> store_writes_{0};
};

}  // namespace once::runtime
