// Private: one row per append (schema version 6, docs/event-store.md).
//
// An append's events are stored in as few `events` rows as the SQL that
// selects on kinds allows. A row holds a run of consecutive events of one
// append: its first event in the row's own columns (sequence, kind, payload,
// metadata, time_ms), its last in the end_* columns with last_sequence, and
// the ones between in `rest` (a JSON array of [kind, payload, metadata,
// time_ms]). A row of one event leaves last_sequence, the end_* columns and
// rest NULL, which is also every row written before version 6.
//
// The rule that keeps every kind-selecting statement exact: an event that
// statement may select on (a marked event: a status kind or one that
// answers a park) is the first or the last event of its row, never between;
// and a park or a terminal event (a releasing event) ends its row. So the
// status index reads `kind` and `end_kind`, a scan for an answer after a
// park reads the rows that start after the park, and a statement that asks
// for the log's head reads the newest row's last_sequence.
//
//   ForEachRow(enc.events, [&](std::span<const EncodedEvent> row) { ... });
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"
#include "once/store/event_store.h"
#include "once/store/validate.h"
#include "once/store_postgres/postgres_event_store.h"
#include "pg_conn.h"

namespace once::store::pg {

// True for an event a statement selects on by kind (see above).
bool IsMarked(const EncodedEvent& e);
// The kinds of a park and of the terminal events (store::EndsRun), which
// end their row.
std::span<const std::string_view> ReleasingKindNames();
bool IsReleasing(std::string_view kind);

// Calls row(span) for each row `events` (one append's, in order) are stored
// as, in order.
template <class RowFn>
void ForEachRow(std::span<const EncodedEvent> events, RowFn row);

// The rows to read for `events` events from a row on (each row holds at
// least one, and the first may hold some before the range): events + 1.
int64_t RowsForEvents(int64_t events);

// SQL: column `what` (over alias rh) of the row of log `id_expr` that holds
// sequence `sequence_expr` (the newest row starting at or before it; the
// newest row for ""), or NULL when there is none. One backward probe of the
// primary key.
std::string RowHoldingSql(std::string_view what, std::string_view id_expr,
                          std::string_view sequence_expr);

// SQL: column `what` (over alias rh) of the newest row of log `id_expr` if
// that row starts at or after sequence `from_expr`, else NULL. One backward
// probe of the primary key that stops at the first row below `from_expr`:
// PostgreSQL reads a leaf page's matching entries all at once, so a probe
// bounded only by the id reads every entry of the log on the page (on a
// long log, hundreds) to return one.
std::string NewestRowFromSql(std::string_view what, std::string_view id_expr,
                             std::string_view from_expr);

// The `rest` column of a row whose events are `row` (NULL, nullopt, for a
// row of one or two events): its events between the first and the last.
std::optional<std::string> EncodeRest(std::span<const EncodedEvent> row);

// The stored rows of appends as the statements' parameter arrays, one
// element per row, bound in sql.h's row-column order: sequence, kind,
// payload, metadata, time_ms, last_sequence, end_kind, end_payload,
// end_metadata, end_time_ms, rest. Views into the events: they must outlive
// the arrays.
class RowArrays {
 public:
  explicit RowArrays(size_t rows_hint);
  // Adds `row` (one row of an append's events, as ForEachRow gives it).
  void Add(std::span<const EncodedEvent> row);
  size_t size() const { return rests_.size(); }
  void BindTo(Params& p) const;

 private:
  // One event's columns per row (the first event's, or the last event's:
  // NULL in a row of one).
  struct EventColumns {
    std::vector<std::optional<int64_t>> sequences, times;
    std::vector<std::optional<std::string_view>> kinds, payloads, metadata;
    void Reserve(size_t n);
    void Add(const EncodedEvent* e);  // nullptr: NULLs
    void BindTo(Params& p) const;
  };
  EventColumns first_, end_;
  std::vector<std::optional<std::string_view>> rests_;
  std::deque<std::string> rest_text_;  // the rest columns' texts (stable addresses)
};

// The columns of one stored row, as the server returned them (text form).
struct StoredRow {
  int64_t sequence = 0;
  std::string_view kind, payload, metadata;
  int64_t time_ms = 0;
  std::optional<int64_t> last_sequence;  // nullopt: a row of one event
  std::string_view end_kind, end_payload, end_metadata;
  int64_t end_time_ms = 0;
  std::optional<std::string_view> rest;  // nullopt: no events between
};

// The row columns after execution_id (kPostgresEventRowColumns), in order.
std::vector<std::string_view> RowColumnNames();
inline constexpr int kRowColumnCount = 11;

// The select list that reads a StoredRow from `alias` (the row columns, in
// the order ReadStoredRow takes them).
std::string StoredRowColumns(std::string_view alias);

// Reads a StoredRow from columns [column, column + 11) of `row`.
StoredRow ReadStoredRow(const PGresult* result, int row, int column);

// The events of `row` within [first, last], in order, each passed to
// `add`. A row that does not decode (malformed rest, a count that does not
// match its sequences, bad JSON) is kCorruption and adds nothing.
Status DecodeStoredRow(std::string_view execution_id, const StoredRow& row, int64_t first,
                       int64_t last, const std::function<void(Envelope)>& add);

template <class RowFn>
void ForEachRow(std::span<const EncodedEvent> events, RowFn row) {
  size_t first = 0;
  while (first < events.size()) {
    size_t count = 1;
    if (!IsReleasing(events[first].kind)) {
      // Unmarked events join the row; a marked one ends it.
      while (first + count < events.size()) {
        if (IsMarked(events[first + count++])) break;
      }
    }
    row(events.subspan(first, count));
    first += count;
  }
}

}  // namespace once::store::pg
