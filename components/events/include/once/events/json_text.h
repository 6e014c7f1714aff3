// File: json_text.h
//
// Compact JSON text, byte for byte what nlohmann's json.dump() writes
// (no indent, UTF-8 kept as is, strict UTF-8), without its per-character
// output path: stores serialize every payload and metadata object they
// write, and dump()'s string escaping was their largest client-side cost.
//
//   std::string text;
//   if (!events::AppendJsonText(envelope.payload, text)) { /* a string is not UTF-8 */ }

#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "once/events/envelope.h"

namespace once::events {

// Appends json.dump() to `out` and returns true; returns false when dump()
// would throw (a string or key that is not valid UTF-8), leaving `out` with
// an unspecified tail the caller discards.
bool AppendJsonText(const Json& json, std::string& out);

// Whether no container in `json` lies more than depth_max containers deep
// (a scalar is at depth 0, [] and {} at 1, [[]] at 2). JSON trees are
// copied, sized, serialized and compared by recursive code (nlohmann's own
// and ours), and a tree deeper than a thread's stack allows crashes the
// process: 300,000 nested arrays are 600 KB of JSON. The walk goes at most
// depth_max + 1 levels down, so it is safe on any tree.
bool JsonDepthWithin(const Json& json, size_t depth_max);

// Appends the string literal dump() writes for `s` (quotes and escapes) and
// returns true; false when `s` is not valid UTF-8.
bool AppendJsonStringLiteral(std::string_view s, std::string& out);

// Plain bytes stand for themselves in a JSON string literal: ASCII that is
// not a control, a quote or a backslash.
inline constexpr std::array<bool, 256> kPlainJsonBytes = [] {
  std::array<bool, 256> t{};
  for (size_t c = 0x20; c < 0x80; ++c) t[c] = c != '"' && c != '\\';
  return t;
}();

namespace internal {
std::optional<size_t> JsonStringLiteralSizeSlow(std::string_view s);
}  // namespace internal

// The length of the string literal dump() writes for `s` (quotes and
// escapes), or nullopt when `s` is not valid UTF-8 (dump() would throw).
// Inline for a string of at most 16 plain bytes (most keys and many values
// of a tree being sized): one table test a byte, no call.
inline std::optional<size_t> JsonStringLiteralSize(std::string_view s) {
  if (s.size() <= 16) {
    bool plain = true;
    for (char c : s) plain &= kPlainJsonBytes[static_cast<unsigned char>(c)];
    if (plain) return s.size() + 2;
  }
  return internal::JsonStringLiteralSizeSlow(s);
}

}  // namespace once::events
