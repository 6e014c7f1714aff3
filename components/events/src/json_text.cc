#include "once/events/json_text.h"

#include <array>
#include <cstdint>
#include <cstring>

namespace once::events {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (a byte >= 0x80), or
// 0 when it is not one (nlohmann's strict rules: no overlong forms, no
// surrogates, nothing above U+10FFFF, nothing cut off).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  auto c1 = static_cast<unsigned char>(s[i + 1]);
  if (c1 < lo || c1 > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  }
  return len;
}

void AppendEscape(unsigned char c, std::string& out) {
  switch (c) {
    case '"':
      out += "\\\"";
      return;
    case '\\':
      out += "\\\\";
      return;
    case '\b':
      out += "\\b";
      return;
    case '\t':
      out += "\\t";
      return;
    case '\n':
      out += "\\n";
      return;
    case '\f':
      out += "\\f";
      return;
    case '\r':
      out += "\\r";
      return;
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      char buf[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
      out.append(buf, sizeof buf);
    }
  }
}

// True when none of the 8 bytes at p needs escaping or is outside ASCII
// (no byte < 0x20, '"', '\\' or >= 0x80). Word-at-a-time: a byte below k
// sets its high bit in (x - k * ones) & ~x, and a borrow only crosses into a
// higher byte from a byte that is itself below k, so "any" is exact.
bool EightPlain(const char* p) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  uint64_t x;
  std::memcpy(&x, p, sizeof x);
  uint64_t control = (x - kOnes * 0x20) & ~x;
  uint64_t quote = x ^ (kOnes * '"');
  uint64_t backslash = x ^ (kOnes * '\\');
  quote = (quote - kOnes) & ~quote;
  backslash = (backslash - kOnes) & ~backslash;
  return ((control | quote | backslash | x) & kHigh) == 0;
}

// How many bytes each ASCII byte takes inside a JSON string literal; 0 for
// the bytes of a multi-byte UTF-8 sequence (>= 0x80), which take themselves.
constexpr std::array<uint8_t, 256> kLiteralBytes = [] {
  std::array<uint8_t, 256> t{};
  for (size_t c = 0; c < 0x80; ++c) t[c] = c < 0x20 ? 6 : 1;
  for (unsigned char c : {'\b', '\t', '\n', '\f', '\r', '"', '\\'}) t[c] = 2;
  return t;
}();

// The length of a prefix of s that is plain ASCII: s itself when all of it
// is (whole words tested at once, then the tail shorter than a word a byte
// at a time without branches, so a short key takes a few instructions),
// else a multiple of 8 at or before the first byte that is not plain.
size_t PlainPrefix(std::string_view s) {
  size_t i = 0;
  while (i + 8 <= s.size() && EightPlain(s.data() + i)) i += 8;
  if (s.size() - i >= 8) return i;
  bool plain = true;
  for (size_t k = i; k < s.size(); ++k) {
    plain &= kPlainJsonBytes[static_cast<unsigned char>(s[k])];
  }
  return plain ? s.size() : i;
}

// Copies runs that need no escaping in one append each; plain ASCII is
// skipped 8 bytes at a time.
bool AppendStringLiteral(std::string_view s, std::string& out) {
  out += '"';
  size_t run = 0;  // start of the pending unescaped run
  size_t i = PlainPrefix(s);
  while (i < s.size()) {
    if (i + 8 <= s.size() && EightPlain(s.data() + i)) {
      i += 8;
      continue;
    }
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      size_t len = Utf8SequenceLength(s, i);
      if (len == 0) return false;
      i += len;
      continue;
    }
    out.append(s.data() + run, i - run);
    AppendEscape(c, out);
    run = ++i;
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
  return true;
}

}  // namespace

bool AppendJsonStringLiteral(std::string_view s, std::string& out) {
  return AppendStringLiteral(s, out);
}

std::optional<size_t> internal::JsonStringLiteralSizeSlow(std::string_view s) {
  // ASCII (nearly every key and most values): one table add per byte, no
  // branch; anything else takes the byte-by-byte path below.
  size_t i = PlainPrefix(s);
  if (i == s.size()) return s.size() + 2;
  size_t n = 2 + i;
  bool ascii = true;
  while (i < s.size()) {
    if (i + 8 <= s.size() && EightPlain(s.data() + i)) {
      n += 8;
      i += 8;
      continue;
    }
    auto c = static_cast<unsigned char>(s[i++]);
    n += kLiteralBytes[c];
    ascii &= c < 0x80;
  }
  if (ascii) return n;
  n = 2;
  i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t len = Utf8SequenceLength(s, i);
      if (len == 0) return std::nullopt;
      n += len;
      i += len;
      continue;
    }
    if (c == '"' || c == '\\') {
      n += 2;
    } else if (c < 0x20) {
      n += (c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r') ? 2 : 6;
    } else {
      n += 1;
    }
    ++i;
  }
  return n;
}

bool JsonDepthWithin(const Json& json, size_t depth_max) {
  // The containers themselves, not Json's iterators: this runs on every
  // input, step value and result a runtime takes.
  switch (json.type()) {
    case Json::value_t::array:
      if (depth_max == 0) return false;
      for (const Json& v : json.get_ref<const Json::array_t&>()) {
        if (v.is_structured() && !JsonDepthWithin(v, depth_max - 1)) return false;
      }
      return true;
    case Json::value_t::object:
      if (depth_max == 0) return false;
      for (const auto& [key, v] : json.get_ref<const Json::object_t&>()) {
        if (v.is_structured() && !JsonDepthWithin(v, depth_max - 1)) return false;
      }
      return true;
    default:
      return true;
  }
}

bool AppendJsonText(const Json& json, std::string& out) {
  switch (json.type()) {
    case Json::value_t::null:
      out += "null";
      return true;
    case Json::value_t::boolean:
      out += json.get<bool>() ? "true" : "false";
      return true;
    case Json::value_t::number_integer:
      out += std::to_string(json.get<int64_t>());
      return true;
    case Json::value_t::number_unsigned:
      out += std::to_string(json.get<uint64_t>());
      return true;
    case Json::value_t::string:
      return AppendStringLiteral(json.get_ref<const std::string&>(), out);
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& v : json) {
        if (!first) out += ',';
        first = false;
        if (!AppendJsonText(v, out)) return false;
      }
      out += ']';
      return true;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = json.begin(); it != json.end(); ++it) {
        if (!first) out += ',';
        first = false;
        if (!AppendStringLiteral(it.key(), out)) return false;
        out += ':';
        if (!AppendJsonText(it.value(), out)) return false;
      }
      out += '}';
      return true;
    }
    default:
      break;  // floats (shortest round-trip form), binary, discarded: dump() itself
  }
  try {
    out += json.dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace once::events
