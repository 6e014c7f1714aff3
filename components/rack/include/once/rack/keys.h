// File: keys.h
//
// Ed25519 keys (libsodium) and the trusted-key list a sled checks requests
// against. A key's id is the low 88 bits of BLAKE2b-256 of its public key.
//
//   KeyPair support = KeyPair::Generate(rng);        // or FromSeed / GenerateFromOs
//   TrustedKeys trusted;
//   ONCE_RETURN_IF_ERROR(trusted.Add(support.public_key));
//   const PublicKey* pk = trusted.Find(support.id());
//
// Thread-compatible values; libsodium is initialised on first use.

#pragma once

#include <array>
#include <map>
#include <memory>
#include <set>
#include <span>

#include "once/base/result.h"
#include "once/base/rng.h"
#include "once/rack/ids.h"
#include "once/rack/limits.h"

namespace once::rack {

using PublicKey = std::array<uint8_t, 32>;
using SecretKey = std::array<uint8_t, 64>;
using Signature = std::array<uint8_t, 64>;

// Initialises libsodium (idempotent, thread-safe); crashes if it cannot.
void EnsureSodium();

KeyId KeyIdOf(const PublicKey& public_key);

struct KeyPair {
  PublicKey public_key{};
  SecretKey secret_key{};

  KeyId id() const { return KeyIdOf(public_key); }

  // Deterministic from a 32-byte seed (for tests and the simulator).
  static KeyPair FromSeed(std::span<const uint8_t, 32> seed);
  // Seed drawn from `rng` (deterministic under a SeededRng).
  static KeyPair Generate(Rng& rng);
  // Seed drawn from the operating system (production clients).
  static KeyPair GenerateFromOs();
};

// Ed25519 detached signature of `message`.
Signature SignBytes(std::span<const uint8_t> message, const SecretKey& secret_key);
// kPermissionDenied ("bad signature") unless `signature` verifies.
Status VerifyBytes(std::span<const uint8_t> message, const Signature& signature,
                   const PublicKey& public_key);

// Signatures already verified, so that one process holding many sled cores
// (the simulator) checks each signed request once rather than once a sled a
// life: an Ed25519 verification costs about as much as the rest of a
// delivery. An entry is the digest of (public key, signature, signed bytes),
// so it vouches for exactly those bytes. At most kVerifiedSignaturesMax
// entries (then it starts over). Not thread-safe: share one only among cores
// that one thread owns.
inline constexpr size_t kVerifiedSignaturesMax = 1 << 16;
class VerifiedSignatures {
 public:
  bool Contains(const Digest256& entry) const { return entries_.contains(entry); }
  void Insert(const Digest256& entry);

 private:
  std::set<Digest256> entries_;
};

// The keys whose requests a sled obeys. At most kTrustedKeysMax.
class TrustedKeys {
 public:
  // kLimitExceeded ("trusted_keys_max") when full; adding a key twice is a no-op.
  Status Add(const PublicKey& public_key);
  // The key with this id, or nullptr.
  const PublicKey* Find(const KeyId& id) const;
  size_t size() const { return keys_.size(); }
  // Copies of these keys share `verified` (none by default: every request is
  // verified).
  void ShareVerified(std::shared_ptr<VerifiedSignatures> verified) {
    verified_ = std::move(verified);
  }
  VerifiedSignatures* verified() const { return verified_.get(); }

 private:
  std::map<KeyId, PublicKey> keys_;
  std::shared_ptr<VerifiedSignatures> verified_;
};

}  // namespace once::rack
