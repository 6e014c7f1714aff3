#include "once/store/read_log.h"

#include <iterator>

namespace once::store {

Result<std::vector<Envelope>> ReadLog(EventStore& store, std::string_view execution_id,
                                      int64_t first) {
  std::vector<Envelope> out;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> page, store.ReadRange(execution_id, first, kToEnd));
    if (page.empty()) break;
    first = page.back().sequence + 1;
    size_t n = page.size();
    if (out.empty()) {
      out = std::move(page);
    } else {
      out.insert(out.end(), std::make_move_iterator(page.begin()),
                 std::make_move_iterator(page.end()));
    }
    if (n < store.limits().read_events_max) break;
  }
  return out;
}

Status ReadTailInto(EventStore& store, std::string_view execution_id, std::vector<Envelope>& log) {
  int64_t first = log.empty() ? 1 : log.back().sequence + 1;
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> tail, ReadLog(store, execution_id, first));
  log.insert(log.end(), std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
  return Ok();
}

}  // namespace once::store
