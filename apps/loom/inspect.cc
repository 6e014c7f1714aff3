#include <fmt/format.h>

#include "loom_app.h"
#include "once/runtime/log_view.h"
#include "once/store_sqlite/sqlite_event_store.h"

namespace once::loom_app {
namespace {

std::string Shorten(std::string s, size_t max) {
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

}  // namespace

void PrintLog(store::EventStore& store, const std::string& execution_id) {
  std::vector<store::Envelope> log;
  for (int64_t next = 1;;) {
    auto page = store.ReadRange(execution_id, next, store::kToEnd);
    if (!page) {
      fmt::print("{}: {}\n", execution_id, page.error().ToString());
      return;
    }
    if (page->empty()) break;
    next = page->back().sequence + 1;
    log.insert(log.end(), page->begin(), page->end());
  }
  auto state = runtime::Fold(log);
  std::string status = state ? std::string(runtime::StatusName(state->status))
                             : "unreadable: " + state.error().message;
  fmt::print("\n{}  ({}, {} events)\n", execution_id, status, log.size());
  fmt::print("  {:>3}  {:<20}  {:>5}  {}\n", "seq", "kind", "fence", "payload");
  for (const auto& e : log) {
    fmt::print("  {:>3}  {:<20}  {:>5}  {}\n", e.sequence, e.kind.view(), e.fence(),
               Shorten(e.payload.dump(), 90));
  }
}

int RunInspect(const std::string& db, const std::string& execution_id) {
  store::SqliteOptions options;
  auto store = store::SqliteEventStore::Open(db, options);
  if (!store) {
    fmt::print(stderr, "inspect: {}\n", store.error().ToString());
    return 1;
  }
  if (!execution_id.empty()) {
    PrintLog(**store, execution_id);
    return 0;
  }
  std::string after;
  do {
    auto page = (*store)->ListExecutions(after, 100);
    if (!page) {
      fmt::print(stderr, "inspect: {}\n", page.error().ToString());
      return 1;
    }
    for (const auto& id : page->execution_ids) PrintLog(**store, id);
    after = page->next_after;
  } while (!after.empty());
  return 0;
}

}  // namespace once::loom_app
