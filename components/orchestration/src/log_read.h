// Internal: reading a whole log through the store's paged ReadRange.
#pragma once

#include <string_view>
#include <vector>

#include "once/store/event_store.h"

namespace once::orchestration::internal {

inline Result<std::vector<store::Envelope>> ReadLog(store::EventStore& s, std::string_view id) {
  std::vector<store::Envelope> out;
  int64_t first = 1;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(std::vector<store::Envelope> page, s.ReadRange(id, first, store::kToEnd));
    if (page.empty()) break;
    first = page.back().sequence + 1;
    size_t n = page.size();
    out.insert(out.end(), std::make_move_iterator(page.begin()),
               std::make_move_iterator(page.end()));
    if (n < s.limits().read_events_max) break;
  }
  return out;
}

inline const events::Json& Member(const events::Json& j, const char* key) {
  static const events::Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A contended resume, or a failure a later try may not see again.
inline bool RetryLater(const Error& e) {
  return e.code == ErrorCode::kResumeContended || e.code == ErrorCode::kStaleFence ||
         e.code == ErrorCode::kSequenceConflict || e.retryable();
}

}  // namespace once::orchestration::internal
