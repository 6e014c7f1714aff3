// itc_size_bench: mean encoded clock size (party bytes + version bytes) of
// interval tree clocks, reproducing the published experiment at 32 parties.
//
//   itc_size_bench [--runs N] [--parties N]
//
// Static message passing: the seed is split by Forks into `parties` clocks;
// each of 25,000 iterations picks a random sender and a different random
// receiver; the sender ticks (Send) and the receiver absorbs the stamp and
// ticks (Recv).
//
// Churn: the population starts as the seed alone. Each of 100,000
// iterations looks at the population size n: below `parties` it forks a
// random member; above, it joins a random member into another random member
// (party union and version join); at exactly `parties` it does one of fork,
// join, tick of a random member, chosen uniformly. The population stays
// within one of `parties` once it has grown.
//
// Each run ends by averaging the encoded size over all clocks; the figure is
// the mean over runs (run r uses seed r).

#include <chrono>
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

double StaticRun(uint64_t seed, size_t parties, int iterations) {
  once::SeededRng rng(seed);
  auto split = Party::Forks(Party::Seed(), parties);
  ONCE_CHECK(split.has_value());
  std::vector<Clock> clocks;
  for (Party& p : *split) clocks.emplace_back(std::move(p), Version());
  for (int i = 0; i < iterations; ++i) {
    const size_t s = rng.Below(parties);
    size_t r = rng.Below(parties - 1);
    if (r >= s) ++r;
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
  size_t parties = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--parties") == 0) parties = std::strtoul(argv[i + 1], nullptr, 10);
  }
  if (runs < 1 || parties < 2) {
    std::fprintf(stderr, "usage: itc_size_bench [--runs N>=1] [--parties N>=2]\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  double static_sum = 0, churn_sum = 0;
  for (int r = 0; r < runs; ++r) {
    static_sum += StaticRun(static_cast<uint64_t>(r), parties, 25000);
    churn_sum += ChurnRun(static_cast<uint64_t>(r), parties, 100000);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("interval tree clocks: mean encoded clock size, %zu parties, %d runs (%.1f s)\n",
              parties, runs, seconds);
  std::printf("%-40s %10s %12s\n", "experiment", "ours (B)", "published (B)");
  std::printf("%-40s %10.1f %12s\n", "static message passing, 25k iterations", static_sum / runs,
              parties == 32 ? "42.4" : "-");
  std::printf("%-40s %10.1f %12s\n", "churn fork/tick/join, 100k iterations", churn_sum / runs,
              parties == 32 ? "274.2" : "-");
  return 0;
}
