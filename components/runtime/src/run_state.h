// Internal: the state of one run of a workflow body.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "once/events/envelope.h"
#include "once/runtime/runtime.h"

namespace once::runtime::internal {

using events::KernelKind;

struct RunState {
  std::string id;
  std::string workflow;
  const WorkflowFn* fn = nullptr;
  Json input;
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

  Envelope Kernel(KernelKind kind, Json payload) const {
    return events::KernelEvent(kind, std::move(payload), fence);
  }
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
