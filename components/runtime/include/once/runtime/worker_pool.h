// File: worker_pool.h
//
// WorkerPool: a fixed set of threads running submitted tasks in FIFO order.
// The runtime runs workflow bodies on it (bodies block on group commit, so
// the pool is sized for concurrency, not for cores).
//
//   WorkerPool pool(64, 100'000);
//   ONCE_RETURN_IF_ERROR(pool.Submit([] { ... }));
//   pool.WaitIdle();
//
// Threads: every method is thread-safe; tasks may Submit more tasks.
// The destructor drains the queue and joins.

#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "once/base/result.h"

namespace once::runtime {

class WorkerPool {
 public:
  WorkerPool(size_t threads, size_t queue_tasks_max);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues a task. kLimitExceeded when queue_tasks_max tasks are waiting.
  Status Submit(std::function<void()> task);
  // Blocks until no task is queued or running.
  void WaitIdle();

 private:
  void Loop();

  const size_t queue_tasks_max_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;  // GUARDED_BY(mu_)
  size_t running_ = 0;                       // GUARDED_BY(mu_)
  bool stopping_ = false;                    // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace once::runtime
