// inbox_bench: what one inbox message costs. N executions (500 by default)
// each park on Receive("go") (and would receive a second: the measured
// delivery re-parks, so it deletes the message with Trim, not Forget); then, one at a time, the
// message is stored (InboxStore::Put: one durable commit) and delivered (Inbox::DeliverPending: a
// log read, the conditional acquire, the [MESSAGE_CONSUMED, EXECUTION_RESUMED, ...] append, then
// the Trim of the delivered message, one more commit). Separately, N Trim calls alone (each on a
// message put for it), and N raw commits of one small row on the same storage (SQLite: a table in
// the same directory, WAL, synchronous=FULL; PostgreSQL: an INSERT autocommit on the same server):
// the floor a durable write pays. Times are wall-clock per operation (p50, p99) and the thread's
// CPU time per operation (the machine is shared: CPU time is the steadier figure).
//
//   inbox_bench --backend sqlite --dir /tmp/ib
//   inbox_bench --backend postgres --url postgresql://postgres@127.0.0.1:5432/postgres
//
// Output: one machine-readable line per backend
//   inbox-bench backend=... n=... put_p50_ms=... deliver_p50_ms=... trim_p50_ms=... raw_p50_ms=...

#include <libpq-fe.h>
#include <sqlite3.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "once/orchestration/inbox.h"
#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "once/store_postgres/postgres_event_store.h"
#include "once/store_postgres/postgres_inbox_store.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/store_sqlite/sqlite_inbox_store.h"

namespace once::bench {
namespace {

using runtime::Json;

struct Options {
  std::string backend = "sqlite";
  std::string dir = "/tmp";
  std::string url;
  size_t n = 500;
};

struct Stores {
  std::unique_ptr<store::EventStore> events;
  std::unique_ptr<inbox::InboxStore> inbox;            // the default: Trim does not wait
  std::unique_ptr<inbox::InboxStore> inbox_sync_trim;  // trim_waits_for_disk (A/B)
  std::function<void()> raw_commit;                    // one small durable write, bypassing once
  std::function<void()> cleanup;
};

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct Phase {
  std::vector<double> wall_ms;
  double cpu_ms = 0;
  template <class F>
  void Time(F&& f) {
    double cpu0 = ThreadCpuMs();
    auto t0 = std::chrono::steady_clock::now();
    f();
    wall_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu_ms += ThreadCpuMs() - cpu0;
  }
  double Pct(double p) {
    if (wall_ms.empty()) return 0;
    std::sort(wall_ms.begin(), wall_ms.end());
    return wall_ms[std::min(wall_ms.size() - 1, static_cast<size_t>(p * wall_ms.size()))];
  }
  double CpuUsPerOp() const { return wall_ms.empty() ? 0 : 1e3 * cpu_ms / wall_ms.size(); }
};

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "inbox_bench: %s\n", what.c_str());
    std::exit(1);
  }
}

Stores OpenSqlite(const Options& o, const Clock& clock) {
  std::filesystem::create_directories(o.dir);
  std::string stem = o.dir + "/inbox-bench-" + std::to_string(getpid());
  Stores s;
  store::SqliteOptions so;
  so.clock = &clock;
  auto events = store::SqliteEventStore::Open(stem + ".db", so);  // synchronous=FULL
  Check(events.has_value(), "sqlite events");
  auto inbox = store::SqliteInboxStore::Open(stem + ".db");  // same file, FULL
  Check(inbox.has_value(), "sqlite inbox");
  auto sync_trim = store::SqliteInboxStore::Open(stem + ".db", {.trim_waits_for_disk = true});
  Check(sync_trim.has_value(), "sqlite inbox (sync trim)");
  s.events = std::move(*events);
  s.inbox = std::move(*inbox);
  s.inbox_sync_trim = std::move(*sync_trim);
  sqlite3* raw = nullptr;
  sqlite3_open((stem + "-raw.db").c_str(), &raw);
  sqlite3_exec(raw, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE t(v TEXT)",
               nullptr, nullptr, nullptr);
  s.raw_commit = [raw] {
    Check(sqlite3_exec(raw, "INSERT INTO t VALUES ('x')", nullptr, nullptr, nullptr) == SQLITE_OK,
          "raw sqlite insert");
  };
  s.cleanup = [raw, stem] {
    sqlite3_close(raw);
    for (const char* f : {".db", "-raw.db"}) {
      for (const char* x : {"", "-wal", "-shm"}) std::filesystem::remove(stem + f + x);
    }
  };
  return s;
}

Stores OpenPostgres(const Options& o, const Clock& clock) {
  std::string schema = "inbox_bench_" + std::to_string(getpid());
  Stores s;
  store::PostgresOptions po;
  po.conninfo = o.url;
  po.schema = schema;
  auto events = store::PostgresEventStore::Open(po, clock);
  Check(events.has_value(), "postgres events");
  store::PostgresInboxOptions io;
  io.conninfo = o.url;
  io.schema = schema;
  auto inbox = store::PostgresInboxStore::Open(io);
  Check(inbox.has_value(), "postgres inbox");
  io.trim_waits_for_disk = true;
  auto sync_trim = store::PostgresInboxStore::Open(io);
  Check(sync_trim.has_value(), "postgres inbox (sync trim)");
  s.events = std::move(*events);
  s.inbox = std::move(*inbox);
  s.inbox_sync_trim = std::move(*sync_trim);
  PGconn* raw = PQconnectdb(o.url.c_str());
  Check(PQstatus(raw) == CONNECTION_OK, "raw postgres connection");
  PQclear(PQexec(raw, ("CREATE TABLE " + schema + ".raw (v text)").c_str()));
  s.raw_commit = [raw, schema] {
    PGresult* r = PQexec(raw, ("INSERT INTO " + schema + ".raw VALUES ('x')").c_str());
    Check(PQresultStatus(r) == PGRES_COMMAND_OK, "raw postgres insert");
    PQclear(r);
  };
  s.cleanup = [raw, schema] {
    PQclear(PQexec(raw, ("DROP SCHEMA " + schema + " CASCADE").c_str()));
    PQfinish(raw);
  };
  return s;
}

void Run(const Options& o) {
  SystemClock clock;
  SeededRng rng(1);
  Stores s;
  if (o.backend == "memory") {
    s.events = std::make_unique<store::MemoryEventStore>();
    s.inbox = std::make_unique<inbox::MemoryInboxStore>();
    s.inbox_sync_trim = std::make_unique<inbox::MemoryInboxStore>();
    s.raw_commit = [] {};
    s.cleanup = [] {};
  } else if (o.backend == "sqlite") {
    s = OpenSqlite(o, clock);
  } else {
    s = OpenPostgres(o, clock);
  }
  {
    runtime::Runtime rt(*s.events, clock);
    Check(rt.Register("wait",
                      [](runtime::Context& ctx, const Json&) -> Result<Json> {
                        ONCE_RETURN_IF_ERROR(ctx.Receive("go"));
                        return ctx.Receive("go");
                      })
              .has_value(),
          "register");
    // A/B in one run, interleaved: even executions through the default
    // store, odd ones through the one whose Trim waits for the disk.
    orchestration::Inbox inbox_a(rt, *s.inbox, clock, rng, {});
    orchestration::Inbox inbox_b(rt, *s.inbox_sync_trim, clock, rng, {});
    for (size_t i = 0; i < o.n; ++i) {
      Check(rt.Start("wait", "e" + std::to_string(i), Json()).has_value(), "start");
    }
    Phase put, deliver_a, deliver_b, trim_a, trim_b, raw;
    for (size_t i = 0; i < o.n; ++i) {
      std::string id = "e" + std::to_string(i);
      bool a = i % 2 == 0;
      inbox::InboxStore& store = a ? *s.inbox : *s.inbox_sync_trim;
      put.Time([&] { Check(store.Put(id, "go", Json{{"i", i}}).has_value(), "put"); });
      (a ? deliver_a : deliver_b).Time([&] {
        auto d = (a ? inbox_a : inbox_b).DeliverPending(id);
        Check(d && *d == orchestration::Delivery::kDelivered, "deliver");
      });
    }
    for (size_t i = 0; i < o.n; ++i) {
      std::string id = "t" + std::to_string(i);
      inbox::InboxStore& store = i % 2 == 0 ? *s.inbox : *s.inbox_sync_trim;
      Check(store.Put(id, "go", 1).has_value(), "put for trim");
      (i % 2 == 0 ? trim_a : trim_b).Time([&] {
        Check(store.Trim(id, "go", 1).has_value(), "trim");
      });
      raw.Time(s.raw_commit);
    }
    for (size_t i = 0; i < o.n; ++i) {
      Check(rt.Inspect("e" + std::to_string(i))->status == runtime::ExecutionStatus::kSuspended,
            "every execution received one and parks on the second");
    }
    double load[1] = {0};
    getloadavg(load, 1);
    std::printf(
        "inbox-bench backend=%s n=%zu put_p50_ms=%.2f put_p99_ms=%.2f put_cpu_us=%.0f "
        "deliver_p50_ms=%.2f deliver_p99_ms=%.2f deliver_cpu_us=%.0f "
        "deliver_synctrim_p50_ms=%.2f deliver_synctrim_p99_ms=%.2f deliver_synctrim_cpu_us=%.0f "
        "trim_p50_ms=%.2f trim_synctrim_p50_ms=%.2f raw_commit_p50_ms=%.2f load=%.2f\n",
        o.backend.c_str(), o.n, put.Pct(0.5), put.Pct(0.99), put.CpuUsPerOp(), deliver_a.Pct(0.5),
        deliver_a.Pct(0.99), deliver_a.CpuUsPerOp(), deliver_b.Pct(0.5), deliver_b.Pct(0.99),
        deliver_b.CpuUsPerOp(), trim_a.Pct(0.5), trim_b.Pct(0.5), raw.Pct(0.5), load[0]);
  }
  s.inbox.reset();
  s.inbox_sync_trim.reset();
  s.events.reset();
  s.cleanup();
}

}  // namespace
}  // namespace once::bench

int main(int argc, char** argv) {
  once::bench::Options o;
  CLI::App app{"inbox_bench: the cost of one durable inbox message"};
  app.add_option("--backend", o.backend, "memory | sqlite | postgres")
      ->check(CLI::IsMember({"memory", "sqlite", "postgres"}));
  app.add_option("--dir", o.dir, "SQLite: the directory of the files");
  app.add_option("--url", o.url, "PostgreSQL: a libpq URL");
  app.add_option("--n", o.n, "messages");
  CLI11_PARSE(app, argc, argv);
  once::bench::Run(o);
  return 0;
}
