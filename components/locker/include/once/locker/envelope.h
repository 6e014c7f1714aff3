// File: envelope.h
//
// The bytes of one slot file: an opaque record inside an envelope that says
// who wrote it (the writing process's nonce), in which order (a sequence), and
// whether it is intact (a BLAKE2b-256 digest). docs/locker-format.md has the
// layout with an example in hex.
//
//   Envelope e{.nonce = nonce, .sequence = 7, .record = record};
//   ONCE_ASSIGN_OR_RETURN(Bytes bytes, EncodeEnvelope(e));
//   ONCE_ASSIGN_OR_RETURN(Envelope back, DecodeEnvelope(bytes));   // back == e
//
// Layout, big-endian: "OLKR", format version u16 (= 1), nonce (16 bytes),
// sequence u64, record length u32, the record, BLAKE2b-256 (libsodium
// crypto_generichash, unkeyed, 32 bytes) of every byte before it.

#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "once/base/hex.h"
#include "once/base/result.h"

namespace once::locker {

// Largest record a locker stores (the caller's encoded bytes).
inline constexpr size_t kRecordBytesMax = 64 * 1024;
inline constexpr uint16_t kFormatVersion = 1;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kDigestBytes = 32;
// magic 4 + version 2 + nonce 16 + sequence 8 + record length 4.
inline constexpr size_t kEnvelopeHeaderBytes = 34;
inline constexpr size_t kEnvelopeOverheadBytes = kEnvelopeHeaderBytes + kDigestBytes;
// Largest slot file a reader accepts.
inline constexpr size_t kEnvelopeBytesMax = kEnvelopeOverheadBytes + kRecordBytesMax;

using Nonce = std::array<uint8_t, kNonceBytes>;

struct Envelope {
  Nonce nonce{};          // the writing process's, drawn from its Rng at Locker::Open
  uint64_t sequence = 0;  // 1 for a locker's first write, then one more per write
  Bytes record;

  friend bool operator==(const Envelope&, const Envelope&) = default;
};

// The envelope's bytes: kEnvelopeOverheadBytes + record size. kLimitExceeded
// ("record_bytes_max") for a record over kRecordBytesMax.
Result<Bytes> EncodeEnvelope(const Envelope& envelope);

// The strict inverse: it accepts exactly the bytes EncodeEnvelope writes, so
// EncodeEnvelope(*DecodeEnvelope(b)) == b for every b it accepts. Checked in
// this order: kLimitExceeded ("envelope_bytes_max") over kEnvelopeBytesMax;
// kCorruption "truncated" below kEnvelopeOverheadBytes, "wrong magic",
// "digest mismatch"; then, for a file with an intact digest,
// kInvalidArgument "unknown format version N", and kCorruption for a record
// length that disagrees with the size ("truncated" / "trailing bytes"). Every single-bit flip and
// every truncation of a valid envelope is refused. Messages are short ("digest mismatch") so that a
// caller can prefix where they came from.
Result<Envelope> DecodeEnvelope(std::span<const uint8_t> bytes);

}  // namespace once::locker
