#include "packed_json.h"

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "once/base/varint.h"

namespace once::store::internal {
namespace {

using events::Json;

int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1)); }

// Reads packed values from the front of a byte string. The first problem
// sticks: ok() turns false and every later read returns a default.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}

  bool ok() const { return problem_ == nullptr; }
  const char* problem() const { return problem_; }
  bool done() const { return rest_.empty(); }
  void Fail(const char* problem) {
    if (problem_ == nullptr) problem_ = problem;
    rest_ = {};
  }

  uint8_t Byte() {
    if (rest_.empty()) {
      Fail("truncated");
      return 0;
    }
    const uint8_t b = static_cast<uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return b;
  }

  uint64_t Varint() {
    const VarintRead r =
        ReadVarint(std::span(reinterpret_cast<const uint8_t*>(rest_.data()), rest_.size()));
    if (r.problem != nullptr) {
      Fail(r.problem);
      return 0;
    }
    rest_.remove_prefix(r.bytes);
    return r.value;
  }

  std::string_view Bytes() {
    const uint64_t n = Varint();
    if (n > rest_.size()) {
      Fail("truncated");
      return {};
    }
    const std::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return out;
  }

  // A container's count: every element takes a byte at least, so a count
  // past what is left is refused before anything is reserved.
  uint64_t Count() {
    const uint64_t n = Varint();
    if (n > rest_.size()) Fail("a count is larger than the bytes left");
    return ok() ? n : 0;
  }

  double Double() {
    if (rest_.size() < sizeof(double)) {
      Fail("truncated");
      return 0;
    }
    uint64_t bits = 0;
    for (size_t i = 0; i < sizeof(bits); ++i) {
      bits |= uint64_t{static_cast<uint8_t>(rest_[i])} << (8 * i);
    }
    rest_.remove_prefix(sizeof(bits));
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    return d;
  }

 private:
  std::string_view rest_;
  const char* problem_ = nullptr;
};

Json ReadValue(Reader& in, size_t depth_left);

// depth_left >= 1 (ReadValue checked): how deep this container may still nest.
Json ReadArray(Reader& in, size_t depth_left) {
  Json out(Json::value_t::array);
  const uint64_t n = in.Count();
  auto& array = out.get_ref<Json::array_t&>();
  array.reserve(n);
  for (uint64_t i = 0; i < n && in.ok(); ++i) array.push_back(ReadValue(in, depth_left - 1));
  return out;
}

Json ReadObject(Reader& in, size_t depth_left) {
  Json out(Json::value_t::object);
  const uint64_t n = in.Count();
  auto& object = out.get_ref<Json::object_t&>();
  for (uint64_t i = 0; i < n && in.ok(); ++i) {
    const std::string_view key = in.Bytes();
    if (!object.empty() && !(std::string_view(object.rbegin()->first) < key)) {
      in.Fail("object keys are not in ascending order");
      break;
    }
    // Ascending keys: each goes at the end (a hint, no search).
    object.emplace_hint(object.end(), std::string(key), ReadValue(in, depth_left - 1));
  }
  return out;
}

Json ReadBinary(Reader& in) {
  const std::string_view bytes = in.Bytes();
  std::vector<uint8_t> content(bytes.begin(), bytes.end());
  const uint8_t has_subtype = in.Byte();
  if (has_subtype > 1) in.Fail("a binary's subtype flag is not 0 or 1");
  // Json::binary(container, subtype): a binary_t passed whole would take the
  // container overload and lose its subtype.
  if (has_subtype == 1) return Json::binary(std::move(content), in.Varint());
  return Json::binary(std::move(content));
}

Json ReadValue(Reader& in, size_t depth_left) {
  const uint8_t tag = in.Byte();
  if ((tag == kPackedArray || tag == kPackedObject) && depth_left == 0) {
    in.Fail("nested deeper than depth_max");
    return Json();
  }
  switch (tag) {
    case kPackedNull:
      return Json();
    case kPackedFalse:
      return Json(false);
    case kPackedTrue:
      return Json(true);
    case kPackedInteger:
      return Json(UnZigZag(in.Varint()));
    case kPackedUnsigned:
      return Json(in.Varint());
    case kPackedFloat:
      return Json(in.Double());
    case kPackedString:
      return Json(std::string(in.Bytes()));
    case kPackedArray:
      return ReadArray(in, depth_left);
    case kPackedObject:
      return ReadObject(in, depth_left);
    case kPackedBinary:
      return ReadBinary(in);
    case kPackedDiscarded:
      return Json(Json::value_t::discarded);
    default:
      in.Fail("an unknown tag");
      return Json();
  }
}

}  // namespace

void PackWriter::Scalar(const Json& json) {
  switch (json.type()) {
    case Json::value_t::number_float: {
      uint64_t bits;
      const double d = json.get<double>();
      std::memcpy(&bits, &d, sizeof(bits));
      Put(kPackedFloat);
      for (size_t i = 0; i < sizeof(bits); ++i) Put(static_cast<uint8_t>(bits >> (8 * i)));
      return;
    }
    case Json::value_t::binary: {
      const auto& binary = json.get_ref<const Json::binary_t&>();
      Put(kPackedBinary);
      PutBytes(std::string_view(reinterpret_cast<const char*>(binary.data()), binary.size()));
      Put(binary.has_subtype() ? 1 : 0);
      if (binary.has_subtype()) PutVarint(binary.subtype());
      return;
    }
    case Json::value_t::discarded:
      return Put(kPackedDiscarded);
    default:
      ONCE_CHECK_MSG(false, "PackWriter::Scalar takes a float, a binary or a discarded value");
  }
}

namespace {

void Pack(const Json& json, PackWriter& w) {
  switch (json.type()) {
    case Json::value_t::null:
      return w.Null();
    case Json::value_t::boolean:
      return w.Bool(json.get<bool>());
    case Json::value_t::number_integer:
      return w.Integer(json.get<int64_t>());
    case Json::value_t::number_unsigned:
      return w.Unsigned(json.get<uint64_t>());
    case Json::value_t::string:
      return w.String(json.get_ref<const std::string&>());
    case Json::value_t::array: {
      const auto& array = json.get_ref<const Json::array_t&>();
      w.Array(array.size());
      for (const Json& v : array) Pack(v, w);
      return;
    }
    case Json::value_t::object: {
      const auto& object = json.get_ref<const Json::object_t&>();
      w.Object(object.size());
      for (const auto& [key, value] : object) {
        w.Key(key);
        Pack(value, w);
      }
      return;
    }
    default:
      return w.Scalar(json);
  }
}

}  // namespace

void PackJson(const Json& json, std::string& out) {
  PackWriter w(out);
  Pack(json, w);
}

Result<Json> UnpackJson(std::string_view bytes, size_t depth_max) {
  Reader in(bytes);
  Json out = ReadValue(in, depth_max);
  if (in.ok() && !in.done()) in.Fail("bytes after the value");
  if (!in.ok()) {
    return MakeError(ErrorCode::kCorruption, std::string("packed JSON: ") + in.problem());
  }
  return out;
}

}  // namespace once::store::internal
