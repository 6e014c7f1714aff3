// The operator's commands over one store (SQLite file or PostgreSQL schema),
// shared by the loom CLI and `loom serve`. Reads go through
// once::visibility (read-only); each act opens the real stores only after
// the read side has checked the target, so bad input writes nothing.
//
//   ONCE_ASSIGN_OR_RETURN(auto ops, Ops::Open({.sqlite_path = "loom.db"}));
//   ONCE_ASSIGN_OR_RETURN(Json shown, ops->Show("order-7", 1000));
//   ONCE_ASSIGN_OR_RETURN(Json done, ops->Cancel("order-7", "operator"));
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/events/envelope.h"
#include "once/visibility/visibility.h"

namespace once::store {
class EventStore;
}
namespace once::inbox {
class InboxStore;
}

namespace once::loom_app {

using events::Json;

// Called now and then with (done, total); total 0 = unknown.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct OpsLimits {
  size_t show_events_max = 10'000;  // events `show` returns (the newest are cut)
  size_t show_messages_max = 100;   // pending messages `show` returns
};

// How `retention run` deletes: executions per transaction, and a pause
// after each, so that a serving process writing the same SQLite file gets its
// write lock between batches (its busy handler backs off 1-100 ms; a
// deleter that begins its next batch at once keeps winning the lock).
struct RetentionPace {
  size_t batch_executions = 64;
  int64_t batch_pause_ms = 10;
};

class Ops {
 public:
  static Result<std::unique_ptr<Ops>> Open(const visibility::Target& target,
                                           visibility::VisibilityLimits limits = {});
  ~Ops();

  visibility::Visibility& view() { return *view_; }
  const visibility::Target& target() const { return target_; }

  // Everything about one execution: its row, its log (the oldest
  // events_max events), the open park and its waits, timers, pending
  // messages, children. kNotFound for an unknown id.
  Result<Json> Show(const std::string& id, size_t events_max);

  // Appends EXECUTION_CANCELLED under a freshly acquired fence (whoever runs
  // the execution is fenced out). kResumeRefused "terminal" when it ended.
  Result<Json> Cancel(const std::string& id, const std::string& reason);
  // Answers the open park under the conditional acquire (the park's fence
  // and sequence): with its timer wait when it has one, else with nothing
  // (the body parks again when it runs). The execution is then running; a
  // node's Recover() (takeover) runs the body. kResumeRefused
  // "not-suspended" when no park is open; kResumeContended when someone
  // else answered it meanwhile.
  Result<Json> Resume(const std::string& id);
  // Stores a message in the execution's inbox; the service's Inbox delivers
  // it (at its park, its next Send or its periodic sweep).
  Result<Json> Send(const std::string& id, const std::string& topic, const Json& message);
  // A new execution whose log is a copy of `id`'s events through its
  // from_step-th step (STEP_COMPLETED or STEP_FAILED; 0 = its start only).
  // new_id "" = "<id>.fork<N>.<ms>". kUnsupported when the copied prefix
  // starts a child.
  Result<Json> Fork(const std::string& id, int64_t from_step, std::string new_id,
                    const ProgressFn& progress);
  // Deletes terminal executions whose end is at least age_ms old, except
  // those the inbox still holds rows for or whose parent is parked on them,
  // in batches paced by `pace`. dry_run: counts only.
  Result<Json> Retention(int64_t age_ms, bool dry_run, const ProgressFn& progress,
                         RetentionPace pace = {});

  // The log `show` reads: the oldest events_max events, page by page
  // (ReadRange), after one Head for the progress total. An unknown id is an
  // empty log. Public for `loom bench --preload`, which times it.
  Result<std::vector<events::Envelope>> ReadLog(const std::string& id, size_t events_max,
                                                const ProgressFn& progress = {});

 private:
  explicit Ops(visibility::Target target);
  Result<store::EventStore*> Store();
  Result<inbox::InboxStore*> Inbox();

  visibility::Target target_;
  std::unique_ptr<visibility::Visibility> view_;
  SystemClock clock_;
  std::mutex mu_;  // the write stores, opened on first use
  std::unique_ptr<store::EventStore> store_;
  std::unique_ptr<inbox::InboxStore> inbox_;
};

// One envelope as the CLI's --json and the API print it.
Json EventJson(const events::Envelope& e);

// The exit code of an error (docs/operations.md, "Exit codes").
int ExitCodeOf(const Error& e);

}  // namespace once::loom_app
