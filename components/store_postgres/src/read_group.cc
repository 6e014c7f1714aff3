#include "read_group.h"

#include "once/store/validate.h"
#include "packed_rows.h"

namespace once::store::pg {

// A range starts at the row that holds its first sequence (a row holds a
// run of one append's events, packed_rows.h): one backward probe, skipped
// from sequence 1. Each row holds at least one event, so the rows of a range
// past that first one carry `lim` events within lim + 1 rows ($5).
const std::string& ReadRangesSql() {
  static const std::string sql =
      "SELECT r.ord, " + StoredRowColumns("e") +
      " FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[]) "
      "WITH ORDINALITY AS r(execution_id, first, last, lim, ord) "
      "CROSS JOIN LATERAL (SELECT x.* FROM events x WHERE x.execution_id = r.execution_id "
      "AND x.sequence >= CASE WHEN r.first <= 1 THEN r.first ELSE COALESCE(" +
      RowHoldingSql("rh.sequence", "r.execution_id", "r.first") +
      ", r.first) END "
      "AND x.sequence <= r.last ORDER BY x.sequence LIMIT r.lim) e "
      "ORDER BY r.ord, e.sequence";
  return sql;
}

void Ranges::Add(std::string_view id, int64_t first, int64_t last, int64_t limit) {
  ids.push_back(id);
  firsts.push_back(first);
  lasts.push_back(last);
  limits.push_back(limit);
}

Params Ranges::ToParams() const {
  // Rows, not events: one more than the events asked (see ReadRangesSql).
  std::vector<std::optional<int64_t>> row_limits;
  row_limits.reserve(limits.size());
  for (const auto& l : limits) row_limits.push_back(RowsForEvents(*l));
  Params p;
  p.Binary(TextArrayBinary(ids))
      .Binary(IntArrayBinary(firsts))
      .Binary(IntArrayBinary(lasts))
      .Binary(IntArrayBinary(row_limits));
  return p;
}

Status DecodeRanges(const PGresult* rows, const Ranges& ranges,
                    const std::function<void(size_t, Result<Envelope>)>& add) {
  std::vector<int64_t> taken(ranges.ids.size(), 0);
  for (int row = 0; row < PQntuples(rows); ++row) {
    int64_t ord = IntAt(rows, row, 0);
    if (ord < 1 || ord > static_cast<int64_t>(ranges.ids.size())) {
      return MakeError(ErrorCode::kInternal, "grouped read: unexpected row");
    }
    size_t i = static_cast<size_t>(ord - 1);
    Status decoded = DecodeStoredRow(ranges.ids[i], ReadStoredRow(rows, row, 1), *ranges.firsts[i],
                                     *ranges.lasts[i], [&](Envelope e) {
                                       if (taken[i] >= *ranges.limits[i]) return;
                                       ++taken[i];
                                       add(i, std::move(e));
                                     });
    if (!decoded) add(i, std::unexpected(decoded.error()));
  }
  return Ok();
}

namespace {

void FailAll(std::span<ReadOp* const> group, const Error& why) {
  for (ReadOp* op : group) op->result = std::unexpected(why);
}

}  // namespace

PostgresReadStats ReadGroup::stats() const {
  return {.groups = groups_.load(std::memory_order_relaxed),
          .reads = reads_.load(std::memory_order_relaxed),
          .largest = largest_.load(std::memory_order_relaxed)};
}

void ReadGroup::RunGroup(std::span<ReadOp* const> group) {
  groups_.fetch_add(1, std::memory_order_relaxed);
  reads_.fetch_add(group.size(), std::memory_order_relaxed);
  RaiseToAtLeast(largest_, group.size());
  Ranges ranges;
  for (const ReadOp* op : group) ranges.Add(op->id, op->first, op->last, op->limit);
  auto conn = pool_.Checkout();
  if (!conn) return FailAll(group, conn.error());
  auto res = (*conn)->Prepared("read_ranges", ranges.ToParams());
  if (!res) return FailAll(group, res.error());
  for (ReadOp* op : group) op->result = std::vector<Envelope>{};
  Status decoded = DecodeRanges(res->get(), ranges, [&](size_t i, Result<Envelope> e) {
    ReadOp& op = *group[i];
    if (!op.result) return;  // an earlier row of it failed to decode
    if (!e) {
      op.result = std::unexpected(e.error());
      return;
    }
    op.result->push_back(std::move(*e));
  });
  if (!decoded) FailAll(group, decoded.error());
}

}  // namespace once::store::pg
