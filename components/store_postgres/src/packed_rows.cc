#include "packed_rows.h"

#include <limits>

#include "once/events/envelope.h"
#include "once/events/json_text.h"
#include "once/events/kinds.h"

namespace once::store::pg {
namespace {

// A kind in the status indexes' predicate (sql.h).
bool IsStatusKind(std::string_view kind) {
  for (std::string_view k : events::StatusKernelKindNames()) {
    if (k == kind) return true;
  }
  return false;
}

std::unexpected<Error> Corrupt(std::string_view execution_id, int64_t sequence,
                               std::string_view why) {
  return MakeError(ErrorCode::kCorruption,
                   "stored row at " + std::to_string(sequence) + ": " + std::string(why),
                   std::string(execution_id));
}

// One event of `rest`: [kind, payload, metadata, time_ms].
Result<Envelope> DecodeRestEvent(std::string_view execution_id, int64_t sequence, Json& item) {
  if (!item.is_array() || item.size() != 4 || !item[0].is_string() || !item[2].is_object() ||
      !item[3].is_number_integer()) {
    return Corrupt(execution_id, sequence,
                   "an event between is not [kind, payload, metadata, time]");
  }
  Envelope e;
  e.execution_id = std::string(execution_id);
  e.sequence = sequence;
  e.kind = events::Kind::FromStored(item[0].get<std::string>());
  e.payload = std::move(item[1]);
  e.metadata = events::Metadata::FromJson(std::move(item[2]));
  e.time_ms = item[3].get<int64_t>();
  if (e.kind.view().empty() || e.metadata.Problem()) {
    return Corrupt(execution_id, sequence, "an event between has no kind or bad metadata");
  }
  return e;
}

}  // namespace

std::span<const std::string_view> ReleasingKindNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const events::KernelKindInfo& k : events::kKernelKinds) {
      if (EndsRun(k.kind)) out.push_back(k.name);
    }
    return out;
  }();
  return names;
}

bool IsReleasing(std::string_view kind) {
  std::optional<events::KernelKind> k = events::ParseKernelKind(kind);
  return k && EndsRun(*k);
}

int64_t RowsForEvents(int64_t events) {
  return events < std::numeric_limits<int64_t>::max() ? events + 1 : events;
}

namespace {

// The newest row of log `id_expr` whose sequence meets `bound` (none: "").
std::string NewestRowSql(std::string_view what, std::string_view id_expr, std::string_view bound) {
  std::string sql = "(SELECT " + std::string(what) +
                    " FROM events rh WHERE rh.execution_id = " + std::string(id_expr);
  if (!bound.empty()) sql += " AND rh.sequence " + std::string(bound);
  return sql + " ORDER BY rh.sequence DESC LIMIT 1)";
}

}  // namespace

std::string RowHoldingSql(std::string_view what, std::string_view id_expr,
                          std::string_view sequence_expr) {
  if (sequence_expr.empty()) return NewestRowSql(what, id_expr, "");
  return NewestRowSql(what, id_expr, "<= " + std::string(sequence_expr));
}

std::string NewestRowFromSql(std::string_view what, std::string_view id_expr,
                             std::string_view from_expr) {
  return NewestRowSql(what, id_expr, ">= " + std::string(from_expr));
}

bool IsMarked(const EncodedEvent& e) { return e.answering || IsStatusKind(e.kind); }

std::optional<std::string> EncodeRest(std::span<const EncodedEvent> row) {
  if (row.size() < 3) return std::nullopt;
  size_t bytes = 2;
  for (size_t i = 1; i + 1 < row.size(); ++i) {
    bytes += row[i].kind.size() + row[i].payload_json.size() + row[i].metadata_json.size() + 32;
  }
  std::string out;
  out.reserve(bytes);
  out += '[';
  for (size_t i = 1; i + 1 < row.size(); ++i) {
    const EncodedEvent& e = row[i];
    if (i > 1) out += ',';
    out += '[';
    events::AppendJsonStringLiteral(e.kind, out);  // kinds are printable ASCII
    out += ',';
    out += e.payload_json;
    out += ',';
    out += e.metadata_json;
    out += ',';
    out += std::to_string(e.time_ms);
    out += ']';
  }
  out += ']';
  return out;
}

void RowArrays::EventColumns::Reserve(size_t n) {
  for (auto* v : {&sequences, &times}) v->reserve(n);
  for (auto* v : {&kinds, &payloads, &metadata}) v->reserve(n);
}

void RowArrays::EventColumns::Add(const EncodedEvent* e) {
  sequences.push_back(e ? std::optional(e->sequence) : std::nullopt);
  kinds.push_back(e ? std::optional<std::string_view>(e->kind) : std::nullopt);
  payloads.push_back(e ? std::optional<std::string_view>(e->payload_json) : std::nullopt);
  metadata.push_back(e ? std::optional<std::string_view>(e->metadata_json) : std::nullopt);
  times.push_back(e ? std::optional(e->time_ms) : std::nullopt);
}

void RowArrays::EventColumns::BindTo(Params& p) const {
  p.Binary(IntArrayBinary(sequences)).Binary(NullableTextArrayBinary(kinds));
  p.Binary(NullableTextArrayBinary(payloads)).Binary(NullableTextArrayBinary(metadata));
  p.Binary(IntArrayBinary(times));
}

RowArrays::RowArrays(size_t rows_hint) {
  first_.Reserve(rows_hint);
  end_.Reserve(rows_hint);
  rests_.reserve(rows_hint);
}

void RowArrays::Add(std::span<const EncodedEvent> row) {
  first_.Add(&row.front());
  end_.Add(row.size() > 1 ? &row.back() : nullptr);
  std::optional<std::string> rest = EncodeRest(row);
  rests_.push_back(rest ? std::optional<std::string_view>(rest_text_.emplace_back(std::move(*rest)))
                        : std::nullopt);
}

void RowArrays::BindTo(Params& p) const {
  first_.BindTo(p);
  end_.BindTo(p);
  p.Binary(NullableTextArrayBinary(rests_));
}

std::vector<std::string_view> RowColumnNames() {
  std::vector<std::string_view> names;
  std::string_view all = kPostgresEventRowColumns;
  while (!all.empty()) {
    size_t comma = all.find(", ");
    names.push_back(all.substr(0, comma));
    all = comma == std::string_view::npos ? std::string_view() : all.substr(comma + 2);
  }
  return names;
}

std::string StoredRowColumns(std::string_view alias) {
  std::string out;
  for (std::string_view name : RowColumnNames()) {
    if (!out.empty()) out += ", ";
    out += alias;
    out += '.';
    out += name;
  }
  return out;
}

StoredRow ReadStoredRow(const PGresult* result, int row, int column) {
  auto text = [&](int c) {
    return std::string_view(PQgetvalue(result, row, column + c),
                            static_cast<size_t>(PQgetlength(result, row, column + c)));
  };
  StoredRow r;
  r.sequence = IntAt(result, row, column);
  r.kind = text(1);
  r.payload = text(2);
  r.metadata = text(3);
  r.time_ms = IntAt(result, row, column + 4);
  if (!PQgetisnull(result, row, column + 5)) {
    r.last_sequence = IntAt(result, row, column + 5);
    r.end_kind = text(6);
    r.end_payload = text(7);
    r.end_metadata = text(8);
    r.end_time_ms = IntAt(result, row, column + 9);
  }
  if (!PQgetisnull(result, row, column + 10)) r.rest = text(10);
  return r;
}

Status DecodeStoredRow(std::string_view execution_id, const StoredRow& row, int64_t first,
                       int64_t last, const std::function<void(Envelope)>& add) {
  // Sequences start at 1: one below would also let `end - row.sequence`
  // overflow.
  if (row.sequence < 1) return Corrupt(execution_id, row.sequence, "its sequence is below 1");
  const int64_t end = row.last_sequence.value_or(row.sequence);
  if (end < row.sequence || (!row.last_sequence && row.rest)) {
    return Corrupt(execution_id, row.sequence, "its last sequence precedes its first");
  }
  Json between = Json::array();
  if (row.rest) {
    Result<Json> parsed = events::ParseJson(*row.rest);
    if (!parsed || !parsed->is_array()) {
      return Corrupt(execution_id, row.sequence, "rest is not an array");
    }
    between = std::move(*parsed);
  }
  const int64_t expected_between = end - row.sequence - (row.last_sequence ? 1 : 0);
  if (static_cast<int64_t>(between.size()) != std::max<int64_t>(expected_between, 0) ||
      (row.last_sequence && end == row.sequence)) {
    return Corrupt(execution_id, row.sequence, "its events do not match its sequences");
  }
  // Decode every event before adding any: a corrupt row adds nothing.
  std::vector<Envelope> out;
  ONCE_ASSIGN_OR_RETURN(Envelope head, DecodeRow(execution_id, row.sequence, std::string(row.kind),
                                                 row.payload, row.metadata, row.time_ms));
  out.push_back(std::move(head));
  for (size_t i = 0; i < between.size(); ++i) {
    ONCE_ASSIGN_OR_RETURN(
        Envelope e,
        DecodeRestEvent(execution_id, row.sequence + 1 + static_cast<int64_t>(i), between[i]));
    out.push_back(std::move(e));
  }
  if (row.last_sequence) {
    ONCE_ASSIGN_OR_RETURN(Envelope tail,
                          DecodeRow(execution_id, end, std::string(row.end_kind), row.end_payload,
                                    row.end_metadata, row.end_time_ms));
    out.push_back(std::move(tail));
  }
  for (Envelope& e : out) {
    if (e.sequence >= first && e.sequence <= last) add(std::move(e));
  }
  return Ok();
}

}  // namespace once::store::pg
