// File: striped_counter.h
//
// A statistics counter that many threads bump on different cores without
// sharing a cache line: each thread adds to its own stripe (one of
// kStripes, chosen once per thread), and a read sums the stripes. A single
// atomic bumped on every operation moved its line between the cores each
// time, and slowed the reads of whatever shared that line.
//
//   StripedCounter commits;
//   commits.Add();                 // any thread
//   uint64_t n = commits.Sum();    // a snapshot; exact once the adders stop

#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace once {

class StripedCounter {
 public:
  void Add(uint64_t n = 1) { stripes_[ThreadStripe()].n.fetch_add(n, std::memory_order_relaxed); }

  uint64_t Sum() const {
    uint64_t sum = 0;
    for (const Stripe& s : stripes_) sum += s.n.load(std::memory_order_relaxed);
    return sum;
  }

 private:
  static constexpr size_t kStripes = 16;
  static constexpr size_t kCacheLineBytes = 64;
  struct alignas(kCacheLineBytes) Stripe {
    std::atomic<uint64_t> n{0};
  };

  // Threads take stripes in turn, so up to kStripes threads never share one.
  static size_t ThreadStripe() {
    static std::atomic<size_t> next{0};
    thread_local const size_t stripe = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
    return stripe;
  }

  std::array<Stripe, kStripes> stripes_;
};

}  // namespace once
