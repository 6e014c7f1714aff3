#include "once/timers/timer_store.h"

#include <limits>
#include <nlohmann/json.hpp>

namespace once::timers {

std::string RedriveText(const Redrive& redrive) {
  return "{\"attempt\":" + std::to_string(redrive.attempt) + "}";
}

Result<Redrive> ParseRedriveText(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto attempt = j.is_object() ? j.find("attempt") : j.end();
  if (j.is_discarded() || attempt == j.end() || !attempt->is_number_integer() ||
      (attempt->is_number_unsigned()
           ? attempt->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())
           : attempt->get<int64_t>() < 0 ||
                 attempt->get<int64_t>() > std::numeric_limits<int>::max())) {
    return MakeError(ErrorCode::kCorruption,
                     "a timer's redrive is not {\"attempt\":n}: " + std::string(text));
  }
  return Redrive{.attempt = attempt->get<int>()};
}

Status ValidateTimerRow(const TimerRow& row) {
  if (row.execution_id.empty() || row.execution_id.size() > 255) {
    return MakeError(ErrorCode::kInvalidArgument, "timer execution id must be 1..255 bytes");
  }
  for (unsigned char c : row.execution_id) {
    if (c < 0x20 || c == 0x7f) {
      return MakeError(ErrorCode::kInvalidArgument, "timer execution id has a control character");
    }
  }
  if (row.redrive && row.redrive->attempt < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "re-drive attempt must be >= 0",
                     row.execution_id);
  }
  if (row.park && (row.park->sequence < 1 || row.park->fence < 0)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "a timer's park needs a sequence >= 1 and a fence >= 0", row.execution_id);
  }
  return Ok();
}

Status ValidateClaim(const ClaimRequest& req) {
  if (req.owner.empty()) return MakeError(ErrorCode::kInvalidArgument, "claim needs an owner");
  if (req.lease_ms <= 0) return MakeError(ErrorCode::kInvalidArgument, "lease_ms must be > 0");
  if (req.ahead_ms < 0 || req.ahead_ms >= req.lease_ms) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "ahead_ms must be >= 0 and < lease_ms (a row claimed ahead stays leased "
                     "until its wake)");
  }
  return Ok();
}

Status ValidateCompleteMany(std::span<const TimerKey> keys, const TimerLimits& limits) {
  if (keys.size() > limits.complete_keys_max) {
    return MakeError(ErrorCode::kInvalidArgument, "CompleteMany takes at most " +
                                                      std::to_string(limits.complete_keys_max) +
                                                      " keys, got " + std::to_string(keys.size()));
  }
  return Ok();
}

}  // namespace once::timers
