#include "once/timers/timer_service.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <string_view>

namespace once::timers {

std::vector<Result<WakeVerdict>> Waker::WakeMany(std::span<const TimerRow* const> rows) {
  std::vector<Result<WakeVerdict>> out;
  out.reserve(rows.size());
  for (const TimerRow* row : rows) out.push_back(Wake(*row));
  return out;
}

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

// The held rows due by now_ms, and the rows a claim (ahead) found due; the
// claimed rows due later are held. The lock is not held over the claim
// (PollOnce never runs concurrently with itself).
Result<std::vector<TimerRow>> TimerService::TakeDue(int64_t now_ms) {
  std::vector<TimerRow> due;
  size_t limit = 0;
  {
    std::lock_guard<std::mutex> lock(held_mu_);
    auto first_later = std::find_if(held_.begin(), held_.end(),
                                    [&](const TimerRow& r) { return r.wake_at_ms > now_ms; });
    due.assign(std::make_move_iterator(held_.begin()), std::make_move_iterator(first_later));
    held_.erase(held_.begin(), first_later);
    size_t in_hand = held_.size() + due.size();
    size_t room = options_.claim_rows_max > in_hand ? options_.claim_rows_max - in_hand : 0;
    limit = std::min(room, timers_.limits().claim_rows_max);
    more_due_ = limit == 0;  // no room to claim: more may be waiting
  }
  if (limit == 0) return due;
  ClaimRequest req{.now_ms = now_ms,
                   .limit = limit,
                   .include_redrive = !redrivers_.empty(),
                   .owner = options_.owner,
                   .lease_ms = options_.lease_ms,
                   .ahead_ms = options_.claim_ahead_ms};
  Result<std::vector<TimerRow>> claimed = timers_.Claim(req);
  if (!claimed) {
    if (due.empty()) return std::unexpected(claimed.error());
    ReportError(claimed.error());  // the held rows due now still fire
    return due;
  }
  std::lock_guard<std::mutex> lock(held_mu_);
  more_due_ = claimed->size() >= limit;
  for (TimerRow& row : *claimed) {  // oldest first
    if (row.wake_at_ms <= now_ms) {
      due.push_back(std::move(row));
    } else {
      held_.push_back(std::move(row));
    }
  }
  std::stable_sort(held_.begin(), held_.end(), [](const TimerRow& a, const TimerRow& b) {
    return a.wake_at_ms < b.wake_at_ms;
  });
  return due;
}

Result<size_t> TimerService::PollOnce() { return Poll(nullptr); }

Result<size_t> TimerService::Poll(const std::function<void()>& all_handed_out) {
  ONCE_ASSIGN_OR_RETURN(std::vector<TimerRow> rows, TakeDue(clock_.NowUnixMillis()));
  std::vector<TimerKey> done = options_.fire_concurrency > 1 && rows.size() > 1
                                   ? FireConcurrently(rows, all_handed_out)
                                   : FireAll(rows);
  Retire(done);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.fired += static_cast<int64_t>(rows.size());
  }
  return rows.size();
}

void TimerService::Retire(std::span<const TimerKey> keys) {
  size_t chunk = std::max<size_t>(1, timers_.limits().complete_keys_max);
  for (size_t at = 0; at < keys.size(); at += chunk) {
    Status s = timers_.CompleteMany(keys.subspan(at, std::min(chunk, keys.size() - at)));
    // Not retired: the rows come due again when their lease ends and are
    // judged again (a fenced resume of an answered park is obsolete).
    if (!s) ReportError(s.error());
  }
}

TimerService::Fired TimerService::Fire(const TimerRow& row) {
  Fired fired = row.redrive ? FireRedrive(row) : FirePlain(row);
  if (!fired.status) ReportError(fired.status.error());
  return fired;
}

std::vector<TimerKey> TimerService::FireAll(const std::vector<TimerRow>& rows) {
  std::vector<TimerKey> done;
  for (const TimerRow& row : rows) {
    if (Fire(row).retire) done.push_back(row.key());
  }
  return done;
}

std::vector<TimerKey> TimerService::FireConcurrently(const std::vector<TimerRow>& rows,
                                                     const std::function<void()>& all_handed_out) {
  // One group per execution, in claim order: two rows of one execution are
  // never fired at once (they would only contend for its fence).
  std::vector<std::vector<const TimerRow*>> groups;
  std::map<std::string_view, size_t> group_of;
  for (const TimerRow& row : rows) {
    auto [it, added] = group_of.try_emplace(row.execution_id, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(&row);
  }
  // Each thread takes `share` executions at a time: their first rows are
  // woken together, any later rows of them one after another.
  const size_t share = waker_.WakesTogether() ? std::max<size_t>(1, options_.wake_batch_max) : 1;
  size_t threads_max = std::min(options_.fire_concurrency, (groups.size() + share - 1) / share);
  std::vector<std::vector<TimerKey>> done(threads_max);  // one per thread: no lock
  std::atomic<size_t> next{0};
  std::atomic<bool> announced{false};
  auto fire = [&](std::vector<TimerKey>& mine) {
    for (size_t i = next.fetch_add(share); i < groups.size(); i = next.fetch_add(share)) {
      const size_t end = std::min(groups.size(), i + share);
      std::vector<const TimerRow*> firsts;
      for (size_t g = i; g < end; ++g) firsts.push_back(groups[g].front());
      FireBatch(firsts, mine);
      for (size_t g = i; g < end; ++g) {
        for (size_t r = 1; r < groups[g].size(); ++r) {
          if (Fire(*groups[g][r]).retire) mine.push_back(groups[g][r]->key());
        }
      }
    }
    if (all_handed_out && !announced.exchange(true)) all_handed_out();
  };
  std::vector<std::thread> threads;
  threads.reserve(threads_max);
  for (size_t t = 1; t < threads_max; ++t) threads.emplace_back(fire, std::ref(done[t]));
  fire(done[0]);
  for (std::thread& t : threads) t.join();
  std::vector<TimerKey> all;
  for (auto& mine : done) std::move(mine.begin(), mine.end(), std::back_inserter(all));
  return all;
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

TimerService::BackoffState TimerService::BackoffOf(const TimerRow& row, int64_t now_ms) {
  BackoffState state;
  std::lock_guard<std::mutex> lock(backoff_mu_);
  auto backoff = backoff_.find(row.execution_id);
  if (backoff != backoff_.end()) {
    state.attempts = backoff->second.attempts;
    if (backoff->second.next_try_ms > now_ms) state.defer_until_ms = backoff->second.next_try_ms;
  }
  return state;
}

TimerService::Fired TimerService::FirePlain(const TimerRow& row) {
  int64_t now_ms = clock_.NowUnixMillis();
  BackoffState backoff = BackoffOf(row, now_ms);
  if (backoff.defer_until_ms > 0) {
    return {false, timers_.Defer(row.key(), options_.owner, backoff.defer_until_ms)};
  }
  return Judge(row, backoff.attempts, now_ms, waker_.Wake(row));
}

TimerService::Fired TimerService::Judge(const TimerRow& row, int attempts_before, int64_t now_ms,
                                        Result<WakeVerdict> verdict) {
  if (!verdict) return {false, std::unexpected(verdict.error())};  // comes due after the lease
  if (*verdict != WakeVerdict::kContended) {
    Count(*verdict == WakeVerdict::kResumed ? &TimerServiceStats::resumed
                                            : &TimerServiceStats::obsolete);
    Forget(row.execution_id);
    return {true, Ok()};
  }
  Count(&TimerServiceStats::contended);
  int attempts = attempts_before + 1;
  if (attempts >= options_.backoff.max_attempts) {
    Forget(row.execution_id);
    Count(&TimerServiceStats::exhausted);
    return {true, MakeError(ErrorCode::kRedriveExhausted,
                            "timer wake contended " + std::to_string(attempts) +
                                " times; left to Recover()",
                            row.execution_id, ResumeContendedDetail{attempts})};
  }
  int64_t next_ms = now_ms + DelayMs(attempts);
  RememberBackoff(row.execution_id, attempts, next_ms);
  return {false, timers_.Defer(row.key(), options_.owner, next_ms)};
}

void TimerService::FireBatch(std::span<const TimerRow* const> rows, std::vector<TimerKey>& done) {
  const int64_t now_ms = clock_.NowUnixMillis();
  std::vector<const TimerRow*> waking;
  std::vector<int> attempts;
  for (const TimerRow* row : rows) {
    BackoffState backoff = row->redrive ? BackoffState{} : BackoffOf(*row, now_ms);
    if (row->redrive || backoff.defer_until_ms > 0) {
      if (Fire(*row).retire) done.push_back(row->key());
      continue;
    }
    waking.push_back(row);
    attempts.push_back(backoff.attempts);
  }
  if (waking.empty()) return;
  std::vector<Result<WakeVerdict>> verdicts = waker_.WakeMany(waking);
  for (size_t i = 0; i < waking.size(); ++i) {
    Fired fired = Judge(*waking[i], attempts[i], now_ms, std::move(verdicts[i]));
    if (!fired.status) ReportError(fired.status.error());
    if (fired.retire) done.push_back(waking[i]->key());
  }
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

TimerService::Fired TimerService::FireRedrive(const TimerRow& row) {
  RedriveAnswer answer = AskRedrivers(row);
  if (answer != RedriveAnswer::kContended) return {true, Ok()};
  int next_attempt = row.redrive->attempt + 1;
  if (next_attempt >= options_.backoff.max_attempts) {
    Count(&TimerServiceStats::exhausted);
    return {true, MakeError(ErrorCode::kRedriveExhausted,
                            "re-drive gave up after " + std::to_string(next_attempt) +
                                " rows; left to Recover()",
                            row.execution_id, ResumeContendedDetail{next_attempt})};
  }
  int64_t wake = std::max(clock_.NowUnixMillis() + DelayMs(next_attempt), row.wake_at_ms + 1);
  // The next row is durable BEFORE this one is retired (with the poll's
  // batch): a crash in between leaves two rows (harmless: the re-drive is
  // idempotent), never none. Not written: this row is kept, and comes due
  // again when its lease ends.
  Status next = timers_.Schedule({row.execution_id, wake, Redrive{next_attempt}});
  if (!next) return {false, next};
  Count(&TimerServiceStats::redrive_rows_written);
  return {true, Ok()};
}

// How long the polling thread waits before the next poll.
int64_t TimerService::WaitMs(bool fired_any) {
  std::lock_guard<std::mutex> lock(held_mu_);
  if (options_.repoll_when_full && more_due_ && fired_any) return 0;
  int64_t wait_ms = options_.poll_interval_ms;
  if (!held_.empty()) {
    wait_ms = std::min(wait_ms, held_.front().wake_at_ms - clock_.NowUnixMillis());
  }
  return std::max<int64_t>(wait_ms, 0);
}

void TimerService::Start() {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { RunLoop(); });
}

namespace {

// A poll running on a thread of its own, and what the loop waits on.
struct RunningPoll {
  std::mutex mu;
  std::condition_variable cv;
  bool handed_out = false;  // GUARDED_BY(mu): its last row went to a firing thread
  bool done = false;        // GUARDED_BY(mu)
  Result<size_t> result = size_t{0};
  std::thread thread;
};

}  // namespace

void TimerService::RunLoop() {
  const bool overlap =
      options_.overlap_polls && options_.repoll_when_full && options_.fire_concurrency > 1;
  std::unique_ptr<RunningPoll> finishing;  // the poll before, finishing its tail
  auto settle = [this](std::unique_ptr<RunningPoll>& poll) -> Result<size_t> {
    poll->thread.join();
    Result<size_t> r = std::move(poll->result);
    poll.reset();
    if (!r) ReportError(r.error());
    return r;
  };
  std::unique_lock<std::mutex> lock(run_mu_);
  while (!stopping_) {
    lock.unlock();
    auto poll = std::make_unique<RunningPoll>();
    RunningPoll* p = poll.get();
    p->thread = std::thread([this, p] {
      Result<size_t> r = Poll([p] {
        std::lock_guard<std::mutex> l(p->mu);
        p->handed_out = true;
        p->cv.notify_all();
      });
      std::lock_guard<std::mutex> l(p->mu);
      p->result = std::move(r);
      p->done = true;
      p->cv.notify_all();
    });
    bool done = false;
    {
      std::unique_lock<std::mutex> l(p->mu);
      p->cv.wait(l, [p] { return p->done || p->handed_out; });
      done = p->done;
    }
    // At most two polls at once: the one before must be finished first.
    if (finishing) settle(finishing);
    int64_t wait_ms = 0;
    if (!done && overlap && WaitMs(true) == 0) {
      finishing = std::move(poll);  // more is due: the next poll starts now
    } else {
      Result<size_t> polled = settle(poll);
      wait_ms = WaitMs(polled && *polled > 0);
    }
    lock.lock();
    if (wait_ms == 0) continue;
    run_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [this] { return stopping_; });
  }
  lock.unlock();
  if (finishing) settle(finishing);
}

// Held rows go back to the store due at their own wake: the next poller
// (another node, or this one restarted) fires them on time, not a lease
// later.
void TimerService::ReleaseHeld() {
  std::vector<TimerRow> held;
  {
    std::lock_guard<std::mutex> lock(held_mu_);
    held.swap(held_);
  }
  for (const TimerRow& row : held) {
    Status s = timers_.Defer(row.key(), options_.owner, row.wake_at_ms);
    if (!s) ReportError(s.error());
  }
}

void TimerService::Stop() {
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  ReleaseHeld();
}

TimerServiceStats TimerService::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

size_t TimerService::held_rows() const {
  std::lock_guard<std::mutex> lock(held_mu_);
  return held_.size();
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
