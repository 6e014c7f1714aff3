// File: inbox.h
//
// Inbox: messages to executions, delivered exactly once.
//
// Send(execution, topic, message) stores the message (InboxStore) and, when
// the execution is parked on that topic, resumes it with ONE atomic append
// of [MESSAGE_CONSUMED, EXECUTION_RESUMED] under the acquired fence
// (Runtime::Deliver with fence_if_parked_at = the park). A message that
// arrives before the park is delivered when the park happens (OnPark, wired
// as RuntimeOptions::on_park), by the next Send, by DeliverPending, or by the
// re-driver.
//
// Exactly once, derived from the log. Messages of one (execution, topic) are
// numbered by the store (seq 1, 2, ... in the order the Puts committed);
// message seq = k is delivered iff the log holds at least k MESSAGE_CONSUMED
// of that topic. Every deliverer reads the open park and that count c from
// ONE read of the log and delivers message seq = c + 1 under
// fence_if_parked_at = that park: the store refuses the acquire
// once any resume answered the park, and the two events land together or
// not at all, so a crash between the acquire and the append (nothing
// landed; the stranded token is a dead acquirer the next try overcomes) or
// after it (both landed; the next try counts it) can neither lose nor
// repeat a delivery. Rule: an execution that receives through an Inbox must
// receive ONLY through it (a direct Runtime::Deliver would shift the count).
//
// Durability and retention. Send returns once the store holds the message
// (the SQL stores: committed). After a delivery the inbox deletes the
// topic's messages through the delivered seq (Trim; a stale deliverer that
// then finds its message gone answers kNoop: a rival delivered it), and all
// of an execution's rows once it is terminal (Forget). A crash between the
// delivery and the delete leaves rows that the next delivery or Sweep()
// deletes; Sweep() also delivers messages stored before a restart.
//
// Contended or failed-retryably deliveries: with `redrive` wired
// (kernel.features.redrive on) the inbox writes a re-drive row (attempt 0)
// and is registered with the TimerService as a Redriver (done | noop |
// contended, re-derived from the log as above); without it the error goes to
// on_error and the message stays stored for the next Send / DeliverPending.
//
//   auto messages = store::SqliteInboxStore::Open("/var/lib/once/loom.db").value();
//   Inbox inbox(rt, *messages, clock, rng, {.redrive = app.Redrive().value()});
//   inbox.Sweep();  // at boot
//   options.on_park = [&](auto& id, int64_t seq, auto& park) { inbox.OnPark(id, seq, park); };
//   inbox.Send("order-7", "approve", Json{{"by", "ann"}});
//
// Threads: every method may be called from any thread.

#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/clock.h"
#include "once/base/rng.h"
#include "once/inbox/inbox_store.h"
#include "once/inbox/memory_inbox_store.h"
#include "once/lifecycle/log_lifecycle.h"
#include "once/orchestration/redrive.h"
#include "once/runtime/runtime.h"
#include "once/timers/timer_service.h"

namespace once::orchestration {

// The store contract and the memory store live in once::inbox (so the SQL
// stores need not depend on orchestration); the names stay usable here.
using inbox::InboxMessage;
using inbox::InboxStore;
using inbox::MemoryInboxStore;

enum class Delivery {
  kDelivered,
  kNoop,       // nothing deliverable now (no park on a topic with a message)
  kContended,  // a rival, a stale fence or a retryable failure: try later
  kDropped,    // the execution is terminal: its stored messages were deleted
};

struct SendResult {
  int64_t message_id = 0;               // the message's seq on (execution, topic)
  Delivery delivery = Delivery::kNoop;  // kNoop: stored, not deliverable now
  bool redrive_scheduled = false;
};

struct SweepReport {
  size_t executions = 0;  // executions holding inbox rows, examined
  size_t delivered = 0;   // deliveries made
  size_t forgotten = 0;   // terminal executions whose rows were deleted
  std::vector<Error> errors;
};

struct InboxOptions {
  std::optional<RedriveWiring> redrive;  // set only when kernel.features.redrive is on
  timers::BackoffPolicy backoff;         // the first re-drive row's delay
  int on_park_nesting_max = 32;          // deliveries nested inside park hooks on one thread
  std::function<void(const Error&)> on_error;
};

// Retention's pin for the inbox: true while `store` holds rows of the
// execution, so a finished log is deleted only after the inbox deleted its
// rows (Sweep or a delivery saw it finish). Otherwise the rows would
// outlive their log, and a later execution with the same id would inherit
// its numbering. `store` must outlive the predicate.
lifecycle::PinPredicate PinInboxRows(InboxStore& store);

class Inbox final : public timers::Redriver {
 public:
  // References must outlive the inbox. With options.redrive, registers
  // itself with the service.
  Inbox(runtime::Runtime& runtime, InboxStore& store, const Clock& clock, Rng& rng,
        InboxOptions options);

  // Stores, then tries to deliver. An error means the message was NOT stored.
  Result<SendResult> Send(std::string_view execution_id, std::string_view topic,
                          events::Json message);
  // Delivers the next stored message the open park waits for, if any
  // (kDropped when the execution is terminal: its messages are deleted).
  Result<Delivery> DeliverPending(std::string_view execution_id);
  // The boot sweep and the garbage collection: for every execution holding
  // inbox rows (paged, executions_per_page at a time), a terminal one's rows
  // are deleted (Forget), consumed messages are deleted (Trim through the
  // log's MESSAGE_CONSUMED count of each topic), and a message the open park
  // waits for is delivered (a message stored before a crash or restart, with
  // nobody left to deliver it). Per-execution errors are collected in the
  // report; the sweep goes on. Run it at boot and then periodically.
  Result<SweepReport> Sweep(size_t executions_per_page = 100);
  // The on_park listener.
  void OnPark(const std::string& id, int64_t park_seq, const store::Envelope& park);
  // timers::Redriver.
  Result<timers::RedriveAnswer> Redrive(const timers::TimerRow& row) override;

 private:
  // DeliverPending plus the contended hand-off; returns whether a row was written.
  bool HandOff(std::string_view execution_id, const Result<Delivery>& r);
  // Deletes what a delivery of `seq` made obsolete: the execution's rows
  // when it ended, else the topic's messages through seq.
  void Retire(std::string_view execution_id, std::string_view topic, int64_t seq,
              runtime::ExecutionStatus after);
  // Trims every topic through its consumed count in `log`.
  Status TrimConsumed(std::string_view execution_id, std::span<const store::Envelope> log);

  runtime::Runtime& runtime_;
  InboxStore& store_;
  const Clock& clock_;
  Rng& rng_;
  InboxOptions options_;
  std::mutex rng_mu_;
};

}  // namespace once::orchestration
