// Micro-benchmarks of interval tree clock operations on large trees.

#include <benchmark/benchmark.h>

#include <vector>

#include "once/base/rng.h"
#include "once/itc/clock.h"

namespace {

using once::itc::Party;
using once::itc::Version;

// `members` forked parties and a version where each has ticked once.
struct Universe {
  std::vector<Party> parties;
  Version version;
};

Universe Make(size_t members) {
  Universe u;
  u.parties = std::move(*Party::Forks(Party::Seed(), members));
  for (const Party& p : u.parties) u.version = *once::itc::Tick(u.version, p);
  return u;
}

void BM_PartyFork(benchmark::State& state) {
  Universe u = Make(static_cast<size_t>(state.range(0)));
  Party all = std::move(u.parties[0]);
  for (size_t i = 1; i < u.parties.size(); i += 2) (void)all.Join(std::move(u.parties[i]));
  for (auto _ : state) {
    auto right = all.Fork();
    benchmark::DoNotOptimize(right);
    (void)all.Join(std::move(*right));
  }
}
BENCHMARK(BM_PartyFork)->Arg(1024)->Arg(32768);

void BM_VersionTick(benchmark::State& state) {
  Universe u = Make(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(once::itc::Tick(u.version, u.parties[7]));
}
BENCHMARK(BM_VersionTick)->Arg(1024)->Arg(32768);

void BM_VersionJoin(benchmark::State& state) {
  Universe u = Make(static_cast<size_t>(state.range(0)));
  Version other = *once::itc::Tick(u.version, u.parties[3]);
  for (auto _ : state) benchmark::DoNotOptimize(once::itc::Join(u.version, other));
}
BENCHMARK(BM_VersionJoin)->Arg(1024)->Arg(32768);

void BM_VersionLeq(benchmark::State& state) {
  Universe u = Make(static_cast<size_t>(state.range(0)));
  Version other = *once::itc::Tick(u.version, u.parties[3]);
  for (auto _ : state) benchmark::DoNotOptimize(once::itc::Leq(u.version, other));
}
BENCHMARK(BM_VersionLeq)->Arg(1024)->Arg(32768);

void BM_VersionEncodeDecode(benchmark::State& state) {
  Universe u = Make(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(Version::Decode(u.version.Encode()));
}
BENCHMARK(BM_VersionEncodeDecode)->Arg(1024)->Arg(32768);

}  // namespace

BENCHMARK_MAIN();
