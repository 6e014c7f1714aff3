// File: packed_json.h
//
// Packed JSON: the memory store's form of a payload at rest. One byte string
// a log instead of a tree of heap blocks an event: a tree's blocks (every
// object, member and string) were most of what an append allocated and kept,
// each fetched from the allocator's shared lists (BENCHMARKS.md, "Issue 20:
// payloads packed at rest, shipped").
//
//   std::string bytes;
//   PackJson(payload, bytes);                          // appends
//   Result<Json> back = UnpackJson(bytes, depth_max);  // == payload, type for type
//
// The format (varint: LEB128, minimal, at most 10 bytes):
//   value := tag:u8 body
//   tag 0 null | 1 false | 2 true
//       3 integer  zigzag varint (number_integer)
//       4 unsigned varint        (number_unsigned)
//       5 float    8 bytes, little-endian (number_float, the double's bits)
//       6 string   varint length, bytes
//       7 array    varint count, value*
//       8 object   varint count, (varint key length, key bytes, value)*,
//                  keys strictly ascending (the order a Json object keeps)
//       9 binary   varint length, bytes, u8 has_subtype (0 or 1),
//                  [varint subtype]
//      10 discarded
// Every value round-trips with its type: an unsigned 17 stays unsigned, a
// float stays a float, NaN keeps its bits. Strings are bytes (the store
// checked them before it packed them).
//
// UnpackJson refuses anything PackJson cannot have written (kCorruption):
// truncation, trailing bytes, an unknown tag, a non-minimal varint, keys out
// of order, containers nested deeper than depth_max. The store reads only
// bytes it packed itself; the checks are for a fuzzer
// (fuzz/packed_json_fuzz.cc) and for a bug, never for a user.
//
// Threads: pure; any thread.

#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "once/base/result.h"
#include "once/base/varint.h"
#include "once/events/envelope.h"

namespace once::store::internal {

// Appends the packed form of `json` to `out`. Recursive: `json` must be no
// deeper than the store's json_depth_max (CheckAppend saw to that).
void PackJson(const events::Json& json, std::string& out);

// A signed integer's varint form (zigzag: 0, -1, 1, -2 ... as 0, 1, 2, 3 ...).
inline uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}

// The format's tags.
enum PackedTag : uint8_t {
  kPackedNull = 0,
  kPackedFalse = 1,
  kPackedTrue = 2,
  kPackedInteger = 3,
  kPackedUnsigned = 4,
  kPackedFloat = 5,
  kPackedString = 6,
  kPackedArray = 7,
  kPackedObject = 8,
  kPackedBinary = 9,
  kPackedDiscarded = 10,
};

// The packed form written a value at a time, in the order of a walk of the
// tree: a container's header (its count), then its members. PackJson is
// this writer over a whole tree; CheckAndPackAppend (validate.h) drives it
// from the walk that measures a payload, so that checking and packing read
// the tree once. Bytes gather in a small buffer of the writer's own and
// reach `out` a buffer at a time (Flush, and the destructor): a push_back or
// append on the string for every tag, varint and key was most of what
// packing cost.
class PackWriter {
 public:
  explicit PackWriter(std::string& out) : out_(out) {}
  ~PackWriter() { Flush(); }
  PackWriter(const PackWriter&) = delete;
  PackWriter& operator=(const PackWriter&) = delete;

  void Null() { Put(kPackedNull); }
  void Bool(bool b) { Put(b ? kPackedTrue : kPackedFalse); }
  void Integer(int64_t v) {
    Put(kPackedInteger);
    PutVarint(ZigZag(v));
  }
  void Unsigned(uint64_t v) {
    Put(kPackedUnsigned);
    PutVarint(v);
  }
  void String(std::string_view s) {
    Put(kPackedString);
    PutBytes(s);
  }
  void Array(size_t count) {  // then `count` values
    Put(kPackedArray);
    PutVarint(count);
  }
  void Object(size_t count) {  // then `count` Key and value pairs, keys ascending
    Put(kPackedObject);
    PutVarint(count);
  }
  void Key(std::string_view key) { PutBytes(key); }
  // A float, a binary or a discarded value (no container).
  void Scalar(const events::Json& json);
  // Everything written so far is in `out`.
  void Flush() {
    out_.append(buffer_, used_);
    used_ = 0;
  }

 private:
  static constexpr size_t kBufferBytes = 256;
  void Room(size_t n) {
    if (used_ + n > kBufferBytes) Flush();
  }
  void Put(uint8_t byte) {
    Room(1);
    buffer_[used_++] = static_cast<char>(byte);
  }
  // The buffer's free end as a push_back container, for AppendVarint.
  struct BufferEnd {
    using value_type = char;
    char* at;
    void push_back(char c) { *at++ = c; }
  };
  void PutVarint(uint64_t v) {
    Room(kVarintBytesMax);
    BufferEnd end{buffer_ + used_};
    AppendVarint(end, v);
    used_ = static_cast<size_t>(end.at - buffer_);
  }
  void PutBytes(std::string_view bytes) {  // length-prefixed
    PutVarint(bytes.size());
    if (bytes.empty()) return;              // an empty binary's data() is null: no memcpy from it
    if (bytes.size() > kBufferBytes / 2) {  // a long one goes straight through
      Flush();
      out_.append(bytes);
      return;
    }
    Room(bytes.size());
    std::memcpy(buffer_ + used_, bytes.data(), bytes.size());
    used_ += bytes.size();
  }

  std::string& out_;
  size_t used_ = 0;
  char buffer_[kBufferBytes];
};

// The value `bytes` holds (exactly one, nothing after it).
Result<events::Json> UnpackJson(std::string_view bytes, size_t depth_max);

}  // namespace once::store::internal
