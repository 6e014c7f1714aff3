// Internal: the state of one run of a workflow body, and what a Context asks
// of the runtime that runs it (RunHost). The Context and the Runtime share
// a RunState and talk through RunHost; neither reads the other's privates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "once/events/envelope.h"
#include "once/runtime/runtime.h"

namespace once::runtime::internal {

using events::KernelKind;

// How a body ended (or parked), kept until its last append is durable.
struct RunEnd {
  bool parked = false;
  RunOutcome outcome;     // an end: completed or failed
  Envelope park;          // a park: the open park
  bool new_park = false;  // a park this run appended (its sequence comes with the append)
  // What the last pending event holds is lent to it, not copied: an end's
  // value (the outcome's value is null until then) or a new park's payload
  // (park's is null). End takes it back once the append returns (TakeBack).
  bool lent = false;
};

// The member of an end's payload that holds its outcome's value.
inline const char* EndValueMember(ExecutionStatus status) {
  return status == ExecutionStatus::kCompleted ? "value" : "error";
}

struct RunState {
  std::string id;
  std::string workflow;
  const WorkflowFn* fn = nullptr;
  Json input;  // a resumed or taken-over run's input, folded from its log
  // The input the body reads (BodyInput): `input`, or a start's own input,
  // lent to its pending EXECUTION_STARTED (the payload's "input" member)
  // instead of copied into it (set by a start, null once the body returns). An
  // append that takes that event while the body runs keeps the lent
  // member's block here (KeepLentInput), so the body's reference stays good,
  // and the event gets a copy.
  const Json* lent_input = nullptr;
  Json::object_t::node_type lent_input_kept;
  Json parent;  // {"execution_id", "key"} or null
  std::string principal;
  // The replay view: the durable log, plus a buffered EXECUTION_RESUMED at
  // its end when this run answers a park. Context consumes it in order.
  std::vector<Envelope> log;
  int64_t head = 0;               // the durable head
  int64_t fence = 0;              // the token this run presents (0: none held)
  std::vector<Envelope> pending;  // appended at the next boundary
  // pending holds a step result: it must be durable before the next effect
  // (a step fn, a child start, a park, the end, the call returning).
  bool step_result_pending = false;
  // A resume's answer (EXECUTION_RESUMED) is made durable before the
  // body's first effect, not with that effect's result: until it is, the
  // park looks unanswered, and a rival resumer of the same park (another
  // node's timer, the child supervisor, Recover) takes the fence after ours
  // and runs the same step while ours runs it; and an unfenced resume the
  // store would refuse (someone fenced the execution) ran the step first.
  // Either way one effect ran twice in live processes, with no crash.
  // Cleared by the run's first append that lands (Runtime::Appended).
  bool answer_unconfirmed = false;

  // Ownership (a runtime with a node): the node running this body, whether
  // the execution's run row already names it (an owned acquire or an
  // earlier owned append), and the node's epoch when the run began.
  std::string_view owner;
  bool owner_recorded = false;
  uint64_t node_epoch = 0;

  // Where the replay is, and how the body ended, as the Context saw it
  // (the runtime's Finish reads these).
  size_t cursor = 0;    // next index of log to look at
  bool live = false;    // past the end of the log
  bool parked = false;  // the body parked (or stays parked)
  bool nondeterministic = false;
  std::optional<Error> latched;  // parked / nondeterminism / an append or gate failure
  std::optional<Json> continue_input;

  // A batch of resumes (Runtime::AnswerParks) writes its runs' last appends
  // together: with defer_end the end or park is not flushed but kept in
  // `end`, with its events still in `pending` (a continuation, an error,
  // or an effect's flush before it are written as usual).
  bool defer_end = false;
  std::optional<RunEnd> end;
  // An if_absent start's hold on its id (StartHolds): kept while the run
  // is, so a pipelined start holds it until its last append is written.
  std::shared_ptr<void> start_hold;

  const Json& BodyInput() const { return lent_input ? *lent_input : input; }

  Envelope Kernel(KernelKind kind, Json payload) const {
    return events::KernelEvent(kind, std::move(payload), fence);
  }

  RunState() = default;
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;
  // Frees the input and the replayed log's payloads from the bottom up
  // (events::FreeTree): nlohmann's destructor allocates a vector to free
  // each container, and a resumed run holds its whole log.
  ~RunState() {
    events::FreeTree(input);
    events::FreePayloads(log);
  }
};

// The next event of the replay view the body consumes (see IsBodyEvent), or
// null past the end (the run is live from then on).
const Envelope* NextBodyEvent(RunState& run);
// Whether NextBodyEvent would return an event (it changes nothing).
bool HasNextBodyEvent(const RunState& run);

// What Transact did with a step function that ran.
struct TransactOutcome {
  // committed: fn's value, durable with its STEP_COMPLETED. Otherwise fn's
  // error (rolled back, nothing appended: the Context records STEP_FAILED).
  bool committed = false;
  Result<Json> value;
};

// What a Context needs from the runtime running its body.
class RunHost {
 public:
  virtual const Clock& clock() const = 0;
  // kLimitExceeded when `value` would nest its event past json_depth_max.
  virtual Status CheckDepth(const Json& value, std::string_view what, std::string_view id,
                            bool wrapped) const = 0;
  // Appends everything pending in one append (a durability boundary).
  virtual Status Flush(RunState& run) = 0;
  // true: the child is this runtime's to run now (ScheduleRedrive it after
  // the parent's CHILD_STARTED is durable, or AbandonRedrive when that
  // fails); false: it existed already and its owner or a takeover runs it.
  virtual Result<bool> CreateChild(const RunState& parent, std::string_view workflow,
                                   std::string_view key, const std::string& child_id,
                                   const Json& input) = 0;
  // Runs the execution's body in the background (a new child, a continuation).
  virtual void ScheduleRedrive(std::string id) = 0;
  virtual void AbandonRedrive(const std::string& id) = 0;
  // The node's step gate: Ok when a step may start now.
  virtual Status BeforeStep(const RunState& run) = 0;
  // Whether the store offers kTransaction.
  virtual bool SupportsTransaction() const = 0;
  // Runs fn in the store's transaction with everything pending plus
  // STEP_COMPLETED {name, value} (see Context::Transaction). An error: the
  // store refused or failed (fn may have run; nothing was committed).
  virtual Result<TransactOutcome> Transact(RunState& run, std::string_view name,
                                           TransactionFnRef fn) = 0;

 protected:
  ~RunHost() = default;
};

// Whether the context consumes this event on replay: step results, child
// starts, parks, resumes and the body's own emitted app events. Audit
// appends (denials, outcomes, consumed messages, annotations, migrations)
// and app events the body did not write are skipped.
bool IsBodyEvent(const Envelope& e);

// Parses a recorded {code, message} into an Error.
Error ErrorFromJson(const Json& j, std::string subject);
Json ErrorToJson(const Error& e);

inline thread_local int outermost_depth = 0;

}  // namespace once::runtime::internal

namespace once::runtime {

// Inline mode: background work queued by a call runs when the outermost
// public call on this thread ends.
class Runtime::Outermost {
 public:
  explicit Outermost(Runtime& rt) : rt_(rt) { ++internal::outermost_depth; }
  ~Outermost() {
    if (internal::outermost_depth == 1) rt_.DrainDeferred();
    --internal::outermost_depth;
  }

 private:
  Runtime& rt_;
};

}  // namespace once::runtime
