// File: varint.h
//
// Varints as our binary formats write them (gossip frames, the memory
// store's packed payloads): LEB128, 7 bits a byte, low bits first, at most
// 10 bytes for 64 bits, and minimal (no trailing 0x00 continuation), so that
// every value has exactly one encoding.
//
//   AppendVarint(out, 300);                      // out: Bytes or std::string
//   VarintRead r = ReadVarint(bytes);            // r.problem: why it is not one
//   if (!r.problem) { use(r.value); bytes = bytes.subspan(r.bytes); }

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace once {

// The most bytes a varint of 64 bits takes.
inline constexpr size_t kVarintBytesMax = 10;

// Appends `v` to `out`, a container of bytes with push_back (Bytes,
// std::string).
template <class Out>
void AppendVarint(Out& out, uint64_t v) {
  using Byte = typename Out::value_type;
  while (v >= 0x80) {
    out.push_back(static_cast<Byte>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<Byte>(v));
}

// How many bytes AppendVarint writes for `v` (1 to 10).
inline size_t VarintBytes(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

// The varint at the front of `bytes` and how many bytes it took, or
// (problem set, the rest zero) "truncated", "varint overflows 64 bits" or
// "varint not minimal".
struct VarintRead {
  uint64_t value = 0;
  size_t bytes = 0;
  const char* problem = nullptr;
};

inline VarintRead ReadVarint(std::span<const uint8_t> bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const uint8_t b = bytes[i];
    const unsigned shift = static_cast<unsigned>(7 * i);
    if (shift == 63 && b > 1) return {.problem = "varint overflows 64 bits"};
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      if (b == 0 && i > 0) return {.problem = "varint not minimal"};
      return {.value = v, .bytes = i + 1};
    }
  }
  return {.problem = "truncated"};
}

}  // namespace once
