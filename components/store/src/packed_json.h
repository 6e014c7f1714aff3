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
#include <string>
#include <string_view>

#include "once/base/result.h"
#include "once/events/envelope.h"

namespace once::store::internal {

// Appends the packed form of `json` to `out`. Recursive: `json` must be no
// deeper than the store's json_depth_max (CheckAppend saw to that).
void PackJson(const events::Json& json, std::string& out);

// The value `bytes` holds (exactly one, nothing after it).
Result<events::Json> UnpackJson(std::string_view bytes, size_t depth_max);

}  // namespace once::store::internal
