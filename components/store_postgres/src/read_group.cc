#include "read_group.h"

#include <cstdlib>

#include "once/store/validate.h"

namespace once::store::pg {
namespace {

int64_t IntAt(const PGresult* res, int row, int col) {
  return std::strtoll(PQgetvalue(res, row, col), nullptr, 10);
}

void FailAll(std::span<ReadOp* const> group, const Error& why) {
  for (ReadOp* op : group) op->result = std::unexpected(why);
}

Params GroupParams(std::span<ReadOp* const> group) {
  std::vector<std::string_view> ids;
  std::vector<std::optional<int64_t>> firsts, lasts, limits;
  for (const ReadOp* op : group) {
    ids.push_back(op->id);
    firsts.push_back(op->first);
    lasts.push_back(op->last);
    limits.push_back(op->limit);
  }
  Params p;
  p.Binary(TextArrayBinary(ids))
      .Binary(IntArrayBinary(firsts))
      .Binary(IntArrayBinary(lasts))
      .Binary(IntArrayBinary(limits));
  return p;
}

}  // namespace

const char* ReadRangesSql() {
  return "SELECT r.ord, e.sequence, e.kind, e.payload, e.metadata::text, e.time_ms "
         "FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[]) "
         "WITH ORDINALITY AS r(execution_id, first, last, lim, ord) "
         "CROSS JOIN LATERAL (SELECT x.sequence, x.kind, x.payload, x.metadata, x.time_ms "
         "FROM events x WHERE x.execution_id = r.execution_id AND x.sequence >= r.first "
         "AND x.sequence <= r.last ORDER BY x.sequence LIMIT r.lim) e "
         "ORDER BY r.ord, e.sequence";
}

PostgresReadStats ReadGroup::stats() const {
  return {.groups = groups_.load(std::memory_order_relaxed),
          .reads = reads_.load(std::memory_order_relaxed),
          .largest = largest_.load(std::memory_order_relaxed)};
}

void ReadGroup::RunGroup(std::span<ReadOp* const> group) {
  groups_.fetch_add(1, std::memory_order_relaxed);
  reads_.fetch_add(group.size(), std::memory_order_relaxed);
  uint64_t size = group.size();
  uint64_t seen = largest_.load(std::memory_order_relaxed);
  while (size > seen && !largest_.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {
  }
  auto conn = pool_.Checkout();
  if (!conn) return FailAll(group, conn.error());
  auto res = (*conn)->Prepared("read_ranges", GroupParams(group));
  if (!res) return FailAll(group, res.error());
  const PGresult* r = res->get();
  for (ReadOp* op : group) op->result = std::vector<Envelope>{};
  for (int i = 0; i < PQntuples(r); ++i) {
    int64_t ord = IntAt(r, i, 0);
    if (ord < 1 || ord > static_cast<int64_t>(group.size())) {
      return FailAll(group,
                     MakeError(ErrorCode::kInternal, "grouped read: unexpected row").error());
    }
    ReadOp& op = *group[ord - 1];
    if (!op.result) continue;  // a row of it failed to decode
    Result<Envelope> e = DecodeRow(op.id, IntAt(r, i, 1), PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
                                   PQgetvalue(r, i, 4), IntAt(r, i, 5));
    if (!e) {
      op.result = std::unexpected(e.error());
      continue;
    }
    op.result->push_back(std::move(*e));
  }
}

}  // namespace once::store::pg
