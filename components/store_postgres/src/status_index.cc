#include "once/store_postgres/status_index.h"

#include "once/events/kinds.h"
#include "sql.h"

namespace once::store {
namespace {

std::string Literal(std::string_view kind) { return "'" + std::string(kind) + "'"; }

}  // namespace

std::vector<StatusRange> PostgresStatusRanges(std::string_view kind, int64_t version) {
  const std::string k = Literal(kind);
  if (version < kPostgresPairedStatusVersion) {
    std::vector<StatusRange> out = {{.where = "kind = " + k,
                                     .time = "time_ms",
                                     .sequence = "sequence",
                                     .order_sequence = "sequence"}};
    if (version >= 6) {
      out.push_back({.where = "end_kind = " + k,
                     .time = "end_time_ms",
                     .sequence = "last_sequence",
                     .order_sequence = "sequence"});
    }
    return out;
  }
  const std::string unpaired = " AND NOT " + sql::PairedStatusPredicate();
  std::vector<StatusRange> out = {{.where = "kind = " + k + unpaired,
                                   .time = "time_ms",
                                   .sequence = "sequence",
                                   .order_sequence = "sequence"},
                                  {.where = "end_kind = " + k + unpaired,
                                   .time = "end_time_ms",
                                   .sequence = "last_sequence",
                                   .order_sequence = "sequence"}};
  // A paired row's entry is keyed by its end's kind: the start's entries
  // are one range per status kind, an end's one range of its own kind.
  const bool start = kind == events::Info(events::KernelKind::kExecutionStarted).name;
  for (std::string_view end : sql::PairedEndKinds()) {
    if (!start && end != kind) continue;
    out.push_back({.where = sql::PairedStatusPredicate() + " AND end_kind = " + Literal(end),
                   .time = "time_ms",
                   .sequence = start ? "sequence" : "last_sequence",
                   .order_sequence = "sequence"});
  }
  return out;
}

std::string AnyStatusRangeSql(const std::vector<StatusRange>& ranges) {
  std::string out = "(";
  for (size_t i = 0; i < ranges.size(); ++i) {
    out += (i ? ") OR (" : "(") + ranges[i].where;
  }
  return out + "))";
}

}  // namespace once::store
