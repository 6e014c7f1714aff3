#include "once/store/validate.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "once/events/json_text.h"
#include "once/events/kernel_payload.h"
#include "packed_json.h"

namespace once::store {
namespace {

// Whether every byte of s lies in [lo, hi] (1 <= lo <= hi < 0x80): eight
// bytes at a time, then the tail without branches. In a word, a byte below
// lo sets its high bit in (x - lo * ones) & ~x and a byte above hi sets it
// in x + (0x7f - hi) * ones; a borrow or carry only crosses from a byte that
// is itself out of range, so "any byte" is exact.
bool AllInRange(std::string_view s, uint8_t lo, uint8_t hi) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  size_t i = 0;
  uint64_t out = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t x;
    std::memcpy(&x, s.data() + i, sizeof x);
    out |= ((x - kOnes * lo) & ~x) | (x + kOnes * (0x7f - hi)) | x;
  }
  bool in = (out & kHigh) == 0;
  for (; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    in &= c >= lo && c <= hi;
  }
  return in;
}

// Returns false on an invalid UTF-8 sequence or a control character.
bool IsCleanUtf8(std::string_view s) {
  if (AllInRange(s, 0x20, 0x7e)) return true;  // printable ASCII: nearly every id
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra = c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : -1;
    if (extra < 0 || i + static_cast<size_t>(extra) >= s.size()) return false;
    uint32_t cp = c & (0x3f >> extra);
    for (int k = 1; k <= extra; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3f);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    if (cp >= 0x80 && cp < 0xa0) return false;  // C1 controls
    i += extra + 1;
  }
  return true;
}

size_t DecimalDigits(uint64_t v) {
  size_t n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

// Validates one event's place, id, kind and metadata shape (EncodeAppend's
// per-event checks before serialization).
Status CheckEventShape(const AppendRequest& req, size_t i, int64_t seq, const Limits& limits) {
  const Envelope& e = req.events[i];
  if (e.sequence != 0 && e.sequence != seq) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "event " + std::to_string(i) + " carries sequence " +
                         std::to_string(e.sequence) + ", its place is " + std::to_string(seq),
                     req.execution_id);
  }
  if (!e.execution_id.empty() && e.execution_id != req.execution_id) {
    return MakeError(ErrorCode::kInvalidArgument, "event names another execution",
                     req.execution_id);
  }
  // A kernel kind's name was checked when its table was built; only its
  // length can meet a configured limit.
  if (!e.kind.interned() || e.kind.size() > limits.kind_bytes_max) {
    ONCE_RETURN_IF_ERROR(ValidateKind(e.kind, limits));
  }
  if (std::optional<std::string_view> problem = e.metadata.Problem()) {
    return MakeError(ErrorCode::kInvalidArgument, std::string(*problem), req.execution_id);
  }
  return CheckKernelPayload(e, req.execution_id);
}

bool EventDepthWithin(const Envelope& e, const Limits& limits) {
  return events::JsonDepthWithin(e.payload, limits.json_depth_max) &&
         events::JsonDepthWithin(e.metadata.extra, limits.json_depth_max);
}

// Why an event that cannot be serialized is refused: a value nested deeper
// than json_depth_max (a limit), else a string that is not UTF-8.
std::unexpected<Error> UnserializableEvent(const AppendRequest& req, const Envelope& e,
                                           const Limits& limits) {
  if (!EventDepthWithin(e, limits)) {
    return JsonDepthError("a payload or metadata", req.execution_id, limits.json_depth_max);
  }
  return MakeError(ErrorCode::kInvalidArgument, "unserializable JSON: a string is not UTF-8",
                   req.execution_id);
}

// The request-level checks both EncodeAppend and CheckAppend start with.
Status CheckRequestShape(const AppendRequest& req, const Limits& limits) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(req.execution_id, limits));
  if (req.events.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "append has no events", req.execution_id);
  }
  if (req.events.size() > limits.batch_events_max) {
    return LimitError("batch_events_max", static_cast<int64_t>(req.events.size()),
                      static_cast<int64_t>(limits.batch_events_max), req.execution_id);
  }
  if (req.expected_next < 1) {
    return MakeError(ErrorCode::kInvalidArgument, "expected_next must be >= 1", req.execution_id);
  }
  if (req.fence && *req.fence < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "fence must be >= 0", req.execution_id);
  }
  if (!req.owner.empty()) ONCE_RETURN_IF_ERROR(ValidateOwner(req.owner, limits));
  return Ok();
}

// Adds the length of the literal of `s` to n; false when s is not UTF-8.
bool AddStringSize(std::string_view s, size_t& n) {
  std::optional<size_t> m = events::JsonStringLiteralSize(s);
  if (!m) return false;
  n += *m;
  return true;
}

// A walk that only measures (SerializedJsonSize): the packing calls of
// AddJsonSize do nothing.
struct NoPack {
  void Null() {}
  void Bool(bool) {}
  void Integer(int64_t) {}
  void Unsigned(uint64_t) {}
  void String(std::string_view) {}
  void Array(size_t) {}
  void Object(size_t) {}
  void Key(std::string_view) {}
  void Scalar(const Json&) {}
  void PayloadEnd() {}
};

// A walk that packs what it measures (CheckAndPackAppend), each payload's
// end recorded.
class PackPayloads : public internal::PackWriter {
 public:
  PackPayloads(std::string& packed, std::vector<size_t>& payload_end)
      : PackWriter(packed), packed_(packed), payload_end_(payload_end) {}
  void PayloadEnd() {
    Flush();
    payload_end_.push_back(packed_.size());
  }

 private:
  std::string& packed_;
  std::vector<size_t>& payload_end_;
};

// Adds the length of json.dump() to n, handing each value to `sink` on the
// way (NoPack, PackPayloads); false when dump() would throw, or when a
// container lies more than depth_left levels down (the walk stops there: it
// never recurses deeper than that).
template <class Sink>
bool AddJsonSize(const Json& json, size_t& n, size_t depth_left, Sink& sink) {
  switch (json.type()) {
    case Json::value_t::null:
      n += 4;
      sink.Null();
      return true;
    case Json::value_t::boolean: {
      const bool b = json.get<bool>();
      n += b ? 4 : 5;
      sink.Bool(b);
      return true;
    }
    case Json::value_t::number_integer: {
      int64_t v = json.get<int64_t>();
      uint64_t magnitude = v < 0 ? ~static_cast<uint64_t>(v) + 1 : static_cast<uint64_t>(v);
      n += DecimalDigits(magnitude) + (v < 0 ? 1 : 0);
      sink.Integer(v);
      return true;
    }
    case Json::value_t::number_unsigned:
      n += DecimalDigits(json.get<uint64_t>());
      sink.Unsigned(json.get<uint64_t>());
      return true;
    case Json::value_t::string: {
      const std::string& s = json.get_ref<const std::string&>();
      if (!AddStringSize(s, n)) return false;
      sink.String(s);
      return true;
    }
    case Json::value_t::array: {
      if (depth_left == 0) return false;
      const auto& array = json.get_ref<const Json::array_t&>();
      n += array.empty() ? 2 : 1 + array.size();  // brackets, commas
      sink.Array(array.size());
      for (const Json& v : array) {
        if (!AddJsonSize(v, n, depth_left - 1, sink)) return false;
      }
      return true;
    }
    case Json::value_t::object: {
      if (depth_left == 0) return false;
      const auto& object = json.get_ref<const Json::object_t&>();
      n += object.empty() ? 2 : 1 + 2 * object.size();  // braces, commas, colons
      sink.Object(object.size());
      for (const auto& [key, value] : object) {
        if (!AddStringSize(key, n)) return false;
        sink.Key(key);
        if (!AddJsonSize(value, n, depth_left - 1, sink)) return false;
      }
      return true;
    }
    default:
      break;  // floats (shortest round-trip form), binary, discarded: rare
  }
  try {
    n += json.dump().size();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  sink.Scalar(json);
  return true;
}

// CheckAppend, its payloads handed to `sink` as they are measured.
template <class Sink>
Result<CheckedAppend> CheckAppendWith(const AppendRequest& req, const Limits& limits,
                                      const Clock& clock, Sink& sink) {
  ONCE_RETURN_IF_ERROR(CheckRequestShape(req, limits));
  CheckedAppend out;
  for (size_t i = 0; i < req.events.size(); ++i) {
    const Envelope& e = req.events[i];
    ONCE_RETURN_IF_ERROR(
        CheckEventShape(req, i, req.expected_next + static_cast<int64_t>(i), limits));
    size_t payload = 0;
    const bool measured = AddJsonSize(e.payload, payload, limits.json_depth_max, sink);
    std::optional<size_t> metadata = SerializedMetadataSize(e.metadata, limits.json_depth_max);
    if (!measured || !metadata) return UnserializableEvent(req, e, limits);
    sink.PayloadEnd();
    size_t bytes = payload + *metadata;
    if (bytes > limits.event_bytes_max) {
      return LimitError("event_bytes_max", static_cast<int64_t>(bytes),
                        static_cast<int64_t>(limits.event_bytes_max), req.execution_id);
    }
    out.bytes += bytes;
    if (e.time_ms == 0 && out.now_ms == 0) out.now_ms = clock.NowUnixMillis();
  }
  ONCE_RETURN_IF_ERROR(CheckBatchBytes(out.bytes, limits));
  out.run_row = RunRowChangeOf(req.events);
  return out;
}

}  // namespace

std::optional<size_t> SerializedJsonSize(const Json& json, size_t depth_max) {
  size_t n = 0;
  NoPack measure_only;
  if (!AddJsonSize(json, n, depth_max, measure_only)) return std::nullopt;
  return n;
}

std::optional<size_t> SerializedMetadataSize(const events::Metadata& m, size_t depth_max) {
  size_t n = 2;  // braces
  size_t members = 0;
  if (m.fence != 0) {
    n += 8 + DecimalDigits(static_cast<uint64_t>(m.fence));  // "fence":N (Problem(): fence >= 0)
    ++members;
  }
  if (m.kernel) {
    n += 13;  // "kernel":true
    ++members;
  }
  if (m.extra.is_object() && !m.extra.empty()) {
    std::optional<size_t> extra = SerializedJsonSize(m.extra, depth_max);
    if (!extra) return std::nullopt;
    n += *extra - 2 - (m.extra.size() - 1);  // its members, without its braces and commas
    members += m.extra.size();
  }
  if (members > 1) n += members - 1;  // commas
  return n;
}

Status CheckFirstEvent(std::string_view execution_id, const Envelope& e, const Limits& limits) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(execution_id, limits));
  if (!e.kind.interned() || e.kind.size() > limits.kind_bytes_max) {
    ONCE_RETURN_IF_ERROR(ValidateKind(e.kind, limits));
  }
  if (std::optional<std::string_view> problem = e.metadata.Problem()) {
    return MakeError(ErrorCode::kInvalidArgument, std::string(*problem), std::string(execution_id));
  }
  ONCE_RETURN_IF_ERROR(CheckKernelPayload(e, execution_id));
  std::optional<size_t> payload = SerializedJsonSize(e.payload, limits.json_depth_max);
  std::optional<size_t> metadata = SerializedMetadataSize(e.metadata, limits.json_depth_max);
  if (!payload || !metadata) {
    if (!EventDepthWithin(e, limits)) {
      return JsonDepthError("a payload or metadata", std::string(execution_id),
                            limits.json_depth_max);
    }
    return MakeError(ErrorCode::kInvalidArgument, "unserializable JSON: a string is not UTF-8",
                     std::string(execution_id));
  }
  size_t bytes = *payload + *metadata;
  if (bytes > limits.event_bytes_max) {
    return LimitError("event_bytes_max", static_cast<int64_t>(bytes),
                      static_cast<int64_t>(limits.event_bytes_max), std::string(execution_id));
  }
  return Ok();
}

Result<CheckedAppend> CheckAppend(const AppendRequest& req, const Limits& limits,
                                  const Clock& clock) {
  NoPack measure_only;
  return CheckAppendWith(req, limits, clock, measure_only);
}

Result<CheckedAppend> CheckAndPackAppend(const AppendRequest& req, const Limits& limits,
                                         const Clock& clock, std::string& packed,
                                         std::vector<size_t>& payload_end) {
  packed.clear();
  payload_end.clear();
  PackPayloads sink(packed, payload_end);
  return CheckAppendWith(req, limits, clock, sink);
}

std::unexpected<Error> JsonDepthError(std::string_view what, std::string subject, size_t depth_max,
                                      std::string limit) {
  return MakeError(
      ErrorCode::kLimitExceeded,
      std::string(what) + " nests more than " + std::to_string(depth_max) + " containers deep",
      std::move(subject),
      LimitDetail{std::move(limit), static_cast<int64_t>(depth_max) + 1,
                  static_cast<int64_t>(depth_max)});
}

Status CheckJsonDepth(const AppendRequest& req, const Limits& limits) {
  for (const Envelope& e : req.events) {
    if (!EventDepthWithin(e, limits)) {
      return JsonDepthError("a payload or metadata", req.execution_id, limits.json_depth_max);
    }
  }
  return Ok();
}

Status ValidateExecutionId(std::string_view id, const Limits& limits) {
  if (id.empty()) return MakeError(ErrorCode::kInvalidArgument, "execution id is empty");
  if (id.size() > limits.execution_id_bytes_max) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "execution id is " + std::to_string(id.size()) + " bytes; at most " +
                         std::to_string(limits.execution_id_bytes_max),
                     std::string(id.substr(0, 64)),
                     LimitDetail{"execution_id_bytes_max", static_cast<int64_t>(id.size()),
                                 static_cast<int64_t>(limits.execution_id_bytes_max)});
  }
  if (!IsCleanUtf8(id)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "execution id has a control character or is not UTF-8");
  }
  return Ok();
}

Status ValidateKind(std::string_view kind, const Limits& limits) {
  if (kind.empty()) return MakeError(ErrorCode::kInvalidArgument, "event kind is empty");
  if (kind.size() > limits.kind_bytes_max) {
    return MakeError(ErrorCode::kInvalidArgument, "event kind is too long", {},
                     LimitDetail{"kind_bytes_max", static_cast<int64_t>(kind.size()),
                                 static_cast<int64_t>(limits.kind_bytes_max)});
  }
  if (!AllInRange(kind, 0x21, 0x7e)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "event kind must be printable ASCII without spaces");
  }
  return Ok();
}

Result<EncodedAppend> EncodeAppend(const AppendRequest& req, const Limits& limits,
                                   const Clock& clock) {
  ONCE_RETURN_IF_ERROR(CheckRequestShape(req, limits));
  EncodedAppend out;
  out.events.reserve(req.events.size());
  int64_t now_ms = 0;
  for (size_t i = 0; i < req.events.size(); ++i) {
    const Envelope& e = req.events[i];
    int64_t seq = req.expected_next + static_cast<int64_t>(i);
    ONCE_RETURN_IF_ERROR(CheckEventShape(req, i, seq, limits));
    EncodedEvent enc;
    enc.sequence = seq;
    enc.kind = e.kind.str();
    // Exactly dump()'s text, without its per-character output path; the
    // serializer recurses, so the depth is checked first.
    bool serialized = EventDepthWithin(e, limits) &&
                      events::AppendJsonText(e.payload, enc.payload_json) &&
                      events::AppendMetadataText(e.metadata, enc.metadata_json);
    if (!serialized) return UnserializableEvent(req, e, limits);
    size_t bytes = enc.payload_json.size() + enc.metadata_json.size();
    if (bytes > limits.event_bytes_max) {
      return LimitError("event_bytes_max", static_cast<int64_t>(bytes),
                        static_cast<int64_t>(limits.event_bytes_max), req.execution_id);
    }
    out.bytes += bytes;
    if (e.time_ms != 0) {
      enc.time_ms = e.time_ms;
    } else {
      if (now_ms == 0) now_ms = clock.NowUnixMillis();
      enc.time_ms = now_ms;
    }
    enc.answering = events::IsAnswering(e.kind, e.metadata);
    enc.suspends = e.kind.Is(events::KernelKind::kExecutionSuspended);
    out.answering |= enc.answering;
    out.suspends |= enc.suspends;
    out.events.push_back(std::move(enc));
  }
  ONCE_RETURN_IF_ERROR(CheckBatchBytes(out.bytes, limits));
  out.run_row = RunRowChangeOf(req.events);
  return out;
}

Status CheckBatchBytes(size_t bytes, const Limits& limits) {
  if (bytes > limits.batch_bytes_max) {
    return LimitError("batch_bytes_max", static_cast<int64_t>(bytes),
                      static_cast<int64_t>(limits.batch_bytes_max));
  }
  return Ok();
}

Status ValidateBatchShape(std::span<const AppendRequest> requests, const Limits& limits) {
  if (requests.size() > limits.batch_executions_max) {
    return LimitError("batch_executions_max", static_cast<int64_t>(requests.size()),
                      static_cast<int64_t>(limits.batch_executions_max));
  }
  size_t events = 0;
  std::unordered_set<std::string_view> seen;
  for (const auto& r : requests) {
    events += r.events.size();
    if (!seen.insert(r.execution_id).second) {
      return MakeError(ErrorCode::kInvalidArgument, "batch names an execution twice",
                       r.execution_id);
    }
  }
  if (events > limits.batch_events_max) {
    return LimitError("batch_events_max", static_cast<int64_t>(events),
                      static_cast<int64_t>(limits.batch_events_max));
  }
  return Ok();
}

Result<Envelope> DecodeRow(std::string_view execution_id, int64_t sequence, std::string kind,
                           std::string_view payload_json, std::string_view metadata_json,
                           int64_t time_ms) {
  Envelope e;
  e.execution_id = std::string(execution_id);
  e.sequence = sequence;
  e.kind = events::Kind::FromStored(std::move(kind));
  e.time_ms = time_ms;
  // events::ParseJson: what fits in int64_t reads back as number_integer, so
  // a stored value round-trips with its type.
  Result<Json> payload = events::ParseJson(payload_json);
  if (payload) e.payload = std::move(*payload);
  Result<events::Metadata> metadata = events::ParseMetadataText(metadata_json);
  if (metadata) e.metadata = std::move(*metadata);
  if (!payload || !metadata) {
    return MakeError(ErrorCode::kCorruption,
                     "stored event " + std::to_string(sequence) + " is not valid JSON",
                     std::string(execution_id));
  }
  return e;
}

std::unexpected<Error> SequenceConflict(std::string_view execution_id, int64_t expected,
                                        int64_t given) {
  return MakeError(
      ErrorCode::kSequenceConflict,
      "append at sequence " + std::to_string(given) + ", next is " + std::to_string(expected),
      std::string(execution_id), SequenceDetail{expected, given});
}

std::unexpected<Error> StaleFence(std::string_view execution_id, int64_t presented,
                                  int64_t current) {
  return MakeError(
      ErrorCode::kStaleFence,
      "fence " + std::to_string(presented) + " is older than " + std::to_string(current),
      std::string(execution_id), StaleFenceDetail{presented, current});
}

Status ValidateFenceIf(std::string_view id, FenceExpectation expect, const Limits& limits,
                       int64_t read_after) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits));
  if (expect.fence < 0 || expect.park_seq < 0 || read_after < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "fence, park_seq and read_after must be >= 0",
                     std::string(id));
  }
  if (!expect.owner.empty()) ONCE_RETURN_IF_ERROR(ValidateOwner(expect.owner, limits));
  if (expect.expected_owner && !expect.expected_owner->empty()) {
    ONCE_RETURN_IF_ERROR(ValidateOwner(*expect.expected_owner, limits));
  }
  return Ok();
}

Status ValidateOwner(std::string_view owner, const Limits& limits) {
  if (owner.empty() || owner.size() > limits.execution_id_bytes_max || !IsCleanUtf8(owner)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "an owner (node id) is 1 to " + std::to_string(limits.execution_id_bytes_max) +
                         " bytes of UTF-8 without control characters",
                     std::string(owner.substr(0, 64)));
  }
  return Ok();
}

RunRowChange RunRowChangeOf(std::span<const Envelope> events) {
  for (const Envelope& e : events) {
    std::optional<events::KernelKind> k =
        e.kind.interned() ? e.kind.interned() : events::ParseKernelKind(e.kind.view());
    if (k && EndsRun(*k)) return RunRowChange::kEnd;
  }
  return RunRowChange::kRun;
}

bool EndsRun(events::KernelKind kind) {
  return kind == events::KernelKind::kExecutionSuspended || events::Info(kind).terminal;
}

Status CheckKernelPayload(const Envelope& e, std::string_view execution_id) {
  std::optional<events::KernelKind> kind =
      e.kind.interned() ? e.kind.interned() : events::ParseKernelKind(e.kind.view());
  if (!kind) return Ok();
  if (std::optional<std::string> problem = events::KernelPayloadProblem(*kind, e.payload)) {
    std::string where = e.sequence > 0 ? " (sequence " + std::to_string(e.sequence) + ")" : "";
    return MakeError(ErrorCode::kInvalidArgument, *problem + where, std::string(execution_id));
  }
  return Ok();
}

std::string SqlQuotedList(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view name : names) {
    ONCE_CHECK_MSG(name.find('\'') == std::string_view::npos, "a kind name to quote has a quote");
    if (!out.empty()) out += ", ";
    out += '\'';
    out += name;
    out += '\'';
  }
  return out;
}

std::span<const std::string_view> EndingKindNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const events::KernelKindInfo& info : events::kKernelKinds) {
      if (info.terminal) out.push_back(info.name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }();
  return names;
}

bool IsEndingKind(std::string_view kind) {
  std::span<const std::string_view> names = EndingKindNames();
  return std::find(names.begin(), names.end(), kind) != names.end();
}

Status CheckDeleteEnded(std::span<const std::string> ids, const Limits& limits) {
  if (ids.size() > limits.delete_batch_executions_max) {
    return LimitError("delete_batch_executions_max", static_cast<int64_t>(ids.size()),
                      static_cast<int64_t>(limits.delete_batch_executions_max));
  }
  std::vector<std::string_view> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
    return MakeError(ErrorCode::kInvalidArgument, "DeleteEnded names an execution twice",
                     std::string(*dup));
  }
  return Ok();
}

std::unexpected<Error> NotEndedBy(std::string_view id, int64_t ended_ms_max) {
  return MakeError(ErrorCode::kNotFound,
                   "no ending event at or before " + std::to_string(ended_ms_max) + " ms",
                   std::string(id));
}

EndedPage EndedPageOf(std::vector<EndedExecution> found, size_t limit) {
  EndedPage page;
  if (found.size() > limit) {
    found.resize(limit);
    page.next_after = found.back().Place();
  }
  page.executions = std::move(found);
  return page;
}

Result<size_t> EndedPageLimit(size_t limit, const Limits& limits) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  return std::min(limit, limits.list_page_executions_max);
}

std::string_view CapabilityName(Capability c) {
  switch (c) {
    case Capability::kAcquireFence:
      return "AcquireFence";
    case Capability::kAcquireFenceIf:
      return "AcquireFenceIf";
    case Capability::kAppendIfUnchanged:
      return "AppendIfUnchanged";
    case Capability::kCopyPrefix:
      return "CopyPrefix";
    case Capability::kTruncatePrefixKeeping:
      return "TruncatePrefixKeeping";
    case Capability::kAcquireFenceIfReadTail:
      return "AcquireFenceIfReadTail";
    case Capability::kOwnership:
      return "Ownership";
    case Capability::kTransaction:
      return "Transaction";
    case Capability::kCount:
      break;
  }
  return "?";
}

std::vector<Result<AcquireWithTail>> EventStore::AcquireFencesIfReadTail(
    std::span<const AcquireIfRead> requests) {
  std::vector<Result<AcquireWithTail>> out;
  out.reserve(requests.size());
  for (const AcquireIfRead& r : requests) {
    out.push_back(AcquireFenceIfReadTail(r.execution_id, r.expect, r.read_after));
  }
  return out;
}

std::unexpected<Error> Unsupported(Capability c, std::string_view store_name) {
  return MakeError(ErrorCode::kUnsupported,
                   std::string(store_name) + " does not offer " + std::string(CapabilityName(c)));
}

}  // namespace once::store
