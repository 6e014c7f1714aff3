// libFuzzer target for what the PostgreSQL event store decodes from the
// server, and for the binary arrays it sends the server to decode:
//   - ParseFenceVersion: the text "<xmin> (<block>,<offset>)" a hinted
//     append reads back (append_hints.h). Accepted text formats back (as
//     PostgreSQL writes it) to text that parses to the same version. The
//     parser takes leading zeros PostgreSQL never writes, so only
//     Parse(Format(Parse(t))) == Parse(t) holds on the input side.
//   - DecodeRanges: the rows of a read group's statement (read_group.h), in
//     a real PGresult made with libpq's own constructors. The input is the
//     ranges (its first line, ids separated by tabs) and rows (each further
//     line: ord and a stored row's columns, packed_rows.h; \N is NULL, a
//     short line's missing columns too). Every row is handed to the read it
//     names (or the group fails with kInternal), each event either decodes
//     (and re-encodes, as the store writes it, to text that decodes to the
//     same event) or is kCorruption; a row that decodes, written again as
//     the store writes a row of those events, decodes to the same events.
//   - TextArrayBinary, IntArrayBinary, BoolArrayBinary, TidArrayBinary,
//     XidArrayBinary: decoded as PostgreSQL's array_recv reads them (a
//     one-dimensional array: ndim 1, the null flag, the element type, the
//     length and lower bound 1, then each element's length, -1 for NULL,
//     and bytes), they give back exactly the items (decode(encode(x)) == x).
// Seeds: components/store_postgres/fuzz/corpus/store_postgres_rows_fuzz
// (kept by store_postgres_decode_test).

#include <libpq-fe.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "append_hints.h"
#include "once/events/metadata.h"
#include "once/store/validate.h"
#include "packed_rows.h"
#include "pg_conn.h"
#include "read_group.h"
#include "text_result.h"

namespace {

using namespace once;
using namespace once::store;
using namespace once::store::pg;

void Check(bool ok) {
  if (!ok) std::abort();
}

std::vector<std::string_view> Split(std::string_view text, char by) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (true) {
    const size_t j = text.find(by, i);
    out.push_back(text.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
    if (j == std::string_view::npos) return out;
    i = j + 1;
  }
}

// ---- ParseFenceVersion ----

std::string Format(const FenceVersion& v) {
  return std::to_string(v.xmin) + " (" + std::to_string(v.block) + "," + std::to_string(v.offset) +
         ")";
}

void TryFenceVersion(std::string_view text) {
  const std::optional<FenceVersion> v = ParseFenceVersion(text);
  if (!v) return;
  const std::optional<FenceVersion> again = ParseFenceVersion(Format(*v));
  Check(again && *again == *v);
}

// ---- DecodeRanges ----

constexpr size_t kRangesMax = 64;
constexpr size_t kRowsMax = 256;

// The events of stored row `row` of `res` (columns from 1), or nullopt.
std::optional<std::vector<Envelope>> RowEvents(const PGresult* res, int row, std::string_view id) {
  std::vector<Envelope> out;
  Status s = DecodeStoredRow(id, ReadStoredRow(res, row, 1), 1, INT64_MAX,
                             [&](Envelope e) { out.push_back(std::move(e)); });
  if (!s) {
    Check(s.error().code == ErrorCode::kCorruption);
    return std::nullopt;
  }
  return out;
}

// `events` (one row's, decoded) written as the store writes a row of them,
// then decoded again: the same events.
void CheckRowRoundTrip(const std::vector<Envelope>& events, std::string_view id) {
  for (const Envelope& e : events) {
    if (e.kind.view() == "\\N") return;  // the text form's NULL: not a row the store can write
  }
  std::vector<EncodedEvent> encoded;
  for (const Envelope& e : events) {
    std::string metadata;
    Check(events::AppendMetadataText(e.metadata, metadata));
    encoded.push_back(EncodedEvent{.sequence = e.sequence,
                                   .kind = std::string(e.kind.view()),
                                   .payload_json = e.payload.dump(),
                                   .metadata_json = std::move(metadata),
                                   .time_ms = e.time_ms});
  }
  const std::string seq = std::to_string(encoded.front().sequence);
  const std::string time = std::to_string(encoded.front().time_ms);
  const std::string last = std::to_string(encoded.back().sequence);
  const std::string end_time = std::to_string(encoded.back().time_ms);
  const std::optional<std::string> rest = EncodeRest(encoded);
  const bool one = encoded.size() == 1;
  const std::string_view null = "\\N";
  // A view of a string that outlives the line, or NULL for a row of one.
  auto end = [&](const std::string& text) { return one ? null : std::string_view(text); };
  const std::vector<std::string_view> line = {"1",
                                              seq,
                                              encoded.front().kind,
                                              encoded.front().payload_json,
                                              encoded.front().metadata_json,
                                              time,
                                              end(last),
                                              end(encoded.back().kind),
                                              end(encoded.back().payload_json),
                                              end(encoded.back().metadata_json),
                                              end(end_time),
                                              rest ? std::string_view(*rest) : null};
  auto res = MakeTextResult({line}, 1 + kRowColumnCount);
  Check(res != nullptr);
  std::optional<std::vector<Envelope>> again = RowEvents(res.get(), 0, id);
  Check(again && *again == events);
}

void TryRanges(std::string_view text) {
  std::vector<std::string_view> lines = Split(text, '\n');
  std::vector<std::string_view> ids = Split(lines.front(), '\t');
  if (ids.size() > kRangesMax || lines.size() - 1 > kRowsMax) return;
  Ranges ranges;
  for (std::string_view id : ids) ranges.Add(id, 1, INT64_MAX, INT64_MAX);
  std::vector<std::vector<std::string_view>> rows;
  for (size_t l = 1; l < lines.size(); ++l) rows.push_back(Split(lines[l], '\t'));
  auto res = MakeTextResult(rows, 1 + kRowColumnCount);
  if (!res) return;
  Status status = DecodeRanges(res.get(), ranges, [&](size_t i, Result<Envelope> e) {
    Check(i < ranges.ids.size());
    if (!e) {
      Check(e.error().code == ErrorCode::kCorruption);
      return;
    }
    Check(e->execution_id == ranges.ids[i]);
    // As the store writes an event, and reads it back.
    std::string metadata;
    Check(events::AppendMetadataText(e->metadata, metadata));
    auto again = DecodeRow(e->execution_id, e->sequence, std::string(e->kind.view()),
                           e->payload.dump(), metadata, e->time_ms);
    Check(again && *again == *e);
  });
  if (!status) {
    Check(status.error().code == ErrorCode::kInternal);
    return;
  }
  for (int row = 0; row < PQntuples(res.get()); ++row) {
    const size_t i = static_cast<size_t>(IntAt(res.get(), row, 0) - 1);
    std::optional<std::vector<Envelope>> events = RowEvents(res.get(), row, ranges.ids[i]);
    if (events && !events->empty()) CheckRowRoundTrip(*events, ranges.ids[i]);
  }
}

// ---- binary arrays, read as array_recv reads them ----

class ArrayReader {
 public:
  explicit ArrayReader(std::string bytes) : bytes_(std::move(bytes)) {}
  uint32_t U32() {
    Check(bytes_.size() - pos_ >= 4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(bytes_[pos_++]);
    return v;
  }
  std::string_view Take(size_t n) {
    Check(bytes_.size() - pos_ >= n);
    std::string_view out = std::string_view(bytes_).substr(pos_, n);
    pos_ += n;
    return out;
  }
  // The header; the number of elements.
  size_t Header(uint32_t element_oid, bool has_null) {
    Check(U32() == 1);  // ndim
    Check(U32() == (has_null ? 1u : 0u));
    Check(U32() == element_oid);
    const uint32_t n = U32();
    Check(U32() == 1);  // lower bound
    return n;
  }
  // The next element's bytes, or nullopt for NULL.
  std::optional<std::string_view> Element() {
    const uint32_t n = U32();
    if (n == 0xffffffffu) return std::nullopt;
    return Take(n);
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  std::string bytes_;
  size_t pos_ = 0;
};

uint64_t BigEndian(std::string_view b) {
  uint64_t v = 0;
  for (char c : b) v = v << 8 | static_cast<uint8_t>(c);
  return v;
}

void TryArrays(std::string_view text) {
  const std::vector<std::string_view> items = Split(text, '\n');
  {
    ArrayReader r(TextArrayBinary(items));
    Check(r.Header(25, false) == items.size());
    for (std::string_view item : items) Check(r.Element() == item);
    Check(r.done());
  }
  // Numbers from the input's bytes, eight at a time; a chunk starting with
  // 0xff is NULL.
  std::vector<std::optional<int64_t>> ints;
  std::vector<std::optional<uint32_t>> xids;
  std::vector<std::optional<Tid>> tids;
  std::vector<bool> bools;
  for (size_t i = 0; i + 8 <= text.size(); i += 8) {
    const std::string_view chunk = text.substr(i, 8);
    const bool null = static_cast<uint8_t>(chunk[0]) == 0xff;
    const uint64_t v = BigEndian(chunk);
    ints.push_back(null ? std::nullopt : std::optional<int64_t>(static_cast<int64_t>(v)));
    xids.push_back(null ? std::nullopt : std::optional<uint32_t>(static_cast<uint32_t>(v)));
    tids.push_back(
        null ? std::nullopt
             : std::optional<Tid>(Tid{static_cast<uint32_t>(v >> 16), static_cast<uint16_t>(v)}));
    bools.push_back(v & 1);
  }
  auto any_null = [&] {
    for (const auto& v : ints) {
      if (!v) return true;
    }
    return false;
  };
  {
    ArrayReader r(IntArrayBinary(ints));
    Check(r.Header(20, any_null()) == ints.size());
    for (const auto& v : ints) {
      auto e = r.Element();
      Check(e.has_value() == v.has_value());
      if (v) Check(e->size() == 8 && static_cast<int64_t>(BigEndian(*e)) == *v);
    }
    Check(r.done());
  }
  {
    ArrayReader r(XidArrayBinary(xids));
    Check(r.Header(28, any_null()) == xids.size());
    for (const auto& v : xids) {
      auto e = r.Element();
      Check(e.has_value() == v.has_value());
      if (v) Check(e->size() == 4 && BigEndian(*e) == *v);
    }
    Check(r.done());
  }
  {
    ArrayReader r(TidArrayBinary(tids));
    Check(r.Header(27, any_null()) == tids.size());
    for (const auto& v : tids) {
      auto e = r.Element();
      Check(e.has_value() == v.has_value());
      if (v) {
        Check(e->size() == 6 && BigEndian(e->substr(0, 4)) == v->block &&
              BigEndian(e->substr(4)) == v->offset);
      }
    }
    Check(r.done());
  }
  {
    ArrayReader r(BoolArrayBinary(bools));
    Check(r.Header(16, false) == bools.size());
    for (bool b : bools) Check(r.Element() == std::string_view(b ? "\x01" : "\x00", 1));
    Check(r.done());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  TryFenceVersion(text);
  TryRanges(text);
  TryArrays(text);
  return 0;
}
