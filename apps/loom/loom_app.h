// The loom command: subcommands share these entry points.
#pragma once

#include <memory>
#include <string>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/nodes/node_registry.h"
#include "once/queues/queue_store.h"
#include "once/store/end_listener.h"
#include "once/store/event_store.h"

namespace once::loom_app {

struct BackendSpec {
  std::string backend = "sqlite";  // memory | sqlite | postgres
  std::string path;                // sqlite file
  std::string url;                 // postgres conninfo
  std::string schema;              // postgres schema ("" = a fresh random one)
};

// Opens the store a spec names. Memory is fresh each time; a postgres spec
// without a schema gets a fresh random schema.
Result<std::unique_ptr<store::EventStore>> OpenBackend(const BackendSpec& spec, const Clock& clock);

// The event store's siblings a bench case needs, on the same database
// (SQLite file or PostgreSQL schema; memory: beside the memory store).
struct BenchSiblings {
  std::unique_ptr<nodes::NodeRegistry> nodes;
  std::unique_ptr<queues::QueueStore> queues;
  std::unique_ptr<store::EndListener> ends;  // PostgreSQL only
};
struct SiblingNeeds {
  bool nodes = false;
  bool queues = false;
  bool ends = false;
};
// kUnsupported when `ends` is asked of a backend without an end listener.
Result<BenchSiblings> OpenSiblings(const BackendSpec& spec, const Clock& clock,
                                   store::EventStore& events, SiblingNeeds needs);

struct BenchOptions {
  std::vector<std::string> backends = {"memory", "sqlite", "postgres"};
  std::vector<std::string> cases;  // empty: all five
  std::string url;                 // postgres
  std::string dir = "/tmp";        // sqlite files
  int executions = 3000;
  int concurrency = 64;
  // Every execution's input, as JSON text (the payloads an execution
  // records carry it: its size is most of what they cost).
  std::string input = R"({"n":1})";
  // Threads that keep `concurrency` executions in flight in the _pipelined
  // cases (Runtime::StartPipelined); 0: one per core.
  int drivers = 0;
  int runs = 5;
  // Untimed runs of a case, each on a store of its own, before each of its
  // timed runs (bench.cc, RunBench: why).
  int warm_up_runs = 1;
  bool count_round_trips = true;
  // Committer flushes in flight; several values run paired (empty: the
  // runtime's default).
  std::vector<size_t> flushes_in_flight;
  // Also one run per case through the profiling decorator at full
  // concurrency: where an execution's latency goes (Start, Resume, each
  // store method; queueing in the committer and the acquire groups is the
  // call's time less the store's).
  bool stages = false;
  // > 0: every case also runs on one store per backend that holds this many
  // finished executions (preload.h), kept for all its runs, paired with the
  // fresh stores; then inspects and list pages are timed on it.
  int64_t preload = 0;
  int inspects = 200;  // `loom show` calls timed on the preloaded store
  int lists = 50;      // first pages of `loom list` timed on it (per query)
  // Keep the preloaded SQLite file or PostgreSQL schema (its name is in the
  // loom-preload line) instead of removing it at the end.
  bool keep_preload = false;
  // After the reads: `loom retention run` deletes the preloaded executions
  // on a thread while unfenced runs on that store and on fresh ones, paired.
  bool retention = false;
  // Its pause after each delete batch (`retention run --batch-pause-ms`);
  // -1: that command's default.
  int64_t retention_pause_ms = -1;
};
int RunBench(const BenchOptions& options);

struct DemoOptions {
  std::string db = "loom-demo.db";
  std::string crash_after;  // "charge": SIGKILL this process right after the charge step
  std::string order = "order-1";
};
int RunDemo(const DemoOptions& options);
int RunStoreDemo(const std::string& db);

int RunInspect(const std::string& db, const std::string& execution_id);
// Prints one execution's log as a table.
void PrintLog(store::EventStore& store, const std::string& execution_id);

}  // namespace once::loom_app
