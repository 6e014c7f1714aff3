// File: clock.h
//
// Time is injected. No component reads the wall clock directly: it takes a
// Clock&. Production passes a SystemClock; tests and the simulator pass a
// ManualClock they advance by hand.
//
//   ManualClock clock(TimePoint{} + std::chrono::seconds(100));
//   clock.Advance(std::chrono::milliseconds(250));

#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace once {

using TimePoint = std::chrono::system_clock::time_point;
using Duration = std::chrono::system_clock::duration;

int64_t ToUnixMillis(TimePoint t);
TimePoint FromUnixMillis(int64_t ms);

class Clock {
 public:
  virtual ~Clock() = default;
  // The current time. Thread-safe.
  virtual TimePoint Now() const = 0;
  int64_t NowUnixMillis() const { return ToUnixMillis(Now()); }
};

// The system's real-time clock. Stateless; one may be shared by all threads.
class SystemClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::system_clock::now(); }
};

// A clock that never jumps: the system's time when it was made plus the
// monotonic time elapsed since (std::chrono::steady_clock). For judging a
// local interval (how long since this node's last heartbeat) where a step of
// the wall clock must not count. Thread-safe.
class SteadyClock final : public Clock {
 public:
  SteadyClock()
      : wall_start_(std::chrono::system_clock::now()), start_(std::chrono::steady_clock::now()) {}
  TimePoint Now() const override {
    return wall_start_ +
           std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start_);
  }

 private:
  TimePoint wall_start_;
  std::chrono::steady_clock::time_point start_;
};

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = FromUnixMillis(1'700'000'000'000)) : now_ns_(Ns(start)) {}
  TimePoint Now() const override {
    return TimePoint(std::chrono::duration_cast<Duration>(
        std::chrono::nanoseconds(now_ns_.load(std::memory_order_acquire))));
  }
  void Set(TimePoint t) { now_ns_.store(Ns(t), std::memory_order_release); }
  void Advance(Duration d) {
    now_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(),
                      std::memory_order_acq_rel);
  }

 private:
  static int64_t Ns(TimePoint t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  std::atomic<int64_t> now_ns_;
};

}  // namespace once
