// loom seed: real executions in a store, for demos, the browser test and the
// 1,000,000-execution benchmark. The runtime runs every body (through an App,
// so parks get their timer rows); one in ten kinds each:
//   0-3 order (two steps, completed)    4 order (declined: failed)
//   5   nap (parked on a one-hour timer) 6 ask (parked on message "approve")
//   7   parent (parked on its child, an ask)  8 nap, then cancelled
//   9   order whose run crashed after its start (running)
#include <fmt/format.h>
#include <unistd.h>

#include <deque>
#include <future>

#include "cli.h"
#include "once/base/rng.h"
#include "once/orchestration/app.h"
#include "once/store_postgres/postgres_event_store.h"
#include "once/store_postgres/postgres_inbox_store.h"
#include "once/store_postgres/postgres_node_registry.h"
#include "once/store_postgres/postgres_queue_store.h"
#include "once/store_postgres/postgres_timer_store.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/store_sqlite/sqlite_inbox_store.h"
#include "once/store_sqlite/sqlite_node_registry.h"
#include "once/store_sqlite/sqlite_queue_store.h"
#include "once/store_sqlite/sqlite_timer_store.h"
#include "progress.h"

namespace once::loom_app {
namespace {

using runtime::Context;
using runtime::Json;

void RegisterSeedWorkflows(runtime::Runtime& rt) {
  (void)rt.Register("order", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json charged, ctx.Step("charge", [&]() -> Result<Json> {
      if (in.value("declined", false)) {
        return MakeError(ErrorCode::kPermissionDenied, "card declined");
      }
      return Json{{"cents", in.value("cents", 0)}};
    }));
    ONCE_ASSIGN_OR_RETURN(Json reserved, ctx.Step("reserve", [&]() -> Result<Json> {
      return Json{{"sku", in.value("sku", 0)}};
    }));
    return Json{{"charged", charged}, {"reserved", reserved}};
  });
  (void)rt.Register("nap", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::hours(1)));
    return Json("rested");
  });
  (void)rt.Register("ask", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json answer, ctx.Receive("approve"));
    return answer;
  });
  (void)rt.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.StartChild("ask", "approval", Json::object()));
    return ctx.AwaitChild("approval");
  });
}

// Case 9 is a body that started and whose process went away: with a node
// its run row names that node (loom nodes, loom show).
Result<runtime::RunOutcome> SeedOne(orchestration::App& app, store::EventStore& store, int64_t i,
                                    std::string_view node) {
  runtime::Runtime& rt = app.runtime();
  switch (i % 10) {
    case 4:
      return rt.Start("order", fmt::format("order-{:07}", i), Json{{"declined", true}});
    case 5:
      return rt.Start("nap", fmt::format("nap-{:07}", i), Json::object());
    case 6:
      return rt.Start("ask", fmt::format("ask-{:07}", i), Json::object());
    case 7:
      return rt.Start("parent", fmt::format("parent-{:07}", i), Json::object());
    case 8: {
      std::string id = fmt::format("nap-{:07}", i);
      ONCE_RETURN_IF_ERROR(rt.Start("nap", id, Json::object()));
      ONCE_ASSIGN_OR_RETURN(int64_t token, store.AcquireFence(id));
      return rt.Cancel(id, "seeded cancel", {.fence = token});
    }
    case 9: {
      std::string id = fmt::format("order-{:07}", i);
      store::AppendRequest req{
          .execution_id = id,
          .events = {events::KernelEvent(
              events::KernelKind::kExecutionStarted,
              Json{{"workflow", "order"}, {"input", Json{{"cents", 100 + i % 900}}}})},
          .owner = node};
      ONCE_RETURN_IF_ERROR(store.Append(req));
      return runtime::RunOutcome{.execution_id = id, .status = runtime::ExecutionStatus::kRunning};
    }
    default:
      return rt.Start("order", fmt::format("order-{:07}", i),
                      Json{{"cents", 100 + i % 900}, {"sku", i % 97}});
  }
}

// A node's seed also fills a durable queue no one serves (loom queues):
// one request per ten executions, limited to two at once on every node.
Status SeedQueue(orchestration::App& app, int64_t executions) {
  ONCE_RETURN_IF_ERROR(app.queues()->Configure(
      {.name = "seed-mail", .concurrency_max = 2, .rate_max = 10, .rate_period_ms = 1'000}));
  for (int64_t i = 0; i < (executions + 9) / 10; ++i) {
    ONCE_RETURN_IF_ERROR(app.Enqueue("seed-mail", "order", fmt::format("mail-{:07}", i),
                                     Json{{"cents", 100 + i}}, {.priority = i % 2}));
  }
  return Ok();
}

}  // namespace

Result<NodeStores> OpenNodeStores(const visibility::Target& target, const Clock& clock,
                                  bool as_node) {
  NodeStores out;
  if (!target.sqlite_path.empty()) {
    if (as_node) {
      ONCE_ASSIGN_OR_RETURN(out.nodes, store::SqliteNodeRegistry::Open(target.sqlite_path));
      ONCE_ASSIGN_OR_RETURN(out.queues, store::SqliteQueueStore::Open(target.sqlite_path));
    }
    store::SqliteOptions options;
    options.clock = &clock;
    ONCE_ASSIGN_OR_RETURN(auto events, store::SqliteEventStore::Open(target.sqlite_path, options));
    ONCE_ASSIGN_OR_RETURN(auto timers, store::SqliteTimerStore::Open(target.sqlite_path, {}));
    ONCE_ASSIGN_OR_RETURN(auto inbox, store::SqliteInboxStore::Open(target.sqlite_path, {}));
    out.events = std::move(events);
    out.timers = std::move(timers);
    out.inbox = std::move(inbox);
    return out;
  }
  store::PostgresOptions options;
  options.conninfo = target.postgres_url;
  options.schema = target.postgres_schema;
  ONCE_ASSIGN_OR_RETURN(auto events, store::PostgresEventStore::Open(options, clock));
  store::PostgresTimerOptions timer_options;
  timer_options.conninfo = target.postgres_url;
  timer_options.schema = target.postgres_schema;
  ONCE_ASSIGN_OR_RETURN(auto timers, store::PostgresTimerStore::Open(timer_options));
  if (as_node) {
    store::PostgresNodeOptions node_options;
    node_options.conninfo = target.postgres_url;
    node_options.schema = target.postgres_schema;
    ONCE_ASSIGN_OR_RETURN(out.nodes, store::PostgresNodeRegistry::Open(node_options));
    store::PostgresQueueOptions queue_options;
    queue_options.conninfo = target.postgres_url;
    queue_options.schema = target.postgres_schema;
    ONCE_ASSIGN_OR_RETURN(out.queues, store::PostgresQueueStore::Open(queue_options));
  }
  store::PostgresInboxOptions inbox_options;
  inbox_options.conninfo = target.postgres_url;
  inbox_options.schema = target.postgres_schema;
  ONCE_ASSIGN_OR_RETURN(auto inbox, store::PostgresInboxStore::Open(inbox_options));
  out.events = std::move(events);
  out.timers = std::move(timers);
  out.inbox = std::move(inbox);
  return out;
}

int RunSeed(const StoreFlags& flags, int64_t executions, int workers, const std::string& node) {
  auto target = flags.ToTarget();
  if (!target) {
    fmt::print(stderr, "loom: {}\n", target.error().message);
    return 2;
  }
  SystemClock clock;
  SystemRng rng;
  auto stores = OpenNodeStores(*target, clock, !node.empty());
  if (!stores) {
    fmt::print(stderr, "loom: {}\n", stores.error().ToString());
    return 1;
  }
  orchestration::AppConfig config{
      .store = stores->events.get(), .timers = stores->timers.get(), .clock = &clock, .rng = &rng};
  config.runtime.workers = 0;
  config.inbox = stores->inbox.get();
  if (!node.empty()) {
    // A node that registers, owns what it runs and releases at the end; it
    // takes nothing over (the seeded running executions stay running).
    config.nodes = stores->nodes.get();
    config.node.info = {.node_id = node, .host = "seed", .pid = getpid(), .version = "loom"};
    config.takeover_interval_ms = 0;
    config.recover_interval_ms = 0;
    config.queues = stores->queues.get();  // not served: what it enqueues stays queued
  }
  auto app = orchestration::App::Create(std::move(config));
  if (!app) {
    fmt::print(stderr, "loom: {}\n", app.error().ToString());
    return 1;
  }
  if (!node.empty()) {
    if (Status started = (*app)->Start(); !started) {
      fmt::print(stderr, "loom: {}\n", started.error().ToString());
      return 1;
    }
    if (Status queued = SeedQueue(**app, executions); !queued) {
      fmt::print(stderr, "loom: {}\n", queued.error().ToString());
      return 1;
    }
  }
  RegisterSeedWorkflows((*app)->runtime());
  // Starts run on `workers` threads; each thread's runs share commits
  // through the runtime's committer.
  Progress bar("seed: executions");
  std::atomic<int64_t> next{0}, done{0}, failed{0};
  std::mutex error_mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int w = 0; w < std::max(1, workers); ++w) {
    threads.emplace_back([&] {
      for (int64_t i; (i = next++) < executions;) {
        auto out = SeedOne(**app, *stores->events, i, node);
        if (!out) {
          ++failed;
          std::lock_guard<std::mutex> lock(error_mu);
          if (first_error.empty()) first_error = out.error().ToString();
        }
        ++done;
      }
    });
  }
  while (done.load() < executions && failed.load() == 0) {
    bar.Update(done.load(), executions);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& t : threads) t.join();
  bar.Update(done.load(), executions);
  bar.Finish();
  if (failed.load() > 0) {
    fmt::print(stderr, "loom: {} starts failed; the first: {}\n", failed.load(), first_error);
    return 1;
  }
  if (flags.json) {
    fmt::print("{}\n", Json{{"seeded", executions}}.dump(2));
  } else {
    fmt::print("seeded {} executions\n", executions);
  }
  return 0;
}

}  // namespace once::loom_app
