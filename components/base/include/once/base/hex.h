// File: hex.h
//
// Lower-case hexadecimal for bytes, and its strict inverse.

#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"

namespace once {

using Bytes = std::vector<uint8_t>;

std::string HexEncode(std::span<const uint8_t> bytes);
std::string HexEncode(std::string_view bytes);
// Rejects odd lengths and non-hex characters (either case accepted).
Result<Bytes> HexDecode(std::string_view hex);

}  // namespace once
