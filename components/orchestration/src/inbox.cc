#include "once/orchestration/inbox.h"

#include "log_read.h"

namespace once::orchestration {

using events::Json;
using events::KernelKind;
using internal::Member;

namespace {
thread_local int on_park_depth = 0;
}

Result<int64_t> MemoryInboxStore::Put(std::string_view execution_id, std::string_view topic,
                                      Json message) {
  std::lock_guard lock(mu_);
  auto& list = by_execution_[std::string(execution_id)];
  if (list.size() >= messages_per_execution_max_) {
    return LimitError("inbox_messages_per_execution_max", static_cast<int64_t>(list.size()) + 1,
                      static_cast<int64_t>(messages_per_execution_max_), std::string(execution_id));
  }
  int64_t id = static_cast<int64_t>(list.size()) + 1;
  list.push_back(InboxMessage{id, std::string(topic), std::move(message)});
  return id;
}

Result<std::vector<InboxMessage>> MemoryInboxStore::Messages(std::string_view execution_id,
                                                             std::string_view topic) {
  std::lock_guard lock(mu_);
  std::vector<InboxMessage> out;
  auto it = by_execution_.find(execution_id);
  if (it == by_execution_.end()) return out;
  for (const InboxMessage& m : it->second) {
    if (m.topic == topic) out.push_back(m);
  }
  return out;
}

Inbox::Inbox(runtime::Runtime& runtime, InboxStore& store, const Clock& clock, Rng& rng,
             InboxOptions options)
    : runtime_(runtime), store_(store), clock_(clock), rng_(rng), options_(std::move(options)) {
  if (options_.redrive) {
    ONCE_CHECK(options_.redrive->timers != nullptr && options_.redrive->service != nullptr);
    options_.redrive->service->AddRedriver(this);
  }
}

Result<Delivery> Inbox::DeliverPending(std::string_view execution_id) {
  ONCE_ASSIGN_OR_RETURN(std::vector<store::Envelope> log,
                        internal::ReadLog(runtime_.store(), execution_id));
  const store::Envelope* park = runtime::FindOpenPark(log);
  if (!park) return Delivery::kNoop;
  for (const Json& wait : Member(park->payload, "waits")) {
    if (Member(wait, "type") != "message" || !Member(wait, "topic").is_string()) continue;
    std::string topic = Member(wait, "topic").get<std::string>();
    size_t consumed = 0;
    for (const store::Envelope& e : log) {
      consumed += e.Is(KernelKind::kMessageConsumed) && Member(e.payload, "topic") == topic;
    }
    ONCE_ASSIGN_OR_RETURN(std::vector<InboxMessage> messages, store_.Messages(execution_id, topic));
    if (messages.size() <= consumed) continue;
    Result<runtime::RunOutcome> r = runtime_.Deliver(
        execution_id, topic, messages[consumed].message, {.fence_if_parked_at = park->sequence});
    if (r) return Delivery::kDelivered;
    if (r.error().code == ErrorCode::kResumeRefused) return Delivery::kNoop;
    if (internal::RetryLater(r.error())) return Delivery::kContended;
    return std::unexpected(r.error());
  }
  return Delivery::kNoop;
}

bool Inbox::HandOff(std::string_view execution_id, const Result<Delivery>& r) {
  bool retry = r ? *r == Delivery::kContended : internal::RetryLater(r.error());
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
  else if (internal::RetryLater(r.error()))
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
      return timers::RedriveAnswer::kNoop;
    case Delivery::kContended:
      break;
  }
  return timers::RedriveAnswer::kContended;
}

}  // namespace once::orchestration
