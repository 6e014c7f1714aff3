#include "once/runtime/worker_pool.h"

namespace once::runtime {

WorkerPool::WorkerPool(size_t threads, size_t queue_tasks_max) : queue_tasks_max_(queue_tasks_max) {
  ONCE_CHECK(threads > 0);
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

Status WorkerPool::Submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= queue_tasks_max_) {
      return LimitError("queue_tasks_max", static_cast<int64_t>(queue_.size() + 1),
                        static_cast<int64_t>(queue_tasks_max_));
    }
    queue_.push_back(std::move(task));
  }
  work_cv_.notify_one();
  return Ok();
}

void WorkerPool::WaitIdle() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
}

void WorkerPool::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    task();
    lock.lock();
    --running_;
    if (queue_.empty() && running_ == 0) idle_cv_.notify_all();
  }
}

}  // namespace once::runtime
