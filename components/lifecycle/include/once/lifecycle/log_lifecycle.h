// File: log_lifecycle.h
//
// LogLifecycle: retention for execution logs. A run fixes its cutoff once,
// at its start (the injected clock's now minus policy.age_ms_min), and pages
// over the store's ended executions (EventStore::ListEnded: the executions
// whose terminal event, EXECUTION_COMPLETED / FAILED / CANCELLED / CONTINUED,
// is at or before the cutoff, read from the store's index, not from every
// log). Executions that end after the run began are never listed, so a run
// ends however fast new ones keep arriving. Each listed execution is
// eligible; it is either archived (the whole log copied to the archive
// EventStore, same sequences, kinds, payloads, metadata and times, then
// deleted from the source, one execution at a time) or deleted, in batches
// of policy.batch_executions per transaction (EventStore::DeleteEnded),
// with policy.batch_pause_ms between batches. The delete re-checks the
// cutoff in its transaction: an execution deleted meanwhile, or deleted and
// started again under the same id, is left alone and counted as `gone`.
// An execution the pin predicate names is left exactly where it is. The pin
// is consulted ONLY for executions that are otherwise eligible (a pin may
// read other logs, so it must not run for every id).
//
//   MemoryEventStore archive;
//   LogLifecycle lifecycle(store, clock, {.policy = {.age_ms_min = 7 * 86'400'000,
//                                                    .mode = RetentionMode::kArchive},
//                                         .archive = &archive,
//                                         .pinned = PinParkedChildren(supervisor)});
//   ONCE_ASSIGN_OR_RETURN(RetentionReport report, lifecycle.ApplyRetention());
//
// Errors. A read or write failure of the store, the archive or the pin
// predicate ends the run with that error (visibly: nothing is swallowed);
// the executions being handled are kept: those gathered for the next batch,
// and all of a batch whose transaction failed (in archive mode, the copy is
// made before the delete, so a failure leaves the log in the source, possibly
// also in the archive: the next run finds the identical copy there and only
// deletes).
// An archive holding a DIFFERENT log of that id is kCorruption, and the
// source is kept. Executions already handled by a failed run stay handled.
// Residual: an unfenced audit append (OUTCOME_RECORDED) landing between the
// copy and the delete is lost with the source; retention runs on old logs.
//
// Threads: one ApplyRetention at a time per instance; the stores and the pin
// predicate must be thread-safe if other threads use them meanwhile.

#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/store/event_store.h"

namespace once::lifecycle {

// True: leave this execution exactly where it is. An error fails the run.
using PinPredicate = std::function<Result<bool>(std::string_view execution_id)>;

// A predicate true when any of `a`, `b` is (nullptr members are skipped);
// the first error wins.
PinPredicate AnyPin(PinPredicate a, PinPredicate b);

enum class RetentionMode { kArchive, kDelete };

struct RetentionPolicy {
  int64_t age_ms_min = 30LL * 24 * 3600 * 1000;  // terminal event at least this old
  RetentionMode mode = RetentionMode::kDelete;
  size_t page_executions = 256;  // executions per ListEnded page (capped by the store)
  // Executions per DeleteEnded transaction (capped by the store's
  // delete_batch_executions_max). On SQLite a batch holds the file's write
  // lock: 64 executions of 10 events hold it a few milliseconds.
  size_t batch_executions = 64;
  // A pause after each delete batch, so that other writers waiting on the
  // store's lock (SQLite: the file lock, and its busy handler's back-off)
  // get it between batches. 0: none.
  int64_t batch_pause_ms = 0;
};

struct LogLifecycleOptions {
  RetentionPolicy policy;
  store::EventStore* archive = nullptr;  // required for kArchive; must outlive
  PinPredicate pinned;                   // may be empty
};

struct RetentionReport {
  size_t examined = 0;  // ended executions listed (ended at or before the cutoff)
  size_t eligible = 0;  // terminal and old enough (pin not yet consulted)
  size_t pinned = 0;    // eligible but pinned: left in place
  size_t archived = 0;
  size_t deleted = 0;  // deleted without an archive copy (kDelete)
  size_t gone = 0;     // eligible, but the delete's re-check refused it (kNotFound): left alone
  size_t batches = 0;  // DeleteEnded transactions
};

class LogLifecycle {
 public:
  // `store` and `clock` must outlive the lifecycle.
  LogLifecycle(store::EventStore& store, const Clock& clock, LogLifecycleOptions options);

  // One retention pass over the executions ended at or before now minus
  // age_ms_min. kInvalidArgument when the mode is kArchive without an archive
  // store, or a page or batch size is 0.
  Result<RetentionReport> ApplyRetention();

  // Replaces the pin predicate (App::Supervise composes one in). Not
  // concurrently with ApplyRetention.
  void set_pinned(PinPredicate pinned) { options_.pinned = std::move(pinned); }
  const PinPredicate& pinned() const { return options_.pinned; }
  const RetentionPolicy& policy() const { return options_.policy; }

 private:
  Status Handle(const store::EndedExecution& ended, RetentionReport& report);
  Status ArchiveOne(const std::string& id, RetentionReport& report);
  Status Archive(const std::string& id, const std::vector<store::Envelope>& log);
  Status FlushBatch(RetentionReport& report);
  size_t BatchMax() const;

  std::vector<std::string> batch_;  // ids to delete, distinct
  int64_t cutoff_ms_ = 0;           // this pass's: ended at or before it

  store::EventStore& store_;
  const Clock& clock_;
  LogLifecycleOptions options_;
};

}  // namespace once::lifecycle
