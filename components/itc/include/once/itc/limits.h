// File: limits.h
//
// The named limits of the itc component. Every decoder and every operation
// that can deepen a tree enforces them, so that no accepted value can make a
// later operation exhaust the stack or memory.
//
//   if (bytes.size() > once::itc::kEncodedBytesMax) ...  // Decode refuses it

#pragma once

#include <cstddef>
#include <cstdint>

namespace once::itc {

// Deepest node of any party or version tree (the root has depth 0). Decoders
// and the text parser reject deeper trees (kLimitExceeded); Fork refuses to
// create one. Operations recurse at most this deep.
inline constexpr uint32_t kTreeDepthMax = 4096;

// Largest encoded party, version or clock that a decoder reads
// (kLimitExceeded beyond it).
inline constexpr size_t kEncodedBytesMax = size_t{1} << 22;

// Longest text a text parser reads (kLimitExceeded beyond it).
inline constexpr size_t kTextBytesMax = size_t{1} << 22;

}  // namespace once::itc
