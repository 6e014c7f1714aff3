#include "once/inbox/inbox_store.h"

#include "once/events/json_text.h"
#include "once/store/event_store.h"
#include "once/store/validate.h"

namespace once::inbox {

namespace {

Status ValidateTopic(std::string_view topic, const InboxLimits& limits) {
  if (topic.empty()) return MakeError(ErrorCode::kInvalidArgument, "inbox topic is empty");
  if (topic.size() > limits.topic_bytes_max) {
    return LimitError("inbox_topic_bytes_max", static_cast<int64_t>(topic.size()),
                      static_cast<int64_t>(limits.topic_bytes_max));
  }
  // The execution id rules (UTF-8, no control character), with no length
  // bound of their own: the topic's is checked above.
  store::Limits any_length;
  any_length.execution_id_bytes_max = topic.size();
  if (!store::ValidateExecutionId(topic, any_length)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "inbox topic has a control character or is not UTF-8");
  }
  return Ok();
}

}  // namespace

Result<std::string> ValidatePut(std::string_view execution_id, std::string_view topic,
                                const events::Json& message, const InboxLimits& limits) {
  ONCE_RETURN_IF_ERROR(store::ValidateExecutionId(execution_id, store::Limits{}));
  std::string subject(execution_id);
  if (Status s = ValidateTopic(topic, limits); !s) {
    Error e = s.error();
    e.subject = subject;
    return std::unexpected(std::move(e));
  }
  std::optional<size_t> bytes = store::SerializedJsonSize(message, limits.message_depth_max);
  if (!bytes && !events::JsonDepthWithin(message, limits.message_depth_max)) {
    return store::JsonDepthError("an inbox message", subject, limits.message_depth_max,
                                 "inbox_message_depth_max");
  }
  if (!bytes) {
    return MakeError(ErrorCode::kInvalidArgument, "inbox message: a string is not UTF-8", subject);
  }
  if (*bytes > limits.message_bytes_max) {
    return LimitError("inbox_message_bytes_max", static_cast<int64_t>(*bytes),
                      static_cast<int64_t>(limits.message_bytes_max), subject);
  }
  return message.dump();
}

std::unexpected<Error> PendingLimitError(std::string_view execution_id, size_t pending,
                                         const InboxLimits& limits) {
  return LimitError("inbox_pending_messages_per_execution_max", static_cast<int64_t>(pending) + 1,
                    static_cast<int64_t>(limits.pending_messages_per_execution_max),
                    std::string(execution_id));
}

Result<events::Json> DecodeMessage(std::string_view execution_id, std::string_view json) {
  // events::ParseJson, as an event's payload: a message round-trips with
  // its integers' types.
  Result<events::Json> j = events::ParseJson(json);
  if (!j) {
    return MakeError(ErrorCode::kCorruption, "inbox: a stored message is not JSON",
                     std::string(execution_id));
  }
  return j;
}

}  // namespace once::inbox
