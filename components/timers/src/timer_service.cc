#include "once/timers/timer_service.h"

#include <algorithm>
#include <atomic>
#include <string_view>

namespace once::timers {

int64_t BackoffPolicy::DelayMs(int attempt, Rng& rng) const {
  int64_t ceiling = base_ms;
  for (int i = 0; i < attempt && ceiling < cap_ms; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, cap_ms);
  return static_cast<int64_t>(rng.NextDouble() * static_cast<double>(ceiling));
}

TimerService::TimerService(TimerStore& timers, Waker& waker, const Clock& clock, Rng& rng,
                           TimerServiceOptions options)
    : timers_(timers), waker_(waker), clock_(clock), rng_(rng), options_(std::move(options)) {}

TimerService::~TimerService() { Stop(); }

void TimerService::AddRedriver(Redriver* redriver) { redrivers_.push_back(redriver); }

void TimerService::ReportError(Error e) {
  if (options_.on_error) options_.on_error(e);
}

Result<size_t> TimerService::PollOnce() {
  int64_t now_ms = clock_.NowUnixMillis();
  ClaimRequest req{.now_ms = now_ms,
                   .limit = options_.claim_rows_max,
                   .include_redrive = !redrivers_.empty(),
                   .owner = options_.owner,
                   .lease_ms = options_.lease_ms};
  ONCE_ASSIGN_OR_RETURN(std::vector<TimerRow> rows, timers_.Claim(req));
  size_t fired = rows.size();
  if (options_.fire_concurrency > 1 && rows.size() > 1) {
    FireConcurrently(rows);
  } else {
    for (const TimerRow& row : rows) {
      Status s = row.redrive ? FireRedrive(row) : FirePlain(row);
      if (!s) ReportError(s.error());
    }
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.fired += static_cast<int64_t>(fired);
  }
  return fired;
}

void TimerService::FireConcurrently(const std::vector<TimerRow>& rows) {
  // One group per execution, in claim order: two rows of one execution are
  // never fired at once (they would only contend for its fence).
  std::vector<std::vector<const TimerRow*>> groups;
  std::map<std::string_view, size_t> group_of;
  for (const TimerRow& row : rows) {
    auto [it, added] = group_of.try_emplace(row.execution_id, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(&row);
  }
  std::atomic<size_t> next{0};
  auto fire = [&] {
    for (size_t i = next.fetch_add(1); i < groups.size(); i = next.fetch_add(1)) {
      for (const TimerRow* row : groups[i]) {
        Status s = row->redrive ? FireRedrive(*row) : FirePlain(*row);
        if (!s) ReportError(s.error());
      }
    }
  };
  size_t threads_max = std::min(options_.fire_concurrency, groups.size());
  std::vector<std::thread> threads;
  threads.reserve(threads_max);
  for (size_t t = 1; t < threads_max; ++t) threads.emplace_back(fire);
  fire();
  for (std::thread& t : threads) t.join();
}

size_t TimerService::FullBatch() const {
  return std::max<size_t>(1, std::min(options_.claim_rows_max, timers_.limits().claim_rows_max));
}

int64_t TimerService::DelayMs(int attempt) {
  std::lock_guard<std::mutex> lock(backoff_mu_);
  return options_.backoff.DelayMs(attempt, rng_);
}

void TimerService::RememberBackoff(const std::string& id, int attempt, int64_t next_ms) {
  std::lock_guard<std::mutex> lock(backoff_mu_);
  if (backoff_.size() >= options_.backoff_entries_max && !backoff_.contains(id)) {
    auto soonest = std::min_element(backoff_.begin(), backoff_.end(), [](auto& a, auto& b) {
      return a.second.next_try_ms < b.second.next_try_ms;
    });
    backoff_.erase(soonest);
  }
  backoff_[id] = Backoff{attempt, next_ms};
}

void TimerService::Count(int64_t TimerServiceStats::*field) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.*field += 1;
}

Status TimerService::FirePlain(const TimerRow& row) {
  int64_t now_ms = clock_.NowUnixMillis();
  int attempts_before = 0;
  int64_t defer_until_ms = 0;
  {
    std::lock_guard<std::mutex> lock(backoff_mu_);
    auto backoff = backoff_.find(row.execution_id);
    if (backoff != backoff_.end()) {
      attempts_before = backoff->second.attempts;
      if (backoff->second.next_try_ms > now_ms) defer_until_ms = backoff->second.next_try_ms;
    }
  }
  if (defer_until_ms > 0) return timers_.Defer(row.key(), options_.owner, defer_until_ms);
  ONCE_ASSIGN_OR_RETURN(WakeVerdict verdict, waker_.Wake(row));
  if (verdict != WakeVerdict::kContended) {
    Count(verdict == WakeVerdict::kResumed ? &TimerServiceStats::resumed
                                           : &TimerServiceStats::obsolete);
    Forget(row.execution_id);
    return timers_.Complete(row.key());
  }
  Count(&TimerServiceStats::contended);
  int attempts = attempts_before + 1;
  if (attempts >= options_.backoff.max_attempts) {
    Forget(row.execution_id);
    Count(&TimerServiceStats::exhausted);
    ONCE_RETURN_IF_ERROR(timers_.Complete(row.key()));
    return MakeError(
        ErrorCode::kRedriveExhausted,
        "timer wake contended " + std::to_string(attempts) + " times; left to Recover()",
        row.execution_id, ResumeContendedDetail{attempts});
  }
  int64_t next_ms = now_ms + DelayMs(attempts);
  RememberBackoff(row.execution_id, attempts, next_ms);
  return timers_.Defer(row.key(), options_.owner, next_ms);
}

RedriveAnswer TimerService::AskRedrivers(const TimerRow& row) {
  for (Redriver* r : redrivers_) {
    auto answer = r->Redrive(row);
    if (!answer) {
      ReportError(answer.error());
      return RedriveAnswer::kContended;  // an erroring re-driver is retried like contention
    }
    if (*answer != RedriveAnswer::kNoop) return *answer;
  }
  return RedriveAnswer::kNoop;
}

Status TimerService::FireRedrive(const TimerRow& row) {
  RedriveAnswer answer = AskRedrivers(row);
  if (answer != RedriveAnswer::kContended) return timers_.Complete(row.key());
  int next_attempt = row.redrive->attempt + 1;
  if (next_attempt >= options_.backoff.max_attempts) {
    Count(&TimerServiceStats::exhausted);
    ONCE_RETURN_IF_ERROR(timers_.Complete(row.key()));
    return MakeError(
        ErrorCode::kRedriveExhausted,
        "re-drive gave up after " + std::to_string(next_attempt) + " rows; left to Recover()",
        row.execution_id, ResumeContendedDetail{next_attempt});
  }
  int64_t wake = std::max(clock_.NowUnixMillis() + DelayMs(next_attempt), row.wake_at_ms + 1);
  // The next row is durable BEFORE this one is retired: a crash in between
  // leaves two rows (harmless: the re-drive is idempotent), never none.
  ONCE_RETURN_IF_ERROR(timers_.Schedule({row.execution_id, wake, Redrive{next_attempt}}));
  Count(&TimerServiceStats::redrive_rows_written);
  return timers_.Complete(row.key());
}

void TimerService::Start() {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(run_mu_);
    while (!stopping_) {
      lock.unlock();
      auto polled = PollOnce();
      if (!polled) ReportError(polled.error());
      bool full = options_.repoll_when_full && polled && *polled >= FullBatch();
      lock.lock();
      if (full) continue;
      run_cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_interval_ms),
                       [this] { return stopping_; });
    }
  });
}

void TimerService::Stop() {
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

TimerServiceStats TimerService::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

size_t TimerService::backoff_entries() const {
  std::lock_guard<std::mutex> lock(backoff_mu_);
  return backoff_.size();
}

void TimerService::Forget(const std::string& id) {
  std::lock_guard<std::mutex> lock(backoff_mu_);
  backoff_.erase(id);
}

}  // namespace once::timers
