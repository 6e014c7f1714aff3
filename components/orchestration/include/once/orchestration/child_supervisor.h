// File: child_supervisor.h
//
// ChildSupervisor resumes a parked parent when the children it awaits have
// settled, safely from any number of nodes at once, and answers the
// retention question "is this finished child still awaited?" (the pin).
//
// Resume rule (design record D2, "as built"): ResumeParent(parent) reads the
// parent's log; unless it is parked on CHILD_DONE (await_child /
// await_children) with every awaited child terminal, it is kNoop. Then:
//   1. an UNFENCED Resume (no options; the runtime derives the children's
//      answer under its own re-check). Taking a fence up front would leave
//      every supervised parent fenced forever, and a fenced execution refuses
//      an unfenced manual resume;
//   2. only on kStaleFence (or kSequenceConflict: someone appended first) it
//      resumes with fence_if_parked_at = the re-read park, within ONE budget
//      of conditional_resumes_max (3) acquires (Runtime::AnswerPark: an
//      acquire that finds a dead acquirer's token and a resume whose append
//      a rival beat both spend one); a store without AcquireFenceIf keeps
//      a budget of acquisitions_max_without_fence_if (2) plain acquisitions
//      (the runtime falls back to AcquireFence).
//   kResumeRefused at any point (the park was answered by a rival, or is
//   gone) is kNoop: losing to another resumer is not an error.
//   Every try failing stale / contended is kContended: with `redrive`
//   wired (kernel.features.redrive on) the supervisor writes the first
//   re-drive row {parent, now + backoff delay of attempt 0, redrive{0}} and
//   returns; its Redriver (registered with the TimerService at construction)
//   later re-derives the resume from the log (done | noop | contended, never
//   writing rows itself: the service writes attempt + 1 and reports
//   exhaustion once). Without `redrive`, nothing is written and one
//   kResumeContended error {attempts} goes to on_error (Recover() re-drives).
//
// Pin (design record D3): ParkedOnChild(child) is true while the child's
// parent is non-terminal and parked on CHILD_DONE for it (a child wait with
// the child's own key, which an await_children park names for every group
// member). The edge child -> parent is the child's EXECUTION_STARTED.parent,
// falling back to the edges this supervisor has seen (OnChildSettled) or
// rebuilt from the parents' CHILD_STARTED events (Rebuild(), for logs written
// before EXECUTION_STARTED carried `parent`). A log that reads as
// kPayloadShredded (child or parent) is NOT pinned: it is unreadable for
// good, and a pin would block its retention forever. Any other read failure
// is returned, so the retention run fails visibly and keeps the log.
//
//   ChildSupervisor supervisor(rt, clock, rng, {.on_error = report});
//   runtime_options.on_child_settled = [&](const Json& p) { supervisor.OnChildSettled(p); };
//   LogLifecycle lifecycle(store, clock, {.pinned = PinParkedChildren(supervisor)});
//
// Threads: every method may be called from any thread (the edge map and the
// rng are under a mutex); the runtime, stores and service must be shareable.

#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "once/base/clock.h"
#include "once/base/rng.h"
#include "once/lifecycle/log_lifecycle.h"
#include "once/orchestration/redrive.h"
#include "once/runtime/runtime.h"
#include "once/timers/timer_service.h"

namespace once::orchestration {

struct ChildSupervisorOptions {
  std::optional<RedriveWiring> redrive;       // set only when kernel.features.redrive is on
  int conditional_resumes_max = 3;            // conditional acquires per ResumeParent
  int acquisitions_max_without_fence_if = 2;  // the same, on a store without AcquireFenceIf
  timers::BackoffPolicy backoff;              // the first re-drive row's delay (attempt 0)
  std::function<void(const Error&)> on_error;
};

enum class SuperviseVerdict { kResumed, kNoop, kContended };

struct ChildSupervisorStats {
  int64_t resumed = 0;
  int64_t noop = 0;
  int64_t contended = 0;
  int64_t conditional_resumes = 0;  // resumes made under the conditional acquire
  int64_t redrive_rows_written = 0;
};

class ChildSupervisor final : public timers::Redriver {
 public:
  // References must outlive the supervisor. With options.redrive, registers
  // itself with options.redrive->service (before the service is started).
  ChildSupervisor(runtime::Runtime& runtime, const Clock& clock, Rng& rng,
                  ChildSupervisorOptions options);

  // The runtime's on_child_settled listener: {execution_id, key} of the
  // settled child's parent. Errors go to on_error.
  void OnChildSettled(const events::Json& parent);

  // The resume rule above, including the contended hand-off.
  Result<SuperviseVerdict> ResumeParent(std::string_view parent_id);
  // The contended hand-off alone, for a resume of `parent_id` someone else
  // lost after `attempts` tries (the runtime's park-time self-resume, see
  // App): with `redrive` the first re-drive row, else one kResumeContended
  // to on_error. Errors: the row's write.
  Status HandOffContended(std::string_view parent_id, int attempts);

  // timers::Redriver: re-derives the resume of row.execution_id from its log.
  Result<timers::RedriveAnswer> Redrive(const timers::TimerRow& row) override;

  // Rebuilds the child -> parent edges from every CHILD_STARTED in the store
  // (shredded logs are skipped). Returns the number of edges known.
  Result<size_t> Rebuild();

  // The pin (see above).
  Result<bool> ParkedOnChild(std::string_view child_id);

  ChildSupervisorStats stats() const;

 private:
  struct Edge {
    std::string parent_id;
    std::string key;
  };
  Result<SuperviseVerdict> TryResume(std::string_view parent_id);
  Result<std::optional<int64_t>> SettledPark(std::string_view parent_id);
  int AttemptsMax() const;
  void Remember(std::string child_id, Edge edge);
  std::optional<Edge> Recall(std::string_view child_id) const;
  void Count(int64_t ChildSupervisorStats::*field);
  void ReportError(const Error& e) const;

  runtime::Runtime& runtime_;
  const Clock& clock_;
  Rng& rng_;
  ChildSupervisorOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Edge, std::less<>> edges_;  // GUARDED_BY(mu_)
  ChildSupervisorStats stats_;                      // GUARDED_BY(mu_)
};

// The retention pin of D3 over `supervisor` (which must outlive it).
lifecycle::PinPredicate PinParkedChildren(ChildSupervisor& supervisor);

}  // namespace once::orchestration
