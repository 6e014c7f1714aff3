// loom: the durable-workflow command.
//   loom demo [--db FILE] [--crash-after charge]   the order workflow on SQLite
//   loom demo store [--db FILE]                    the fence, step by step
//   loom inspect [--db FILE] [ID]                  print execution logs
//   loom bench [options]                           the throughput table
#include <CLI/CLI.hpp>
#include <cstdlib>

#include "allocator_settings.h"
#include "loom_app.h"

int main(int argc, char** argv) {
  using namespace once::loom_app;
  ApplyAllocatorSettings(argv);
  CLI::App app{"loom: durable workflows that run at most once"};
  app.require_subcommand(1);

  DemoOptions demo;
  auto* demo_cmd = app.add_subcommand("demo", "run the order workflow on embedded SQLite");
  demo_cmd->add_option("--db", demo.db, "SQLite file")->capture_default_str();
  demo_cmd->add_option("--crash-after", demo.crash_after, "kill the process after this step")
      ->check(CLI::IsMember({"charge"}));
  demo_cmd->add_option("--order", demo.order, "order execution id")->capture_default_str();
  std::string store_db = "loom-demo.db";
  auto* store_cmd = demo_cmd->add_subcommand("store", "the event store's fences, step by step");
  store_cmd->add_option("--db", store_db, "SQLite file")->capture_default_str();

  std::string inspect_db = "loom-demo.db", inspect_id;
  auto* inspect_cmd = app.add_subcommand("inspect", "print execution logs");
  inspect_cmd->add_option("--db", inspect_db, "SQLite file")->capture_default_str();
  inspect_cmd->add_option("id", inspect_id, "one execution (default: all)");

  BenchOptions bench;
  if (const char* url = std::getenv("ONCE_TEST_POSTGRES_URL")) bench.url = url;
  auto* bench_cmd = app.add_subcommand("bench", "executions per second, per backend and case");
  bench_cmd->add_option("--backend", bench.backends, "memory, sqlite, postgres")
      ->capture_default_str();
  bench_cmd->add_option("--case", bench.cases,
                        "unfenced, fenced, park_resume, park_resume_fence, park_resume_if, "
                        "park_resume_if_separate, raw_acquire, raw_acquire_if, raw_read");
  bench_cmd->add_option("--url", bench.url, "PostgreSQL URL (default $ONCE_TEST_POSTGRES_URL)");
  bench_cmd->add_option("--dir", bench.dir, "folder for SQLite files")->capture_default_str();
  bench_cmd->add_option("--executions", bench.executions, "per run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--concurrency", bench.concurrency, "in flight")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--runs", bench.runs, "runs per cell (median)")->capture_default_str();
  bench_cmd
      ->add_option("--warm-up-runs", bench.warm_up_runs,
                   "untimed runs of the same case before each timed run")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  bench_cmd->add_flag("--stages", bench.stages,
                      "also print where an execution's latency goes (one profiled run per case)");
  bench_cmd->add_option("--flushes-in-flight", bench.flushes_in_flight,
                        "group-commit flushes in flight; several values run paired");

  CLI11_PARSE(app, argc, argv);
  if (*store_cmd) return RunStoreDemo(store_db);
  if (*demo_cmd) return RunDemo(demo);
  if (*inspect_cmd) return RunInspect(inspect_db, inspect_id);
  if (*bench_cmd) return RunBench(bench);
  return 2;
}
