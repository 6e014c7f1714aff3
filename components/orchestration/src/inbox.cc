#include "once/orchestration/inbox.h"

#include <algorithm>
#include <map>

#include "log_read.h"

namespace once::orchestration {

using events::Json;
using events::KernelKind;
using internal::Member;

namespace {
thread_local int on_park_depth = 0;
}

lifecycle::PinPredicate PinInboxRows(InboxStore& store) {
  return [&store](std::string_view id) -> Result<bool> { return store.Holds(id); };
}

Inbox::Inbox(runtime::Runtime& runtime, InboxStore& store, const Clock& clock, Rng& rng,
             InboxOptions options)
    : runtime_(runtime), store_(store), clock_(clock), rng_(rng), options_(std::move(options)) {
  if (options_.redrive) {
    ONCE_CHECK(options_.redrive->timers != nullptr && options_.redrive->service != nullptr);
    options_.redrive->service->AddRedriver(this);
  }
}

namespace {

// MESSAGE_CONSUMED events of `topic` in the log.
int64_t ConsumedOf(std::span<const store::Envelope> log, const std::string& topic) {
  int64_t consumed = 0;
  for (const store::Envelope& e : log) {
    consumed += e.Is(KernelKind::kMessageConsumed) && Member(e.payload, "topic") == topic;
  }
  return consumed;
}

}  // namespace

void Inbox::Retire(std::string_view execution_id, std::string_view topic, int64_t seq,
                   runtime::ExecutionStatus after) {
  // A failure leaves rows that the next delivery or Sweep() deletes.
  Status s = runtime::IsTerminal(after) ? store_.Forget(execution_id)
                                        : store_.Trim(execution_id, topic, seq);
  if (!s && options_.on_error) options_.on_error(s.error());
}

Status Inbox::TrimConsumed(std::string_view execution_id, std::span<const store::Envelope> log) {
  std::map<std::string, int64_t> consumed;
  for (const store::Envelope& e : log) {
    if (e.Is(KernelKind::kMessageConsumed) && Member(e.payload, "topic").is_string()) {
      ++consumed[Member(e.payload, "topic").get<std::string>()];
    }
  }
  for (const auto& [topic, count] : consumed) {
    ONCE_RETURN_IF_ERROR(store_.Trim(execution_id, topic, count));
  }
  return Ok();
}

Result<Delivery> Inbox::DeliverPending(std::string_view execution_id) {
  ONCE_ASSIGN_OR_RETURN(std::vector<store::Envelope> log,
                        store::ReadLog(runtime_.store(), execution_id));
  ONCE_ASSIGN_OR_RETURN(runtime::ExecutionState st, runtime::Fold(log));
  const store::Envelope* park = runtime::FindOpenPark(log);
  if (!park) {
    if (log.empty() || !runtime::IsTerminal(st.status)) return Delivery::kNoop;
    ONCE_RETURN_IF_ERROR(store_.Forget(execution_id));
    return Delivery::kDropped;
  }
  for (const Json& wait : Member(park->payload, "waits")) {
    if (Member(wait, "type") != "message" || !Member(wait, "topic").is_string()) continue;
    std::string topic = Member(wait, "topic").get<std::string>();
    int64_t seq = ConsumedOf(log, topic) + 1;
    ONCE_ASSIGN_OR_RETURN(std::optional<InboxMessage> next, store_.Get(execution_id, topic, seq));
    // Not sent yet, or deleted after a rival delivered it.
    if (!next) continue;
    Result<runtime::ParkAnswered> answered = runtime_.AnswerPark(
        execution_id,
        {.park_seq = park->sequence, .topic = topic, .message = std::move(next->message)});
    if (!answered) {
      // A failure a later try may not see again is a contended delivery.
      if (answered.error().retryable()) return Delivery::kContended;
      return std::unexpected(answered.error());
    }
    switch (answered->verdict) {
      case runtime::ParkVerdict::kResumed:
        Retire(execution_id, topic, seq, answered->outcome->status);
        return Delivery::kDelivered;
      case runtime::ParkVerdict::kNoop:
        return Delivery::kNoop;
      case runtime::ParkVerdict::kContended:
        return Delivery::kContended;
    }
  }
  return Delivery::kNoop;
}

Result<SweepReport> Inbox::Sweep(size_t executions_per_page) {
  SweepReport report;
  std::string after;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(std::vector<std::string> page,
                          store_.Executions(after, std::max<size_t>(1, executions_per_page)));
    if (page.empty()) return report;
    after = page.back();
    for (const std::string& id : page) {
      ++report.executions;
      Result<std::vector<store::Envelope>> log = store::ReadLog(runtime_.store(), id);
      Status trimmed = log ? TrimConsumed(id, *log) : Status(std::unexpected(log.error()));
      if (!trimmed) {
        report.errors.push_back(trimmed.error());
        continue;
      }
      // Deliveries go on while the execution parks again on a stored message.
      for (;;) {
        Result<Delivery> d = DeliverPending(id);
        if (!d) report.errors.push_back(d.error());
        if (d && *d == Delivery::kDropped) ++report.forgotten;
        if (!d || *d != Delivery::kDelivered) break;
        ++report.delivered;
      }
    }
  }
}

bool Inbox::HandOff(std::string_view execution_id, const Result<Delivery>& r) {
  bool retry = r ? *r == Delivery::kContended : r.error().retryable();
  if (!r && !retry) {
    if (options_.on_error) options_.on_error(r.error());
    return false;
  }
  if (!retry) return false;
  if (!options_.redrive) {
    if (options_.on_error) {
      options_.on_error(r ? Error{ErrorCode::kResumeContended,
                                  "message delivery contended; stored for a later delivery",
                                  std::string(execution_id), ResumeContendedDetail{1}}
                          : r.error());
    }
    return false;
  }
  int64_t delay_ms;
  {
    std::lock_guard lock(rng_mu_);
    delay_ms = options_.backoff.DelayMs(0, rng_);
  }
  Status s = options_.redrive->timers->Schedule(
      {std::string(execution_id), clock_.NowUnixMillis() + delay_ms, timers::Redrive{0}});
  if (!s) {
    if (options_.on_error) options_.on_error(s.error());
    return false;
  }
  return true;
}

Result<SendResult> Inbox::Send(std::string_view execution_id, std::string_view topic,
                               Json message) {
  ONCE_ASSIGN_OR_RETURN(int64_t id, store_.Put(execution_id, topic, std::move(message)));
  SendResult out{.message_id = id};
  Result<Delivery> r = DeliverPending(execution_id);
  if (r)
    out.delivery = *r;
  else if (r.error().retryable())
    out.delivery = Delivery::kContended;
  out.redrive_scheduled = HandOff(execution_id, r);
  return out;
}

void Inbox::OnPark(const std::string& id, int64_t, const store::Envelope& park) {
  bool waits_message = false;
  for (const Json& wait : Member(park.payload, "waits")) {
    waits_message = waits_message || Member(wait, "type") == "message";
  }
  if (!waits_message) return;
  // A body that keeps receiving early messages would recurse once per
  // message; past the bound the rest wait for the next Send / re-drive.
  if (on_park_depth >= options_.on_park_nesting_max) return;
  ++on_park_depth;
  Result<Delivery> r = DeliverPending(id);
  --on_park_depth;
  HandOff(id, r);
}

Result<timers::RedriveAnswer> Inbox::Redrive(const timers::TimerRow& row) {
  ONCE_ASSIGN_OR_RETURN(Delivery d, DeliverPending(row.execution_id));
  switch (d) {
    case Delivery::kDelivered:
      return timers::RedriveAnswer::kDone;
    case Delivery::kNoop:
    case Delivery::kDropped:
      return timers::RedriveAnswer::kNoop;
    case Delivery::kContended:
      break;
  }
  return timers::RedriveAnswer::kContended;
}

}  // namespace once::orchestration
