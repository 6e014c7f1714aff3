// Internal: small helpers the orchestration sources share.
#pragma once

#include <string_view>
#include <vector>

#include "once/store/event_store.h"
#include "once/store/read_log.h"

namespace once::orchestration::internal {

inline const events::Json& Member(const events::Json& j, const char* key) {
  static const events::Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

}  // namespace once::orchestration::internal
