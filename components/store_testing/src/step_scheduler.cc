#include "once/store_testing/step_scheduler.h"

#include <gtest/gtest.h>

#include <thread>

namespace once::store_testing {
namespace {

char Letter(size_t actor) { return static_cast<char>('A' + actor); }

std::string Name(size_t actor, std::string_view what) {
  return std::string(1, Letter(actor)) + std::string(what);
}

}  // namespace

// ---- Schedule ----------------------------------------------------------------

Result<Schedule> Schedule::Parse(std::string_view text) {
  std::vector<ScheduleStep> steps;
  for (char c : text) {
    if (c == ' ') continue;
    if (c >= 'A' && c <= 'Z') {
      steps.push_back({.actor = static_cast<size_t>(c - 'A')});
    } else if (c == '!' && !steps.empty() && !steps.back().crash) {
      steps.back().crash = true;
    } else {
      return MakeError(ErrorCode::kInvalidArgument,
                       "schedule \"" + std::string(text) + "\": unexpected '" + c +
                           "' (letters A-Z, each optionally followed by '!')");
    }
  }
  return Schedule(std::move(steps));
}

std::string Schedule::ToString() const {
  std::string out;
  for (const ScheduleStep& s : steps_) {
    out += Letter(s.actor);
    if (s.crash) out += '!';
  }
  return out;
}

std::vector<Schedule> EnumerateSchedules(size_t actor_count, size_t length_max, bool with_crashes) {
  ONCE_CHECK(actor_count >= 1 && actor_count <= kScheduleActorsMax);
  std::vector<ScheduleStep> alphabet;
  for (size_t a = 0; a < actor_count; ++a) alphabet.push_back({.actor = a});
  if (with_crashes) {
    for (size_t a = 0; a < actor_count; ++a) alphabet.push_back({.actor = a, .crash = true});
  }
  std::vector<Schedule> out = {Schedule()};
  size_t level_begin = 0;
  for (size_t length = 1; length <= length_max; ++length) {
    size_t level_end = out.size();
    for (size_t i = level_begin; i < level_end; ++i) {
      for (const ScheduleStep& step : alphabet) {
        std::vector<ScheduleStep> steps = out[i].steps();
        steps.push_back(step);
        out.emplace_back(std::move(steps));
      }
    }
    level_begin = level_end;
  }
  return out;
}

// ---- StepScheduler -----------------------------------------------------------

StepScheduler::StepScheduler(Schedule schedule, size_t actor_count, StepOptions options)
    : schedule_(std::move(schedule)), options_(options), actors_(actor_count) {
  ONCE_CHECK(actor_count <= kScheduleActorsMax);
  for (const ScheduleStep& s : schedule_.steps()) {
    ONCE_CHECK_MSG(s.actor < actor_count, "the schedule names an actor that does not exist");
  }
}

void StepScheduler::GrantLocked(size_t actor) {
  granted_ = actor;
  trace_.push_back(Name(actor, ":" + actors_[actor].call));
  cv_.notify_all();
}

// Takes every step that can be taken now. Each decision depends only on the
// actors' states at their gates (never on timing), so a schedule always
// produces the same sequence of calls.
void StepScheduler::PumpLocked() {
  while (granted_ == kNone && !timed_out_) {
    if (next_step_ < schedule_.size()) {
      const ScheduleStep step = schedule_.steps()[next_step_];
      Actor& a = actors_[step.actor];
      if (a.finished || a.crashed) {
        trace_.push_back(Name(step.actor, "-"));
      } else if (step.crash) {
        a.crashed = true;
        trace_.push_back(Name(step.actor, "!"));
        cv_.notify_all();
      } else if (a.waiting) {
        ++next_step_;
        GrantLocked(step.actor);
        return;
      } else {
        return;  // wait until the actor reaches its next call or returns
      }
      ++next_step_;
      continue;
    }
    for (size_t i = 0; i < actors_.size(); ++i) {
      Actor& a = actors_[i];
      if (a.finished || a.crashed) continue;
      if (options_.after == AfterSchedule::kCrashAll) {
        a.crashed = true;
        trace_.push_back(Name(i, "!"));
        cv_.notify_all();
        continue;
      }
      if (a.waiting) GrantLocked(i);
      return;  // the lowest unfinished actor runs to its end first
    }
    return;
  }
}

Status StepScheduler::Gate(size_t actor, std::string_view call) {
  std::unique_lock<std::mutex> lock(mu_);
  Actor& a = actors_.at(actor);
  auto crashed_error = [&] {
    return MakeError(ErrorCode::kCancelled,
                     "actor " + std::string(1, Letter(actor)) + " crashed by the schedule");
  };
  auto timeout_error = [&] {
    return MakeError(ErrorCode::kTimeout, "step schedule abandoned: no step possible in time");
  };
  if (a.crashed) return crashed_error();
  if (timed_out_) return timeout_error();
  a.waiting = true;
  a.call = std::string(call);
  PumpLocked();
  auto deadline = std::chrono::steady_clock::now() + options_.gate_timeout;
  while (granted_ != actor && !a.crashed && !timed_out_) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && granted_ != actor &&
        !a.crashed) {
      timed_out_ = true;
      cv_.notify_all();
    }
  }
  a.waiting = false;
  if (granted_ == actor) return Ok();
  return a.crashed ? crashed_error() : timeout_error();
}

void StepScheduler::Release(size_t actor) {
  std::lock_guard<std::mutex> lock(mu_);
  ONCE_CHECK(granted_ == actor);
  granted_ = kNone;
  PumpLocked();
  cv_.notify_all();
}

void StepScheduler::Finish(size_t actor) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_.at(actor).finished = true;
  actors_.at(actor).waiting = false;
  PumpLocked();
  cv_.notify_all();
}

bool StepScheduler::crashed(size_t actor) const {
  std::lock_guard<std::mutex> lock(mu_);
  return actors_.at(actor).crashed;
}

bool StepScheduler::timed_out() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timed_out_;
}

std::vector<std::string> StepScheduler::trace() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trace_;
}

// ---- StepStore ---------------------------------------------------------------

template <class F>
auto StepStore::Gated(std::string_view call, F&& f) -> decltype(f()) {
  if (Status s = scheduler_.Gate(actor_, call); !s) return std::unexpected(s.error());
  auto result = f();
  scheduler_.Release(actor_);
  return result;
}

Result<int64_t> StepStore::Append(const store::AppendRequest& req) {
  return Gated("Append", [&] { return target().Append(req); });
}
Result<std::vector<Result<int64_t>>> StepStore::AppendBatch(
    std::span<const store::AppendRequest> requests) {
  return Gated("AppendBatch", [&] { return target().AppendBatch(requests); });
}
Result<std::vector<store::Envelope>> StepStore::ReadRange(std::string_view id, int64_t first,
                                                          int64_t last) {
  return Gated("ReadRange", [&] { return target().ReadRange(id, first, last); });
}
Result<int64_t> StepStore::Head(std::string_view id) {
  return Gated("Head", [&] { return target().Head(id); });
}
Result<store::ExecutionPage> StepStore::ListExecutions(std::string_view after, size_t limit) {
  return Gated("ListExecutions", [&] { return target().ListExecutions(after, limit); });
}
Status StepStore::DeleteExecution(std::string_view id) {
  return Gated("DeleteExecution", [&] { return target().DeleteExecution(id); });
}
Result<int64_t> StepStore::CustomAcquireFence(std::string_view id) {
  return Gated("AcquireFence", [&] { return target().AcquireFence(id); });
}
Result<int64_t> StepStore::CustomReadFence(std::string_view id) {
  return Gated("ReadFence", [&] { return target().ReadFence(id); });
}
Result<store::ConditionalAcquire> StepStore::CustomAcquireFenceIf(std::string_view id,
                                                                  store::FenceExpectation expect) {
  return Gated("AcquireFenceIf", [&] { return target().AcquireFenceIf(id, expect); });
}
Result<store::AcquireWithTail> StepStore::CustomAcquireFenceIfReadTail(
    std::string_view id, store::FenceExpectation expect, int64_t read_after) {
  return Gated("AcquireFenceIfReadTail",
               [&] { return target().AcquireFenceIfReadTail(id, expect, read_after); });
}
Result<int64_t> StepStore::CustomAppendIfUnchanged(const store::AppendRequest& req,
                                                   int64_t observed) {
  return Gated("AppendIfUnchanged", [&] { return target().AppendIfUnchanged(req, observed); });
}
Status StepStore::CustomCopyPrefix(std::string_view from, std::string_view to, int64_t through) {
  return Gated("CopyPrefix", [&] { return target().CopyPrefix(from, to, through); });
}
Status StepStore::CustomTruncatePrefixKeeping(std::string_view id, int64_t first_kept) {
  return Gated("TruncatePrefixKeeping",
               [&] { return target().TruncatePrefixKeeping(id, first_kept); });
}

Result<std::optional<store::RunOwner>> StepStore::CustomRunOwnerOf(std::string_view id) {
  return Gated("RunOwnerOf", [&] { return target().RunOwnerOf(id); });
}

Result<int64_t> StepStore::CustomAppendInTransaction(std::string_view id,
                                                     store::TransactionWorkRef work) {
  return Gated("AppendInTransaction", [&] { return target().AppendInTransaction(id, work); });
}

// ---- Runs --------------------------------------------------------------------

std::string StepRun::TraceText() const {
  std::string out;
  for (const std::string& t : trace) {
    if (!out.empty()) out += ' ';
    out += t;
  }
  return out;
}

StepRun RunActors(EventStore& store, const Schedule& schedule, std::span<const Actor> actors,
                  const StepOptions& options) {
  StepScheduler scheduler(schedule, actors.size(), options);
  std::vector<std::unique_ptr<StepStore>> views;
  for (size_t i = 0; i < actors.size(); ++i) {
    views.push_back(std::make_unique<StepStore>(store, scheduler, i));
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < actors.size(); ++i) {
    threads.emplace_back([&, i] {
      actors[i](*views[i]);
      scheduler.Finish(i);
    });
  }
  for (auto& t : threads) t.join();
  StepRun run{.schedule = schedule, .trace = scheduler.trace(), .timed_out = scheduler.timed_out()};
  for (size_t i = 0; i < actors.size(); ++i) run.crashed.push_back(scheduler.crashed(i));
  return run;
}

StoreMaker FreshStores(BackendFactory factory, StoreConfig config) {
  return [factory = std::move(factory), config] { return factory.make(config); };
}

size_t RunEverySchedule(std::span<const Schedule> schedules, const StoreMaker& make_store,
                        const Scenario& scenario, const StepOptions& options) {
  size_t runs = 0;
  for (const Schedule& schedule : schedules) {
    SCOPED_TRACE("schedule \"" + schedule.ToString() + "\"");
    const bool failed_before = testing::Test::HasFailure();
    Result<StoreHarness> harness = make_store();
    if (!harness) {
      ADD_FAILURE() << "no store: " << harness.error().ToString();
      return runs;
    }
    EventStore& store = *harness->store;
    ScenarioRun scenario_run = scenario(store);
    StepRun run = RunActors(store, schedule, scenario_run.actors, options);
    EXPECT_FALSE(run.timed_out) << "no step was possible for " << options.gate_timeout.count()
                                << " ms; trace: " << run.TraceText();
    if (scenario_run.check) scenario_run.check(store, run);
    ++runs;
    if (options.stop_at_first_failure && !failed_before && testing::Test::HasFailure()) {
      ADD_FAILURE() << "stopped at the first failing schedule \"" << schedule.ToString()
                    << "\"; trace: " << run.TraceText();
      break;
    }
  }
  return runs;
}

}  // namespace once::store_testing
