// File: limits.h
//
// The named limits of the rack component. Every decoder, every queue and every
// table of the sled core enforces them with a kLimitExceeded error whose
// LimitDetail names the limit (for example "command_bytes_max").
//
//   if (command.size() > once::rack::kCommandBytesMax) ...  // JobStart refused

#pragma once

#include <cstddef>
#include <cstdint>

namespace once::rack {

// Largest encoded gossip message (requests and events) a decoder reads.
inline constexpr size_t kMessageBytesMax = 32 * 1024;
// Largest encoded signed request a client may submit to a sled.
inline constexpr size_t kRequestBytesMax = 16 * 1024;
// Longest job command.
inline constexpr size_t kCommandBytesMax = 8 * 1024;
// Longest job target text ("*" or a comma list).
inline constexpr size_t kTargetBytesMax = 1024;
// Most items in a target list.
inline constexpr size_t kTargetItemsMax = 64;
// Longest baseboard id ("part:serial").
inline constexpr size_t kBaseboardBytesMax = 128;
// Longest error text carried in an event.
inline constexpr size_t kErrorTextBytesMax = 1024;
// Longest build version text in a version announcement.
inline constexpr size_t kBuildVersionBytesMax = 256;
// Most keys on a trusted-key list.
inline constexpr size_t kTrustedKeysMax = 64;
// Cubbies of a rack are 0..kCubbyMax.
inline constexpr uint8_t kCubbyMax = 31;

}  // namespace once::rack
