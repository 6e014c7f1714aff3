// memory_growth_bench: what a new execution costs the memory store when the
// store is empty and when it already holds N executions: its fence acquire
// and its first append (the three events of a one-step execution: started,
// step completed, completed), each timed over `ops` new executions on one
// thread. The requests are built before the clock starts. Each round times
// a fresh empty store and then the full one (which keeps what the rounds
// add, as a service's store would); the full store's ratio to the empty one
// is what issue 20's growth target asks of the whole case. It applies the
// allocator settings loom applies (once::allocator), so its heap grows as
// loom's does; its fill line names them. Each call is also timed alone, and
// a round reports its slowest acquire and append: a table that grows all at
// once stops its shard for that long. (The per-call clock reads are inside
// the averages, the same for every store.)
//
// The raw limit beside them: what this machine charges for memory touched
// for the first time, which every growing store pays (its heap, its tables'
// new arrays): once::allocator::MeasureFirstTouch, microseconds a 4 KiB and
// a 2 MiB page.
//
//   memory_growth_bench [N (1000000)] [ops (20000)] [rounds (5)]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "once/allocator/first_touch.h"
#include "once/allocator/settings.h"
#include "once/events/envelope.h"
#include "once/store/memory_store.h"

namespace {

using namespace once;
using Steady = std::chrono::steady_clock;

// `n` new one-step executions' first appends, ids "<tag>-<i>" (as long as
// the bench's ids: past the short-string buffer).
std::vector<store::AppendRequest> NewExecutions(const std::string& tag, int n) {
  std::vector<store::AppendRequest> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    store::AppendRequest r;
    r.execution_id = "memory-growth-" + tag + "-" + std::to_string(i);
    r.fence = std::nullopt;  // unfenced, as the loom bench's case
    const events::Json value = events::JsonObject("n", 1);
    r.events.push_back(
        events::KernelEvent(events::KernelKind::kExecutionStarted,
                            events::JsonObject("workflow", "one_step", "input", value)));
    r.events.push_back(events::KernelEvent(events::KernelKind::kStepCompleted,
                                           events::JsonObject("name", "work", "value", value)));
    r.events.push_back(events::KernelEvent(events::KernelKind::kExecutionCompleted,
                                           events::JsonObject("value", value)));
    out.push_back(std::move(r));
  }
  return out;
}

struct PerOp {
  double acquire_ns = 0;
  double append_ns = 0;
  double acquire_us_max = 0;  // the slowest single call
  double append_us_max = 0;
};

// Runs `call` and raises `max_us` to its duration if longer.
template <class Call>
void TimeOne(double& max_us, Call&& call) {
  const auto t0 = Steady::now();
  call();
  max_us = std::max(max_us, std::chrono::duration<double, std::micro>(Steady::now() - t0).count());
}

// Acquires, then appends, `n` new executions on `store`; nanoseconds each.
// Exits on an error: a figure of failed calls would mean nothing.
PerOp Time(store::MemoryEventStore& store, const std::string& tag, int n) {
  std::vector<store::AppendRequest> requests = NewExecutions(tag, n);
  PerOp out;
  const auto t0 = Steady::now();
  for (const store::AppendRequest& r : requests) {
    TimeOne(out.acquire_us_max, [&] {
      if (!store.AcquireFence(r.execution_id)) std::abort();
    });
  }
  const auto t1 = Steady::now();
  for (store::AppendRequest& r : requests) {
    TimeOne(out.append_us_max, [&] {
      if (!store.Append(std::move(r))) std::abort();
    });
  }
  const auto t2 = Steady::now();
  out.acquire_ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
  out.append_ns = std::chrono::duration<double, std::nano>(t2 - t1).count() / n;
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A positive count from argv[i], or `fallback` when absent.
int CountArg(int argc, char** argv, int i, int fallback) {
  if (argc <= i) return fallback;
  const int n = std::atoi(argv[i]);
  if (n <= 0) {
    std::fprintf(stderr, "usage: memory_growth_bench [N] [ops] [rounds] (counts >= 1)\n");
    std::exit(2);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  once::allocator::ApplySettings(argv);  // the allocator loom ships with
  const int preload = CountArg(argc, argv, 1, 1000000);
  const int ops = CountArg(argc, argv, 2, 20000);
  const int rounds = CountArg(argc, argv, 3, 5);
  const std::optional<once::allocator::FirstTouch> raw = once::allocator::MeasureFirstTouch();
  if (!raw) {
    std::fprintf(stderr, "memory_growth_bench: could not map memory to measure its first touch\n");
    return 1;
  }
  std::printf("memory-growth-raw first_touch_us_per_4k_page=%.2f first_touch_us_per_2m_page=%.1f\n",
              raw->us_per_small_page, raw->us_per_huge_page);
  store::MemoryEventStore full;
  const auto fill_start = Steady::now();
  constexpr int kFillChunk = 100000;  // requests built at a time
  for (int done = 0; done < preload; done += kFillChunk) {
    (void)Time(full, "pre" + std::to_string(done), std::min(kFillChunk, preload - done));
  }
  const double fill_s = std::chrono::duration<double>(Steady::now() - fill_start).count();
  std::printf("memory-growth-fill executions=%d seconds=%.1f allocator=\"%s\"\n", preload, fill_s,
              once::allocator::Description().c_str());
  std::vector<double> acquire_empty, acquire_full, append_empty, append_full;
  double acquire_us_max_full = 0, append_us_max_full = 0;
  for (int round = 0; round < rounds; ++round) {
    store::MemoryEventStore empty;
    const PerOp e = Time(empty, "empty" + std::to_string(round), ops);
    const PerOp f = Time(full, "full" + std::to_string(round), ops);
    std::printf(
        "memory-growth-round round=%d acquire_ns_empty=%.0f acquire_ns_full=%.0f "
        "append_ns_empty=%.0f append_ns_full=%.0f acquire_us_max_empty=%.0f "
        "acquire_us_max_full=%.0f append_us_max_empty=%.0f append_us_max_full=%.0f\n",
        round, e.acquire_ns, f.acquire_ns, e.append_ns, f.append_ns, e.acquire_us_max,
        f.acquire_us_max, e.append_us_max, f.append_us_max);
    acquire_us_max_full = std::max(acquire_us_max_full, f.acquire_us_max);
    append_us_max_full = std::max(append_us_max_full, f.append_us_max);
    acquire_empty.push_back(e.acquire_ns);
    acquire_full.push_back(f.acquire_ns);
    append_empty.push_back(e.append_ns);
    append_full.push_back(f.append_ns);
  }
  const double ae = Median(acquire_empty), af = Median(acquire_full);
  const double pe = Median(append_empty), pf = Median(append_full);
  std::printf(
      "memory-growth n=%d ops=%d rounds=%d acquire_ns_empty=%.0f acquire_ns_full=%.0f "
      "append_ns_empty=%.0f append_ns_full=%.0f execution_ratio=%.2f "
      "acquire_us_max_full=%.0f append_us_max_full=%.0f\n",
      preload, ops, rounds, ae, af, pe, pf, (ae + pe) / (af + pf), acquire_us_max_full,
      append_us_max_full);
  return 0;
}
