// Internal: the fence protocol of a resume and of a takeover claim (design
// record D1/D2; docs/event-store.md "Fences"): what a resume must find in
// the log before it takes a token, how it takes one (the conditional
// acquire, last, retried on a dead acquirer within a budget), and how
// takeover claims a running execution from a dead owner. The runtime's
// resume, cancel, park answers and takeover all go through here.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/runtime/runtime.h"
#include "once/store/event_store.h"

namespace once::runtime::internal {

// What a resume must find: the park it answers (nullopt: the open one), and
// for a message delivery the topic that park must wait on.
struct ResumeTarget {
  std::optional<int64_t> park_seq;
  std::optional<std::string> topic;
};

// Refusals that need no token: unknown, terminal, not parked, not parked at
// the expected sequence, not waiting on the topic (kResumeRefused with the
// reason); kCorruption for a log that cannot be read. A resumable log's
// folded state comes back, so that a caller that runs it need not fold the
// log again.
Result<ExecutionState> CheckResumable(std::string_view id, std::span<const Envelope> log,
                                      const ResumeTarget& target);

// What a resume's result says of the park it answered: resumed, noop
// (kResumeRefused: nothing to answer), contended (kResumeContended), or
// nullopt (any other error: a lost append, or a failure, for the caller).
std::optional<ParkVerdict> VerdictOf(const Result<RunOutcome>& resumed);

// Appends a combined acquire's tail to `log`, and reads the rest of the
// log when the tail stopped at the store's read_events_max.
Status AdvanceByTail(store::EventStore& store, std::string_view id, std::vector<Envelope>& log,
                     std::vector<Envelope> tail);

// The first wait of `park` of this type (and key == value when key is set).
const Json* FindWait(const Envelope& park, std::string_view type, const char* key = nullptr,
                     std::string_view value = {});

// The token a run presents. `fresh`: the log was advanced to the store's
// head under that token (the combined acquire returned the tail).
// `owner_recorded`: the acquire named the run's owner in the run row.
struct Fenced {
  int64_t token = 0;
  bool fresh = false;
  bool owner_recorded = false;
};

class FenceProtocol {
 public:
  explicit FenceProtocol(store::EventStore& store) : store_(store) {}

  // The token a resume presents: the one held (options.fence), one taken
  // with the conditional acquire on the park (options.fence_if_parked_at:
  // each acquire spends one of *budget; a stale answer whose park is still
  // the same unanswered one is retried on the store's current token; none
  // left is kResumeContended), or none. `owner` (may be empty) is recorded
  // with the acquire. A store without the conditional acquire gets a plain
  // AcquireFence; one that does not fence, no token.
  // `expect_fence`: the token to expect first instead of the park's (the
  // current one a lost append reported: the park's is stale forever). With
  // an empty `log` on a store with AcquireFenceIfReadTail it is the park's
  // own token (acquire-first): the park is not read; the acquire judges it
  // and fills `log` with the whole log, which the caller must check.
  Result<Fenced> ForResume(std::string_view id, std::vector<Envelope>& log,
                           const RunOptions& options, std::string_view owner, int* budget,
                           std::optional<int64_t> expect_fence = std::nullopt);

  // Takeover's claim of a running execution: ONE conditional acquire
  // expecting the token seen, no answering event past the log's head, and
  // (on a store with kOwnership) the run row naming `expected_owner`; on
  // success `owner` is recorded and the log advanced by the tail. nullopt:
  // lost (someone moved the token, answered, or owns it now).
  Result<std::optional<Fenced>> ClaimRunning(std::string_view id, std::vector<Envelope>& log,
                                             int64_t token_seen, std::string_view owner,
                                             std::optional<std::string_view> expected_owner);

 private:
  Result<Fenced> AcquireIfParked(std::string_view id, std::vector<Envelope>& log, int64_t park_seq,
                                 std::string_view owner, int* budget,
                                 std::optional<int64_t> expect_fence);
  // One conditional acquire; with the combined capability the log is
  // advanced by the tail it returns (and *fresh set).
  Result<store::ConditionalAcquire> AcquireOnce(std::string_view id, std::vector<Envelope>& log,
                                                store::FenceExpectation expect, bool* fresh);

  store::EventStore& store_;
};

}  // namespace once::runtime::internal
