// File: ids.h
//
// The rack's identifiers and digests. Job, session and key ids and nonces are
// 88-bit values (11 bytes, big-endian), each its own type so one cannot be
// passed for another, shown as 8-word codephrases. Digests are BLAKE2b-256
// (libsodium crypto_generichash, 32-byte output, no key); an 88-bit id taken
// from a digest keeps its low 88 bits, that is its last 11 bytes.
//
//   JobId id = JobId::FromDigest(Blake2b256({tag, bytes}));
//   std::string shown = id.ToString();             // "abandon-...-zoo"
//   ONCE_ASSIGN_OR_RETURN(JobId back, JobId::Parse(shown));

#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "once/base/hex.h"
#include "once/base/result.h"

namespace once::rack {

using Digest256 = std::array<uint8_t, 32>;

// BLAKE2b-256 of the concatenation of `parts`.
Digest256 Blake2b256(std::initializer_list<std::span<const uint8_t>> parts);
// The bytes of a string, for hashing tags.
std::span<const uint8_t> AsBytes(std::string_view text);

inline constexpr size_t kId88Bytes = 11;

// Parses an 8-word codephrase into 11 bytes (errors as codephrase::DecodeBytes).
Result<std::array<uint8_t, kId88Bytes>> ParseId88(std::string_view phrase);
std::string FormatId88(std::span<const uint8_t, kId88Bytes> bytes);

template <class Tag>
struct Id88 {
  std::array<uint8_t, kId88Bytes> bytes{};

  // The low 88 bits of a digest.
  static Id88 FromDigest(const Digest256& digest) {
    Id88 id;
    for (size_t i = 0; i < kId88Bytes; ++i) id.bytes[i] = digest[digest.size() - kId88Bytes + i];
    return id;
  }
  static Result<Id88> Parse(std::string_view phrase) {
    ONCE_ASSIGN_OR_RETURN(auto raw, ParseId88(phrase));
    return Id88{raw};
  }
  std::string ToString() const { return FormatId88(bytes); }
  friend auto operator<=>(const Id88&, const Id88&) = default;
};

using JobId = Id88<struct JobIdTag>;
using SessionId = Id88<struct SessionIdTag>;
using KeyId = Id88<struct KeyIdTag>;
using Nonce = Id88<struct NonceTag>;

}  // namespace once::rack
