// File: chaos_check.h
//
// The chaos test's checker (docs/nodes.md, "The chaos test"): a pure
// function over what the node processes wrote to the ledger, the kills the
// driver made, and what the store holds at the end. It knows nothing about
// processes, so its negative controls feed it doctored inputs.
//
//   ONCE_ASSIGN_OR_RETURN(std::vector<LedgerLine> lines, ReadLedger("run/ledger"));
//   ChaosFacts facts = ...;  // kills, enqueued ids, logs, queue samples
//   ChaosVerdict v = CheckChaos(lines, facts);
//   if (!v.breaches.empty()) ...  // each names the invariant and the execution
//
// The ledger: one line per event, written by the node with ONE write(2) on
// a file opened O_APPEND before the step function returns (a SIGKILL after
// the write cannot lose it: the kernel holds it), so every effect a step
// had is in it, whatever the kill. Fields, space separated:
//   <steady ns> <pid> <node id> <what> <execution id> <step or ->
// what: effect (a step's effect), submit (a node is about to start a direct
// execution), startfail (that start was refused, the step names the code),
// end (the node saw the execution end), boot, stop. The steady clock is
// CLOCK_MONOTONIC, one clock for every process of the machine.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "once/base/result.h"

namespace once::loom_app {

struct LedgerLine {
  int64_t t_ns = 0;
  int64_t pid = 0;
  std::string node;
  std::string what;
  std::string execution_id;
  std::string step;
};

// Reads a ledger file; kCorruption names the first malformed line (a torn
// line cannot happen with one write(2) per line: it is a breach).
Result<std::vector<LedgerLine>> ReadLedger(const std::string& path);
std::string FormatLedgerLine(const LedgerLine& line);

struct Kill {
  int64_t pid = 0;
  int64_t t_ns = 0;  // the steady clock just before kill(2)
};

// One execution's log at the end.
struct LogFacts {
  std::string workflow;
  int64_t terminal_events = 0;  // COMPLETED, FAILED, CANCELLED, CONTINUED
  std::string status;           // the last terminal kind's name, or "open"
};

struct QueueLimitFacts {
  size_t concurrency_max = 0;  // 0: none
  size_t per_node_concurrency_max = 0;
  size_t claimed_max = 0;          // the most claimed items sampled at once, every node
  size_t claimed_by_node_max = 0;  // the most one node held, sampled
  size_t samples = 0;
};

struct ChaosFacts {
  std::vector<Kill> kills;
  std::set<int64_t> pids;                // every node process the driver started
  std::vector<std::string> enqueued;     // queued starts the driver's Enqueue accepted
  std::map<std::string, LogFacts> logs;  // every execution with events
  std::map<std::string, QueueLimitFacts> queues;
  // Rows of the transactional step's table per execution (committed runs).
  std::map<std::string, int64_t> tx_rows;
  std::string tx_workflow = "job";         // every completed one ran the step once
  std::vector<std::string> node_failures;  // node exits the driver did not cause
  // Cron: the schedule's execution ids are "<prefix><tick ms>", ticks
  // tick_ms apart in cron time.
  bool cron = true;  // a schedule ran (latency mode has none)
  // Step effects run twice <= kills (the issue's bound; it assumes few
  // steps in flight at a kill: latency mode's long steps on many bodies
  // break it by design, and only the per-duplicate rule holds there).
  bool duplicates_within_kills = true;
  std::string tick_prefix = "tick@";
  int64_t tick_ms = 60'000;
  // The workflow whose executions are queued (their spans are checked
  // against concurrency_max) keyed by id prefix -> queue.
  std::map<std::string, std::string> queue_of_prefix;
};

struct ChaosVerdict {
  std::vector<std::string> breaches;  // empty: every invariant held
  size_t executions = 0, completed = 0;
  size_t effects = 0;
  size_t duplicates = 0;          // extra effect lines of one execution's step
  size_t duplicates_by_kill = 0;  // each explained by a kill of the earlier runner
  size_t submitted = 0, never_started = 0, start_refused = 0;
  size_t ticks = 0;
  size_t tx_exactly_once = 0;                      // executions with exactly one committed row
  std::map<std::string, size_t> span_overlap_max;  // per queue, from the ledger
};

ChaosVerdict CheckChaos(const std::vector<LedgerLine>& ledger, const ChaosFacts& facts);

// Takeover latency: for each kill, the executions the killed process was
// running (its last effect line on them came less than active_window_ns
// before the kill, and was not their last step) and, for each, the time from
// the kill to its first effect line written by another process.
struct TakeoverSample {
  std::string execution_id;
  int64_t kill_pid = 0;
  int64_t latency_ns = -1;  // -1: never resumed elsewhere
};
std::vector<TakeoverSample> TakeoverLatencies(const std::vector<LedgerLine>& ledger,
                                              const std::vector<Kill>& kills,
                                              int64_t active_window_ns,
                                              const std::set<std::string>& last_steps);

// The checker's negative controls: each doctors one input the way a broken
// engine would and expects a breach. Returns the controls NOT caught.
std::vector<std::string> CheckChaosControls(const std::vector<LedgerLine>& ledger,
                                            const ChaosFacts& facts);

}  // namespace once::loom_app
