#include "read_group.h"

#include "once/store/validate.h"

namespace once::store::pg {

const char* ReadRangesSql() {
  return "SELECT r.ord, e.sequence, e.kind, e.payload, e.metadata::text, e.time_ms "
         "FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[]) "
         "WITH ORDINALITY AS r(execution_id, first, last, lim, ord) "
         "CROSS JOIN LATERAL (SELECT x.sequence, x.kind, x.payload, x.metadata, x.time_ms "
         "FROM events x WHERE x.execution_id = r.execution_id AND x.sequence >= r.first "
         "AND x.sequence <= r.last ORDER BY x.sequence LIMIT r.lim) e "
         "ORDER BY r.ord, e.sequence";
}

void Ranges::Add(std::string_view id, int64_t first, int64_t last, int64_t limit) {
  ids.push_back(id);
  firsts.push_back(first);
  lasts.push_back(last);
  limits.push_back(limit);
}

Params Ranges::ToParams() const {
  Params p;
  p.Binary(TextArrayBinary(ids))
      .Binary(IntArrayBinary(firsts))
      .Binary(IntArrayBinary(lasts))
      .Binary(IntArrayBinary(limits));
  return p;
}

Status DecodeRanges(const PGresult* rows, const Ranges& ranges,
                    const std::function<void(size_t, Result<Envelope>)>& add) {
  for (int row = 0; row < PQntuples(rows); ++row) {
    int64_t ord = IntAt(rows, row, 0);
    if (ord < 1 || ord > static_cast<int64_t>(ranges.ids.size())) {
      return MakeError(ErrorCode::kInternal, "grouped read: unexpected row");
    }
    size_t i = static_cast<size_t>(ord - 1);
    add(i, DecodeRow(ranges.ids[i], IntAt(rows, row, 1), PQgetvalue(rows, row, 2),
                     PQgetvalue(rows, row, 3), PQgetvalue(rows, row, 4), IntAt(rows, row, 5)));
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
