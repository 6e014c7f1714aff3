#include "once/store_postgres/status_index.h"

#include "once/events/kinds.h"
#include "sql.h"

namespace once::store {
namespace {

std::string Literal(std::string_view kind) { return "'" + std::string(kind) + "'"; }

std::string_view StartKind() { return events::Info(events::KernelKind::kExecutionStarted).name; }

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
  const std::string started = Literal(StartKind());
  std::vector<StatusRange> out = {{.where = "kind = " + k + " AND " + sql::PairedEndSql() + " = ''",
                                   .time = "time_ms",
                                   .sequence = "sequence",
                                   .order_sequence = "sequence"},
                                  {.where = "end_kind = " + k + " AND " + sql::UnpairedEndSql(),
                                   .time = "end_time_ms",
                                   .sequence = "last_sequence",
                                   .order_sequence = "sequence"}};
  // A paired row's one entry is its start's, keyed by its end's kind: the
  // starts are one more range per end kind, an end one range of its own.
  const bool start = kind == StartKind();
  for (std::string_view end : events::StatusKernelKindNames()) {
    if (!start && end != kind) continue;
    out.push_back(
        {.where = "kind = " + started + " AND " + sql::PairedEndSql() + " = " + Literal(end),
         .time = "time_ms",
         .sequence = start ? "sequence" : "last_sequence",
         .order_sequence = "sequence"});
  }
  return out;
}

std::vector<std::string> PostgresStatusCountConditions(std::string_view kind, int64_t version) {
  std::vector<StatusRange> ranges = PostgresStatusRanges(kind, version);
  std::vector<std::string> out;
  if (version >= kPostgresPairedStatusVersion) {
    // The first events' entries of the kind, paired or not, then the rest
    // (the starts' paired ranges are all in the first).
    out.push_back("kind = " + Literal(kind));
    ranges.erase(ranges.begin());
    if (kind == StartKind()) ranges.resize(1);
  }
  for (const StatusRange& r : ranges) out.push_back(r.where);
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
