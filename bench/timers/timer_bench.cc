// timer_bench: do timers fire on time? N executions (10,000 by default) each
// park on SleepUntil(T) for ONE common instant T; a TimerService with a
// RuntimeWaker (real time, SystemClock) fires them. Lateness of an execution
// = the moment its resume is durable (Waker::Wake returned kResumed, seen by
// a decorator of the RuntimeWaker, before the row is retired) - T. Reports
// p50 / p99 / max lateness, fired/s (N / (last resume - T)) and how many
// executions completed (read back from the log: must be N). The log's
// EXECUTION_COMPLETED time_ms gives a second lateness figure (stamped when
// the event is made, before its append is durable).
//
//   timer_bench --backend memory
//   timer_bench --backend sqlite --dir /tmp/tb
//   timer_bench --backend postgres --url postgresql://postgres@127.0.0.1:5432/postgres
//
// T is chosen from a pilot: pilot executions (1% of N, at least 50, parked a
// day ahead so they never fire) time the setup, and T = the start of the real
// setup + 1.5 x the extrapolated setup time + --slack-ms. If the setup still
// runs past T the line says so (setup_overran=1): the lateness then includes
// setup time and the figure is not valid.
//
// The TimerService runs with TimerServiceOptions' defaults, and the stores
// with their own limits and pool sizes, unless a flag overrides one
// (--claim-rows-max, --fire-concurrency, --wake-batch-max, --repoll-when-full 0|1,
// --overlap-polls 0|1, --claim-ahead-ms, --poll-interval-ms). After the firing, the raw limit of
// the same storage is measured (raw_fsync_per_s, raw_write_mb_per_s, raw_commit_per_s; see
// RawRates). --profile-store adds the event store's per-method calls and
// mean latency over the firing (store_<Method>_calls / _ms_avg). On PostgreSQL
// the WAL written from T to the last resume is reported (fire_wal_bytes,
// fire_wal_mb_per_s) beside the disk's raw_write_mb_per_s. With
// TIMER_BENCH_PERF_CTL=<fifo> (perf record -D -1 --control fifo:<fifo>,<ack>)
// and TIMER_BENCH_PERF_CTL_ACK=<ack>, perf samples the firing only (from T to
// the last resume), not the setup.
//
// Output: one machine-readable line
//   timer-bench backend=... timers=... p50_ms=... p99_ms=... max_ms=... fired_per_s=...
//   completed=... ...

#include <fcntl.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cpu.h"
#include "once/allocator/settings.h"
#include "once/base/clock.h"
#include "once/base/rng.h"
#include "once/orchestration/runtime_waker.h"
#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "once/store_decorators/profiling_store.h"
#include "once/store_postgres/postgres_event_store.h"
#include "once/store_postgres/postgres_timer_store.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/store_sqlite/sqlite_timer_store.h"
#include "once/timers/memory_timer_store.h"
#include "once/timers/timer_service.h"

namespace once::bench {
namespace {

using runtime::Context;
using runtime::Json;
using runtime::Runtime;

struct Options {
  std::string backend = "memory";
  std::string dir;
  std::string url;
  size_t timers = 10'000;
  size_t workers = 16;  // runtime workers (the setup's concurrent starts)
  // The TimerService's own defaults unless a flag overrides one.
  timers::TimerServiceOptions service;
  bool timers_synchronous_normal = false;  // SQLite diagnosis: timer commits without fsync
  int64_t raw_ms = 1'000;                  // how long the raw fsync / commit rates are measured
  bool profile_store = false;              // time the event store's methods over the firing
  bool repark = false;  // after the wake the workflow sleeps again (a day): a timer row per fire
  int64_t slack_ms = 2'000;
  int64_t wait_ms_max = 900'000;  // give up on stragglers after T + this
  int server_pid = 0;  // PostgreSQL postmaster (0: found from url): its CPU over the firing
  // PostgreSQL: PostgresOptions::acquire_groups_in_flight_max (0: the store's default).
  size_t acquire_groups = 0;
  // CommitterOptions::flushes_in_flight_max (0: the store's, 2 on PostgreSQL).
  size_t flushes_in_flight = 0;
};

struct Stores {
  std::unique_ptr<store::EventStore> events;
  std::unique_ptr<timers::TimerStore> timers;
};

// The run's own PostgreSQL schema, dropped when the run is over.
std::string PostgresSchema() { return "timer_bench_" + std::to_string(getpid()); }

Result<Stores> OpenStores(const Options& o, const Clock& clock) {
  Stores s;
  // The stores' own defaults (TimerLimits, pool sizes), raised only when a
  // flag asks the service for more than they give.
  timers::TimerLimits limits;
  limits.claim_rows_max = std::max(limits.claim_rows_max, o.service.claim_rows_max);
  limits.complete_keys_max = std::max(limits.complete_keys_max, o.service.claim_rows_max);
  if (o.backend == "memory") {
    s.events = std::make_unique<store::MemoryEventStore>();
    s.timers = std::make_unique<timers::MemoryTimerStore>(limits);
    return s;
  }
  if (o.backend == "sqlite") {
    // One file each: the timer store's connection never waits on the event
    // store's write lock. Durability FULL on both (the defaults).
    std::string dir = o.dir.empty() ? "/tmp" : o.dir;
    std::filesystem::create_directories(dir);
    std::string stem = dir + "/timer-bench-" + std::to_string(getpid());
    for (const char* suffix : {"-events.db", "-timers.db"}) {
      for (const char* extra : {"", "-wal", "-shm"}) {
        std::filesystem::remove(stem + suffix + extra);
      }
    }
    ONCE_ASSIGN_OR_RETURN(auto events, store::SqliteEventStore::Open(stem + "-events.db"));
    ONCE_ASSIGN_OR_RETURN(
        auto timers, store::SqliteTimerStore::Open(
                         stem + "-timers.db",
                         {.durability = o.timers_synchronous_normal ? store::Durability::kNormal
                                                                    : store::Durability::kFull,
                          .limits = limits}));
    s.events = std::move(events);
    s.timers = std::move(timers);
    return s;
  }
  if (o.backend == "postgres") {
    std::string schema = PostgresSchema();
    store::PostgresOptions po{
        .conninfo = o.url,
        .schema = schema,
        .connections_max =
            std::max<size_t>(store::PostgresOptions{}.connections_max, o.service.fire_concurrency)};
    if (o.acquire_groups > 0) po.acquire_groups_in_flight_max = o.acquire_groups;
    ONCE_ASSIGN_OR_RETURN(auto events, store::PostgresEventStore::Open(po, clock));
    store::PostgresTimerOptions to{.conninfo = o.url, .schema = schema, .limits = limits};
    ONCE_ASSIGN_OR_RETURN(auto timers, store::PostgresTimerStore::Open(to));
    s.events = std::move(events);
    s.timers = std::move(timers);
    return s;
  }
  return MakeError(ErrorCode::kInvalidArgument, "unknown backend " + o.backend);
}

// Records when each resume became durable (before the service retires the row).
class TimingWaker final : public timers::Waker {
 public:
  TimingWaker(timers::Waker& inner, const Clock& clock) : inner_(inner), clock_(clock) {}

  Result<timers::WakeVerdict> Wake(const timers::TimerRow& row) override {
    auto begin = std::chrono::steady_clock::now();
    Result<timers::WakeVerdict> v = inner_.Wake(row);
    Record(begin, std::span<const Result<timers::WakeVerdict>>(&v, 1));
    return v;
  }

  bool WakesTogether() const override { return inner_.WakesTogether(); }

  // A batch's resumes are durable by the time it returns: each is timed
  // then (no earlier than its own append landed).
  std::vector<Result<timers::WakeVerdict>> WakeMany(
      std::span<const timers::TimerRow* const> rows) override {
    auto begin = std::chrono::steady_clock::now();
    std::vector<Result<timers::WakeVerdict>> v = inner_.WakeMany(rows);
    Record(begin, v);
    return v;
  }

  size_t resumed() const { return resumed_count_.load(std::memory_order_acquire); }

 private:
  void Record(std::chrono::steady_clock::time_point begin,
              std::span<const Result<timers::WakeVerdict>> verdicts) {
    int64_t now_ms = clock_.NowUnixMillis();
    int64_t took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - begin)
                          .count();
    wake_us_.fetch_add(took_us * static_cast<int64_t>(verdicts.size()));
    std::lock_guard<std::mutex> lock(mu_);
    for (const Result<timers::WakeVerdict>& v : verdicts) {
      if (v && *v == timers::WakeVerdict::kResumed) {
        resumed_ms_.push_back(now_ms);
      } else {
        ++not_resumed_;
      }
    }
    resumed_count_.store(resumed_ms_.size(), std::memory_order_release);
  }

 public:
  int64_t wake_us() const { return wake_us_.load(); }
  std::vector<int64_t> resumed_ms() const {
    std::lock_guard<std::mutex> lock(mu_);
    return resumed_ms_;
  }
  size_t not_resumed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return not_resumed_;
  }

 private:
  timers::Waker& inner_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::vector<int64_t> resumed_ms_;  // GUARDED_BY(mu_)
  size_t not_resumed_ = 0;           // GUARDED_BY(mu_)
  std::atomic<size_t> resumed_count_{0};
  std::atomic<int64_t> wake_us_{0};  // summed time inside Wake
};

// Times Claim and Complete (the service's own store writes).
class TimingTimerStore final : public timers::TimerStore {
 public:
  explicit TimingTimerStore(timers::TimerStore& inner) : inner_(inner) {}
  Status Schedule(const timers::TimerRow& row) override { return inner_.Schedule(row); }
  Result<std::vector<timers::TimerRow>> Due(int64_t now_ms, size_t limit,
                                            bool include_redrive) override {
    return inner_.Due(now_ms, limit, include_redrive);
  }
  Result<std::vector<timers::TimerRow>> Claim(const timers::ClaimRequest& req) override {
    auto begin = std::chrono::steady_clock::now();
    auto r = inner_.Claim(req);
    if (r && !r->empty()) claim_us_.fetch_add(Since(begin));
    return r;
  }
  Status Complete(const timers::TimerKey& key) override {
    auto begin = std::chrono::steady_clock::now();
    Status s = inner_.Complete(key);
    complete_us_.fetch_add(Since(begin));
    complete_calls_.fetch_add(1);
    return s;
  }
  Status CompleteMany(std::span<const timers::TimerKey> keys) override {
    auto begin = std::chrono::steady_clock::now();
    Status s = inner_.CompleteMany(keys);
    complete_us_.fetch_add(Since(begin));
    complete_calls_.fetch_add(1);
    return s;
  }
  Status Defer(const timers::TimerKey& key, std::string_view owner, int64_t until_ms) override {
    return inner_.Defer(key, owner, until_ms);
  }
  Result<std::vector<timers::TimerRow>> RowsOf(std::string_view execution_id) override {
    return inner_.RowsOf(execution_id);
  }
  const timers::TimerLimits& limits() const override { return inner_.limits(); }
  int64_t claim_us() const { return claim_us_.load(); }
  int64_t complete_us() const { return complete_us_.load(); }
  int64_t complete_calls() const { return complete_calls_.load(); }

 private:
  static int64_t Since(std::chrono::steady_clock::time_point begin) {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                 begin)
        .count();
  }
  timers::TimerStore& inner_;
  std::atomic<int64_t> claim_us_{0};     // summed, claims that returned rows
  std::atomic<int64_t> complete_us_{0};  // summed, Complete and CompleteMany
  std::atomic<int64_t> complete_calls_{0};
};

int64_t Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return -1;
  size_t i = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

// The PostgreSQL server's CPU accounting (none for an embedded backend, or a
// server that is not a local process).
std::optional<bench::PostgresServerCpu> ServerCpuOf(const Options& o) {
  if (o.backend != "postgres") return std::nullopt;
  if (o.server_pid > 0) return bench::PostgresServerCpu::OfPostmaster(o.server_pid);
  Result<bench::PostgresServerCpu> found = bench::PostgresServerCpu::Find(o.url);
  if (!found) return std::nullopt;
  return *found;
}

// Names the fifo of `perf record --control` that samples the firing only.
constexpr char kPerfControlVariable[] = "TIMER_BENCH_PERF_CTL";

double LoadAverage1() {
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

// Starts executions [first, first + count) parked until wake_at_ms; returns
// how many parked. Up to `in_flight` starts are outstanding at once.
size_t StartParked(Runtime& rt, const std::string& prefix, size_t count, int64_t wake_at_ms,
                   size_t in_flight) {
  size_t parked = 0;
  std::vector<std::future<Result<runtime::RunOutcome>>> pending;
  auto drain = [&](size_t keep) {
    while (pending.size() > keep) {
      Result<runtime::RunOutcome> r = pending.front().get();
      pending.erase(pending.begin());
      if (r && r->status == runtime::ExecutionStatus::kSuspended) {
        ++parked;
      } else if (!r) {
        std::fprintf(stderr, "timer-bench: start failed: %s\n", r.error().message.c_str());
      }
    }
  };
  for (size_t i = 0; i < count; ++i) {
    pending.push_back(
        rt.StartAsync("sleep_until", prefix + std::to_string(i), Json{{"wake_at_ms", wake_at_ms}}));
    if (pending.size() >= in_flight) drain(in_flight / 2);
  }
  drain(0);
  return parked;
}

// The raw limit of the storage the run used, measured in the same run: a
// 4 KiB write + fdatasync of a file in the SQLite folder, and one durable
// commit of a one-row INSERT (SQLite: WAL, synchronous=FULL, autocommit;
// PostgreSQL: one connection, autocommit, synchronous_commit on), each in a
// loop for o.raw_ms, one at a time. -1: not measured (memory, or an error).
struct RawRates {
  double fsync_per_s = -1;
  double commit_per_s = -1;
  // Sequential 256 KiB writes, each followed by fdatasync: the bandwidth a
  // log that flushes large groups (PostgreSQL's WAL) gets from the disk.
  double write_mb_per_s = -1;
};

template <class F>
double PerSecond(int64_t ms, F&& once) {
  auto begin = std::chrono::steady_clock::now();
  auto end = begin + std::chrono::milliseconds(ms);
  int64_t n = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (!once()) return -1;
    ++n;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return static_cast<double>(n) / s;
}

double RawFsyncPerSecond(const std::string& dir, int64_t ms) {
  std::string path = dir + "/timer-bench-raw-" + std::to_string(getpid());
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return -1;
  std::string block(4096, 'x');
  off_t at = 0;
  double rate = PerSecond(ms, [&] {
    bool ok = ::pwrite(fd, block.data(), block.size(), at) == static_cast<ssize_t>(block.size()) &&
              ::fdatasync(fd) == 0;
    at = (at + 4096) % (1 << 20);
    return ok;
  });
  ::close(fd);
  std::filesystem::remove(path);
  return rate;
}

double RawWriteMegabytesPerSecond(const std::string& dir, int64_t ms) {
  std::string path = dir + "/timer-bench-raw-write-" + std::to_string(getpid());
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return -1;
  constexpr size_t kBlock = 256 * 1024;
  constexpr off_t kFileMax = 64 << 20;  // rewritten in a circle: the bytes stay bounded
  std::string block(kBlock, 'x');
  off_t at = 0;
  double writes = PerSecond(ms, [&] {
    bool ok = ::pwrite(fd, block.data(), kBlock, at) == static_cast<ssize_t>(kBlock) &&
              ::fdatasync(fd) == 0;
    at = (at + static_cast<off_t>(kBlock)) % kFileMax;
    return ok;
  });
  ::close(fd);
  std::filesystem::remove(path);
  return writes < 0 ? -1 : writes * kBlock / 1e6;
}

// PostgreSQL's WAL position in bytes (-1: not read).
int64_t PostgresWalBytes(const std::string& url) {
  PGconn* conn = PQconnectdb(url.c_str());
  int64_t bytes = -1;
  if (PQstatus(conn) == CONNECTION_OK) {
    PGresult* r = PQexec(conn, "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8");
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
      bytes = std::strtoll(PQgetvalue(r, 0, 0), nullptr, 10);
    }
    PQclear(r);
  }
  PQfinish(conn);
  return bytes;
}

double RawSqliteCommitsPerSecond(const std::string& dir, int64_t ms) {
  std::string path = dir + "/timer-bench-raw-" + std::to_string(getpid()) + ".db";
  sqlite3* db = nullptr;
  double rate = -1;
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
      sqlite3_exec(db,
                   "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
                   "CREATE TABLE raw(id INTEGER PRIMARY KEY, v TEXT)",
                   nullptr, nullptr, nullptr) == SQLITE_OK) {
    sqlite3_stmt* insert = nullptr;
    if (sqlite3_prepare_v2(db, "INSERT INTO raw(v) VALUES ('timer')", -1, &insert, nullptr) ==
        SQLITE_OK) {
      rate = PerSecond(ms, [&] {
        int rc = sqlite3_step(insert);
        sqlite3_reset(insert);
        return rc == SQLITE_DONE;
      });
    }
    sqlite3_finalize(insert);
  }
  sqlite3_close(db);
  for (const char* extra : {"", "-wal", "-shm"}) std::filesystem::remove(path + extra);
  return rate;
}

double RawPostgresCommitsPerSecond(const std::string& url, int64_t ms) {
  PGconn* conn = PQconnectdb(url.c_str());
  double rate = -1;
  auto exec = [&](const char* sql) {
    PGresult* r = PQexec(conn, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok;
  };
  std::string table = "timer_bench_raw_" + std::to_string(getpid());
  std::string create = "CREATE TABLE " + table + " (id bigserial PRIMARY KEY, v text)";
  std::string insert = "INSERT INTO " + table + " (v) VALUES ('timer')";
  std::string drop = "DROP TABLE " + table;
  if (PQstatus(conn) == CONNECTION_OK && exec(create.c_str())) {
    rate = PerSecond(ms, [&] { return exec(insert.c_str()); });
    exec(drop.c_str());
  }
  PQfinish(conn);
  return rate;
}

// Drops the run's schema (its 100,000s of rows are of no use after it), once
// every store and connection of the run is closed.
void DropPostgresSchema(const std::string& url, const std::string& schema) {
  PGconn* conn = PQconnectdb(url.c_str());
  if (PQstatus(conn) == CONNECTION_OK) {
    std::string drop =
        "SET client_min_messages = warning; DROP SCHEMA IF EXISTS \"" + schema + "\" CASCADE";
    PGresult* r = PQexec(conn, drop.c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      std::fprintf(stderr, "timer-bench: %s: %s", drop.c_str(), PQerrorMessage(conn));
    }
    PQclear(r);
  }
  PQfinish(conn);
}

RawRates MeasureRaw(const Options& o) {
  RawRates raw;
  if (o.backend == "memory") return raw;
  std::string dir = o.dir.empty() ? "/tmp" : o.dir;
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  raw.fsync_per_s = RawFsyncPerSecond(dir, o.raw_ms);
  raw.write_mb_per_s = RawWriteMegabytesPerSecond(dir, o.raw_ms);
  raw.commit_per_s = o.backend == "sqlite" ? RawSqliteCommitsPerSecond(dir, o.raw_ms)
                                           : RawPostgresCommitsPerSecond(o.url, o.raw_ms);
  return raw;
}

int Run(const Options& o) {
  SystemClock clock;
  SystemRng rng;
  Result<Stores> stores = OpenStores(o, clock);
  if (!stores) {
    std::fprintf(stderr, "timer-bench: %s\n", stores.error().message.c_str());
    return 1;
  }
  std::atomic<size_t> errors{0};
  auto on_error = [&](const Error& e) {
    if (errors.fetch_add(1) < 5)
      std::fprintf(stderr, "timer-bench: error: %s\n", e.message.c_str());
  };
  // --profile-store: the runtime and ParkTimers see the event store through
  // a ProfilingStore (per-method call counts and latency over the firing).
  std::unique_ptr<store::ProfilingStore> profiled;
  store::EventStore* events = stores->events.get();
  if (o.profile_store) {
    profiled = std::make_unique<store::ProfilingStore>(*events, clock);
    events = profiled.get();
  }
  orchestration::ParkTimers park_timers(*events, *stores->timers, on_error);
  runtime::RuntimeOptions rt_options{.workers = o.workers, .on_error = on_error};
  rt_options.committer.flushes_in_flight_max = o.flushes_in_flight;
  rt_options.on_park = [&](const std::string& id, int64_t seq, const store::Envelope& park) {
    park_timers.OnPark(id, seq, park);
  };
  Runtime rt(*events, clock, rt_options);
  // Sleeps until the input's instant; records nothing else; completes.
  (void)rt.Register("sleep_until", [&o](Context& ctx, const Json& in) -> Result<Json> {
    int64_t wake_at_ms = in["wake_at_ms"].get<int64_t>();
    ONCE_RETURN_IF_ERROR(ctx.SleepUntil(FromUnixMillis(wake_at_ms)));
    // --repark: the resume parks again, so every fired row writes a new
    // timer row on the firing thread (ParkTimers::OnPark), as a loop of
    // sleeps does.
    if (o.repark) ONCE_RETURN_IF_ERROR(ctx.SleepUntil(FromUnixMillis(wake_at_ms + 86'400'000)));
    return Json();
  });
  orchestration::RuntimeWaker runtime_waker(rt);
  TimingWaker waker(runtime_waker, clock);
  timers::TimerServiceOptions service_options = o.service;
  service_options.owner = "timer-bench";
  service_options.on_error = on_error;
  TimingTimerStore timed_timers(*stores->timers);
  timers::TimerService service(timed_timers, waker, clock, rng, service_options);
  service.Start();  // polling all along, as in production

  size_t in_flight = std::max<size_t>(o.workers * 4, 64);
  // Pilot: time the setup on executions that never fire in this run.
  size_t pilot = std::max<size_t>(o.timers / 100, 50);
  auto pilot_start = std::chrono::steady_clock::now();
  StartParked(rt, "pilot-", pilot, clock.NowUnixMillis() + 86'400'000, in_flight);
  double pilot_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - pilot_start).count();
  double setup_estimate_s = pilot_s * static_cast<double>(o.timers) / static_cast<double>(pilot);

  int64_t setup_start_ms = clock.NowUnixMillis();
  int64_t t_ms = setup_start_ms + static_cast<int64_t>(setup_estimate_s * 1'500) + o.slack_ms;
  size_t parked = StartParked(rt, "t-", o.timers, t_ms, in_flight);
  int64_t parked_ms = clock.NowUnixMillis();
  std::optional<bench::PostgresServerCpu> server_cpu = ServerCpuOf(o);
  double load_at_t = -1;
  while (clock.NowUnixMillis() < t_ms) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  load_at_t = LoadAverage1();
  double client_cpu_at_t = bench::ProcessCpuSeconds();
  double server_cpu_at_t = server_cpu ? server_cpu->Seconds() : 0;
  const int64_t wal_at_t = o.backend == "postgres" ? PostgresWalBytes(o.url) : -1;
  runtime::CommitterStats commits_at_t = rt.commit_stats();
  bench::PerfControl(kPerfControlVariable, "enable\n");
  auto store_at_t = profiled ? profiled->Snapshot() : std::map<std::string, store::MethodStats>{};
  int64_t deadline_ms = t_ms + o.wait_ms_max;
  while (waker.resumed() < parked && clock.NowUnixMillis() < deadline_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bench::PerfControl(kPerfControlVariable, "disable\n");
  double load_after = LoadAverage1();
  double client_fire_cpu_s = bench::ProcessCpuSeconds() - client_cpu_at_t;
  double server_fire_cpu_s = server_cpu ? server_cpu->Seconds() - server_cpu_at_t : 0;
  const int64_t wal_after = wal_at_t >= 0 ? PostgresWalBytes(o.url) : -1;
  runtime::CommitterStats commits_after = rt.commit_stats();
  auto store_after = profiled ? profiled->Snapshot() : std::map<std::string, store::MethodStats>{};
  service.Stop();
  rt.WaitIdle();
  timers::TimerServiceStats stats = service.stats();

  RawRates raw = MeasureRaw(o);

  std::vector<int64_t> lateness;
  for (int64_t ms : waker.resumed_ms()) lateness.push_back(ms - t_ms);
  std::sort(lateness.begin(), lateness.end());

  // Read back: completed count, and the EXECUTION_COMPLETED stamps (with
  // --repark: the second EXECUTION_SUSPENDED, the park after the wake).
  size_t completed = 0;
  std::vector<int64_t> stamped;
  for (size_t i = 0; i < o.timers; ++i) {
    auto log = stores->events->ReadRange("t-" + std::to_string(i), 1, store::kToEnd);
    if (!log) continue;
    int parks = 0;
    for (const store::Envelope& e : *log) {
      parks += e.Is(events::KernelKind::kExecutionSuspended);
      bool done = o.repark ? e.Is(events::KernelKind::kExecutionSuspended) && parks == 2
                           : e.Is(events::KernelKind::kExecutionCompleted);
      if (done) {
        ++completed;
        stamped.push_back(e.time_ms - t_ms);
      }
    }
  }
  std::sort(stamped.begin(), stamped.end());
  int64_t last_ms = lateness.empty() ? 0 : lateness.back();
  double fired_per_s =
      last_ms > 0 ? static_cast<double>(lateness.size()) * 1'000.0 / static_cast<double>(last_ms)
                  : 0;
  auto ms = [](const std::vector<int64_t>& v, double p) {
    return std::to_string(Percentile(v, p));
  };
  auto fixed = [](double x, int digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", digits, x);
    return std::string(buf);
  };
  double per_row = std::max<double>(1, static_cast<double>(stats.fired));
  std::vector<std::pair<std::string, std::string>> fields = {
      {"backend", o.backend},
      {"timers", std::to_string(o.timers)},
      {"parked", std::to_string(parked)},
      {"completed", std::to_string(completed)},
      {"resumed", std::to_string(lateness.size())},
      {"p50_ms", ms(lateness, 0.50)},
      {"p99_ms", ms(lateness, 0.99)},
      {"max_ms", ms(lateness, 1.0)},
      {"min_ms", ms(lateness, 0.0)},
      {"fired_per_s", fixed(fired_per_s, 0)},
      {"log_p50_ms", ms(stamped, 0.50)},
      {"log_p99_ms", ms(stamped, 0.99)},
      {"log_max_ms", ms(stamped, 1.0)},
      {"setup_s", fixed(static_cast<double>(parked_ms - setup_start_ms) / 1'000.0, 1)},
      {"margin_ms", std::to_string(t_ms - parked_ms)},
      {"setup_overran", parked_ms > t_ms ? "1" : "0"},
      {"workers", std::to_string(o.workers)},
      {"poll_interval_ms", std::to_string(o.service.poll_interval_ms)},
      {"claim_rows_max", std::to_string(o.service.claim_rows_max)},
      {"fire_concurrency", std::to_string(o.service.fire_concurrency)},
      {"wake_batch_max", std::to_string(o.service.wake_batch_max)},
      {"acquire_groups", std::to_string(o.acquire_groups)},
      {"repoll_when_full", o.service.repoll_when_full ? "1" : "0"},
      {"claim_ahead_ms", std::to_string(o.service.claim_ahead_ms)},
      {"overlap_polls", o.service.overlap_polls ? "1" : "0"},
      {"sqlite_timers_normal", o.timers_synchronous_normal ? "1" : "0"},
      {"repark", o.repark ? "1" : "0"},
      {"wake_ms_avg", fixed(static_cast<double>(waker.wake_us()) / 1e3 / per_row, 2)},
      // Retiring: the store calls made (CompleteMany batches) and their
      // summed time, per fired row.
      {"complete_calls", std::to_string(timed_timers.complete_calls())},
      {"complete_ms_avg",
       fixed(static_cast<double>(timed_timers.complete_us()) / 1e3 / per_row, 2)},
      {"claim_ms_total", std::to_string(timed_timers.claim_us() / 1'000)},
      // Over the firing: appends handed to the runtime's Committer, and the
      // store writes (Append / AppendBatch calls) they shared.
      {"fire_appends", std::to_string(commits_after.requests - commits_at_t.requests)},
      {"fire_store_writes", std::to_string(commits_after.store_writes - commits_at_t.store_writes)},
      {"flushes_in_flight", std::to_string(commits_after.flushes_in_flight_max)},
      {"service_fired", std::to_string(stats.fired)},
      {"service_resumed", std::to_string(stats.resumed)},
      {"obsolete", std::to_string(stats.obsolete)},
      {"contended", std::to_string(stats.contended)},
      {"errors", std::to_string(errors.load())},
      {"client_cpu_s", fixed(bench::ProcessCpuSeconds(), 2)},
      {"client_fire_cpu_s", fixed(client_fire_cpu_s, 2)},
      {"server_fire_cpu_s", server_cpu ? fixed(server_fire_cpu_s, 2) : "none"},
      // PostgreSQL's WAL from T until the last resume, and its rate over the firing.
      {"fire_wal_bytes", wal_after >= 0 ? std::to_string(wal_after - wal_at_t) : "none"},
      {"fire_wal_mb_per_s",
       wal_after >= 0 && last_ms > 0
           ? fixed(static_cast<double>(wal_after - wal_at_t) / 1e3 / static_cast<double>(last_ms),
                   1)
           : "none"},
      {"load_at_t", fixed(load_at_t, 2)},
      {"load_after", fixed(load_after, 2)},
      // The storage's own limit, measured right after the firing: one
      // writer, one commit at a time (see RawRates).
      {"raw_fsync_per_s", raw.fsync_per_s >= 0 ? fixed(raw.fsync_per_s, 0) : "none"},
      {"raw_write_mb_per_s", raw.write_mb_per_s >= 0 ? fixed(raw.write_mb_per_s, 1) : "none"},
      {"raw_commit_per_s", raw.commit_per_s >= 0 ? fixed(raw.commit_per_s, 0) : "none"},
      {"tcmalloc_transfer_num_obj", allocator::TransferObjectsInForce()},
      {"huge_page_regions", allocator::HugePageRegionsInForce() ? "1" : "0"},
  };
  // Over the firing, per event-store method: calls and mean latency.
  for (const auto& [method, after] : store_after) {
    store::MethodStats before =
        store_at_t.contains(method) ? store_at_t.at(method) : store::MethodStats{};
    int64_t calls = after.calls - before.calls;
    if (calls <= 0) continue;
    fields.push_back({"store_" + method + "_calls", std::to_string(calls)});
    fields.push_back(
        {"store_" + method + "_ms_avg",
         fixed(static_cast<double>(after.total_us - before.total_us) / 1e3 / calls, 2)});
  }
  std::string line = "timer-bench";
  for (const auto& [key, value] : fields) line += " " + key + "=" + value;
  std::printf("%s\n", line.c_str());
  return completed == o.timers && parked_ms <= t_ms ? 0 : 3;
}

}  // namespace
}  // namespace once::bench

int main(int argc, char** argv) {
  // The allocator settings of the programs we ship (loom's), which a program
  // that embeds the runtime gets by the same call.
  once::allocator::ApplySettings(argv);
  once::bench::Options o;
  CLI::App app{"timer_bench: lateness of timers due at one instant"};
  app.add_option("--backend", o.backend, "memory | sqlite | postgres")
      ->check(CLI::IsMember({"memory", "sqlite", "postgres"}));
  app.add_option("--dir", o.dir, "SQLite: folder for the database files (default /tmp)");
  app.add_option("--url", o.url, "PostgreSQL: connection URL (default $ONCE_TEST_POSTGRES_URL)");
  app.add_option("--timers", o.timers, "executions parked on the one instant");
  app.add_option("--workers", o.workers, "runtime workers");
  app.add_option("--poll-interval-ms", o.service.poll_interval_ms, "TimerService poll interval");
  app.add_option("--claim-rows-max", o.service.claim_rows_max, "rows claimed per poll");
  app.add_option("--claim-ahead-ms", o.service.claim_ahead_ms,
                 "TimerServiceOptions::claim_ahead_ms (0: claim due rows only)");
  app.add_option(
      "--acquire-groups", o.acquire_groups,
      "PostgreSQL: acquire groups in flight (PostgresOptions::acquire_groups_in_flight_max; "
      "0: the store's default)");
  app.add_option("--flushes-in-flight", o.flushes_in_flight,
                 "group-commit flushes in flight (CommitterOptions::flushes_in_flight_max; 0: "
                 "the store's, 2 on PostgreSQL)");
  app.add_option("--fire-concurrency", o.service.fire_concurrency,
                 "rows fired at once (TimerServiceOptions::fire_concurrency)");
  app.add_option("--wake-batch-max", o.service.wake_batch_max,
                 "rows a firing thread wakes together (TimerServiceOptions::wake_batch_max)");
  app.add_option("--repoll-when-full", o.service.repoll_when_full,
                 "TimerServiceOptions::repoll_when_full (1/0): a full batch is followed by a poll "
                 "at once");
  app.add_option("--overlap-polls", o.service.overlap_polls,
                 "TimerServiceOptions::overlap_polls (1/0): the next poll of a full claim starts "
                 "once the poll before has handed out its rows");
  app.add_option("--raw-ms", o.raw_ms, "how long the raw fsync / commit rates are measured");
  app.add_flag("--repark", o.repark,
               "after its wake each execution sleeps again for a day: every fired row writes a "
               "new timer row on the firing thread (completed= then counts re-parked ones)");
  app.add_flag("--profile-store", o.profile_store,
               "wrap the event store in a ProfilingStore: per-method calls and latency over the "
               "firing");
  app.add_flag("--sqlite-timers-normal", o.timers_synchronous_normal,
               "diagnosis: the SQLite timer store at synchronous=NORMAL (no fsync per commit)");
  app.add_option("--server-pid", o.server_pid,
                 "PostgreSQL postmaster pid (default: found from --url when the server is a "
                 "local process)");
  app.add_option("--slack-ms", o.slack_ms, "added to 1.5 x the estimated setup time for T");
  app.add_option("--wait-ms-max", o.wait_ms_max, "give up this long after T");
  CLI11_PARSE(app, argc, argv);
  if (o.backend == "postgres" && o.url.empty()) {
    if (const char* env = std::getenv("ONCE_TEST_POSTGRES_URL")) o.url = env;
    if (o.url.empty()) {
      std::fprintf(stderr, "timer-bench: postgres needs --url or ONCE_TEST_POSTGRES_URL\n");
      return 2;
    }
  }
  int status = once::bench::Run(o);
  if (o.backend == "postgres")
    once::bench::DropPostgresSchema(o.url, once::bench::PostgresSchema());
  return status;
}
