// Small helpers the runtime's sources share (internal).
#pragma once

#include <string>
#include <string_view>

#include "once/base/result.h"
#include "once/events/envelope.h"

namespace once::runtime::internal {

// j[key] when j is an object holding key, else a null Json (never throws).
inline const events::Json& Member(const events::Json& j, const char* key) {
  static const events::Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// Moves j[key] out (Member, taken rather than copied): null when j holds no
// such member; the member stays, null.
inline events::Json TakeMember(events::Json& j, const char* key) {
  if (!j.is_object()) return events::Json();
  auto it = j.find(key);
  return it == j.end() ? events::Json() : std::move(*it);
}

// True if j is the string s. (j == s would build a Json of s to compare
// with: a heap block for every replayed step, wait and call name.)
inline bool IsString(const events::Json& j, std::string_view s) {
  return j.is_string() && j.get_ref<const std::string&>() == s;
}

// kResumeRefused with its typed reason ("not-suspended", "terminal", ...).
inline std::unexpected<Error> Refused(std::string_view id, std::string reason) {
  std::string message = "resume refused: " + reason;
  return MakeError(ErrorCode::kResumeRefused, std::move(message), std::string(id),
                   ResumeRefusedDetail{std::move(reason)});
}

}  // namespace once::runtime::internal
