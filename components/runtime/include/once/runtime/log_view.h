// File: log_view.h
//
// Pure functions over an execution's log (no I/O): the status fold, the open
// park, and the child answers a park is waiting for. The runtime and its
// callers (timers, supervisors) share them so every component reads a log
// the same way.
//
//   ONCE_ASSIGN_OR_RETURN(ExecutionState st, Fold(events));
//   if (auto park = FindOpenPark(events)) resume at park->sequence;
//
// A log the kernel cannot read (a kernel event whose payload lacks its
// kind's shape, events::KernelPayloadProblem: a row written by hand or by an
// older build) folds to kCorruption, never to an exception: the caller
// quarantines that one execution and goes on serving the others.
//
// Threads: pure; any thread.

#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "once/base/result.h"
#include "once/events/envelope.h"

namespace once::runtime {

using events::Envelope;
using events::Json;

enum class ExecutionStatus {
  kUnknown,    // no events
  kRunning,    // started or resumed, not parked, not terminal
  kSuspended,  // the newest answering event is a park
  kCompleted,
  kFailed,
  kCancelled,
  kContinued,
};
std::string_view StatusName(ExecutionStatus s);
bool IsTerminal(ExecutionStatus s);

struct ExecutionState {
  ExecutionStatus status = ExecutionStatus::kUnknown;
  std::string workflow;             // EXECUTION_STARTED.workflow
  Json input;                       // EXECUTION_STARTED.input
  Json parent;                      // EXECUTION_STARTED.parent ({execution_id, key}) or null
  int64_t head = 0;                 // the highest sequence seen
  Json result;                      // terminal payload (value / error / next), else null
  std::optional<int64_t> park_seq;  // the open park, when suspended
};

// Folds the events (ascending) into a state. kCorruption (subject: the
// execution) when a kernel event's payload lacks its kind's shape; every
// kernel event of the log is checked, so a log that folds can be replayed.
Result<ExecutionState> Fold(std::span<const Envelope> events);

// The newest park that no answering event follows (events ascending), or
// nullopt. Ignorable appends after a park (a denial, an app event) do not
// close it.
const Envelope* FindOpenPark(std::span<const Envelope> events);

// True if some answering event in `events` has sequence > seq.
bool AnsweredAfter(std::span<const Envelope> events, int64_t seq);

// The child execution id the runtime derives from a parent id and a key.
std::string ChildExecutionId(std::string_view parent_id, std::string_view key);

// A terminal child's result as recorded in a parent's EXECUTION_RESUMED value:
// {"status":"completed","value":v} | {"status":"failed","error":{code,message}}
// | {"status":"cancelled"} | {"status":"continued","next":id}; nullopt when
// the child is not terminal.
std::optional<Json> ChildResult(const ExecutionState& child);

}  // namespace once::runtime
