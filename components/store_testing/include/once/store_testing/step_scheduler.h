// File: step_scheduler.h
//
// A deterministic step scheduler for interleaving tests. Several actors (one
// thread each) share a store; each actor reaches it through its own StepStore,
// a decorator that holds every store call at a gate until the schedule says it
// is that actor's turn. So the actors run ONE STORE CALL AT A TIME, in exactly
// the order the schedule names, and an actor can be crashed between any two of
// its calls.
//
// A schedule is text: a letter per step (A = actor 0, B = actor 1, ...); a
// letter followed by '!' crashes that actor at that point instead (its next
// call, and every later one, fails with kCancelled without reaching the
// store). Spaces are ignored.
//
//   "ABBA"     A makes a call, then B twice, then A.
//   "AB!A"     A makes a call, B crashes, A makes a call.
//
// Steps are taken strictly in order: a step waits until its actor reaches its
// next store call (or returns: a step for an actor that has finished or
// crashed is skipped). When the schedule runs out, StepOptions::after decides:
// kRunToCompletion lets the lowest-lettered unfinished actor run to its end,
// then the next (deterministic), kCrashAll crashes every unfinished actor
// (the schedule is then a crash point: "what if everyone died right here").
//
// Every interleaving of two actors up to 7 calls, each run on a fresh store:
//
//   std::vector<Schedule> all = EnumerateSchedules(2, 7);   // 255 schedules
//   ManualClock clock;
//   RunEverySchedule(all, FreshStores(MemoryFactory(), {.clock = &clock}),
//       [](EventStore& store) {                 // per schedule, ungated setup
//         Park(store);
//         auto state = std::make_shared<Outcome>();
//         return ScenarioRun{
//             .actors = {[state](EventStore& s) { Resume(s, state->a); },
//                        [state](EventStore& s) { Resume(s, state->b); }},
//             .check = [state](EventStore& store, const StepRun& run) {
//               EXPECT_LE(CountResumes(store), 1) << run.TraceText();
//             }};
//       },
//       {.after = AfterSchedule::kCrashAll});
//
// Actors: an actor must return once its calls fail with kCancelled (crashed)
// or kTimeout (the run was abandoned); one that loops forever on an error
// hangs the run. GoogleTest assertions may be used in actors (SCOPED_TRACE is
// per thread: prefer recording results and asserting in `check`).
// Deadlock guard: if no step can be taken for StepOptions::gate_timeout (an
// actor blocked outside the store waiting for another), the run is abandoned:
// every gate answers kTimeout and StepRun::timed_out is set.
//
// Threads: a StepScheduler and its StepStores are shared by the actor threads
// of one run; RunActors / RunEverySchedule are called from one test thread.

#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"
#include "once/store/event_store.h"
#include "once/store/wrapper.h"
#include "once/store_testing/conformance.h"

namespace once::store_testing {

inline constexpr size_t kScheduleActorsMax = 26;  // letters A..Z

struct ScheduleStep {
  size_t actor = 0;    // 0 = 'A'
  bool crash = false;  // crash the actor here instead of letting it call
  friend bool operator==(const ScheduleStep&, const ScheduleStep&) = default;
};

class Schedule {
 public:
  Schedule() = default;
  explicit Schedule(std::vector<ScheduleStep> steps) : steps_(std::move(steps)) {}
  // "AB!A" (see the file comment); anything else is kInvalidArgument.
  static Result<Schedule> Parse(std::string_view text);

  std::string ToString() const;  // Parse(ToString()) == *this; "" for the empty schedule
  const std::vector<ScheduleStep>& steps() const { return steps_; }
  size_t size() const { return steps_.size(); }
  friend bool operator==(const Schedule&, const Schedule&) = default;

 private:
  std::vector<ScheduleStep> steps_;
};

// Every schedule over `actor_count` actors of length 0..length_max, shortest
// first, then in letter order. Without crashes there are sum(k^n) of them
// (2 actors, length 7: 255); with_crashes adds "X!" for every actor as a step.
std::vector<Schedule> EnumerateSchedules(size_t actor_count, size_t length_max,
                                         bool with_crashes = false);

enum class AfterSchedule {
  kRunToCompletion,  // unfinished actors run to their end, lowest letter first
  kCrashAll,         // unfinished actors crash
};

struct StepOptions {
  AfterSchedule after = AfterSchedule::kRunToCompletion;
  std::chrono::milliseconds gate_timeout{10'000};  // no step possible this long: abandon
  bool stop_at_first_failure = true;               // RunEverySchedule
};

// The gate the StepStores of one run share.
class StepScheduler {
 public:
  StepScheduler(Schedule schedule, size_t actor_count, StepOptions options = {});

  // Before `actor`'s store call `call`. Blocks until the schedule grants it.
  // Ok: make the call, then Release(actor). kCancelled: the actor is crashed
  // (do not make the call). kTimeout: the run was abandoned.
  Status Gate(size_t actor, std::string_view call);
  // After the granted call returned.
  void Release(size_t actor);
  // The actor's thread has returned: it takes no more steps.
  void Finish(size_t actor);

  bool crashed(size_t actor) const;
  bool timed_out() const;
  // What happened, in order: "A:Append" (a granted call), "B!" (a crash),
  // "A-" (a step skipped because A had finished or crashed).
  std::vector<std::string> trace() const;

 private:
  struct Actor {
    bool waiting = false;  // at the gate
    bool finished = false;
    bool crashed = false;
    std::string call;
  };
  static constexpr size_t kNone = static_cast<size_t>(-1);

  void PumpLocked();
  void GrantLocked(size_t actor);

  const Schedule schedule_;
  const StepOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Actor> actors_;       // GUARDED_BY(mu_)
  size_t next_step_ = 0;            // GUARDED_BY(mu_)
  size_t granted_ = kNone;          // GUARDED_BY(mu_): the actor whose call is running
  bool timed_out_ = false;          // GUARDED_BY(mu_)
  std::vector<std::string> trace_;  // GUARDED_BY(mu_)
};

// Every capability is gated and then forwarded.
struct GateEverything {
  static constexpr store::Decide kAcquireFence = store::Decide::kCustom;
  static constexpr store::Decide kAcquireFenceIf = store::Decide::kCustom;
  static constexpr store::Decide kAppendIfUnchanged = store::Decide::kCustom;
  static constexpr store::Decide kCopyPrefix = store::Decide::kCustom;
  static constexpr store::Decide kTruncatePrefixKeeping = store::Decide::kCustom;
  static constexpr store::Decide kAcquireFenceIfReadTail = store::Decide::kCustom;
  static constexpr store::Decide kOwnership = store::Decide::kCustom;
  static constexpr store::Decide kTransaction = store::Decide::kCustom;
};

// One actor's view of the store: every method (except limits() and
// Supports()) passes the scheduler's gate first. Supports() is the target's.
class StepStore final : public store::EventStoreWrapper<StepStore, GateEverything> {
 public:
  // `target` and `scheduler` must outlive the StepStore.
  StepStore(EventStore& target, StepScheduler& scheduler, size_t actor)
      : EventStoreWrapper(target), scheduler_(scheduler), actor_(actor) {}

  Result<int64_t> Append(const store::AppendRequest& req) override;
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const store::AppendRequest> requests) override;
  Result<std::vector<store::Envelope>> ReadRange(std::string_view id, int64_t first,
                                                 int64_t last) override;
  Result<int64_t> Head(std::string_view id) override;
  Result<store::ExecutionPage> ListExecutions(std::string_view after, size_t limit) override;
  Status DeleteExecution(std::string_view id) override;

  Result<int64_t> CustomAcquireFence(std::string_view id);
  Result<int64_t> CustomReadFence(std::string_view id);
  Result<store::ConditionalAcquire> CustomAcquireFenceIf(std::string_view id,
                                                         store::FenceExpectation expect);
  // One step: the acquire and its read are one atomic store call.
  Result<store::AcquireWithTail> CustomAcquireFenceIfReadTail(std::string_view id,
                                                              store::FenceExpectation expect,
                                                              int64_t read_after);
  Result<int64_t> CustomAppendIfUnchanged(const store::AppendRequest& req, int64_t observed);
  Status CustomCopyPrefix(std::string_view from, std::string_view to, int64_t through);
  Status CustomTruncatePrefixKeeping(std::string_view id, int64_t first_kept);
  Result<std::optional<store::RunOwner>> CustomRunOwnerOf(std::string_view id);
  // One step: the work and the append are one atomic store call.
  Result<int64_t> CustomAppendInTransaction(std::string_view id, store::TransactionWorkRef work);

 protected:
  std::string_view name() const override { return "step"; }

 private:
  template <class F>
  auto Gated(std::string_view call, F&& f) -> decltype(f());

  StepScheduler& scheduler_;
  const size_t actor_;
};

// An actor: runs on its own thread with its gated view of the store.
using Actor = std::function<void(EventStore& store)>;

struct StepRun {
  Schedule schedule;
  std::vector<std::string> trace;  // StepScheduler::trace()
  std::vector<bool> crashed;       // per actor
  bool timed_out = false;
  std::string TraceText() const;  // "A:Head B:Head B:Append ..."
};

// Runs the actors (one thread each, actor i = letter i) over StepStores on
// `store` under `schedule`; returns when every actor has returned.
StepRun RunActors(EventStore& store, const Schedule& schedule, std::span<const Actor> actors,
                  const StepOptions& options = {});

// What one schedule runs: built afresh per schedule by the Scenario.
struct ScenarioRun {
  std::vector<Actor> actors;
  // After every actor returned, on the test thread, with the ungated store.
  std::function<void(EventStore& store, const StepRun& run)> check;
};
// Sets up the fresh, ungated store (e.g. writes a park) and returns the run.
using Scenario = std::function<ScenarioRun(EventStore& store)>;
using StoreMaker = std::function<Result<StoreHarness>()>;

// A fresh store per call from `factory` with `config`.
StoreMaker FreshStores(BackendFactory factory, StoreConfig config);

// For each schedule: a fresh store, scenario(store), RunActors, check, all
// under SCOPED_TRACE(schedule). A timed-out run is a test failure. Returns the
// number of schedules run (fewer when stop_at_first_failure stopped it).
size_t RunEverySchedule(std::span<const Schedule> schedules, const StoreMaker& make_store,
                        const Scenario& scenario, const StepOptions& options = {});

}  // namespace once::store_testing
