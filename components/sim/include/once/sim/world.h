// File: world.h
//
// A deterministic rack: N sleds in one process, each the real SledCore with
// the real boundary rules and locker (over locker::MemoryFs drives whose
// unsynced writes a crash loses), the real gossip replica and reconciliation
// sessions (gossip::SessionMachine) over a virtual network (links,
// partitions, moves of a stopped sled, frame delay and loss), one virtual
// clock and one seeded Rng. No threads, no sockets, no wall clock: the same
// seed and steps give the same trace, byte for byte (TraceHash).
//
//   World world({.seed = 7});
//   for (const Step& step : scenario.steps) world.Apply(step);
//   world.Finish();                          // the final liveness checks
//   if (!world.breaches().empty() || !world.failures().empty()) ...
//   std::cout << world.Report();
//
// Checkers: at most once (no sled ever starts the same chain position twice,
// across all its lives), one at a time (a non-concurrent job never starts
// while another process of that sled, a previous life's included, may still
// run), and liveness, after every settle and at Finish: no own status sits
// Started without a process of the current life behind it, no job of an
// active session sits Queued unless a running job holds it, and every job
// submitted while its target sled was settled and undisturbed (no move, link
// change, drive fault, wipe or reset of that sled since the settle before the
// submission; crashes and boots in place are allowed) ran there or was
// cancelled.
//
// Single-threaded. A World is one schedule; explore.h runs many.

#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "once/base/result.h"
#include "once/rack/boundary.h"
#include "once/rack/ids.h"
#include "once/sim/scenario.h"

namespace once::sim {

struct WorldOptions {
  uint64_t seed = 1;
  rack::BoundaryFlaws flaws;  // the negative controls (never reachable from a server)
  size_t left_universes_max = rack::kLeftUniversesMax;
  size_t left_sessions_max = rack::kLeftSessionsMax;
  int64_t gossip_interval_ms = 100;
  int64_t link_delay_ms_min = 1;
  int64_t link_delay_ms_max = 15;
  double frame_loss = 0;               // probability that a frame is lost (its session dies)
  int64_t settle_budget_ms = 600'000;  // virtual; past it `settle` reports a liveness breach
  int64_t drain_timeout_ms = 2000;
  bool keep_log = true;  // the per-sled log Report prints
};

struct Breach {
  // "at-most-once", "one-at-a-time", "liveness/not-run", "liveness/started",
  // "liveness/queued", "settle"
  std::string kind;
  std::string detail;
};

struct WorldStats {
  uint64_t jobs_run = 0;
  uint64_t skipped = 0;
  uint64_t interrupted = 0;
  uint64_t sessions = 0;  // reconciliation sessions completed
  uint64_t steps = 0;
};

class World {
 public:
  explicit World(WorldOptions options);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // Applies one step. A step that cannot apply (a job via a sled that is
  // down, a move of a running sled) is noted in the log, not an error.
  void Apply(const Step& step);
  // The final checks of a schedule: liveness over what the steps left.
  void Finish();

  const std::vector<Breach>& breaches() const;
  const std::vector<std::string>& failures() const;
  const WorldStats& stats() const;
  // Per sled: what ran, what was skipped and why, every boundary change.
  std::string Report() const;
  rack::Digest256 TraceHash() const;
  // The virtual time, ms since the rack's cold boot.
  int64_t now_ms() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Runs a whole scenario in a fresh world; the world is returned for its
// report and checks.
std::unique_ptr<World> RunScenario(const Scenario& scenario, WorldOptions options);

}  // namespace once::sim
