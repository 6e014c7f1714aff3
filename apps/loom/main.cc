// loom: the durable-workflow command.
//   loom demo [--db FILE] [--crash-after charge]   the order workflow on SQLite
//   loom demo store [--db FILE]                    the fence, step by step
//   loom inspect [--db FILE] [ID]                  print execution logs
//   loom bench [options]                           the throughput table
//   loom chaos run [options]                       SIGKILL chaos over node processes
//   loom list|show|cancel|resume|send|fork|timers|retention run|seed|serve
//        [--db FILE | --url URL [--schema S] | $LOOM_URL] [--json]
//                                                  the operator's commands
//                                                  (docs/operations.md)
#include <CLI/CLI.hpp>
#include <cstdlib>

#include "chaos.h"
#include "cli.h"
#include "loom_app.h"
#include "once/allocator/settings.h"
#include "serve.h"

int main(int argc, char** argv) {
  using namespace once::loom_app;
  once::allocator::ApplySettings(argv);
  CLI::App app{"loom: durable workflows that run at most once"};
  app.require_subcommand(1);
  // The store flags and --json may follow the subcommand (fallthrough).
  app.fallthrough();
  StoreFlags store;
  app.add_option("--url", store.url, "PostgreSQL URL (default $LOOM_URL)");
  app.add_option("--schema", store.schema, "PostgreSQL schema")->capture_default_str();
  app.add_flag("--json", store.json, "one JSON document on stdout");
  auto add_db = [&](CLI::App* cmd) { cmd->add_option("--db", store.db, "SQLite file"); };

  ListFlags list;
  auto* list_cmd = app.add_subcommand("list", "executions, newest first, paged");
  add_db(list_cmd);
  list_cmd->add_option("--status", list.status,
                       "running, suspended, completed, failed, cancelled, continued");
  list_cmd->add_option("--workflow", list.workflow, "workflow name");
  list_cmd->add_option("--parked-on", list.parked_on, "timer, message, child");
  list_cmd->add_option("--started-after", list.started_after, "Unix ms or UTC date/time");
  list_cmd->add_option("--started-before", list.started_before, "Unix ms or UTC date/time");
  list_cmd->add_option("--updated-after", list.updated_after, "Unix ms or UTC date/time");
  list_cmd->add_option("--updated-before", list.updated_before, "Unix ms or UTC date/time");
  list_cmd->add_option("--id-prefix", list.id_prefix, "execution ids starting with this");
  list_cmd->add_option("--limit", list.limit, "rows a page")->capture_default_str();
  list_cmd->add_option("--cursor", list.cursor, "the next page (printed by the previous)");

  std::string id;
  size_t show_events = 10'000;
  auto* show_cmd = app.add_subcommand("show", "one execution: state, log, park, timers, inbox");
  add_db(show_cmd);
  show_cmd->add_option("id", id, "execution id")->required();
  show_cmd->add_option("--events", show_events, "events shown at most")->capture_default_str();

  std::string reason = "cancelled by an operator";
  auto* cancel_cmd = app.add_subcommand("cancel", "cancel an execution (fences out its runner)");
  add_db(cancel_cmd);
  cancel_cmd->add_option("id", id, "execution id")->required();
  cancel_cmd->add_option("--reason", reason, "recorded in EXECUTION_CANCELLED");

  auto* resume_cmd =
      app.add_subcommand("resume", "answer the open park (under fence_if_parked_at)");
  add_db(resume_cmd);
  resume_cmd->add_option("id", id, "execution id")->required();

  std::string topic, message;
  auto* send_cmd = app.add_subcommand("send", "store a message in an execution's inbox");
  add_db(send_cmd);
  send_cmd->add_option("id", id, "execution id")->required();
  send_cmd->add_option("topic", topic, "topic")->required();
  send_cmd->add_option("json", message, "the message (JSON)")->required();

  int64_t from_step = 0;
  std::string fork_id;
  auto* fork_cmd = app.add_subcommand("fork", "a new execution from the first N steps of one");
  add_db(fork_cmd);
  fork_cmd->add_option("id", id, "execution id")->required();
  fork_cmd->add_option("--from-step", from_step, "steps copied")->required();
  fork_cmd->add_option("--id", fork_id, "the new execution's id (default ID.forkN.MS)");

  int64_t due_within_ms = -1;
  size_t timers_limit = 50;
  std::string timers_cursor;
  auto* timers_cmd = app.add_subcommand("timers", "timer rows by wake time");
  add_db(timers_cmd);
  timers_cmd->add_option("--due-within-ms", due_within_ms, "only rows due by now + this");
  timers_cmd->add_option("--limit", timers_limit, "rows a page")->capture_default_str();
  timers_cmd->add_option("--cursor", timers_cursor, "the next page");

  int64_t age_ms = 30LL * 86'400'000;
  bool dry_run = false;
  auto* retention_cmd = app.add_subcommand("retention", "retention of finished executions");
  auto* retention_run = retention_cmd->add_subcommand("run", "delete old finished executions");
  retention_cmd->require_subcommand(1);
  add_db(retention_run);
  retention_run->add_option("--age-ms", age_ms, "ended at least this long ago")
      ->capture_default_str();
  retention_run->add_flag("--dry-run", dry_run, "count, delete nothing");
  RetentionPace pace;
  retention_run->add_option("--batch", pace.batch_executions, "executions per delete transaction")
      ->check(CLI::Range(size_t{1}, once::store::kRetentionBatchExecutionsMax))
      ->capture_default_str();
  retention_run
      ->add_option("--batch-pause-ms", pace.batch_pause_ms,
                   "pause after each batch (lets a live SQLite writer take the lock)")
      ->check(CLI::Range(int64_t{0}, int64_t{60'000}))
      ->capture_default_str();

  auto* nodes_cmd = app.add_subcommand("nodes", "nodes, their leases and what they own");
  add_db(nodes_cmd);
  auto* queues_cmd = app.add_subcommand("queues", "durable queues (issue 15)");
  add_db(queues_cmd);

  // Bounds of the commands' counts, named so that a refusal says them
  // (CLI11's PositiveNumber printed "0 not in range 0 to 1.8e308").
  constexpr int kBenchExecutionsMax = 10'000'000;  // executions a run
  constexpr int kBenchConcurrencyMax = 4'096;      // client threads (one per execution in flight)
  constexpr int kBenchRunsMax = 1'000;             // timed runs a cell
  constexpr int kBenchInspectsMax = 1'000'000;     // `loom show` calls timed
  constexpr int64_t kSeedExecutionsMax = 10'000'000;
  constexpr int kSeedWorkersMax = 256;  // threads

  int64_t seed_executions = 1000;
  int seed_workers = 4;
  auto* seed_cmd = app.add_subcommand("seed", "run a mix of real workflows into a store");
  add_db(seed_cmd);
  seed_cmd->add_option("--executions", seed_executions, "how many")
      ->check(CLI::Range(int64_t{0}, kSeedExecutionsMax))
      ->capture_default_str();
  seed_cmd->add_option("--workers", seed_workers, "threads starting them")
      ->check(CLI::Range(1, kSeedWorkersMax))
      ->capture_default_str();
  std::string seed_node;
  seed_cmd->add_option("--node", seed_node, "seed as this Loom node (registered, owning its runs)");

  ServeOptions serve;
  auto* serve_cmd = app.add_subcommand("serve", "the HTTP API, the web UI and /metrics");
  add_db(serve_cmd);
  serve_cmd->add_option("--listen", serve.listen, "address:port")->capture_default_str();
  serve_cmd
      ->add_option("--token-file", serve.token_file,
                   "bearer token for acting (created 0600 at first start)")
      ->capture_default_str();
  serve_cmd->add_option("--rack", serve.rack_dir, "a rack folder (sush rack up --dir)");
  serve_cmd->add_option("--sled", serve.sled_urls, "a sled's URL (repeatable)");
  serve_cmd->add_option("--log-format", serve.log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  serve_cmd->add_option("--log-level", serve.log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  serve_cmd
      ->add_option("--counts-refresh-ms", serve.counts_refresh_ms,
                   "how often the status counts are recomputed")
      ->capture_default_str();

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
  bench_cmd->add_option(
      "--case", bench.cases,
      "unfenced, fenced, park_resume, park_resume_fence, park_resume_if, park_resume_if_acquire, "
      "park_resume_if_read, park_resume_if_separate, raw_acquire, "
      "raw_acquire_if, raw_read; queue; "
      "CASE_node (as a node), CASE_notify (with an end listener, postgres), unfenced_pipelined "
      "(through StartPipelined, --drivers threads)");
  bench_cmd->add_option("--url", bench.url, "PostgreSQL URL (default $ONCE_TEST_POSTGRES_URL)");
  bench_cmd->add_option("--dir", bench.dir, "folder for SQLite files")->capture_default_str();
  bench_cmd->add_option("--executions", bench.executions, "per run")
      ->capture_default_str()
      ->check(CLI::Range(1, kBenchExecutionsMax));
  bench_cmd->add_option("--concurrency", bench.concurrency, "in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, kBenchConcurrencyMax));
  bench_cmd->add_option("--input", bench.input, "every execution's input, as JSON text")
      ->capture_default_str();
  bench_cmd
      ->add_option("--drivers", bench.drivers,
                   "threads keeping --concurrency in flight in CASE_pipelined (0: one per core)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bench_cmd->add_option("--runs", bench.runs, "runs per cell (median)")
      ->check(CLI::Range(1, kBenchRunsMax))
      ->capture_default_str();
  bench_cmd
      ->add_option("--warm-up-runs", bench.warm_up_runs,
                   "untimed runs of the same case before each timed run")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  bench_cmd->add_flag("--stages", bench.stages,
                      "also print where an execution's latency goes (one profiled run per case)");
  bench_cmd->add_option(
      "--flushes-in-flight", bench.flushes_in_flight,
      "group-commit flushes in flight (default: the store's, 2 on PostgreSQL); several "
      "values run paired");
  bench_cmd
      ->add_option("--preload", bench.preload,
                   "also run each case on one store preloaded with N finished executions, "
                   "paired with the fresh stores; then time inspects and lists on it")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench_cmd->add_flag(
      "--keep-preload", bench.keep_preload,
      "keep the preloaded SQLite file or PostgreSQL schema (named in loom-preload)");
  bench_cmd
      ->add_option("--retention-pause-ms", bench.retention_pause_ms,
                   "--retention: the pause after each delete batch (-1: retention run's default)")
      ->check(CLI::Range(int64_t{-1}, int64_t{60'000}))
      ->capture_default_str();
  bench_cmd->add_flag("--retention", bench.retention,
                      "then delete the preloaded executions (loom retention run) while unfenced "
                      "runs on the same store");
  bench_cmd->add_option("--inspects", bench.inspects, "inspects timed on the preloaded store")
      ->check(CLI::Range(1, kBenchInspectsMax))
      ->capture_default_str();

  auto* chaos_cmd = app.add_subcommand("chaos", "SIGKILL chaos over Loom node processes");
  chaos_cmd->require_subcommand(1);
  ChaosOptions chaos;
  auto* chaos_run = chaos_cmd->add_subcommand(
      "run", "start node processes, kill and restart them under load, check every invariant");
  add_db(chaos_run);
  auto add_timing = [](CLI::App* cmd, ChaosTiming& t) {
    cmd->add_option("--lease-ms", t.lease_ms, "node_lease_ms")->capture_default_str();
    cmd->add_option("--heartbeat-ms", t.heartbeat_ms, "heartbeat_interval_ms")
        ->capture_default_str();
    cmd->add_option("--step-margin-ms", t.step_margin_ms, "step_margin_ms")->capture_default_str();
    cmd->add_option("--takeover-ms", t.takeover_ms, "takeover_interval_ms")->capture_default_str();
    cmd->add_option("--recover-ms", t.recover_ms, "recover_interval_ms")->capture_default_str();
  };
  add_timing(chaos_run, chaos.timing);
  chaos_run->add_option("--mode", chaos.mode, "chaos or latency")
      ->check(CLI::IsMember({"chaos", "latency"}))
      ->capture_default_str();
  chaos_run->add_option("--dir", chaos.dir, "folder for the ledger and the node logs")->required();
  chaos_run->add_option("--nodes", chaos.nodes, "node processes")
      ->check(CLI::Range(2, 16))
      ->capture_default_str();
  chaos_run->add_option("--kills", chaos.kills, "SIGKILLs")
      ->check(CLI::Range(0, 100'000))
      ->capture_default_str();
  chaos_run->add_option("--load-ms", chaos.load_ms, "chaos mode: how long load and kills last")
      ->check(CLI::Range(int64_t{2'000}, int64_t{3'600'000}))
      ->capture_default_str();
  chaos_run->add_option("--queued", chaos.queued, "queued starts over the load")
      ->check(CLI::Range(0, 1'000'000))
      ->capture_default_str();
  chaos_run
      ->add_option("--direct-interval-ms", chaos.direct_interval_ms,
                   "each node starts a direct execution this often")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}))
      ->capture_default_str();
  chaos_run->add_option("--settle-ms-max", chaos.settle_ms_max, "after the load")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}))
      ->capture_default_str();
  chaos_run->add_option("--workers", chaos.workers, "runtime workers per node")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  chaos_run->add_option("--seed", chaos.seed, "kills, load")->capture_default_str();
  chaos_run->add_option("--kill-gap-ms", chaos.kill_gap_ms, "latency mode (default lease + 5 s)");
  ChaosNodeOptions chaos_node;
  auto* chaos_node_cmd = chaos_cmd->add_subcommand("node", "one node process (started by run)");
  add_db(chaos_node_cmd);
  add_timing(chaos_node_cmd, chaos_node.timing);
  chaos_node_cmd->add_option("--mode", chaos_node.mode)->required();
  chaos_node_cmd->add_option("--node-id", chaos_node.node_id)->required();
  chaos_node_cmd->add_option("--ledger", chaos_node.ledger)->required();
  chaos_node_cmd->add_option("--workers", chaos_node.workers);
  chaos_node_cmd->add_option("--direct-interval-ms", chaos_node.direct_interval_ms);
  chaos_node_cmd->add_option("--load-until-ms", chaos_node.load_until_ms)->required();
  chaos_node_cmd->add_option("--cron-epoch-ms", chaos_node.cron_epoch_ms)->required();
  chaos_node_cmd->add_option("--seed", chaos_node.seed);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "loom: %s (try --help)\n", e.what());
    return 2;
  }
  if (*list_cmd) return RunList(store, list);
  if (*show_cmd) return RunShow(store, id, show_events);
  if (*cancel_cmd) return RunCancel(store, id, reason);
  if (*resume_cmd) return RunResume(store, id);
  if (*send_cmd) return RunSend(store, id, topic, message);
  if (*fork_cmd) return RunFork(store, id, from_step, fork_id);
  if (*timers_cmd) return RunTimers(store, due_within_ms, timers_limit, timers_cursor);
  if (*retention_run) return RunRetention(store, age_ms, dry_run, pace);
  if (*nodes_cmd) return RunNodes(store);
  if (*queues_cmd) return RunQueues(store);
  if (*seed_cmd) return RunSeed(store, seed_executions, seed_workers, seed_node);
  if (*serve_cmd) return RunServe(store, serve);
  if (*store_cmd) return RunStoreDemo(store_db);
  if (*demo_cmd) return RunDemo(demo);
  if (*inspect_cmd) return RunInspect(inspect_db, inspect_id);
  if (*bench_cmd) return RunBench(bench);
  if (*chaos_run) return RunChaos(store, chaos);
  if (*chaos_node_cmd) return RunChaosNode(store, chaos_node);
  return 2;
}
