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
// create one. Operations recurse at most this deep, so the limit also bounds
// their stack: 1,024 levels fit a default 8 MiB thread stack with room to
// spare even with AddressSanitizer's larger frames (4,096 did not). A rack
// of 32 sleds forks to depth ~5; 1,024 is 2^-1024 of the interval.
inline constexpr uint32_t kTreeDepthMax = 1024;

// Largest encoded party, version or clock that a decoder reads
// (kLimitExceeded beyond it).
inline constexpr size_t kEncodedBytesMax = size_t{1} << 22;

// Longest text a text parser reads (kLimitExceeded beyond it).
inline constexpr size_t kTextBytesMax = size_t{1} << 22;

}  // namespace once::itc
