#include "once/queues/queue_store.h"

#include <algorithm>

#include "once/events/json_text.h"
#include "once/store/event_store.h"
#include "once/store/validate.h"

namespace once::queues {
namespace {

// A name, key or id: 1..max bytes of UTF-8 without control characters
// (the execution id rules).
Status ValidateText(std::string_view what, std::string_view text, size_t max) {
  store::Limits l;
  l.execution_id_bytes_max = max;
  if (Status s = store::ValidateOwner(text, l); !s) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": 1 to " + std::to_string(max) +
                         " bytes of UTF-8 without control characters",
                     std::string(text.substr(0, 64)));
  }
  return Ok();
}

}  // namespace

Status ValidateQueueName(std::string_view name, const QueueLimits& limits) {
  return ValidateText("a queue name", name, limits.queue_name_bytes_max);
}

Status ValidateQueueConfig(const QueueConfig& config, const QueueLimits& limits) {
  ONCE_RETURN_IF_ERROR(ValidateQueueName(config.name, limits));
  if (config.rate_period_ms <= 0) {
    return MakeError(ErrorCode::kInvalidArgument, "rate_period_ms must be > 0", config.name);
  }
  return Ok();
}

Result<std::string> ValidateEnqueue(const EnqueueRequest& r, const QueueLimits& limits) {
  ONCE_RETURN_IF_ERROR(ValidateQueueName(r.queue, limits));
  ONCE_RETURN_IF_ERROR(ValidateText("a workflow name", r.workflow, limits.workflow_bytes_max));
  ONCE_RETURN_IF_ERROR(
      ValidateText("an execution id", r.execution_id, limits.execution_id_bytes_max));
  if (!r.dedup_key.empty()) {
    ONCE_RETURN_IF_ERROR(ValidateText("a dedup key", r.dedup_key, limits.dedup_key_bytes_max));
  }
  if (r.delay_ms < 0 || r.delay_ms > limits.delay_ms_max) {
    return LimitError("delay_ms_max", r.delay_ms, limits.delay_ms_max, r.execution_id);
  }
  if (!events::JsonDepthWithin(r.input, limits.json_depth_max)) {
    return store::JsonDepthError("the input", r.execution_id, limits.json_depth_max,
                                 "json_depth_max");
  }
  std::string text;
  if (!events::AppendJsonText(r.input, text)) {
    return MakeError(ErrorCode::kInvalidArgument, "the input has a string that is not UTF-8",
                     r.execution_id);
  }
  if (text.size() > limits.input_bytes_max) {
    return LimitError("input_bytes_max", static_cast<int64_t>(text.size()),
                      static_cast<int64_t>(limits.input_bytes_max), r.execution_id);
  }
  return text;
}

Status ValidateClaim(const ClaimRequest& req, const QueueLimits& limits) {
  ONCE_RETURN_IF_ERROR(ValidateQueueName(req.queue, limits));
  ONCE_RETURN_IF_ERROR(ValidateText("a node id", req.node, limits.execution_id_bytes_max));
  if (req.limit == 0) return MakeError(ErrorCode::kInvalidArgument, "a claim's limit is >= 1");
  return Ok();
}

Status ValidateBatch(size_t items, const QueueLimits& limits) {
  if (items > limits.batch_items_max) {
    return LimitError("batch_items_max", static_cast<int64_t>(items),
                      static_cast<int64_t>(limits.batch_items_max));
  }
  return Ok();
}

Status ValidateSchedule(const ScheduleRow& row, const QueueLimits& limits) {
  ONCE_RETURN_IF_ERROR(ValidateText("a schedule name", row.name, limits.queue_name_bytes_max));
  ONCE_RETURN_IF_ERROR(ValidateText("a workflow name", row.workflow, limits.workflow_bytes_max));
  ONCE_RETURN_IF_ERROR(ValidateQueueName(row.queue, limits));
  if (row.cron.empty() || row.cron.size() > 255) {
    return MakeError(ErrorCode::kInvalidArgument, "a cron expression is 1 to 255 bytes", row.name);
  }
  EnqueueRequest probe{
      .queue = row.queue, .workflow = row.workflow, .execution_id = row.name, .input = row.input};
  ONCE_RETURN_IF_ERROR(ValidateEnqueue(probe, limits));
  return Ok();
}

std::unexpected<Error> DedupTaken(std::string_view queue, std::string_view key,
                                  std::string holder) {
  return MakeError(ErrorCode::kAlreadyExists,
                   "dedup key '" + std::string(key) + "' of queue " + std::string(queue) +
                       " is held by " + holder,
                   holder, AlreadyExistsDetail{holder});
}

RateRoom RateRoomAt(const QueueConfig& config, int64_t now_ms, int64_t last_window_start_ms,
                    size_t last_window_count) {
  RateRoom r;
  r.window_start_ms = now_ms - now_ms % config.rate_period_ms;
  if (config.rate_max == 0) {
    r.left = SIZE_MAX;
    return r;
  }
  size_t used = last_window_start_ms == r.window_start_ms ? last_window_count : 0;
  r.left = used >= config.rate_max ? 0 : config.rate_max - used;
  return r;
}

size_t ClaimRoom(const QueueConfig& config, size_t limit, size_t claimed, size_t claimed_by_node,
                 const RateRoom& rate) {
  size_t room = std::min(limit, rate.left);
  if (config.concurrency_max > 0) {
    room = std::min(room, claimed >= config.concurrency_max ? 0 : config.concurrency_max - claimed);
  }
  if (config.per_node_concurrency_max > 0) {
    room = std::min(room, claimed_by_node >= config.per_node_concurrency_max
                              ? 0
                              : config.per_node_concurrency_max - claimed_by_node);
  }
  return room;
}

}  // namespace once::queues
