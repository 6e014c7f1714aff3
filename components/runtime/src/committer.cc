#include "once/runtime/committer.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace once::runtime {

namespace {

CommitterOptions Resolved(CommitterOptions options, const store::EventStore& store) {
  if (options.flushes_in_flight_max == 0) {
    options.flushes_in_flight_max = std::max<size_t>(1, store.AppendBatchesInFlightUseful());
  }
  return options;
}

}  // namespace

// A pipelined request owns its slot, its request and its done; freed once
// done has returned (on a flusher, or by Run on the thread draining `dones`).
struct Committer::Pipelined final : DoneQueue::Entry {
  Pipelined(store::AppendRequest r, CommitDone d, DoneQueue* q)
      : req(std::move(r)), done(std::move(d)), dones(q) {
    slot = Slot{.req = &req, .pipelined = this};
  }

  void Run() override {
    std::unique_ptr<Pipelined> self(this);
    done(std::move(slot.result));
  }

  store::AppendRequest req;
  CommitDone done;
  DoneQueue* dones;
  Slot slot;
};

DoneQueue::~DoneQueue() {
  while (outstanding() > 0) Drain(/*wait=*/true);
  std::lock_guard lock(mu_);  // a drainer on another thread has left Ran
}

void DoneQueue::Expect(Committer& committer) {
  Committer* expected = nullptr;
  if (!committer_.compare_exchange_strong(expected, &committer, std::memory_order_acq_rel)) {
    ONCE_CHECK_MSG(expected == &committer, "a DoneQueue serves one committer");
  }
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  committer.in_done_queues_.fetch_add(1, std::memory_order_relaxed);
}

size_t DoneQueue::Drain(bool wait) {
  Entry* chain = nullptr;
  for (;;) {
    std::unique_lock lock(mu_);
    if (head_ == nullptr && outstanding() > 0) {
      // Nothing here yet: this thread leads the flush its dones wait for
      // (or wakes a flusher for it), rather than sleep through it.
      Committer* committer = committer_.load(std::memory_order_acquire);
      lock.unlock();
      if (committer->LeadOrWake(/*lead=*/wait)) continue;
      lock.lock();
    }
    if (wait) {
      waiting_ = true;
      cv_.wait(lock, [&] { return head_ != nullptr || outstanding() == 0; });
      waiting_ = false;
    }
    chain = std::exchange(head_, nullptr);
    tail_ = nullptr;
    break;
  }
  size_t ran = 0;
  while (chain != nullptr) {
    Entry* next = chain->next;
    chain->Run();
    chain = next;
    ++ran;
  }
  if (ran > 0) Ran(ran);
  return ran;
}

void DoneQueue::Push(Entry* first, Entry* last) {
  // Notified under the lock: once the drainer has run these, the queue may
  // be destroyed, so nothing of it is touched after the lock is released.
  std::lock_guard lock(mu_);
  if (tail_ != nullptr) {
    tail_->next = first;
  } else {
    head_ = first;
  }
  tail_ = last;
  if (waiting_) cv_.notify_one();
}

// Under the lock, so that a drainer waiting for none to come (on another
// thread) sees the count fall, and the destructor's last lock orders it.
void DoneQueue::Ran(size_t n) {
  committer_.load(std::memory_order_acquire)
      ->in_done_queues_.fetch_sub(n, std::memory_order_release);
  std::lock_guard lock(mu_);
  if (outstanding_.fetch_sub(n, std::memory_order_acq_rel) == n) cv_.notify_all();
}

Committer::Committer(store::EventStore& store, CommitterOptions options)
    : store_(store), options_(Resolved(options, store)) {
  ONCE_CHECK(options_.batch_executions_max > 0);
}

Committer::~Committer() {
  Drain();
  CheckDoneQueuesDrained();
  std::vector<std::thread> flushers;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    flushers.swap(flushers_);
  }
  flusher_cv_.notify_all();
  for (std::thread& t : flushers) t.join();
}

Result<int64_t> Committer::Commit(store::AppendRequest req) {
  GroupWait wait(1);
  Slot slot{.req = &req, .wait = &wait};
  CommitSlots(std::span<Slot>(&slot, 1), wait);
  return std::move(slot.result);
}

std::vector<Result<int64_t>> Committer::CommitMany(std::span<store::AppendRequest> reqs) {
  if (reqs.empty()) return {};
  GroupWait wait(reqs.size());
  std::vector<Slot> slots(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) slots[i] = Slot{.req = &reqs[i], .wait = &wait};
  CommitSlots(slots, wait);
  std::vector<Result<int64_t>> out;
  out.reserve(slots.size());
  for (Slot& s : slots) out.push_back(std::move(s.result));
  return out;
}

void Committer::CommitPipelined(store::AppendRequest req, CommitDone done, DoneQueue* dones) {
  ONCE_CHECK_MSG(static_cast<bool>(done), "CommitPipelined needs a done to call");
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (dones != nullptr) dones->Expect(*this);
  auto* p = new Pipelined(std::move(req), std::move(done), dones);
  std::lock_guard lock(mu_);
  ONCE_CHECK_MSG(!stopping_, "CommitPipelined on a committer being destroyed");
  if (flushers_.empty()) {
    for (size_t i = 0; i < options_.flushes_in_flight_max; ++i) {
      flushers_.emplace_back([this] { Flusher(); });
    }
  }
  queue_.push_back(&p->slot);
  ++pipelined_queued_;
  ++pipelined_unanswered_;
  if (options_.linger_us_max > 0) linger_cv_.notify_one();
  // Room for a flush: a flusher checks CanLead itself (no scan of the queue
  // on every call here). A queue's drainer leads its own ("The drainer is
  // the flusher").
  if (dones == nullptr && flushes_in_flight_ < options_.flushes_in_flight_max) {
    flusher_cv_.notify_one();
  }
}

void Committer::Drain() {
  std::unique_lock lock(mu_);
  flusher_cv_.notify_all();  // requests of a queue no one drains wait for a flusher
  drained_cv_.wait(lock, [&] { return pipelined_unanswered_ == 0; });
}

bool Committer::LeadOrWake(bool lead) {
  std::unique_lock lock(mu_);
  if (!PipelinedWaiting() || !CanLead()) return false;
  if (!lead) {
    flusher_cv_.notify_one();
    return false;
  }
  LeadFlush(lock);
  return true;
}

void Committer::Flusher() {
  std::unique_lock lock(mu_);
  for (;;) {
    flusher_cv_.wait(lock, [&] { return stopping_ || (PipelinedWaiting() && CanLead()); });
    if (PipelinedWaiting() && CanLead()) {
      LeadFlush(lock);
    } else if (stopping_) {
      return;  // Drain ran first: nothing pipelined is left
    }
  }
}

void Committer::CheckDoneQueuesDrained() const {
  ONCE_CHECK_MSG(in_done_queues_.load(std::memory_order_acquire) == 0,
                 "a DoneQueue still holds pipelined dones: drain it before the runtime goes");
}

bool Committer::PipelinedWaiting() const { return pipelined_queued_ > 0; }

void Committer::CommitSlots(std::span<Slot> slots, GroupWait& wait) {
  requests_.fetch_add(slots.size(), std::memory_order_relaxed);
  std::unique_lock lock(mu_);
  for (Slot& s : slots) queue_.push_back(&s);
  if (options_.linger_us_max > 0) linger_cv_.notify_one();
  for (;;) {
    if (CanLead()) {
      LeadFlush(lock);
      if (wait.Answered()) return;
      continue;
    }
    lock.unlock();
    if (wait.Wait() == GroupWait::Woken::kAnswered) return;
    lock.lock();
  }
}

// Room for another flush and something it may take.
bool Committer::CanLead() const {
  if (flushes_in_flight_ >= options_.flushes_in_flight_max) return false;
  return std::any_of(queue_.begin(), queue_.end(),
                     [&](const Slot* s) { return !writing_.contains(s->req->execution_id); });
}

void Committer::Linger(std::unique_lock<std::mutex>& lock) {
  if (options_.linger_us_max <= 0 || queue_.size() >= options_.flush_requests_min) return;
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(options_.linger_us_max);
  linger_cv_.wait_until(lock, deadline,
                        [&] { return queue_.size() >= options_.flush_requests_min; });
}

// Requires mu_ held and CanLead(). Releases mu_ while the store writes.
void Committer::LeadFlush(std::unique_lock<std::mutex>& lock) {
  ++flushes_in_flight_;
  flushes_in_flight_peak_ = std::max(flushes_in_flight_peak_, flushes_in_flight_);
  Linger(lock);
  std::vector<Slot*> taken;
  std::vector<store::AppendRequest> batch;
  batch.reserve(std::min(queue_.size(), options_.batch_executions_max));
  for (auto it = queue_.begin();
       it != queue_.end() && taken.size() < options_.batch_executions_max;) {
    if (writing_.contains((*it)->req->execution_id)) {
      ++it;  // its execution is in this or another flush: it waits for a later one
      continue;
    }
    taken.push_back(*it);
    if ((*it)->pipelined) --pipelined_queued_;
    batch.push_back(std::move(*(*it)->req));
    writing_.insert(batch.back().execution_id);  // a view into batch: reserved, never moved
    it = queue_.erase(it);
  }
  WakeNextLeader();  // with flushes_in_flight_max > 1 the next may start now
  lock.unlock();
  if (!batch.empty()) Write(batch, taken);
  // Answered before the next leader is asked (as the store's groups do), so
  // that the callers just answered can queue their next append for it; the
  // other order measured the same (docs: BENCHMARKS.md, "The group's end").
  // An append queued before its execution leaves writing_ waits for the ask.
  // (Counted first: an answered slot may be gone.)
  const size_t pipelined = static_cast<size_t>(
      std::count_if(taken.begin(), taken.end(), [](const Slot* s) { return s->pipelined; }));
  Answer(taken, batch);
  lock.lock();
  for (const auto& r : batch) writing_.erase(r.execution_id);
  --flushes_in_flight_;
  pipelined_unanswered_ -= pipelined;
  if (pipelined > 0 && pipelined_unanswered_ == 0) drained_cv_.notify_all();
  WakeNextLeader();
}

void Committer::Answer(std::span<Slot*> taken, std::span<store::AppendRequest> batch) {
  // The flush's entries for each DoneQueue, chained in flush order and
  // handed over at once (a flush's requests come from a few queues).
  struct Chain {
    DoneQueue* queue;
    Pipelined* first;
    Pipelined* last;
  };
  std::vector<Chain> chains;
  for (size_t i = 0; i < taken.size(); ++i) {
    Slot* s = taken[i];
    if (s->wait) {
      s->wait->AnswerOne();
      continue;
    }
    Pipelined* p = s->pipelined;
    if (p->dones == nullptr) {
      std::unique_ptr<Pipelined> owned(p);
      p->done(std::move(p->slot.result));
      continue;
    }
    // Its events back, so that its drainer (the thread that made them) frees
    // them. (Callers of Commit do not get theirs: 64 threads each freeing
    // their own cost the park/resume cases 10 us of CPU an execution more
    // than their leader freeing them all, BENCHMARKS.md.)
    p->req.events = std::move(batch[i].events);
    auto chain = std::find_if(chains.begin(), chains.end(),
                              [&](const Chain& c) { return c.queue == p->dones; });
    if (chain == chains.end()) {
      chains.push_back(Chain{p->dones, p, p});
    } else {
      chain->last->next = p;
      chain->last = p;
    }
  }
  for (const Chain& c : chains) c.queue->Push(c.first, c.last);
}

void Committer::WakeNextLeader() {
  if (flushes_in_flight_ >= options_.flushes_in_flight_max) return;
  for (Slot* s : queue_) {
    if (writing_.contains(s->req->execution_id)) continue;
    if (s->pipelined) {
      flusher_cv_.notify_one();
    } else {
      s->wait->AskToLead();
    }
    return;
  }
}

void Committer::Write(std::span<const store::AppendRequest> batch, std::span<Slot*> taken) {
  store_writes_.fetch_add(1, std::memory_order_relaxed);
  if (batch.size() == 1) {
    taken[0]->result = store_.Append(batch[0]);
    return;
  }
  auto results = store_.AppendBatch(batch);
  for (size_t i = 0; i < taken.size(); ++i) {
    if (!results) {
      taken[i]->result = std::unexpected(results.error());
    } else {
      taken[i]->result = std::move((*results)[i]);
    }
  }
}

CommitterStats Committer::stats() const {
  std::lock_guard lock(mu_);
  return {requests_.load(std::memory_order_relaxed), store_writes_.load(std::memory_order_relaxed),
          flushes_in_flight_peak_, options_.flushes_in_flight_max};
}

}  // namespace once::runtime
