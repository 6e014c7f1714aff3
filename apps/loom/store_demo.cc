// loom demo store: the event store's fence, step by step, on SQLite.
#include <fmt/format.h>

#include "loom_app.h"
#include "once/store_sqlite/sqlite_event_store.h"

namespace once::loom_app {
namespace {

using events::KernelEvent;
using events::KernelKind;
using store::AppendRequest;

void Say(const std::string& what, const Result<int64_t>& r) {
  fmt::print("  {:<62} {}\n", what, r ? fmt::format("ok, head {}", *r) : r.error().ToString());
}

}  // namespace

int RunStoreDemo(const std::string& db) {
  SystemClock clock;
  store::SqliteOptions options;
  options.clock = &clock;
  auto opened = store::SqliteEventStore::Open(db, options);
  if (!opened) {
    fmt::print(stderr, "demo: {}\n", opened.error().ToString());
    return 1;
  }
  store::EventStore& s = **opened;
  const std::string id = fmt::format("fence-demo-{}", clock.NowUnixMillis());
  fmt::print("The event store on SQLite ({}), execution {}:\n", db, id);

  auto append = [&](int64_t next, std::vector<events::Envelope> evs, std::optional<int64_t> fence) {
    return s.Append(
        {.execution_id = id, .expected_next = next, .events = std::move(evs), .fence = fence});
  };
  Say("append EXECUTION_STARTED, STEP_COMPLETED",
      append(1,
             {KernelEvent(KernelKind::kExecutionStarted, {{"workflow", "demo"}}),
              KernelEvent(KernelKind::kStepCompleted, {{"name", "charge"}})},
             0));
  Say("append at sequence 2 again (a racing writer)",
      append(2, {KernelEvent(KernelKind::kStepCompleted, nlohmann::json{{"name", "s"}})}, 0));
  Say("park: append EXECUTION_SUSPENDED (waits on a timer)",
      append(3,
             {KernelEvent(KernelKind::kExecutionSuspended,
                          {{"waits", {{{"type", "timer"}, {"wake_at_ms", 0}}}}})},
             0));
  Say("an unfenced audit append after the park (EXECUTION_DENIED)",
      append(4, {KernelEvent(KernelKind::kExecutionDenied, {{"principal", "mallory"}})},
             std::nullopt));
  auto a = s.AcquireFenceIf(id, {.fence = 0, .park_seq = 3});
  fmt::print(
      "  {:<62} {}\n", "resumer A: AcquireFenceIf(fence 0, park 3)",
      a ? (a->stale ? "stale" : fmt::format("won token {}", a->fence)) : a.error().ToString());
  auto b = s.AcquireFenceIf(id, {.fence = 0, .park_seq = 3});
  fmt::print("  {:<62} {}\n", "resumer B: AcquireFenceIf(fence 0, park 3)",
             b ? (b->stale ? fmt::format("stale (current token {})", b->fence) : "won")
               : b.error().ToString());
  int64_t token = a && !a->stale ? a->fence : 0;
  Say(fmt::format("resumer A appends EXECUTION_RESUMED under token {}", token),
      append(5, {KernelEvent(KernelKind::kExecutionResumed, {{"answer", "timer"}}, token)}, token));
  auto b2 = s.AcquireFenceIf(id, {.fence = token, .park_seq = 3});
  fmt::print("  {:<62} {}\n", "resumer B retries with the current token",
             b2 ? (b2->stale ? "stale: the park is already answered" : "won (wrong!)")
                : b2.error().ToString());
  Say("a stale writer appends under token 0",
      append(6, {KernelEvent(KernelKind::kStepCompleted, nlohmann::json{{"name", "s"}})}, 0));
  Say("resumer A completes the execution",
      append(6, {KernelEvent(KernelKind::kExecutionCompleted, {{"value", "done"}}, token)}, token));
  PrintLog(s, id);
  return 0;
}

}  // namespace once::loom_app
