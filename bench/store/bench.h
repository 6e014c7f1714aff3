// File: bench.h
//
// The store benchmark's seam: a Target makes Writers, a Writer commits one
// transaction per call. The same runner drives the EventStore backends and
// the raw limit of their storage (plain INSERTs of rows of the same size,
// same durability, same batching, same number of clients), so the two
// figures of a cell differ only in what the store does on top of the INSERT.
//
//   Workload w{.mode = Mode::kGrouped, .clients = 1, .seconds = 2};
//   ONCE_ASSIGN_OR_RETURN(auto target, NewMemoryStoreTarget());
//   ONCE_ASSIGN_OR_RETURN(RunResult r, Run(*target, w, "r0"));
//   // r.events_per_s()

#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "cpu.h"
#include "once/base/result.h"

namespace once::bench {

enum class Mode {
  kSingle,   // one event per transaction, each client on its own execution
  kGrouped,  // one event to each of `executions` executions per transaction
};

struct Workload {
  Mode mode = Mode::kSingle;
  int executions = 64;         // per transaction in kGrouped
  int clients = 1;             // concurrent writers, each with its own executions
  size_t payload_bytes = 200;  // serialized payload JSON of every event
  double seconds = 2;          // measured time of one run
  double warmup_seconds = 0.3;
  int64_t events_max = 0;  // > 0: stop a run after this many events instead
  // Appends carry the fence token their writer acquired at setup.
  bool fenced = true;

  int events_per_transaction() const { return mode == Mode::kGrouped ? executions : 1; }
};

// One event as every target writes it: what the store's encoding produces.
struct Row {
  std::string kind;
  std::string payload_json;   // exactly payload_bytes long
  std::string metadata_json;  // {"fence":1,"kernel":true} when fenced
};
Row MakeRow(const Workload& w);

// Ids of one length for every run, client and execution, so rows are the
// same size on every target: "bench-<tag>-c07-e0063" (tag: 8 characters).
std::string ExecutionId(std::string_view tag, int client, int execution);

class Writer {
 public:
  virtual ~Writer() = default;
  // Commits one transaction; returns the events it made durable. Called
  // from one thread at a time (each client owns its writer).
  virtual Result<int64_t> Commit() = 0;
};

class Target {
 public:
  virtual ~Target() = default;
  // Makes client `client`'s writer for one run; `tag` names the run, so
  // runs never share executions or rows. Called from the main thread.
  virtual Result<std::unique_ptr<Writer>> NewWriter(const Workload& w, std::string_view tag,
                                                    int client) = 0;
  // After a run: checks what it wrote (e.g. a log's head), best effort.
  virtual Status Verify(const Workload& w, std::string_view tag, int client, int64_t transactions) {
    return Ok();
  }
  // CPU seconds (user + system) the storage server has used so far, summed
  // over its processes; nullopt for an embedded storage (its work is this
  // process's CPU).
  virtual std::optional<double> ServerCpuSeconds() { return std::nullopt; }
};

struct RunResult {
  int64_t events = 0;
  int64_t transactions = 0;
  double seconds = 0;
  double client_cpu_s = 0;  // this process, user + system, over the measured window
  double server_cpu_s = 0;  // the server's processes over the same window (0: embedded)
  double events_per_s() const { return seconds > 0 ? events / seconds : 0; }
  // CPU microseconds per event, client + server: the cost the machine pays
  // for one event, whatever else is running (unlike events/s).
  double cpu_us_per_event() const {
    return events > 0 ? (client_cpu_s + server_cpu_s) * 1e6 / static_cast<double>(events) : 0;
  }
};

// Warms every client up for w.warmup_seconds, then runs them together for
// w.seconds (or until w.events_max); the first error stops the run.
Result<RunResult> Run(Target& target, const Workload& w, std::string_view tag);

// Both targets on the same clients, in turns: each client commits to `a`
// for `slice_seconds`, then to `b` for as long (each on its own writer),
// and so on, for w.warmup_seconds and then w.seconds; each side's figure is
// its events over the time its own commits took. A shared disk's slow
// moments (on a VM they last seconds) then fall on both sides alike, which
// two runs one after the other cannot promise. Turns, not single commits:
// switching connections at every commit added about 47 us to each (a
// wake-up of the other server process), to both sides alike, which pulls
// their ratio towards 1. CPU is not split between the sides (left 0);
// w.events_max is not used.
Result<std::pair<RunResult, RunResult>> RunInterleaved(Target& a, Target& b, const Workload& w,
                                                       double slice_seconds, std::string_view tag_a,
                                                       std::string_view tag_b);

// ---- Targets ---------------------------------------------------------------

// The reference MemoryEventStore (no raw limit).
Result<std::unique_ptr<Target>> NewMemoryStoreTarget();

// SqliteEventStore in `dir`/store.db (Durability::kFull).
Result<std::unique_ptr<Target>> NewSqliteStoreTarget(const std::string& dir);
// Plain prepared INSERTs into `dir`/raw.db, journal_mode=WAL, synchronous=FULL.
Result<std::unique_ptr<Target>> NewSqliteRawTarget(const std::string& dir);

// PostgresEventStore in schema `schema` (created, dropped by the destructor).
Result<std::unique_ptr<Target>> NewPostgresStoreTarget(const std::string& url,
                                                       const std::string& schema, int clients);
// Plain prepared INSERTs (one row; or one multi-VALUES statement per group)
// into a fresh table in schema `schema`, one connection per client.
Result<std::unique_ptr<Target>> NewPostgresRawTarget(const std::string& url,
                                                     const std::string& schema);

}  // namespace once::bench
