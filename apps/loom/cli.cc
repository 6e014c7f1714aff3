// The operator's commands: list, show, cancel, resume, send, fork, timers,
// retention run, seed. Each prints a table for people or, with --json, one
// JSON document (docs/operations.md names its fields); an error is one line
// on stderr and an exit code from ExitCodeOf.
#include "cli.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>

#include "once/base/decimal.h"
#include "once/runtime/runtime.h"
#include "once/store_postgres/postgres_event_store.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "ops.h"
#include "progress.h"

namespace once::loom_app {
namespace {

using visibility::ExecutionRow;

std::string Time(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = ms / 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buf, ms % 1000);
}

std::string Shorten(std::string s, size_t max) {
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

int Fail(const Error& e) {
  std::string subject = e.subject.empty() ? "" : e.subject + ": ";
  fmt::print(stderr, "loom: {}{} ({})\n", subject, e.message, ErrorCodeName(e.code));
  return ExitCodeOf(e);
}

void PrintJson(const Json& j) { fmt::print("{}\n", j.dump(2)); }

Result<std::unique_ptr<Ops>> OpenOps(const StoreFlags& flags) {
  ONCE_ASSIGN_OR_RETURN(visibility::Target target, flags.ToTarget());
  return Ops::Open(target);
}

void PrintRows(const std::vector<ExecutionRow>& rows) {
  fmt::print("{:<32} {:<14} {:<10} {:<24} {:<24} {:>6} {:>5}  {}\n", "EXECUTION", "WORKFLOW",
             "STATUS", "STARTED", "UPDATED", "EVENTS", "FENCE", "PARKED ON");
  for (const auto& r : rows) {
    std::string parked;
    for (const auto& w : r.parked_on) parked += (parked.empty() ? "" : ",") + w;
    fmt::print("{:<32} {:<14} {:<10} {:<24} {:<24} {:>6} {:>5}  {}\n", Shorten(r.execution_id, 32),
               Shorten(r.workflow, 14), r.status, Time(r.started_ms), Time(r.updated_ms), r.head,
               r.fence, parked);
  }
}

}  // namespace

Result<visibility::Target> StoreFlags::ToTarget() const {
  std::string u = url;
  if (u.empty() && db.empty()) {
    if (const char* env = std::getenv("LOOM_URL")) u = env;
  }
  if (u.empty() == db.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "name one store: --db FILE (SQLite) or --url URL (PostgreSQL; or LOOM_URL)");
  }
  if (!db.empty()) return visibility::Target{.sqlite_path = db};
  if (u.starts_with("sqlite:")) return visibility::Target{.sqlite_path = u.substr(7)};
  if (!u.starts_with("postgres://") && !u.starts_with("postgresql://") &&
      u.find('=') == std::string::npos) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "malformed store URL '" + u +
                         "': use postgresql://user@host:port/db, a libpq key=value string, or "
                         "sqlite:FILE");
  }
  return visibility::Target{.postgres_url = u, .postgres_schema = schema};
}

Result<int64_t> ParseTimeArg(const std::string& text) {
  if (text.empty()) return 0;
  // Unix milliseconds, or an ISO date/time in UTC (2024-05-01, 2024-05-01T12:00:00).
  if (text.find_first_not_of("0123456789") == std::string::npos) {
    if (std::optional<int64_t> ms = ParseDecimal<int64_t>(text)) return *ms;
    return MakeError(ErrorCode::kInvalidArgument, "'" + text + "' is too large for Unix ms");
  }
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) {
    tm = {};
    end = strptime(text.c_str(), "%Y-%m-%d", &tm);
  }
  if (end == nullptr || (*end != '\0' && *end != 'Z')) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "'" + text + "' is not a time: use Unix ms, 2024-05-01 or 2024-05-01T12:00:00");
  }
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

int RunList(const StoreFlags& flags, const ListFlags& list) {
  auto ops = OpenOps(flags);
  if (!ops) return Fail(ops.error());
  visibility::ListQuery q{.status = list.status,
                          .workflow = list.workflow,
                          .parked_on = list.parked_on,
                          .id_prefix = list.id_prefix,
                          .limit = list.limit,
                          .cursor = list.cursor};
  for (auto [text, out] : {std::pair{&list.started_after, &q.started_after_ms},
                           std::pair{&list.started_before, &q.started_before_ms},
                           std::pair{&list.updated_after, &q.updated_after_ms},
                           std::pair{&list.updated_before, &q.updated_before_ms}}) {
    auto t = ParseTimeArg(*text);
    if (!t) return Fail(t.error());
    *out = *t;
  }
  auto page = (*ops)->view().List(q);
  if (!page) return Fail(page.error());
  if (flags.json) {
    Json rows = Json::array();
    for (const auto& r : page->rows) rows.push_back(visibility::ToJson(r));
    PrintJson(Json{{"executions", std::move(rows)},
                   {"next_cursor", page->next_cursor.empty() ? Json() : Json(page->next_cursor)},
                   {"scanned", page->scanned}});
    return 0;
  }
  PrintRows(page->rows);
  if (!page->next_cursor.empty()) {
    fmt::print("-- more: --cursor {}  ({} examined)\n", page->next_cursor, page->scanned);
  }
  return 0;
}

int RunShow(const StoreFlags& flags, const std::string& id, size_t events_max) {
  auto ops = OpenOps(flags);
  if (!ops) return Fail(ops.error());
  auto shown = (*ops)->Show(id, events_max);
  if (!shown) return Fail(shown.error());
  if (flags.json) {
    PrintJson(*shown);
    return 0;
  }
  const Json& x = (*shown)["execution"];
  fmt::print("{}  workflow {}  status {}  fence {}  events {}\n", id,
             x["workflow"].get<std::string>(), x["status"].get<std::string>(),
             x["fence"].get<int64_t>(), x["head"].get<int64_t>());
  fmt::print("started {}  updated {}  owner {}\n", Time(x["started_ms"]), Time(x["updated_ms"]),
             (*shown)["owner"].is_null() ? "-" : (*shown)["owner"].dump());
  if (!x["parent_id"].is_null()) fmt::print("parent {}\n", x["parent_id"].get<std::string>());
  if (!(*shown)["open_park"].is_null()) {
    const Json& p = (*shown)["open_park"];
    fmt::print("parked at {} ({}) on {}\n", p["sequence"].get<int64_t>(),
               p["call"].get<std::string>(), p["waits"].dump());
  }
  if (!x["result"].is_null()) fmt::print("result {}\n", Shorten(x["result"].dump(), 200));
  fmt::print("\n{:>5}  {:<24} {:<20} {:>5}  {}\n", "SEQ", "TIME", "KIND", "FENCE", "PAYLOAD");
  for (const Json& e : (*shown)["events"]) {
    fmt::print("{:>5}  {:<24} {:<20} {:>5}  {}\n", e["sequence"].get<int64_t>(), Time(e["time_ms"]),
               e["kind"].get<std::string>(), e["fence"].get<int64_t>(),
               Shorten(e["payload"].dump(), 80));
  }
  if ((*shown)["events_truncated"].get<bool>()) fmt::print("(later events not shown: --events)\n");
  for (const Json& t : (*shown)["timers"]) {
    fmt::print("timer  wake {}  {}\n", Time(t["wake_at_ms"]),
               t["redrive_attempt"].is_null() ? "park timer"
                                              : "re-drive attempt " + t["redrive_attempt"].dump());
  }
  for (const Json& m : (*shown)["pending_messages"]) {
    fmt::print("message  {} #{}  {}\n", m["topic"].get<std::string>(), m["seq"].get<int64_t>(),
               Shorten(m["message"].dump(), 80));
  }
  for (const Json& c : (*shown)["children"]) {
    fmt::print("child  {}  {}  {}\n", c["key"].get<std::string>(),
               c["execution_id"].get<std::string>(), c["status"].get<std::string>());
  }
  for (const Json& p : (*shown)["problems"]) {
    fmt::print("problem  event {}: {}\n", p["sequence"].get<int64_t>(),
               p["problem"].get<std::string>());
  }
  return 0;
}

int RunAct(const StoreFlags& flags, const std::string& what,
           const std::function<Result<Json>(Ops&)>& act) {
  auto ops = OpenOps(flags);
  if (!ops) return Fail(ops.error());
  auto done = act(**ops);
  if (!done) return Fail(done.error());
  if (flags.json) {
    PrintJson(*done);
  } else {
    std::string line = what;
    for (auto& [k, v] : done->items()) line += fmt::format("  {}={}", k, v.dump());
    fmt::print("{}\n", line);
  }
  return 0;
}

int RunCancel(const StoreFlags& flags, const std::string& id, const std::string& reason) {
  return RunAct(flags, "cancelled", [&](Ops& ops) { return ops.Cancel(id, reason); });
}

int RunResume(const StoreFlags& flags, const std::string& id) {
  return RunAct(flags, "resumed", [&](Ops& ops) { return ops.Resume(id); });
}

int RunSend(const StoreFlags& flags, const std::string& id, const std::string& topic,
            const std::string& message_text) {
  auto message = events::ParseJson(message_text);
  if (!message) {
    return Fail(Error{ErrorCode::kInvalidArgument, "the message is not JSON: " + message_text});
  }
  return RunAct(flags, "sent", [&](Ops& ops) { return ops.Send(id, topic, *message); });
}

int RunFork(const StoreFlags& flags, const std::string& id, int64_t from_step,
            const std::string& new_id) {
  Progress bar("fork: events read");
  int rc = RunAct(flags, "forked", [&](Ops& ops) {
    return ops.Fork(id, from_step, new_id, [&](int64_t d, int64_t t) { bar.Update(d, t); });
  });
  return rc;
}

int RunTimers(const StoreFlags& flags, int64_t due_within_ms, size_t limit,
              const std::string& cursor) {
  auto ops = OpenOps(flags);
  if (!ops) return Fail(ops.error());
  int64_t due_before = due_within_ms < 0 ? 0
                                         : std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                                   .count() +
                                               due_within_ms;
  auto page = (*ops)->view().Timers(due_before, limit, cursor);
  if (!page) return Fail(page.error());
  if (flags.json) {
    Json rows = Json::array();
    for (const auto& t : page->timers) rows.push_back(visibility::ToJson(t));
    PrintJson(Json{{"timers", std::move(rows)},
                   {"next_cursor", page->next_cursor.empty() ? Json() : Json(page->next_cursor)}});
    return 0;
  }
  fmt::print("{:<32} {:<24} {:<10} {}\n", "EXECUTION", "WAKE AT", "KIND", "LEASE");
  for (const auto& t : page->timers) {
    fmt::print("{:<32} {:<24} {:<10} {}\n", Shorten(t.execution_id, 32), Time(t.wake_at_ms),
               t.redrive_attempt ? fmt::format("redrive#{}", *t.redrive_attempt) : "park",
               t.lease_owner.empty() ? "-" : t.lease_owner + " until " + Time(t.lease_until_ms));
  }
  if (!page->next_cursor.empty()) fmt::print("-- more: --cursor {}\n", page->next_cursor);
  return 0;
}

int RunNodes(const StoreFlags& flags) {
  auto ops = OpenOps(flags);
  if (!ops) return Fail(ops.error());
  auto nodes = (*ops)->view().Nodes(1000);
  if (!nodes) return Fail(nodes.error());
  if (flags.json) {
    Json rows = Json::array();
    for (const auto& n : *nodes) rows.push_back(visibility::ToJson(n));
    PrintJson(Json{{"nodes", std::move(rows)}});
    return 0;
  }
  fmt::print("{:<24} {:<16} {:>7} {:<14} {:<24} {:>8} {:<6} {:>6}\n", "NODE", "HOST", "PID",
             "VERSION", "HEARTBEAT", "LEASE", "ALIVE", "RUNS");
  for (const auto& n : *nodes) {
    fmt::print("{:<24} {:<16} {:>7} {:<14} {:<24} {:>6}ms {:<6} {:>6}\n", Shorten(n.node_id, 24),
               Shorten(n.host, 16), n.pid, Shorten(n.version, 14), Time(n.heartbeat_at_ms),
               n.lease_ms,
               n.stopped ? "stop"
               : n.alive ? "yes"
                         : "DEAD",
               n.runs_owned);
  }
  return 0;
}

int RunQueues(const StoreFlags& flags) {
  auto ops = OpenOps(flags);
  if (!ops) return Fail(ops.error());
  auto queues = (*ops)->view().Queues(1000);
  if (!queues) return Fail(queues.error());
  if (flags.json) {
    Json rows = Json::array();
    for (const auto& q : *queues) rows.push_back(visibility::ToJson(q));
    PrintJson(Json{{"queues", std::move(rows)}});
    return 0;
  }
  fmt::print("{:<24} {:>8} {:>8} {:>12} {:>9} {:>9}\n", "QUEUE", "LIMIT", "PER-NODE", "RATE",
             "PENDING", "CLAIMED");
  for (const auto& q : *queues) {
    std::string rate = q.rate_max > 0 ? fmt::format("{}/{}ms", q.rate_max, q.rate_period_ms) : "-";
    fmt::print("{:<24} {:>8} {:>8} {:>12} {:>9} {:>9}\n", Shorten(q.name, 24),
               q.concurrency_max > 0 ? std::to_string(q.concurrency_max) : "-",
               q.per_node_concurrency_max > 0 ? std::to_string(q.per_node_concurrency_max) : "-",
               rate, q.pending, q.claimed);
  }
  return 0;
}

int RunRetention(const StoreFlags& flags, int64_t age_ms, bool dry_run, RetentionPace pace) {
  Progress bar(dry_run ? "retention (dry run): eligible" : "retention: eligible");
  return RunAct(flags, dry_run ? "retention dry run" : "retention", [&](Ops& ops) {
    auto out = ops.Retention(
        age_ms, dry_run, [&](int64_t d, int64_t t) { bar.Update(d, t); }, pace);
    bar.Finish();
    return out;
  });
}

}  // namespace once::loom_app
