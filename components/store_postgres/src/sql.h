// Private: the schema and the statements. Values are bound ($n) everywhere.

#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace once::store::sql {

inline constexpr int64_t kSchemaVersion = 1;
inline constexpr std::string_view kVersionRow = "version";
inline constexpr std::string_view kParkFencesMarker = "park_fences_backfilled";
inline constexpr std::string_view kParkIndex = "events_parks_backfill";

// once_schema holds the version and the one-time markers.
inline constexpr std::string_view kCreateSchemaTable =
    "CREATE TABLE IF NOT EXISTS once_schema (name text PRIMARY KEY, value bigint NOT NULL)";

// Ids compare in byte order (COLLATE "C") so ListExecutions pages ascend by bytes.
inline constexpr std::string_view kCreateTablesV1 = R"(
CREATE TABLE IF NOT EXISTS events (
  execution_id text COLLATE "C" NOT NULL,
  sequence bigint NOT NULL,
  kind text NOT NULL,
  payload text NOT NULL,
  metadata jsonb NOT NULL,
  time_ms bigint NOT NULL,
  PRIMARY KEY (execution_id, sequence)
);
-- A row exists once someone acquires, or once the execution parks (token 0).
CREATE TABLE IF NOT EXISTS fences (
  execution_id text COLLATE "C" PRIMARY KEY,
  token bigint NOT NULL
))";

// The scan for an answering event (events::IsAnswering) over alias `a`.
std::string AnsweringPredicate(std::string_view alias);

// The boot backfill: every execution whose newest answering event is a park.
std::string BackfillAllSql();
// One batch of the offline backfill: $1 after (id), $2 batch size. Returns
// (last id of the batch or NULL, parked executions found).
std::string BackfillBatchSql();

// The append statement for one or many requests. `lock_strength` is "SHARE"
// (the append guard) or "UPDATE" (AppendIfUnchanged). Parameters:
//   $1 ids text[], $2 fences int8[] (NULL: unguarded), $3 exact bool[]
//   (token must equal the fence), $4 lock bool[] (read the row FOR
//   lock_strength), $5 expected_next int8[], $6 suspends bool[],
//   $7 event request index (1-based) int8[], $8 sequence int8[],
//   $9 kind text[], $10 payload text[], $11 metadata text[], $12 time_ms int8[].
// Returns per request, in order: ord, token, head, inserted (total rows).
std::string AppendSql(std::string_view lock_strength);

// The conditional bump of AcquireFenceIf ($1 id, $2 expected token, $3 the
// park's sequence): prepared, run as its own statement after the row lock.
std::string FenceIfBumpSql();

// AppendSql for a statement where no request locks (all $4 false) and none
// parks (all $6 false): the same verdict and rows, without the locked CTE and
// the park-fence insert. Parameters: AppendSql's without $4 and $6, renumbered
// ($1 ids, $2 fences, $3 exact, $4 expected_next, $5..$10 the event arrays).
std::string LeanAppendSql();

}  // namespace once::store::sql
