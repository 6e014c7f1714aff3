// File: chaos.h
//
// `loom chaos run`: three (--nodes) Loom node processes on one store (a
// SQLite file or a PostgreSQL schema), killed with SIGKILL at random moments
// and restarted, under queued and direct workflows with timers, children
// and a cron schedule; then every invariant of docs/nodes.md "The chaos
// test" is checked (chaos_check.h) with the checker's negative controls.
// `--mode latency` keeps long-running bodies on every node, kills one node at
// a time with the default lease and reports how long its executions took to
// resume elsewhere (p50/p99).
//
//   loom chaos run --db /tmp/c/loom.db --dir /tmp/c --kills 30 --lease-ms 1000
//   loom chaos run --url $URL --schema chaos1 --dir /tmp/c --mode latency --kills 20
//
// `loom chaos node` is one node process (the driver starts it; not for
// hand use): an App serving the queues, starting direct executions, driving
// the cron schedule on a clock 60 times faster than the store's, and writing
// every step effect to the ledger.
#pragma once

#include <cstdint>
#include <string>

#include "cli.h"

namespace once::loom_app {

struct ChaosTiming {
  // Short, so a run is bounded; the margin leaves a step that passed the
  // gate 600 ms to write its effect before the node can be judged dead
  // (the window docs/nodes.md names), also on a loaded 2-core machine.
  int64_t lease_ms = 1'500;  // node_lease_ms
  int64_t heartbeat_ms = 250;
  int64_t step_margin_ms = 600;
  int64_t takeover_ms = 50;  // takeover_interval_ms: live nodes take over all the time
  int64_t recover_ms = 2'000;
};

struct ChaosOptions {
  std::string mode = "chaos";  // chaos | latency
  std::string dir;             // the ledger, node logs, the report
  int nodes = 3;
  int kills = 30;
  ChaosTiming timing;
  int64_t load_ms = 40'000;          // queued and direct starts, cron ticks, kills
  int queued = 120;                  // queued starts over load_ms
  int64_t direct_interval_ms = 800;  // each node starts one direct execution this often
  int64_t settle_ms_max = 60'000;    // after the load: everything ends within this
  int workers = 4;                   // runtime.workers per node
  uint64_t seed = 1;
  // latency mode: one kill every kill_gap_ms (default: lease + 5 s)
  int64_t kill_gap_ms = 0;
};
int RunChaos(const StoreFlags& store, const ChaosOptions& options);

struct ChaosNodeOptions {
  std::string mode = "chaos";
  std::string node_id;
  std::string ledger;
  ChaosTiming timing;
  int workers = 4;
  int64_t direct_interval_ms = 800;
  int64_t load_until_ms = 0;  // Unix ms: no direct start nor cron tick after it
  int64_t cron_epoch_ms = 0;  // Unix ms: cron time = epoch + (store time - epoch) * 60
  uint64_t seed = 1;
};
int RunChaosNode(const StoreFlags& store, const ChaosNodeOptions& options);

}  // namespace once::loom_app
