// loom demo: a small but real workflow application on embedded SQLite.
//
// An order charges a card (a side effect written to a file beside the
// database), reserves stock, sleeps, ships through a child workflow and
// completes. Run it with --crash-after charge and the process kills itself
// with SIGKILL inside the reserve step, once the charge is recorded; run it
// again and it recovers from the log: the charge is replayed from its
// recorded result, not performed again.

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "loom_app.h"
#include "once/runtime/runtime.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/store_sqlite/sqlite_node_registry.h"

namespace once::loom_app {
namespace {

using runtime::Context;
using runtime::ExecutionStatus;
using runtime::Json;
using runtime::Runtime;

// The side effect: one line per charge, fsynced, so a crash cannot hide one.
Result<Json> Charge(const std::string& ledger, const std::string& order, int cents) {
  int fd = ::open(ledger.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0) return MakeError(ErrorCode::kUnavailable, "cannot open " + ledger);
  std::string line = fmt::format("charged {} {} cents\n", order, cents);
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return MakeError(ErrorCode::kUnavailable, "cannot write " + ledger);
  return Json{{"charged_cents", cents}};
}

int CountCharges(const std::string& ledger) {
  std::ifstream in(ledger);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind("charged", 0) == 0 ? 1 : 0;
  return n;
}

void RegisterDemo(Runtime& rt, const DemoOptions& options, const std::string& ledger) {
  (void)rt.Register("order", [&options, ledger](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json charged, ctx.Step("charge", [&]() -> Result<Json> {
      return Charge(ledger, ctx.execution_id(), in.value("cents", 0));
    }));
    // The charge's result is durable before the next step's function runs
    // (context.h): crashing inside that function shows the charge replayed
    // from the log, not performed again.
    ONCE_ASSIGN_OR_RETURN(Json reserved, ctx.Step("reserve", [&]() -> Result<Json> {
      if (options.crash_after == "charge") {
        fmt::print("demo: the charge is recorded; killing this process (SIGKILL)\n");
        std::fflush(stdout);
        ::kill(::getpid(), SIGKILL);
      }
      return Json{{"reserved", true}};
    }));
    (void)reserved;
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::milliseconds(500)));
    ONCE_RETURN_IF_ERROR(ctx.StartChild("ship", "ship", Json{{"order", ctx.execution_id()}}));
    ONCE_ASSIGN_OR_RETURN(Json shipped, ctx.AwaitChild("ship"));
    return Json{{"charge", charged}, {"ship", shipped}};
  });
  (void)rt.Register("ship", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json label, ctx.Step("label", [&]() -> Result<Json> {
      return Json{{"tracking", "TRK-" + in.value("order", std::string("?"))}};
    }));
    return label;
  });
}

// Wakes the order's timer when it is due (the TimerService does this in a
// deployed app) and waits until the order is terminal.
Status DriveToEnd(Runtime& rt, const std::string& id, const Clock& clock) {
  for (int i = 0; i < 200; ++i) {
    ONCE_ASSIGN_OR_RETURN(auto state, rt.Inspect(id));
    if (runtime::IsTerminal(state.status)) return Ok();
    ONCE_ASSIGN_OR_RETURN(auto park, rt.LocatePark(id));
    if (park) {
      for (const auto& wait : park->envelope.payload.value("waits", Json::array())) {
        if (wait.value("type", "") == "timer" &&
            wait.value("wake_at_ms", int64_t{0}) <= clock.NowUnixMillis()) {
          fmt::print("demo: the timer of {} is due; resuming under acquire-if-parked (park {})\n",
                     id, park->sequence);
          auto r = rt.Resume(id, {.fence_if_parked_at = park->sequence});
          if (!r) fmt::print("demo: resume: {}\n", r.error().ToString());
        }
      }
    }
    rt.WaitIdle();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return MakeError(ErrorCode::kTimeout, "the order did not finish", id);
}

}  // namespace

int RunDemo(const DemoOptions& options) {
  SystemClock clock;
  store::SqliteOptions sqlite_options;
  sqlite_options.clock = &clock;
  auto store = store::SqliteEventStore::Open(options.db, sqlite_options);
  if (!store) {
    fmt::print(stderr, "demo: {}\n", store.error().ToString());
    return 1;
  }
  std::string ledger = options.db + ".charges";
  // This process is the node "demo" on the file: what it runs is owned by
  // it, so a restart (the same node) takes its own runs back at once, while
  // another node would wait for the lease (docs/nodes.md).
  auto registry = store::SqliteNodeRegistry::Open(options.db, {.clock = &clock});
  if (!registry) {
    fmt::print(stderr, "demo: {}\n", registry.error().ToString());
    return 1;
  }
  SteadyClock local;
  nodes::Node node(**registry, local,
                   {.info = {.node_id = "demo", .host = "localhost", .pid = ::getpid()}});
  if (auto beat = node.Beat(); !beat) {
    fmt::print(stderr, "demo: {}\n", beat.error().ToString());
    return 1;
  }
  Runtime rt(**store, clock, {.workers = 0, .node = &node});
  RegisterDemo(rt, options, ledger);

  auto recovered = rt.Recover();
  if (recovered && recovered->redriven > 0) {
    fmt::print("demo: recovered {} execution(s) that were running when the process died\n",
               recovered->redriven);
  }
  auto head = (*store)->Head(options.order);
  if (head && *head == 0) {
    fmt::print("demo: starting {} (charge 1999 cents, reserve, sleep, ship, complete)\n",
               options.order);
    auto out = rt.Start("order", options.order, Json{{"cents", 1999}});
    if (!out) fmt::print("demo: start: {}\n", out.error().ToString());
  }
  if (auto s = DriveToEnd(rt, options.order, clock); !s) {
    fmt::print(stderr, "demo: {}\n", s.error().ToString());
    return 1;
  }
  PrintLog(**store, options.order);
  PrintLog(**store, runtime::ChildExecutionId(options.order, "ship"));
  int charges = CountCharges(ledger);
  fmt::print("\ndemo: the card was charged {} time(s) for {}\n", charges, options.order);
  return charges == 1 ? 0 : 2;
}

}  // namespace once::loom_app
