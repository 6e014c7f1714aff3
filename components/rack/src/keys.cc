#include "once/rack/keys.h"

#include <sodium.h>

namespace once::rack {

void EnsureSodium() {
  static const bool ready = sodium_init() >= 0;
  ONCE_CHECK_MSG(ready, "libsodium failed to initialise");
}

KeyId KeyIdOf(const PublicKey& public_key) { return KeyId::FromDigest(Blake2b256({public_key})); }

KeyPair KeyPair::FromSeed(std::span<const uint8_t, 32> seed) {
  EnsureSodium();
  KeyPair keys;
  crypto_sign_seed_keypair(keys.public_key.data(), keys.secret_key.data(), seed.data());
  return keys;
}

KeyPair KeyPair::Generate(Rng& rng) {
  std::array<uint8_t, 32> seed;
  rng.Fill(seed.data(), seed.size());
  return FromSeed(seed);
}

KeyPair KeyPair::GenerateFromOs() {
  EnsureSodium();
  KeyPair keys;
  crypto_sign_keypair(keys.public_key.data(), keys.secret_key.data());
  return keys;
}

Signature SignBytes(std::span<const uint8_t> message, const SecretKey& secret_key) {
  EnsureSodium();
  Signature signature;
  crypto_sign_detached(signature.data(), nullptr, message.data(), message.size(),
                       secret_key.data());
  return signature;
}

Status VerifyBytes(std::span<const uint8_t> message, const Signature& signature,
                   const PublicKey& public_key) {
  EnsureSodium();
  if (crypto_sign_verify_detached(signature.data(), message.data(), message.size(),
                                  public_key.data()) != 0) {
    return MakeError(ErrorCode::kPermissionDenied, "bad signature");
  }
  return Ok();
}

Status TrustedKeys::Add(const PublicKey& public_key) {
  KeyId id = KeyIdOf(public_key);
  if (keys_.contains(id)) return Ok();
  if (keys_.size() >= kTrustedKeysMax) {
    return LimitError("trusted_keys_max", static_cast<int64_t>(keys_.size() + 1),
                      static_cast<int64_t>(kTrustedKeysMax));
  }
  keys_.emplace(id, public_key);
  return Ok();
}

const PublicKey* TrustedKeys::Find(const KeyId& id) const {
  auto it = keys_.find(id);
  return it == keys_.end() ? nullptr : &it->second;
}

void VerifiedSignatures::Insert(const Digest256& entry) {
  if (entries_.size() >= kVerifiedSignaturesMax) entries_.clear();
  entries_.insert(entry);
}

}  // namespace once::rack
