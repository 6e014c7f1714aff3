// File: limits.h
//
// The named limits of the gossip component. Every decoder and every session
// enforces them; crossing one is a kLimitExceeded error with a LimitDetail
// naming the limit, never a crash or an unbounded allocation.
//
//   if (payload.size() > once::gossip::kPayloadBytesMax) ...  // Send refuses it

#pragma once

#include <cstddef>
#include <cstdint>

namespace once::gossip {

// Bytes of one message's opaque payload (Send refuses more).
inline constexpr size_t kPayloadBytesMax = size_t{64} << 10;
// Bytes of one message's encoded version (Send refuses a tick that would pass
// it; a receiver refuses such a record).
inline constexpr size_t kVersionBytesMax = size_t{64} << 10;
// Bytes of an encoded ceiling or party in a greeting.
inline constexpr size_t kCeilingBytesMax = size_t{256} << 10;
// Operations in one atomic batch.
inline constexpr size_t kBatchOpsMax = 4096;
// Bytes of one frame body on the wire (the default of
// SessionOptions::frame_bytes_max, and the most any option may ask for).
inline constexpr size_t kFrameBytesMax = size_t{1} << 20;
// Smallest frame budget a session accepts (a record must always fit).
inline constexpr size_t kFrameBytesMin = size_t{256} << 10;
// Bytes of a persisted bookmark.
inline constexpr size_t kBookmarkBytesMax = size_t{1} << 20;

}  // namespace once::gossip
