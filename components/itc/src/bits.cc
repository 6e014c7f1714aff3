#include "bits.h"

#include <string>

namespace once::itc::internal {

void BitWriter::Put(bool bit) {
  if (used_ == 8) {
    bytes_.push_back(0);
    used_ = 0;
  }
  if (bit) bytes_.back() |= static_cast<uint8_t>(0x80u >> used_);
  ++used_;
}

void BitWriter::PutBits(unsigned __int128 value, int count) {
  for (int i = count - 1; i >= 0; --i) Put(((value >> i) & 1) != 0);
}

void BitWriter::PutGamma(unsigned __int128 n) {
  const unsigned __int128 code = n + 1;
  int width = 0;  // floor(log2(code))
  while ((code >> (width + 1)) != 0) ++width;
  for (int i = 0; i < width; ++i) Put(false);
  PutBits(code, width + 1);
}

Bytes BitWriter::Finish() && {
  Put(true);
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

Result<unsigned __int128> BitReader::GetGamma() {
  constexpr int kWidthMax = 66;  // enough for zigzag deltas of 64-bit heights
  int width = 0;
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool bit, Get());
    if (bit) break;
    if (++width > kWidthMax) return Fail(ErrorCode::kInvalidArgument, "gamma code too long");
  }
  unsigned __int128 code = 1;
  for (int i = 0; i < width; ++i) {
    ONCE_ASSIGN_OR_RETURN(bool bit, Get());
    code = (code << 1) | (bit ? 1 : 0);
  }
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
