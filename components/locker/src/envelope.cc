#include "once/locker/envelope.h"

#include <sodium.h>

#include <algorithm>

namespace once::locker {
namespace {

constexpr std::array<uint8_t, 4> kMagic = {'O', 'L', 'K', 'R'};

using Digest = std::array<uint8_t, kDigestBytes>;

Digest Blake2b256(std::span<const uint8_t> bytes) {
  // sodium_init is idempotent and thread-safe; generichash needs no more.
  static const int sodium_ready = sodium_init();
  (void)sodium_ready;
  Digest out{};
  crypto_generichash(out.data(), out.size(), bytes.data(), bytes.size(), nullptr, 0);
  return out;
}

void PutBigEndian(Bytes& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t GetBigEndian(std::span<const uint8_t> in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | in[at + i];
  return v;
}

std::unexpected<Error> Corrupt(std::string what) {
  return MakeError(ErrorCode::kCorruption, std::move(what));
}

}  // namespace

Result<Bytes> EncodeEnvelope(const Envelope& envelope) {
  if (envelope.record.size() > kRecordBytesMax) {
    return LimitError("record_bytes_max", static_cast<int64_t>(envelope.record.size()),
                      kRecordBytesMax);
  }
  Bytes out;
  out.reserve(kEnvelopeOverheadBytes + envelope.record.size());
  out.insert(out.end(), kMagic.begin(), kMagic.end());
  PutBigEndian(out, kFormatVersion, 2);
  out.insert(out.end(), envelope.nonce.begin(), envelope.nonce.end());
  PutBigEndian(out, envelope.sequence, 8);
  PutBigEndian(out, envelope.record.size(), 4);
  out.insert(out.end(), envelope.record.begin(), envelope.record.end());
  const Digest digest = Blake2b256(out);
  out.insert(out.end(), digest.begin(), digest.end());
  return out;
}

Result<Envelope> DecodeEnvelope(std::span<const uint8_t> bytes) {
  if (bytes.size() > kEnvelopeBytesMax) {
    return LimitError("envelope_bytes_max", static_cast<int64_t>(bytes.size()), kEnvelopeBytesMax);
  }
  if (bytes.size() < kEnvelopeOverheadBytes) return Corrupt("truncated");
  if (!std::equal(kMagic.begin(), kMagic.end(), bytes.begin())) return Corrupt("wrong magic");
  const auto body = bytes.first(bytes.size() - kDigestBytes);
  const Digest digest = Blake2b256(body);
  if (!std::equal(digest.begin(), digest.end(), bytes.begin() + body.size())) {
    return Corrupt("digest mismatch");
  }
  const uint64_t version = GetBigEndian(bytes, 4, 2);
  if (version != kFormatVersion) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "unknown format version " + std::to_string(version));
  }
  const uint64_t record_size = GetBigEndian(bytes, 30, 4);
  const size_t present = body.size() - kEnvelopeHeaderBytes;
  if (record_size > present) return Corrupt("truncated");
  if (record_size < present) return Corrupt("trailing bytes");
  Envelope envelope;
  std::copy_n(bytes.begin() + 6, kNonceBytes, envelope.nonce.begin());
  envelope.sequence = GetBigEndian(bytes, 22, 8);
  envelope.record.assign(body.begin() + kEnvelopeHeaderBytes, body.end());
  return envelope;
}

}  // namespace once::locker
