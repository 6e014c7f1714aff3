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

// The keys whose requests a sled obeys. At most kTrustedKeysMax.
class TrustedKeys {
 public:
  // kLimitExceeded ("trusted_keys_max") when full; adding a key twice is a no-op.
  Status Add(const PublicKey& public_key);
  // The key with this id, or nullptr.
  const PublicKey* Find(const KeyId& id) const;
  size_t size() const { return keys_.size(); }

 private:
  std::map<KeyId, PublicKey> keys_;
};

}  // namespace once::rack
