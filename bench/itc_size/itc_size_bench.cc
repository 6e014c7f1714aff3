// itc_size_bench: mean encoded clock size (party bytes + version bytes) of
// interval tree clocks, reproducing the published experiment at 32 parties.
//
//   itc_size_bench [--runs N] [--churn-runs N] [--parties N]
//
// --churn-runs (default: --runs) bounds the slower churn experiments.
//
// The published figures come from the `rumors` crate's space-consumption
// example, which reproduces section 6 of the ITC paper. Its procedure, which
// the rows marked "published procedure" follow:
//
// Population: `parties` clocks forked from the seed round by round (every
// clock forks once per round, in order, until there are enough; balanced for
// a power of two).
//
// Static message passing, 25,000 iterations: each iteration ticks one random
// clock (an internal event), then a random sender's version is joined into a
// different random receiver, with no event on either side (the paper's peek
// of an anonymous stamp, then join). The receiver is drawn uniformly and, if it
// is the sender, replaced by the sender's successor in population order.
//
// Churn, 100,000 iterations: each iteration forks a random clock (population
// n + 1), ticks a random clock, then removes a random clock and joins it into
// another random one (back to n).
//
// The rows marked "send/recv" are our earlier procedures, kept for comparison:
// static with Clock::Send (tick) and Clock::Recv (absorb, then tick); churn from
// the seed alone, forking below `parties`, joining above, and at exactly
// `parties` one of fork / join / tick uniformly.
//
// Each run ends by averaging the encoded size over all clocks; the figure is
// the mean over runs (run r uses seed r).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "once/base/rng.h"
#include "once/itc/clock.h"

namespace {

using once::itc::Clock;
using once::itc::Party;
using once::itc::Version;

double MeanSize(const std::vector<Clock>& clocks) {
  double total = 0;
  for (const Clock& c : clocks) total += static_cast<double>(c.Encode().size());
  return total / static_cast<double>(clocks.size());
}

std::vector<Clock> Population(size_t parties) {
  std::vector<Clock> clocks;
  clocks.push_back(Clock::Seed());
  while (clocks.size() < parties) {
    const size_t round = clocks.size();
    for (size_t i = 0; i < round && clocks.size() < parties; ++i) {
      auto right = clocks[i].Fork();
      ONCE_CHECK(right.has_value());
      clocks.push_back(std::move(*right));
    }
  }
  return clocks;
}

// A random pair of distinct indices below n.
std::pair<size_t, size_t> Pair(once::Rng& rng, size_t n) {
  const size_t s = rng.Below(n);
  size_t r = rng.Below(n - 1);
  if (r >= s) ++r;
  return {s, r};
}

double StaticRun(uint64_t seed, size_t parties, int iterations) {
  once::SeededRng rng(seed);
  std::vector<Clock> clocks = Population(parties);
  for (int i = 0; i < iterations; ++i) {
    ONCE_CHECK(clocks[rng.Below(parties)].Tick().has_value());
    // As published: a receiver drawn equal to the sender becomes the next
    // clock, so clock s + 1 receives from s twice as often as any other.
    const size_t s = rng.Below(parties);
    size_t r = rng.Below(parties);
    if (r == s) r = (r + 1) % parties;
    clocks[r].Absorb(clocks[s].version());
  }
  return MeanSize(clocks);
}

double StaticSendRecvRun(uint64_t seed, size_t parties, int iterations) {
  once::SeededRng rng(seed);
  auto split = Party::Forks(Party::Seed(), parties);
  ONCE_CHECK(split.has_value());
  std::vector<Clock> clocks;
  for (Party& p : *split) clocks.emplace_back(std::move(p), Version());
  for (int i = 0; i < iterations; ++i) {
    const auto [s, r] = Pair(rng, parties);
    auto stamp = clocks[s].Send();
    ONCE_CHECK(stamp.has_value());
    ONCE_CHECK(clocks[r].Recv(*stamp).has_value());
  }
  return MeanSize(clocks);
}

void Fork(std::vector<Clock>& clocks, once::Rng& rng) {
  auto right = clocks[rng.Below(clocks.size())].Fork();
  ONCE_CHECK(right.has_value());
  clocks.push_back(std::move(*right));
}

void JoinTwo(std::vector<Clock>& clocks, once::Rng& rng) {
  const size_t a = rng.Below(clocks.size());
  size_t b = rng.Below(clocks.size() - 1);
  if (b >= a) ++b;
  Clock gone = std::move(clocks[b]);
  clocks.erase(clocks.begin() + static_cast<std::ptrdiff_t>(b));
  ONCE_CHECK(clocks[a < b ? a : a - 1].Join(std::move(gone)).has_value());
}

double ChurnRun(uint64_t seed, size_t parties, int iterations) {
  once::SeededRng rng(seed);
  std::vector<Clock> clocks = Population(parties);
  for (int i = 0; i < iterations; ++i) {
    Fork(clocks, rng);
    ONCE_CHECK(clocks[rng.Below(clocks.size())].Tick().has_value());
    JoinTwo(clocks, rng);
  }
  return MeanSize(clocks);
}

double ChurnSendRecvRun(uint64_t seed, size_t parties, int iterations) {
  once::SeededRng rng(seed);
  std::vector<Clock> clocks;
  clocks.push_back(Clock::Seed());
  for (int i = 0; i < iterations; ++i) {
    if (clocks.size() < parties) {
      Fork(clocks, rng);
    } else if (clocks.size() > parties) {
      JoinTwo(clocks, rng);
    } else {
      switch (rng.Below(3)) {
        case 0:
          Fork(clocks, rng);
          break;
        case 1:
          JoinTwo(clocks, rng);
          break;
        default:
          ONCE_CHECK(clocks[rng.Below(clocks.size())].Tick().has_value());
      }
    }
  }
  return MeanSize(clocks);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 100;
  int churn_runs = -1;
  size_t parties = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--churn-runs") == 0) churn_runs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--parties") == 0) parties = std::strtoul(argv[i + 1], nullptr, 10);
  }
  if (churn_runs < 0) churn_runs = runs;
  if (runs < 1 || churn_runs < 1 || parties < 2) {
    std::fprintf(stderr,
                 "usage: itc_size_bench [--runs N>=1] [--churn-runs N>=1] [--parties N>=2]\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  // Per experiment: the sum and the sum of squares of the per-run means.
  double sums[4] = {0, 0, 0, 0}, squares[4] = {0, 0, 0, 0};
  auto add = [&](int e, double x) {
    sums[e] += x;
    squares[e] += x * x;
  };
  for (int r = 0; r < runs; ++r) {
    add(0, StaticRun(static_cast<uint64_t>(r), parties, 25000));
    add(2, StaticSendRecvRun(static_cast<uint64_t>(r), parties, 25000));
  }
  for (int r = 0; r < churn_runs; ++r) {
    add(1, ChurnRun(static_cast<uint64_t>(r), parties, 100000));
    add(3, ChurnSendRecvRun(static_cast<uint64_t>(r), parties, 100000));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "interval tree clocks: mean encoded clock size, %zu parties, %d static runs, %d churn runs "
      "(%.1f s)\n",
      parties, runs, churn_runs, seconds);
  std::printf("%-62s %10s %10s %12s\n", "experiment", "ours (B)", "std err", "published (B)");
  const bool p32 = parties == 32;
  const char* names[4] = {"static message passing, 25k iterations (published procedure)",
                          "churn fork+tick+join, 100k iterations (published procedure)",
                          "static, send ticks, recv absorbs and ticks",
                          "churn from the seed, one of fork/join/tick"};
  const char* published[4] = {p32 ? "42.4" : "-", p32 ? "274.2" : "-", "-", "-"};
  for (int e = 0; e < 4; ++e) {
    const double n = e % 2 == 0 ? runs : churn_runs;
    const double mean = sums[e] / n;
    const double var = n > 1 ? (squares[e] - n * mean * mean) / (n - 1) : 0;
    std::printf("%-62s %10.2f %10.2f %12s\n", names[e], mean, std::sqrt(std::max(var, 0.0) / n),
                published[e]);
  }
  return 0;
}
