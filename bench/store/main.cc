// store_bench: events appended per second by an EventStore backend, beside
// the raw limit of the same storage measured in the same run.
//
//   store_bench --backend sqlite --mode grouped --dir /tmp/sb
//   store_bench --backend postgres --mode single --clients 8 --url postgresql://...
//   store_bench --backend memory --seconds 1
//
// Each of --runs runs measures the store, then the raw INSERTs (alternating
// which goes first), or with --interleave-ms both at once, in turns on the
// same clients (RunInterleaved: a disk's slow seconds fall on both); the
// medians (and the median of the runs' store/raw ratios) are reported in a
// table row and in one machine-readable line:
//   store-bench backend=sqlite mode=grouped clients=1 ... events_per_s=... raw_events_per_s=...
//   ratio=...

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench.h"

namespace once::bench {
namespace {

struct Options {
  std::string backend = "memory";
  std::string mode = "single";
  std::string url;
  std::string dir;
  std::string only = "both";
  int runs = 3;
  bool header = true;
  Workload workload;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Figures(const std::vector<double>& v) {
  std::string out;
  for (double x : v) out += (out.empty() ? "" : "/") + std::to_string(std::llround(x));
  return out.empty() ? "-" : out;
}

// "0a1fs003": this process, store or raw, the run.
std::string RunTag(char what, int run) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04x%c%03d", static_cast<unsigned>(getpid()) & 0xffff, what, run);
  return buf;
}

int Main(int argc, char** argv) {
  Options o;
  Workload& w = o.workload;
  CLI::App app{"store_bench: events appended per second, beside the storage's raw limit"};
  app.add_option("--backend", o.backend, "memory | sqlite | postgres")
      ->check(CLI::IsMember({"memory", "sqlite", "postgres"}));
  app.add_option("--mode", o.mode,
                 "single: one event per transaction; grouped: one event to each of "
                 "--executions executions per AppendBatch (one transaction)")
      ->check(CLI::IsMember({"single", "grouped"}));
  app.add_option("--seconds", w.seconds, "measured seconds of one run")->capture_default_str();
  app.add_option("--events", w.events_max, "stop a run after N events instead (0: --seconds)");
  app.add_option("--warmup-seconds", w.warmup_seconds)->capture_default_str();
  app.add_option("--executions", w.executions, "executions per grouped transaction")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--payload-bytes", w.payload_bytes, "serialized payload JSON of every event")
      ->capture_default_str()
      ->check(CLI::Range(40, 1 << 20));
  app.add_option("--clients", w.clients,
                 "concurrent writers, each on its own executions and connection")
      ->capture_default_str()
      ->check(CLI::Range(1, 128));
  app.add_option("--runs", o.runs, "runs per figure; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 99));
  app.add_option("--url", o.url, "PostgreSQL URL (postgres backend)")
      ->envname("ONCE_BENCH_POSTGRES_URL");
  app.add_option("--dir", o.dir, "folder for the SQLite files (default: a temp folder)");
  app.add_option("--only", o.only, "measure the store, the raw limit, or both")
      ->check(CLI::IsMember({"store", "raw", "both"}))
      ->capture_default_str();
  bool unfenced = false;
  app.add_flag("--unfenced", unfenced, "append without acquiring a fence token first");
  double interleave_ms = 0;
  app.add_option("--interleave-ms", interleave_ms,
                 "run the store and the raw INSERTs at once, in turns of this many ms on the "
                 "same clients (0: one after the other); CPU is then not reported")
      ->check(CLI::Range(0.0, 60000.0));
  bool no_header = false;
  app.add_flag("--no-header", no_header, "print the table row without its header");
  CLI11_PARSE(app, argc, argv);
  w.fenced = !unfenced;
  w.mode = o.mode == "grouped" ? Mode::kGrouped : Mode::kSingle;
  o.header = !no_header;

  bool want_store = o.only != "raw";
  bool want_raw = o.only != "store" && o.backend != "memory";
  if (o.backend == "postgres" && o.url.empty()) {
    std::fprintf(stderr, "store_bench: --url (or ONCE_BENCH_POSTGRES_URL) is required\n");
    return 2;
  }
  const bool interleave = interleave_ms > 0;
  if (interleave && !(want_store && want_raw)) {
    std::fprintf(stderr, "store_bench: --interleave-ms needs the store and the raw limit both\n");
    return 2;
  }
  if (o.backend == "sqlite" && w.clients > 1) {
    std::fprintf(stderr, "store_bench: note: SQLite has one writer; clients queue for it\n");
  }
  bool temp_dir = false;
  if (o.backend == "sqlite" && o.dir.empty()) {
    o.dir = (std::filesystem::temp_directory_path() / ("store-bench-" + std::to_string(getpid())))
                .string();
    temp_dir = true;
  }
  std::string schema =
      "store_bench_" + std::to_string(getpid()) + "_" +
      std::to_string(std::chrono::system_clock::now().time_since_epoch() / std::chrono::seconds(1));

  std::unique_ptr<Target> store_target;
  std::unique_ptr<Target> raw_target;
  auto fail = [&](const char* what, const Error& e) {
    std::fprintf(stderr, "store_bench: %s: %s\n", what, e.ToString().c_str());
    return 1;
  };
  if (want_store) {
    Result<std::unique_ptr<Target>> t = o.backend == "memory" ? NewMemoryStoreTarget()
                                        : o.backend == "sqlite"
                                            ? NewSqliteStoreTarget(o.dir)
                                            : NewPostgresStoreTarget(o.url, schema, w.clients);
    if (!t) return fail("store", t.error());
    store_target = std::move(*t);
  }
  if (want_raw) {
    Result<std::unique_ptr<Target>> t =
        o.backend == "sqlite" ? NewSqliteRawTarget(o.dir) : NewPostgresRawTarget(o.url, schema);
    if (!t) return fail("raw", t.error());
    raw_target = std::move(*t);
  }

  double load_before[3] = {0, 0, 0};
  getloadavg(load_before, 3);
  std::vector<double> store_eps, raw_eps;
  std::vector<RunResult> store_runs, raw_runs;
  for (int run = 0; run < o.runs; ++run) {
    if (interleave) {
      auto r = RunInterleaved(*store_target, *raw_target, w, interleave_ms / 1000, RunTag('s', run),
                              RunTag('r', run));
      if (!r) return fail("interleaved run", r.error());
      store_eps.push_back(r->first.events_per_s());
      raw_eps.push_back(r->second.events_per_s());
      std::fprintf(
          stderr, "  run %d interleaved: store %.0f events/s, raw %.0f (%lld + %lld events)\n",
          run + 1, r->first.events_per_s(), r->second.events_per_s(),
          static_cast<long long>(r->first.events), static_cast<long long>(r->second.events));
      continue;
    }
    // Alternate the order so that neither side always runs on a warmer disk.
    for (int k = 0; k < 2; ++k) {
      bool store_turn = (k == 0) == (run % 2 == 0);
      Target* target = store_turn ? store_target.get() : raw_target.get();
      if (target == nullptr) continue;
      auto r = Run(*target, w, RunTag(store_turn ? 's' : 'r', run));
      if (!r) return fail(store_turn ? "store run" : "raw run", r.error());
      (store_turn ? store_eps : raw_eps).push_back(r->events_per_s());
      (store_turn ? store_runs : raw_runs).push_back(*r);
      std::fprintf(stderr,
                   "  run %d %-5s %10.0f events/s (%lld events in %.2f s), CPU %.1f us/event "
                   "(client %.1f + server %.1f)\n",
                   run + 1, store_turn ? "store" : "raw", r->events_per_s(),
                   static_cast<long long>(r->events), r->seconds, r->cpu_us_per_event(),
                   r->client_cpu_s * 1e6 / std::max<double>(1, r->events),
                   r->server_cpu_s * 1e6 / std::max<double>(1, r->events));
    }
  }
  raw_target.reset();
  store_target.reset();
  if (temp_dir) std::filesystem::remove_all(o.dir);

  double store = Median(store_eps);
  double raw = Median(raw_eps);
  // The ratio is the median of the runs' ratios: a run's store and raw
  // figures are measured back to back, so a slow moment of a shared disk
  // weighs on both sides of its ratio rather than on one median.
  char ratio[32] = "none";
  if (!store_eps.empty() && store_eps.size() == raw_eps.size()) {
    std::vector<double> ratios;
    for (size_t i = 0; i < store_eps.size(); ++i) {
      ratios.push_back(raw_eps[i] > 0 ? store_eps[i] / raw_eps[i] : 0);
    }
    std::snprintf(ratio, sizeof ratio, "%.2f", Median(ratios));
  }
  // CPU per event (client + server), medians; the CPU ratio raw / store is
  // the share of the raw path's efficiency the store keeps: unlike events/s
  // it does not move with what else the machine runs.
  auto cpu = [](const std::vector<RunResult>& runs, auto part) {
    std::vector<double> v;
    for (const RunResult& r : runs) v.push_back(part(r));
    return Median(v);
  };
  auto total = [](const RunResult& r) { return r.cpu_us_per_event(); };
  auto client = [](const RunResult& r) {
    return r.events > 0 ? r.client_cpu_s * 1e6 / static_cast<double>(r.events) : 0;
  };
  auto server = [](const RunResult& r) {
    return r.events > 0 ? r.server_cpu_s * 1e6 / static_cast<double>(r.events) : 0;
  };
  char cpu_ratio[32] = "none";
  if (!store_runs.empty() && store_runs.size() == raw_runs.size()) {
    std::vector<double> ratios;
    for (size_t i = 0; i < store_runs.size(); ++i) {
      double s = store_runs[i].cpu_us_per_event();
      ratios.push_back(s > 0 ? raw_runs[i].cpu_us_per_event() / s : 0);
    }
    std::snprintf(cpu_ratio, sizeof cpu_ratio, "%.2f", Median(ratios));
  }
  auto us = [](const std::vector<RunResult>& runs, double v) {
    if (runs.empty()) return std::string("none");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return std::string(buf);
  };
  if (o.header) {
    std::printf("%-9s %-8s %7s %5s %12s %12s %6s  %s\n", "backend", "mode", "clients", "ev/tx",
                "store ev/s", "raw ev/s", "ratio", "runs (store | raw)");
  }
  auto cell = [](const std::vector<double>& v, double m) {
    return v.empty() ? std::string("-") : std::to_string(std::llround(m));
  };
  std::printf("%-9s %-8s %7d %5d %12s %12s %6s  %s | %s\n", o.backend.c_str(), o.mode.c_str(),
              w.clients, w.events_per_transaction(), cell(store_eps, store).c_str(),
              cell(raw_eps, raw).c_str(), ratio, Figures(store_eps).c_str(),
              Figures(raw_eps).c_str());
  std::printf(
      "store-bench backend=%s mode=%s clients=%d events_per_tx=%d payload_bytes=%zu "
      "fenced=%d runs=%d seconds=%g interleave_ms=%g events_per_s=%s raw_events_per_s=%s "
      "ratio=%s\n",
      o.backend.c_str(), o.mode.c_str(), w.clients, w.events_per_transaction(), w.payload_bytes,
      w.fenced ? 1 : 0, o.runs, w.seconds, interleave_ms, cell(store_eps, store).c_str(),
      raw_eps.empty() ? "none" : std::to_string(std::llround(raw)).c_str(), ratio);
  // The CPU line: microseconds of CPU per event, client and server.
  std::printf(
      "store-cpu backend=%s mode=%s clients=%d store_cpu_us=%s store_client_us=%s "
      "store_server_us=%s raw_cpu_us=%s raw_client_us=%s raw_server_us=%s cpu_ratio=%s "
      "load_before=%.2f\n",
      o.backend.c_str(), o.mode.c_str(), w.clients, us(store_runs, cpu(store_runs, total)).c_str(),
      us(store_runs, cpu(store_runs, client)).c_str(),
      us(store_runs, cpu(store_runs, server)).c_str(), us(raw_runs, cpu(raw_runs, total)).c_str(),
      us(raw_runs, cpu(raw_runs, client)).c_str(), us(raw_runs, cpu(raw_runs, server)).c_str(),
      cpu_ratio, load_before[0]);
  return 0;
}

}  // namespace
}  // namespace once::bench

int main(int argc, char** argv) { return once::bench::Main(argc, argv); }
