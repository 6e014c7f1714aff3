#include "once/base/clock.h"

namespace once {

int64_t ToUnixMillis(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

TimePoint FromUnixMillis(int64_t ms) {
  return TimePoint(std::chrono::duration_cast<Duration>(std::chrono::milliseconds(ms)));
}

}  // namespace once
