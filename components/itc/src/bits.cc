#include "bits.h"

#include <algorithm>
#include <bit>
#include <string>

namespace once::itc::internal {

void BitWriter::PutBits(unsigned __int128 value, int count) {
  constexpr int kChunk = 48;
  while (count > kChunk) {
    count -= kChunk;
    PutSmall(static_cast<uint64_t>(value >> count) & ((uint64_t{1} << kChunk) - 1), kChunk);
  }
  if (count > 0) {
    PutSmall(static_cast<uint64_t>(value) & ((uint64_t{1} << count) - 1), count);
  }
}

void BitWriter::PutGamma(unsigned __int128 n) {
  const unsigned __int128 code = n + 1;
  const uint64_t high = static_cast<uint64_t>(code >> 64);
  const uint64_t low = static_cast<uint64_t>(code);
  // floor(log2(code)); code >= 1
  const int width = high != 0 ? 127 - std::countl_zero(high) : 63 - std::countl_zero(low);
  if (2 * width + 1 <= 56) {  // the width's zeros and the code in one put
    PutSmall(low, 2 * width + 1);
    return;
  }
  PutBits(0, width);
  PutBits(code, width + 1);
}

Bytes BitWriter::Finish() && {
  Put(true);
  if (pending_bits_ > 0) bytes_.push_back(static_cast<uint8_t>(pending_ << (8 - pending_bits_)));
  return std::move(bytes_);
}

std::unexpected<Error> BitReader::Fail(ErrorCode code, const std::string& why) const {
  return MakeError(
      code, std::string(what_) + " encoding: " + why + " (at bit " + std::to_string(bit_) + ")");
}

Result<bool> BitReader::Get() {
  if (bit_ >= bytes_.size() * 8) return Fail(ErrorCode::kInvalidArgument, "truncated");
  const bool bit = (bytes_[bit_ / 8] >> (7 - bit_ % 8)) & 1;
  ++bit_;
  return bit;
}

uint64_t BitReader::Window(size_t& valid) const {
  const size_t total = bytes_.size() * 8;
  const size_t first = bit_ / 8;
  uint64_t word = 0;
  if (first + 8 <= bytes_.size()) {
    for (size_t i = 0; i < 8; ++i) word = (word << 8) | bytes_[first + i];
  } else {
    for (size_t i = 0; i < 8; ++i) {
      word = (word << 8) | (first + i < bytes_.size() ? bytes_[first + i] : 0);
    }
  }
  const int skip = static_cast<int>(bit_ % 8);
  valid = std::min<size_t>(64 - skip, total - bit_);
  return word << skip;
}

Result<unsigned __int128> BitReader::GetGamma() {
  if (bit_ < bytes_.size() * 8) {
    size_t valid = 0;
    const uint64_t window = Window(valid);
    if (window != 0) {
      const int width = std::countl_zero(window);
      const int bits = 2 * width + 1;
      if (bits <= kWindowGammaBitsMax && static_cast<size_t>(bits) <= valid) {
        bit_ += bits;
        return static_cast<unsigned __int128>((window >> (64 - bits)) - 1);
      }
    }
  }
  return GetGammaBitwise();
}

Result<unsigned __int128> BitReader::GetGammaBitwise() {
  constexpr int kWidthMax = 66;  // enough for zigzag deltas of 64-bit heights
  const size_t total = bytes_.size() * 8;
  int width = 0;
  while (true) {
    if (bit_ >= total) return Fail(ErrorCode::kInvalidArgument, "truncated");
    if (BitAt(bit_++)) break;
    if (++width > kWidthMax) return Fail(ErrorCode::kInvalidArgument, "gamma code too long");
  }
  if (total - bit_ < static_cast<size_t>(width)) {
    bit_ = total;
    return Fail(ErrorCode::kInvalidArgument, "truncated");
  }
  unsigned __int128 code = 1;
  for (int i = 0; i < width; ++i) code = (code << 1) | (BitAt(bit_++) ? 1 : 0);
  return code - 1;
}

Result<size_t> BitReader::FinishPrefix() {
  if (bit_ >= bytes_.size() * 8) return Fail(ErrorCode::kInvalidArgument, "missing marker");
  ONCE_ASSIGN_OR_RETURN(bool marker, Get());
  if (!marker) return Fail(ErrorCode::kInvalidArgument, "missing marker");
  while (bit_ % 8 != 0) {
    ONCE_ASSIGN_OR_RETURN(bool pad, Get());
    if (pad) return Fail(ErrorCode::kInvalidArgument, "trailing bits after the marker");
  }
  return bit_ / 8;
}

Status BitReader::Finish() {
  ONCE_ASSIGN_OR_RETURN(size_t used, FinishPrefix());
  if (used != bytes_.size()) {
    return Fail(ErrorCode::kInvalidArgument,
                "trailing bytes: " + std::to_string(bytes_.size() - used));
  }
  return Ok();
}

}  // namespace once::itc::internal
