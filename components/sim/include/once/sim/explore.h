// File: explore.h
//
// Random exploration of rack schedules: each schedule is a scenario drawn
// from its own seed (partitions, moves of stopped sleds, crashes, boots,
// drive faults, data wipes, session starts and jobs), run in a fresh World
// seeded with the same seed, and ended by a heal, a boot of every sled, a
// settle and a probe job that every trusted sled must run. A schedule that
// breaches is shrunk (delta debugging over its steps, keeping the world
// seed) to the fewest steps that still breach the same way.
//
//   ExploreOptions options{.seed = 7, .schedules = 10000};
//   ExploreResult r = Explore(options);
//   if (r.first_breach) std::cout << FormatScenario(r.first_breach->shrunk);
//
// Deterministic for a seed and a schedule count, whatever the thread count:
// schedule i's seed is Mix(seed, i), and the reported breach is the one of
// the lowest schedule index.

#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "once/rack/boundary.h"
#include "once/sim/scenario.h"
#include "once/sim/world.h"

namespace once::sim {

struct ExploreOptions {
  uint64_t seed = 1;
  uint64_t schedules = 1000;
  int sleds_min = 4;
  int sleds_max = 8;
  int actions_min = 8;  // random actions before the final heal and probe
  int actions_max = 40;
  rack::BoundaryFlaws flaws;
  int threads = 1;
  bool shrink = true;
  // Stops at the first breach (the lowest index among those run).
  bool stop_at_breach = true;
};

struct FoundBreach {
  uint64_t index = 0;  // which schedule
  uint64_t seed = 0;   // its world seed: `sush sim run FILE --seed S` replays it
  Breach breach;
  Scenario schedule;  // as drawn
  Scenario shrunk;    // the fewest steps that still breach the same way
};

struct ExploreResult {
  uint64_t schedules = 0;  // run
  uint64_t breaches = 0;
  uint64_t jobs_run = 0;
  uint64_t skipped = 0;
  uint64_t interrupted = 0;
  double seconds = 0;
  std::optional<FoundBreach> first_breach;
};

// The seed of schedule `index`.
uint64_t ScheduleSeed(uint64_t seed, uint64_t index);
// The schedule of a seed (deterministic).
Scenario RandomSchedule(uint64_t schedule_seed, const ExploreOptions& options);
// Runs `scenario` in a world seeded `seed` with `flaws`; the first breach.
std::optional<Breach> FirstBreach(const Scenario& scenario, uint64_t seed,
                                  const rack::BoundaryFlaws& flaws, WorldStats* stats = nullptr);
// The fewest steps (ddmin) that still breach with the same kind.
Scenario Shrink(const Scenario& scenario, uint64_t seed, const rack::BoundaryFlaws& flaws,
                const Breach& breach);

ExploreResult Explore(const ExploreOptions& options);

// Flaws by name (the simulator's negative controls): "single-session-version",
// "no-filter-insert-on-hit", "lazy-entry-marker", "unpersisted-entry-marker",
// "zombies-by-join-frontier", "record-after-start", "position-unchecked",
// "rehop-past".
// kInvalidArgument otherwise.
Result<rack::BoundaryFlaws> FlawByName(std::string_view name);
std::vector<std::string> FlawNames();

}  // namespace once::sim
