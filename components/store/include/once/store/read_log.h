// File: read_log.h
//
// ReadLog: an execution's whole log (or its tail from `first`), read page by
// page through EventStore::ReadRange (each page at most
// limits().read_events_max events). The one way the runtime, orchestration
// and lifecycle read a whole log.
//
//   ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store, "order-7"));
//
// An unknown execution reads as empty. The pages are read one after
// another, not in one snapshot: an append that lands between two pages is
// read or not, as it would be by a later read. Errors: the store's.

#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "once/store/event_store.h"

namespace once::store {

Result<std::vector<Envelope>> ReadLog(EventStore& store, std::string_view execution_id,
                                      int64_t first = 1);

// Appends the events past the last one of `log` (all of them when it is
// empty) to `log`.
Status ReadTailInto(EventStore& store, std::string_view execution_id, std::vector<Envelope>& log);

}  // namespace once::store
