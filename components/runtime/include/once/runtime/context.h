// File: context.h
//
// Context: what a workflow body sees. The body runs from the top on every
// start, resume and recovery; each call consumes the next recorded event of
// its kind from the log (replay) and only past the end of the log does
// anything new (live). Bodies must therefore be deterministic apart from what
// they do inside Step functions.
//
//   Result<Json> Order(Context& ctx, const Json& input) {
//     ONCE_ASSIGN_OR_RETURN(Json charged, ctx.Step("charge", [&]() -> Result<Json> {
//       return payments.Charge(input["amount"]);
//     }));
//     ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::hours(1)));
//     ONCE_RETURN_IF_ERROR(ctx.StartChild("ship", "ship", input));
//     ONCE_ASSIGN_OR_RETURN(Json shipped, ctx.AwaitChild("ship"));
//     return Json{{"charged", charged}, {"shipped", shipped}};
//   }
//
// Parking. Sleep, AwaitChild(ren) and Receive park the execution when their
// answer is not in the log: the context records the park (one
// EXECUTION_SUSPENDED naming every wait) and returns an error of code
// kCancelled whose message starts with "parked". The body should return it
// (ONCE_RETURN_IF_ERROR), but a park cannot be swallowed: from then on every
// context call returns the same error without doing anything, and the runtime
// ignores whatever the body returns. The same holds for a nondeterminism
// error (kNondeterminism: the body's calls do not match its log) and for a
// failed append (kStaleFence, kSequenceConflict, kUnavailable, ...): the run
// ends with that error and nothing more is appended.
//
// Durability. Events of a run are buffered and appended together at the
// boundaries, one append each. The rule: a step's recorded result is durable
// before any LATER effect can happen: the next Step function runs, a child
// starts, a continuation starts, the body parks or ends, or the Start /
// Resume call returns. So Step returns its result before it is durable, and
// the run's own EXECUTION_STARTED / EXECUTION_RESUMED ride along with the
// first boundary: start + one step + complete is ONE append, a resume's
// {EXECUTION_RESUMED, ..., the park or the end} one more. A crash (or a
// refused append: a rival's fence, a duplicate start) before a boundary
// loses what was buffered and re-runs those Step functions on the next run,
// the same window as a crash inside a Step function: steps are executed at
// least once and recorded exactly once. A Step function may therefore run
// for an execution whose start or resume is never recorded (e.g. a Start of
// an id that already exists: its first step runs, the append is refused
// with kSequenceConflict and nothing is recorded). A child start first makes
// everything buffered durable (the child's log names this execution).
//
// Threads: a Context belongs to one run on one thread; it is not shareable.

#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/events/envelope.h"
#include "once/store/sql_transaction.h"

namespace once::runtime {

using events::Json;
namespace internal {
struct RunState;
struct RunEnd;
struct Fenced;
struct TransactOutcome;
class RunHost;
}  // namespace internal

// A non-owning reference to a callable returning Result<Json> (no heap).
class StepFnRef {
 public:
  template <class F>
  StepFnRef(F& f)
      : obj_(&f), call_([](void* o) -> Result<Json> { return (*static_cast<F*>(o))(); }) {}
  Result<Json> operator()() const { return call_(obj_); }

 private:
  void* obj_;
  Result<Json> (*call_)(void*);
};

// A non-owning reference to a callable Result<Json>(store::SqlTransaction&).
class TransactionFnRef {
 public:
  template <class F>
  TransactionFnRef(F& f)
      : obj_(&f), call_([](void* o, store::SqlTransaction& sql) -> Result<Json> {
          return (*static_cast<F*>(o))(sql);
        }) {}
  Result<Json> operator()(store::SqlTransaction& sql) const { return call_(obj_, sql); }

 private:
  void* obj_;
  Result<Json> (*call_)(void*, store::SqlTransaction&);
};

class Context {
 public:
  // Made by the runtime for one run of a body (bodies only receive one).
  Context(internal::RunHost& host, internal::RunState& run);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const std::string& execution_id() const;
  const std::string& principal() const;

  // Runs fn once and records STEP_COMPLETED {name, value} or STEP_FAILED
  // {name, error}; on replay returns the recorded result without running fn.
  template <class F>
  Result<Json> Step(std::string_view name, F&& fn) {
    static_assert(std::is_invocable_r_v<Result<Json>, F&>, "fn must return Result<Json>");
    return StepImpl(name, StepFnRef(fn));
  }

  // The exactly-once step (store capability kTransaction: the SQLite and
  // PostgreSQL stores). Runs fn(sql) inside the store's own write
  // transaction, on the database that holds this execution's log, and
  // commits fn's writes in the SAME transaction as STEP_COMPLETED {name,
  // value} (and everything the run buffered before it), under the run's
  // fence. So either both are durable or neither is: a run that lost its
  // fence to another runner (kStaleFence) or its sequence
  // (kSequenceConflict) has fn's writes rolled back with its record, and
  // the run ends with that error, as any failed append ends it. On replay
  // the recorded result is returned and fn does not run. fn's error (or an
  // Exec error fn swallowed) rolls fn's writes back and is recorded as
  // STEP_FAILED {name, error}, as Step records one. An exception thrown by
  // fn is kInternal, recorded the same way.
  //
  //   ONCE_ASSIGN_OR_RETURN(Json paid, ctx.Transaction("pay", [&](store::SqlTransaction& sql)
  //                                                        -> Result<Json> {
  //     ONCE_RETURN_IF_ERROR(sql.Exec("INSERT INTO payments(id, cents) VALUES ($1, $2)",
  //                                   {Json(ctx.execution_id()), Json(1999)}));
  //     return Json(1999);
  //   }));
  //
  // Limits: fn touches only that database, through `sql` (never the store
  // or another connection: the writer is held while fn runs, so keep it
  // short); no nested Transaction, Step or other Context call inside fn;
  // the statements' limits are the store's (sql_transaction.h). A store
  // without kTransaction (memory, decorators that refuse it) answers
  // kUnsupported, records nothing and does not end the run.
  template <class F>
  Result<Json> Transaction(std::string_view name, F&& fn) {
    static_assert(std::is_invocable_r_v<Result<Json>, F&, store::SqlTransaction&>,
                  "fn must take store::SqlTransaction& and return Result<Json>");
    return TransactionImpl(name, TransactionFnRef(fn));
  }

  // Records an application event (kind must not be a kernel kind).
  Status Emit(std::string_view kind, Json payload);

  // Parks on a timer. On replay returns Ok once the recorded resume answered
  // the timer; the wake time is taken from the clock only when first parked.
  Status Sleep(Duration duration);
  Status SleepUntil(TimePoint wake_at);

  // Records CHILD_STARTED {key, workflow, child_id, group, input} and starts
  // the child execution ChildExecutionId(id, key) with
  // EXECUTION_STARTED.parent = {execution_id, key}. Idempotent on replay.
  Status StartChild(std::string_view workflow, std::string_view key, Json input,
                    std::string_view group = {});
  // Parks until the child is terminal. Returns its value; a failed child
  // returns its recorded error (a cancelled one, kCancelled).
  Result<Json> AwaitChild(std::string_view key);
  // Parks until every child started in `group` is terminal. Returns
  // {key: ChildResult} for all of them (see log_view.h).
  Result<Json> AwaitChildren(std::string_view group);

  // Parks until a message on `topic` is delivered (Runtime::Deliver);
  // returns the message.
  Result<Json> Receive(std::string_view topic);

  // Ends this execution with EXECUTION_CONTINUED {input, next} and starts
  // `next` (this id with a "~N" generation suffix) with the same workflow.
  // The body should return right after; the runtime ignores its result.
  Status ContinueAsNew(Json input);

  bool parked() const;

 private:
  enum class Call { kSleep, kAwaitChild, kAwaitChildren, kReceive };

  Result<Json> StepImpl(std::string_view name, StepFnRef fn);
  Result<Json> TransactionImpl(std::string_view name, TransactionFnRef fn);
  // The recorded result of step `name` at the replay cursor `e`.
  Result<Json> ReplayStep(std::string_view name, const events::Envelope& e);
  // Buffers STEP_FAILED {name, error} (appended with the next boundary).
  void RecordStepFailure(std::string_view name, const Error& error);
  Result<Json> AwaitImpl(Call call, Json waits, const Json& answer_wait, bool match_waits);
  Status FlushBeforeEffect(bool everything);
  std::unexpected<Error> Diverged(std::string what);
  std::unexpected<Error> Park(Call call, Json waits, Json extra);
  std::unexpected<Error> Latched() const;
  std::unexpected<Error> Fail(Error e);

  internal::RunHost& host_;
  internal::RunState& run_;  // the replay cursor and the body's end live there
  std::map<std::string, std::vector<std::string>, std::less<>> groups_;  // group -> keys
};

}  // namespace once::runtime
