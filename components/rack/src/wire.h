// Big-endian, length-checked primitives for messages.cc. A Reader never reads
// past its span; every failure is a typed error.

#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "once/base/hex.h"
#include "once/base/result.h"

namespace once::rack::wire {

inline Status CheckSize(const char* limit, size_t size, size_t max) {
  if (size > max) {
    return LimitError(limit, static_cast<int64_t>(size), static_cast<int64_t>(max));
  }
  return Ok();
}

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) {
    out_.push_back(static_cast<uint8_t>(v >> 8));
    out_.push_back(static_cast<uint8_t>(v));
  }
  void U32(uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out_.push_back(static_cast<uint8_t>(v >> s));
  }
  void U64(uint64_t v) {
    for (int s = 56; s >= 0; s -= 8) out_.push_back(static_cast<uint8_t>(v >> s));
  }
  void Raw(std::span<const uint8_t> bytes) { out_.insert(out_.end(), bytes.begin(), bytes.end()); }
  // u32 length then the bytes; kLimitExceeded beyond `max`.
  Status Blob(std::span<const uint8_t> bytes, const char* limit, size_t max) {
    ONCE_RETURN_IF_ERROR(CheckSize(limit, bytes.size(), max));
    U32(static_cast<uint32_t>(bytes.size()));
    Raw(bytes);
    return Ok();
  }
  Status String(const std::string& s, const char* limit, size_t max) {
    return Blob({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, limit, max);
  }
  Bytes Take() { return std::move(out_); }

 private:
  Bytes out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  Result<uint8_t> U8() {
    ONCE_RETURN_IF_ERROR(Need(1));
    return bytes_[pos_++];
  }
  Result<uint16_t> U16() {
    ONCE_RETURN_IF_ERROR(Need(2));
    uint16_t v = static_cast<uint16_t>(bytes_[pos_] << 8 | bytes_[pos_ + 1]);
    pos_ += 2;
    return v;
  }
  Result<uint32_t> U32() {
    ONCE_RETURN_IF_ERROR(Need(4));
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | bytes_[pos_++];
    return v;
  }
  Result<uint64_t> U64() {
    ONCE_RETURN_IF_ERROR(Need(8));
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | bytes_[pos_++];
    return v;
  }
  Result<bool> Bool() {
    ONCE_ASSIGN_OR_RETURN(uint8_t v, U8());
    if (v > 1) return MakeError(ErrorCode::kInvalidArgument, "flag byte is not 0 or 1");
    return v == 1;
  }
  template <size_t N>
  Result<std::array<uint8_t, N>> Fixed() {
    ONCE_RETURN_IF_ERROR(Need(N));
    std::array<uint8_t, N> out{};
    for (size_t i = 0; i < N; ++i) out[i] = bytes_[pos_++];
    return out;
  }
  Result<Bytes> Blob(const char* limit, size_t max) {
    ONCE_ASSIGN_OR_RETURN(uint32_t size, U32());
    ONCE_RETURN_IF_ERROR(CheckSize(limit, size, max));
    ONCE_RETURN_IF_ERROR(Need(size));
    Bytes out(bytes_.begin() + pos_, bytes_.begin() + pos_ + size);
    pos_ += size;
    return out;
  }
  Result<std::string> String(const char* limit, size_t max) {
    ONCE_ASSIGN_OR_RETURN(Bytes raw, Blob(limit, max));
    return std::string(raw.begin(), raw.end());
  }
  size_t remaining() const { return bytes_.size() - pos_; }
  Status End() const {
    if (pos_ != bytes_.size()) return MakeError(ErrorCode::kInvalidArgument, "trailing bytes");
    return Ok();
  }

 private:
  Status Need(size_t n) const {
    if (bytes_.size() - pos_ < n) return MakeError(ErrorCode::kInvalidArgument, "truncated");
    return Ok();
  }
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

}  // namespace once::rack::wire
