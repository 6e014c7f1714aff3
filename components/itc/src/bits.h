// Bit streams, most significant bit first, with the marker padding of the
// wire formats: the live bits, one 1-bit, zeros to a byte boundary.

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "once/base/hex.h"
#include "once/base/result.h"

namespace once::itc::internal {

class BitWriter {
 public:
  // Room for `bytes` before the first allocation grows it (a hint).
  void Reserve(size_t bytes) { bytes_.reserve(bytes); }
  void Put(bool bit) { PutSmall(bit ? 1 : 0, 1); }
  void PutBits(unsigned __int128 value, int count);  // low `count` bits, MSB first
  // Elias gamma of n + 1 (n may be up to 2^65).
  void PutGamma(unsigned __int128 n);
  // Appends the marker and the padding and returns the bytes.
  Bytes Finish() &&;

 private:
  // Appends the low `count` <= 56 bits of `value` (which has no higher bits).
  void PutSmall(uint64_t value, int count) {
    pending_ = (pending_ << count) | value;
    pending_bits_ += count;
    while (pending_bits_ >= 8) {
      pending_bits_ -= 8;
      bytes_.push_back(static_cast<uint8_t>(pending_ >> pending_bits_));
    }
    pending_ &= (uint64_t{1} << pending_bits_) - 1;
  }

  Bytes bytes_;
  uint64_t pending_ = 0;  // the last pending_bits_ (< 8) bits written, not yet a byte
  int pending_bits_ = 0;
};

class BitReader {
 public:
  // `what` names the value in error messages ("party", "version").
  BitReader(std::span<const uint8_t> bytes, const char* what) : bytes_(bytes), what_(what) {}
  Result<bool> Get();
  bool BitAt(size_t bit) const { return (bytes_[bit / 8] >> (7 - bit % 8)) & 1; }
  // Elias gamma: returns n where the code is of n + 1; n < 2^66. A code of
  // up to kWindowGammaBitsMax bits is read from one 64-bit window; longer
  // ones, and every malformed one, a bit at a time (GetGammaBitwise).
  Result<unsigned __int128> GetGamma();
  // Checks the marker and the zero padding; returns the bytes consumed.
  Result<size_t> FinishPrefix();
  // As FinishPrefix, and requires that nothing follows.
  Status Finish();

  std::unexpected<Error> Fail(ErrorCode code, const std::string& why) const;

 private:
  // The longest gamma code GetGamma reads from one window: a window starts
  // within a byte, so at least 57 of its 64 bits are the stream's.
  static constexpr int kWindowGammaBitsMax = 57;
  // The 64 bits from bit_ on, most significant first; bits past the end of
  // the stream read as 0. `valid` is how many are the stream's.
  uint64_t Window(size_t& valid) const;
  Result<unsigned __int128> GetGammaBitwise();

  std::span<const uint8_t> bytes_;
  const char* what_;
  size_t bit_ = 0;
};

}  // namespace once::itc::internal
