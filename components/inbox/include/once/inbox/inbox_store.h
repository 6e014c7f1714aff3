// File: inbox_store.h
//
// InboxStore: durable storage of the messages sent to executions (the
// orchestration Inbox delivers them; see once/orchestration/inbox.h).
//
//   MemoryInboxStore store;                       // or SqliteInboxStore / PostgresInboxStore
//   ONCE_ASSIGN_OR_RETURN(int64_t seq, store.Put("order-7", "approve", Json{{"by", "ann"}}));
//   ONCE_ASSIGN_OR_RETURN(auto m, store.Get("order-7", "approve", seq));   // the message
//   ONCE_RETURN_IF_ERROR(store.Trim("order-7", "approve", seq));           // consumed: delete
//
// Numbering. Every (execution, topic) has its own sequence: the n-th Put on
// it gets seq n (1-based), in the order the Puts committed. A seq is never
// reused: Trim deletes messages but keeps the topic's counter, so the k-th
// message keeps number k whatever was deleted before it. Only Forget resets
// an execution's counters (its next Put gets seq 1 again). The Inbox relies
// on this: the message it delivers next is seq = (MESSAGE_CONSUMED events of
// the topic in the log) + 1.
//
// Durability. Put returns once the message is durable (the SQL stores: the
// transaction committed, SQLite with synchronous=FULL by default); an error
// means nothing was stored. Trim and Forget are idempotent.
//
// Retention. Consumed messages are deleted with Trim (the Inbox does it
// after each delivery, and Inbox::Collect catches up after a crash); every
// message of a finished execution is deleted with Forget. So the stored rows
// are the messages not yet consumed, at most
// limits().pending_messages_per_execution_max per execution.
//
// Limits (InboxLimits, units last): message_bytes_max (the compact JSON
// serialization of the message), message_depth_max (containers nested in
// it), topic_bytes_max, and pending_messages_per_execution_max (messages
// stored and not yet deleted, all topics of one execution). Crossing one is
// kLimitExceeded with a LimitDetail naming it (inbox_message_bytes_max,
// inbox_message_depth_max, inbox_topic_bytes_max,
// inbox_pending_messages_per_execution_max). Malformed input is
// kInvalidArgument: an execution id that the event stores would refuse
// (store::ValidateExecutionId), an empty topic or one with a control
// character or invalid UTF-8, a message whose strings are not UTF-8.
//
// Threads: every method may be called from any thread (and, for the SQL
// stores, from many processes or nodes on one database).

#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"
#include "once/events/envelope.h"
#include "once/store/event_store.h"

namespace once::inbox {

struct InboxMessage {
  std::string topic;
  int64_t seq = 0;  // 1-based, per (execution, topic)
  events::Json message;
  friend bool operator==(const InboxMessage&, const InboxMessage&) = default;
};

struct InboxLimits {
  // Compact JSON bytes of one message. Below the event store's 1 MiB event
  // payload: a delivery writes the message into MESSAGE_CONSUMED and
  // EXECUTION_RESUMED, and a message that could never be appended would
  // never be delivered.
  size_t message_bytes_max = 256 * 1024;
  // Containers nested inside each other in one message: one less than the
  // event store's json_depth_max, since a delivery writes the message one
  // level down ({"message": ...}, {"value": ...}).
  size_t message_depth_max = store::kJsonDepthMaxDefault - 1;
  size_t topic_bytes_max = 255;
  // Messages stored and not yet deleted, over all topics of one execution.
  size_t pending_messages_per_execution_max = 10'000;
  // Ids one Executions() page returns at most.
  size_t executions_page_max = 1'000;
};

class InboxStore {
 public:
  virtual ~InboxStore() = default;

  // Stores the message durably and returns its seq (see Numbering).
  virtual Result<int64_t> Put(std::string_view execution_id, std::string_view topic,
                              const events::Json& message) = 0;
  // The message `seq` of (execution, topic); nullopt when it was never Put
  // or has been deleted.
  virtual Result<std::optional<InboxMessage>> Get(std::string_view execution_id,
                                                  std::string_view topic, int64_t seq) = 0;
  // The execution's stored messages, ordered by (topic bytes, seq).
  virtual Result<std::vector<InboxMessage>> Pending(std::string_view execution_id) = 0;
  // Deletes the messages of (execution, topic) with seq <= through_seq; the
  // counter stays.
  virtual Status Trim(std::string_view execution_id, std::string_view topic,
                      int64_t through_seq) = 0;
  // Deletes every message and counter of the execution.
  virtual Status Forget(std::string_view execution_id) = 0;
  // True while the execution holds messages or counters (retention keeps
  // its log until then: see orchestration's PinInboxRows).
  virtual Result<bool> Holds(std::string_view execution_id) = 0;
  // Ids of executions holding messages or counters, in byte order, greater
  // than `after`, at most min(limit, limits().executions_page_max).
  virtual Result<std::vector<std::string>> Executions(std::string_view after, size_t limit) = 0;

  virtual const InboxLimits& limits() const = 0;
};

// The checks every backend applies to a Put, in this order: id, topic,
// message. Returns the message's compact JSON (what the SQL stores keep).
Result<std::string> ValidatePut(std::string_view execution_id, std::string_view topic,
                                const events::Json& message, const InboxLimits& limits);

// The pending-count error for an execution that already holds `pending`.
std::unexpected<Error> PendingLimitError(std::string_view execution_id, size_t pending,
                                         const InboxLimits& limits);

// Decodes a stored message; bad JSON is kCorruption.
Result<events::Json> DecodeMessage(std::string_view execution_id, std::string_view json);

}  // namespace once::inbox
