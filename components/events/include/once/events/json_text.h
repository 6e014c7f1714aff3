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

// Appends the string literal dump() writes for `s` (quotes and escapes) and
// returns true; false when `s` is not valid UTF-8.
bool AppendJsonStringLiteral(std::string_view s, std::string& out);

// The length of the string literal dump() writes for `s` (quotes and
// escapes), or nullopt when `s` is not valid UTF-8 (dump() would throw).
std::optional<size_t> JsonStringLiteralSize(std::string_view s);

// True when `s` is at most 16 bytes of plain ASCII (no control, quote,
// backslash or byte >= 0x80): its literal is itself in quotes. Inline, for
// the many short keys and values of a tree being sized or written.
inline constexpr std::array<bool, 256> kPlainJsonBytes = [] {
  std::array<bool, 256> t{};
  for (size_t c = 0x20; c < 0x80; ++c) t[c] = c != '"' && c != '\\';
  return t;
}();
inline bool IsShortPlainJsonString(std::string_view s) {
  if (s.size() > 16) return false;
  bool plain = true;
  for (char c : s) plain &= kPlainJsonBytes[static_cast<unsigned char>(c)];
  return plain;
}

}  // namespace once::events
