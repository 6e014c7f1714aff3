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
// ordered by their store id; the k-th one (0-based) is delivered iff the log
// holds at least k + 1 MESSAGE_CONSUMED of that topic. Every deliverer reads
// the open park and that count from ONE read of the log and delivers message
// #count under fence_if_parked_at = that park: the store refuses the acquire
// once any resume answered the park, and the two events land together or
// not at all, so a crash between the acquire and the append (nothing
// landed; the stranded token is a dead acquirer the next try overcomes) or
// after it (both landed; the next try counts it) can neither lose nor
// repeat a delivery. Rule: an execution that receives through an Inbox must
// receive ONLY through it (a direct Runtime::Deliver would shift the count).
//
// Contended or failed-retryably deliveries: with `redrive` wired
// (kernel.features.redrive on) the inbox writes a re-drive row (attempt 0)
// and is registered with the TimerService as a Redriver (done | noop |
// contended, re-derived from the log as above); without it the error goes to
// on_error and the message stays stored for the next Send / DeliverPending.
//
//   MemoryInboxStore messages;
//   Inbox inbox(rt, messages, clock, rng, {.redrive = app.Redrive().value()});
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
#include <string>
#include <string_view>
#include <vector>

#include "once/base/clock.h"
#include "once/base/rng.h"
#include "once/orchestration/redrive.h"
#include "once/runtime/runtime.h"
#include "once/timers/timer_service.h"

namespace once::orchestration {

struct InboxMessage {
  int64_t id = 0;  // ascending per execution, in Put order
  std::string topic;
  events::Json message;
};

// Durable message storage. Thread-safe.
class InboxStore {
 public:
  virtual ~InboxStore() = default;
  // Stores the message; returns its id. kLimitExceeded past the limit.
  virtual Result<int64_t> Put(std::string_view execution_id, std::string_view topic,
                              events::Json message) = 0;
  // The execution's messages on `topic`, ascending by id.
  virtual Result<std::vector<InboxMessage>> Messages(std::string_view execution_id,
                                                     std::string_view topic) = 0;
};

class MemoryInboxStore final : public InboxStore {
 public:
  explicit MemoryInboxStore(size_t messages_per_execution_max = 10'000)
      : messages_per_execution_max_(messages_per_execution_max) {}
  Result<int64_t> Put(std::string_view execution_id, std::string_view topic,
                      events::Json message) override;
  Result<std::vector<InboxMessage>> Messages(std::string_view execution_id,
                                             std::string_view topic) override;

 private:
  size_t messages_per_execution_max_;
  std::mutex mu_;
  std::map<std::string, std::vector<InboxMessage>, std::less<>> by_execution_;  // GUARDED_BY(mu_)
};

enum class Delivery { kDelivered, kNoop, kContended };

struct SendResult {
  int64_t message_id = 0;
  Delivery delivery = Delivery::kNoop;  // kNoop: stored, not deliverable now
  bool redrive_scheduled = false;
};

struct InboxOptions {
  std::optional<RedriveWiring> redrive;  // set only when kernel.features.redrive is on
  timers::BackoffPolicy backoff;         // the first re-drive row's delay
  int on_park_nesting_max = 32;          // deliveries nested inside park hooks on one thread
  std::function<void(const Error&)> on_error;
};

class Inbox final : public timers::Redriver {
 public:
  // References must outlive the inbox. With options.redrive, registers
  // itself with the service.
  Inbox(runtime::Runtime& runtime, InboxStore& store, const Clock& clock, Rng& rng,
        InboxOptions options);

  // Stores, then tries to deliver. An error means the message was NOT stored.
  Result<SendResult> Send(std::string_view execution_id, std::string_view topic,
                          events::Json message);
  // Delivers the next stored message the open park waits for, if any.
  Result<Delivery> DeliverPending(std::string_view execution_id);
  // The on_park listener.
  void OnPark(const std::string& id, int64_t park_seq, const store::Envelope& park);
  // timers::Redriver.
  Result<timers::RedriveAnswer> Redrive(const timers::TimerRow& row) override;

 private:
  // DeliverPending plus the contended hand-off; returns whether a row was written.
  bool HandOff(std::string_view execution_id, const Result<Delivery>& r);

  runtime::Runtime& runtime_;
  InboxStore& store_;
  const Clock& clock_;
  Rng& rng_;
  InboxOptions options_;
  std::mutex rng_mu_;
};

}  // namespace once::orchestration
