// File: cli.h
//
// `sush sim`: the simulator's command line (docs/sush-simulator.md).
//
//   sush sim run FILE [--seed S] [--flaw NAME]... [--quiet]
//       runs a scenario; prints, per sled, what ran, what was skipped and why,
//       and every boundary change; exit 0 if no breach and every expect held,
//       1 otherwise, 2 for a usage or parse error.
//   sush sim explore [--sleds N|MIN-MAX] [--seed S] [--schedules K] [--threads T]
//                    [--flaw NAME]... [--out FILE] [--expect-breach] [--no-shrink]
//       draws K random schedules and prints
//       `schedules=K breaches=B jobs_run=R skipped=S interrupted=I seconds=T
//       schedules_per_second=P`; on a breach, the schedule's seed and the breach,
//       and writes the schedule shrunk to the fewest steps that still breach to
//       FILE (default sim-breach-SEED.sush); exit 1 on a breach (with
//       --expect-breach: 0 on a breach, 1 without one: the negative controls).
//   sush sim check FILE|DIR...
//       runs every scenario (a folder's *.sush files, in name order): each must
//       hold (no breach, every expect met) under the real rules, and fail under
//       each flaw named on a `# catches: NAME...` line of the file (the
//       negative controls); prints one line a file and
//       `scenarios=N negative_controls=C failed=F`; exit 0 iff F is 0.
//   sush sim flaws
//       the names --flaw takes, one a line.
//
//   std::vector<std::string> args = {"run", "scenarios/partition_flip_flop.sush"};
//   int code = SimCommand(args, std::cout, std::cerr);

#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace once::sim {

int SimCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace once::sim
