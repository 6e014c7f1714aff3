// File: status_index.h
//
// The operator's status indexes on the PostgreSQL events table, as their
// readers see them: which ordered index ranges hold the status events
// (events::StatusKernelKindNames) of one kind. The store's retention listing
// and the visibility queries (newest of a status, counts, open parks) build
// their SQL from these ranges, so one rule says where a status event is.
//
// Schema version 6 stores a run of one append's events as one row
// (packed_rows.h): a status event is the row's first event (kind, time_ms,
// sequence) or its last (end_kind, end_time_ms, last_sequence), and each has
// an entry in its own index. From version 7 a *paired* row, one whose first
// event is EXECUTION_STARTED and whose last is a status event of the same
// time (a whole one-step execution, or its first stretch up to a park,
// written in one append), has one entry for both: its start's, in
// events_by_first_status on (kind, paired end kind, time_ms, execution_id,
// sequence), where every other row's second column is ''. That is one
// B-tree insert less (and about 140 bytes less WAL) for most executions,
// with no third index for every statement to open; a list reads a few more
// ranges.
//
//   for (const StatusRange& r : PostgresStatusRanges("EXECUTION_FAILED", version))
//     sql += "SELECT execution_id, " + r.time + " FROM events WHERE " + r.where + ...;
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace once::store {

// The first schema version with paired rows' single entry.
inline constexpr int64_t kPostgresPairedStatusVersion = 7;

// One ordered range of one status index: the entries of one status kind.
// Every text names unqualified columns of `events`.
struct StatusRange {
  // Selects the range's rows. It repeats the index's predicate, so that a
  // generic plan proves the partial index applies.
  std::string where;
  // The entry's time (time_ms or end_time_ms) and its event's sequence
  // (sequence or last_sequence).
  std::string time;
  std::string sequence;
  // The index's own sequence column: ordered by (time, execution_id,
  // order_sequence) the range is read in index order. Within one execution
  // rows and their last events are in one order, so that order is also the
  // entries' (time, execution_id, sequence) order.
  std::string order_sequence;
};

// The ranges holding the status events of `kind` (one of
// events::StatusKernelKindNames, inlined as a literal) in a schema of
// `version`: one range before version 6, two in version 6, and from version
// 7 three (eight for EXECUTION_STARTED: its paired entries are one range per
// status kind at their end). Each status event of `kind` is one entry of
// one range (a paired row's start and end are entries of different kinds).
std::vector<StatusRange> PostgresStatusRanges(std::string_view kind, int64_t version);

// Conditions whose rows, counted one condition at a time and added, count
// the entries of `kind`: the ranges' own, except that from version 7 a
// kind's entries in events_by_first_status are one condition on `kind`
// alone, which an index-only scan answers (a condition on the paired
// column, an expression, reads the table).
std::vector<std::string> PostgresStatusCountConditions(std::string_view kind, int64_t version);

// The rows any of `ranges` holds, as one SQL condition (the ranges' `where`
// OR'ed), each row once. Planned as one pass over the table: a count of a
// kind's entries is faster as a sum of one count per range.
std::string AnyStatusRangeSql(const std::vector<StatusRange>& ranges);

}  // namespace once::store
