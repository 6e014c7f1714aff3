#include "once/runtime/committer.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace once::runtime {

Committer::Committer(store::EventStore& store, CommitterOptions options)
    : store_(store), options_(options) {
  ONCE_CHECK(options_.batch_executions_max > 0);
}

Result<int64_t> Committer::Commit(store::AppendRequest req) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  Slot slot{&req};
  std::unique_lock lock(mu_);
  queue_.push_back(&slot);
  if (options_.linger_us_max > 0) linger_cv_.notify_one();
  while (!slot.done) {
    if (flushing_) {
      cv_.wait(lock);
      continue;
    }
    LeadFlush(lock);
  }
  return std::move(slot.result);
}

void Committer::Linger(std::unique_lock<std::mutex>& lock) {
  if (options_.linger_us_max <= 0 || queue_.size() >= options_.flush_requests_min) return;
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(options_.linger_us_max);
  linger_cv_.wait_until(lock, deadline,
                        [&] { return queue_.size() >= options_.flush_requests_min; });
}

// Requires mu_ held and !flushing_. Releases mu_ while the store writes.
void Committer::LeadFlush(std::unique_lock<std::mutex>& lock) {
  flushing_ = true;
  Linger(lock);
  std::vector<Slot*> taken;
  std::vector<store::AppendRequest> batch;
  std::unordered_set<std::string_view> ids;  // views into batch: reserved, never moved
  batch.reserve(std::min(queue_.size(), options_.batch_executions_max));
  for (auto it = queue_.begin();
       it != queue_.end() && taken.size() < options_.batch_executions_max;) {
    if (ids.contains((*it)->req->execution_id)) {
      ++it;  // a second request for one execution waits for the next flush
      continue;
    }
    taken.push_back(*it);
    batch.push_back(std::move(*(*it)->req));
    ids.insert(batch.back().execution_id);
    it = queue_.erase(it);
  }
  lock.unlock();
  store_writes_.fetch_add(1, std::memory_order_relaxed);
  if (batch.size() == 1) {
    taken[0]->result = store_.Append(batch[0]);
  } else {
    auto results = store_.AppendBatch(batch);
    for (size_t i = 0; i < taken.size(); ++i) {
      if (!results) {
        taken[i]->result = std::unexpected(results.error());
      } else {
        taken[i]->result = std::move((*results)[i]);
      }
    }
  }
  lock.lock();
  for (Slot* s : taken) s->done = true;
  flushing_ = false;
  cv_.notify_all();
}

CommitterStats Committer::stats() const {
  return {requests_.load(std::memory_order_relaxed), store_writes_.load(std::memory_order_relaxed)};
}

}  // namespace once::runtime
