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
//     line: ord, sequence, kind, payload, metadata, time_ms). Every row is
//     handed to the read it names (or the group fails with kInternal), each
//     event either decodes (and re-encodes, as the store writes it, to text
//     that decodes to the same event) or is kCorruption.
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

void TryRanges(std::string_view text) {
  std::vector<std::string_view> lines = Split(text, '\n');
  std::vector<std::string_view> ids = Split(lines.front(), '\t');
  if (ids.size() > kRangesMax || lines.size() - 1 > kRowsMax) return;
  Ranges ranges;
  for (std::string_view id : ids) ranges.Add(id, 1, INT64_MAX, INT64_MAX);
  std::vector<std::vector<std::string_view>> rows;
  for (size_t l = 1; l < lines.size(); ++l) rows.push_back(Split(lines[l], '\t'));
  auto res = MakeTextResult(rows);
  if (!res) return;
  size_t calls = 0;
  Status status = DecodeRanges(res.get(), ranges, [&](size_t i, Result<Envelope> e) {
    Check(i < ranges.ids.size());
    const int row = static_cast<int>(calls++);
    Check(IntAt(res.get(), row, 0) == static_cast<int64_t>(i) + 1);
    if (!e) {
      Check(e.error().code == ErrorCode::kCorruption);
      return;
    }
    Check(e->execution_id == ranges.ids[i]);
    Check(e->sequence == IntAt(res.get(), row, 1) && e->time_ms == IntAt(res.get(), row, 5));
    Check(e->kind.view() == PQgetvalue(res.get(), row, 2));
    // As the store writes an event, and reads it back.
    std::string metadata;
    Check(events::AppendMetadataText(e->metadata, metadata));
    auto again = DecodeRow(e->execution_id, e->sequence, std::string(e->kind.view()),
                           e->payload.dump(), metadata, e->time_ms);
    Check(again && *again == *e);
  });
  if (!status) {
    Check(status.error().code == ErrorCode::kInternal);
  } else {
    Check(calls == rows.size());
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
