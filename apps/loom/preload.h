// loom bench --preload N: a store that already holds N finished executions,
// so the bench measures a full store, not only an empty one (issue 20).
//
//   ONCE_ASSIGN_OR_RETURN(PreloadFigures f, Preload(spec, store, 100'000, clock));
//   ONCE_RETURN_IF_ERROR(VerifyPreload(spec, store, f));
//   ONCE_ASSIGN_OR_RETURN(Percentiles p, TimeInspects(spec, store, f, 200, rng));
//
// Shape: execution i is "pre-<i, 10 digits>"; the even ones are a start,
// eight steps and a completion, the odd ones a start, three steps, a park
// (Sleep), its resume under the conditional fence, three steps and a
// completion (10 events each, and a fences row like the one the resume
// leaves). The rows are copies of two template executions the runtime
// writes first through the store itself, so every column is the store's own
// encoding; only the id and the times change (spread over the 90 days before
// now, oldest first, each log keeping its template's gaps).
//
// How they are written: PostgreSQL by COPY FROM STDIN (text) in chunks of
// kPreloadChunk executions, then VACUUM ANALYZE (what autovacuum would have
// done to a months-old table) and a CHECKPOINT, so neither lands inside a
// timed run (timed apart as the settle time); SQLite by
// prepared INSERTs on a connection of its own, one transaction per chunk,
// then a TRUNCATE checkpoint; the memory store by its ordinary Append. Ids
// ascend, so the primary keys grow at their right edge (random ids would
// split pages all over the index: a slower preload, a larger index).
//
// Errors: whatever the backend's connection or statements return.
#pragma once

#include <cstdint>
#include <string>

#include "loom_app.h"
#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/base/rng.h"
#include "once/store/event_store.h"

namespace once::loom_app {

inline constexpr int64_t kPreloadChunk = 50'000;              // executions per COPY / transaction
inline constexpr int64_t kPreloadSpanMs = 90LL * 86'400'000;  // how far back the logs go

struct PreloadFigures {
  int64_t executions = 0;
  int64_t events = 0;
  double write_s = 0;   // writing the rows
  double settle_s = 0;  // VACUUM ANALYZE (PostgreSQL) or the checkpoint (SQLite)
  int64_t bytes = 0;    // on disk after (BytesOnDisk), 0 for memory
};

// The id of preloaded execution i (0-based).
std::string PreloadId(int64_t i);

// Writes n finished executions into the store `spec` names, which `store`
// is open on. The store must not hold ids starting "pre-".
Result<PreloadFigures> Preload(const BackendSpec& spec, store::EventStore& store, int64_t n,
                               const Clock& clock);

// The bytes the store takes: PostgreSQL, pg_total_relation_size of every
// table of the schema (indexes and TOAST included); SQLite, the file, its
// WAL and its shared-memory file; memory, 0.
Result<int64_t> BytesOnDisk(const BackendSpec& spec);

// Removes the store `spec` names: the SQLite file (with its WAL and
// shared-memory file), the PostgreSQL schema (DROP SCHEMA ... CASCADE);
// nothing for memory. The store must be closed.
Status RemovePreloaded(const BackendSpec& spec);

// The server's WAL insert position in bytes (pg_current_wal_lsn), for the
// WAL a span writes; PostgreSQL only.
Result<int64_t> WalPositionBytes(const std::string& url);

// Checks that `loom list` and `loom show` see the preloaded executions as
// finished runs of their workflows (sampled), so the bench cannot measure
// rows no reader would accept. kInternal names what did not match.
Status VerifyPreload(const BackendSpec& spec, store::EventStore& store, const PreloadFigures& f);

struct Percentiles {
  int samples = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

// `samples` inspects of random preloaded executions, each timed twice: the
// log read `loom show` makes (Ops::ReadLog: the head, then the log) and all
// of `loom show` (Ops::Show: the summary, the log, timers, inbox, owner).
// The memory store, which `loom show` cannot open, reads and folds the log
// (both figures).
struct InspectFigures {
  Percentiles log;
  Percentiles show;
};
Result<InspectFigures> TimeInspects(const BackendSpec& spec, store::EventStore& store,
                                    const PreloadFigures& f, int samples, Rng& rng);

// `samples` first pages of `loom list` (50 rows, any status, newest first)
// and as many of `loom list --status completed`; SQL backends only.
Result<std::pair<Percentiles, Percentiles>> TimeLists(const BackendSpec& spec, int samples);

struct RetentionFigures {
  int64_t examined = 0;
  int64_t deleted = 0;
  double seconds = 0;
};

// `loom retention run --age-ms age_ms` on the store (Ops::Retention: the
// CLI's path, its pins included); SQL backends only.
// pause_ms: its --batch-pause-ms (-1: the default).
Result<RetentionFigures> RunRetention(const BackendSpec& spec, int64_t age_ms, int64_t pause_ms);

}  // namespace once::loom_app
