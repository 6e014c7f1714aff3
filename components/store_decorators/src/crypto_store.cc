#include "once/store_decorators/crypto_store.h"

#include <sodium.h>

#include "once/store/validate.h"

namespace once::store {
namespace {

constexpr char kSealedKey[] = "$sealed";
constexpr size_t kNonceBytes = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
constexpr size_t kTagBytes = crypto_aead_xchacha20poly1305_ietf_ABYTES;

std::string AssociatedData(std::string_view id, int64_t sequence, std::string_view kind) {
  std::string ad(id);
  ad.push_back('\0');
  ad += std::to_string(sequence);
  ad.push_back('\0');
  ad.append(kind);
  return ad;
}

std::string ToBase64(const std::vector<uint8_t>& bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), bytes.data(), bytes.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

Result<std::vector<uint8_t>> FromBase64(std::string_view text) {
  std::vector<uint8_t> out(text.size());
  size_t len = 0;
  if (sodium_base642bin(out.data(), out.size(), text.data(), text.size(), nullptr, &len, nullptr,
                        sodium_base64_VARIANT_ORIGINAL) != 0) {
    return MakeError(ErrorCode::kCorruption, "sealed payload is not base64");
  }
  out.resize(len);
  return out;
}

Result<Json> SealPayload(const Json& payload, const ExecutionKey& key, const std::string& ad) {
  std::string plain = payload.dump();
  std::vector<uint8_t> sealed(kNonceBytes + plain.size() + kTagBytes);
  randombytes_buf(sealed.data(), kNonceBytes);
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(
      sealed.data() + kNonceBytes, &written, reinterpret_cast<const uint8_t*>(plain.data()),
      plain.size(), reinterpret_cast<const uint8_t*>(ad.data()), ad.size(), nullptr, sealed.data(),
      key.data());
  sealed.resize(kNonceBytes + written);
  return Json{{kSealedKey, ToBase64(sealed)}};
}

Result<Json> OpenPayload(const Json& stored, const ExecutionKey& key, const std::string& ad) {
  if (!stored.is_object() || !stored.contains(kSealedKey) || !stored[kSealedKey].is_string()) {
    return MakeError(ErrorCode::kCorruption, "payload is not sealed");
  }
  ONCE_ASSIGN_OR_RETURN(auto sealed, FromBase64(stored[kSealedKey].get<std::string>()));
  if (sealed.size() < kNonceBytes + kTagBytes) {
    return MakeError(ErrorCode::kCorruption, "sealed payload is too short");
  }
  std::string plain(sealed.size() - kNonceBytes - kTagBytes, '\0');
  unsigned long long len = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(
          reinterpret_cast<uint8_t*>(plain.data()), &len, nullptr, sealed.data() + kNonceBytes,
          sealed.size() - kNonceBytes, reinterpret_cast<const uint8_t*>(ad.data()), ad.size(),
          sealed.data(), key.data()) != 0) {
    return MakeError(ErrorCode::kCorruption, "sealed payload does not open with its key");
  }
  plain.resize(len);
  return events::ParseJson(plain);
}

size_t PlainBytesFor(size_t sealed_bytes_max) {
  // base64(nonce + plain + tag) plus the JSON wrapper {"$sealed":"..."}.
  size_t b64 = sealed_bytes_max > 16 ? sealed_bytes_max - 16 : 0;
  size_t raw = b64 / 4 * 3;
  return raw > kNonceBytes + kTagBytes ? raw - kNonceBytes - kTagBytes : 0;
}

}  // namespace

Result<ExecutionKey> MemoryKeyVault::KeyFor(std::string_view execution_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(execution_id);
  if (it != keys_.end()) {
    if (!it->second) {
      return MakeError(ErrorCode::kPayloadShredded, "the execution's key was shredded",
                       std::string(execution_id));
    }
    return *it->second;
  }
  ExecutionKey key;
  crypto_aead_xchacha20poly1305_ietf_keygen(key.data());
  keys_.emplace(std::string(execution_id), key);
  return key;
}

Result<std::optional<ExecutionKey>> MemoryKeyVault::Find(std::string_view execution_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(execution_id);
  if (it == keys_.end()) return std::optional<ExecutionKey>();
  if (!it->second) {
    return MakeError(ErrorCode::kPayloadShredded, "the execution's key was shredded",
                     std::string(execution_id));
  }
  return it->second;
}

Status MemoryKeyVault::Shred(std::string_view execution_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = keys_[std::string(execution_id)];
  if (slot) sodium_memzero(slot->data(), slot->size());
  slot.reset();
  return Ok();
}

CryptoStore::CryptoStore(EventStore& target, KeyVault& vault, std::optional<Limits> limits)
    : EventStoreWrapper(target), vault_(vault) {
  ONCE_CHECK(sodium_init() >= 0);
  if (limits) {
    limits_ = *limits;
  } else {
    limits_ = target.limits();
    limits_.event_bytes_max = PlainBytesFor(limits_.event_bytes_max);
    limits_.batch_bytes_max = PlainBytesFor(limits_.batch_bytes_max);
  }
}

Limits CryptoStore::SealedLimitsFor(const Limits& plain) {
  auto sealed = [](size_t n) { return (n + kNonceBytes + kTagBytes + 2) / 3 * 4 + 16; };
  Limits out = plain;
  out.event_bytes_max = sealed(plain.event_bytes_max);
  out.batch_bytes_max = sealed(plain.batch_bytes_max) * 2;  // per-event wrappers add up
  return out;
}

Result<AppendRequest> CryptoStore::Seal(const AppendRequest& req, size_t* bytes) {
  // Validate against the decorator's (plaintext) limits first, so an
  // oversized payload gets the same typed error as on an unwrapped store.
  SystemClock clock;
  ONCE_ASSIGN_OR_RETURN(CheckedAppend plain, CheckAppend(req, limits_, clock));
  *bytes += plain.bytes;
  ONCE_ASSIGN_OR_RETURN(ExecutionKey key, vault_.KeyFor(req.execution_id));
  AppendRequest sealed = req;
  for (size_t i = 0; i < sealed.events.size(); ++i) {
    Envelope& e = sealed.events[i];
    int64_t seq = req.expected_next + static_cast<int64_t>(i);
    ONCE_ASSIGN_OR_RETURN(
        e.payload, SealPayload(e.payload, key, AssociatedData(req.execution_id, seq, e.kind)));
  }
  return sealed;
}

Result<Envelope> CryptoStore::Open(Envelope sealed, const std::optional<ExecutionKey>& key) {
  if (!key) {
    return MakeError(ErrorCode::kCorruption, "sealed payload but the execution has no key",
                     sealed.execution_id);
  }
  ONCE_ASSIGN_OR_RETURN(sealed.payload, OpenPayload(sealed.payload, *key,
                                                    AssociatedData(sealed.execution_id,
                                                                   sealed.sequence, sealed.kind)));
  return sealed;
}

Result<int64_t> CryptoStore::Append(const AppendRequest& req) {
  size_t bytes = 0;
  ONCE_ASSIGN_OR_RETURN(AppendRequest sealed, Seal(req, &bytes));
  return target().Append(sealed);
}

Result<std::vector<Result<int64_t>>> CryptoStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  ONCE_RETURN_IF_ERROR(ValidateBatchShape(requests, limits_));
  std::vector<AppendRequest> sealed;
  std::vector<size_t> positions;
  std::vector<Result<int64_t>> out(requests.size(), 0);
  size_t bytes = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto s = Seal(requests[i], &bytes);
    if (!s) {
      out[i] = std::unexpected(s.error());  // fails alone, like any refused request
      continue;
    }
    sealed.push_back(std::move(*s));
    positions.push_back(i);
  }
  ONCE_RETURN_IF_ERROR(CheckBatchBytes(bytes, limits_));
  if (sealed.empty()) return out;
  ONCE_ASSIGN_OR_RETURN(auto results, target().AppendBatch(sealed));
  for (size_t k = 0; k < positions.size(); ++k) out[positions[k]] = std::move(results[k]);
  return out;
}

Status CryptoStore::OpenAll(std::string_view id, std::vector<Envelope>& events) {
  if (events.empty()) return Ok();
  ONCE_ASSIGN_OR_RETURN(std::optional<ExecutionKey> key, vault_.Find(id));
  for (auto& e : events) {
    ONCE_ASSIGN_OR_RETURN(e, Open(std::move(e), key));
  }
  return Ok();
}

Result<std::vector<Envelope>> CryptoStore::ReadRange(std::string_view id, int64_t first,
                                                     int64_t last) {
  ONCE_ASSIGN_OR_RETURN(auto events, target().ReadRange(id, first, last));
  ONCE_RETURN_IF_ERROR(OpenAll(id, events));
  return events;
}

Result<AcquireWithTail> CryptoStore::CustomAcquireFenceIfReadTail(std::string_view id,
                                                                  FenceExpectation e,
                                                                  int64_t read_after) {
  ONCE_ASSIGN_OR_RETURN(AcquireWithTail out, target().AcquireFenceIfReadTail(id, e, read_after));
  ONCE_RETURN_IF_ERROR(OpenAll(id, out.tail));
  return out;
}

// The SQL's own writes are not sealed (they are the caller's tables); the
// append's payloads are, as Append seals them.
Result<int64_t> CryptoStore::CustomAppendInTransaction(std::string_view id,
                                                       TransactionWorkRef work) {
  auto sealed_work = [&](SqlTransaction& sql) -> Result<AppendRequest> {
    ONCE_ASSIGN_OR_RETURN(AppendRequest req, work(sql));
    size_t bytes = 0;
    return Seal(req, &bytes);
  };
  return target().AppendInTransaction(id, sealed_work);
}

Result<int64_t> CryptoStore::CustomAppendIfUnchanged(const AppendRequest& req, int64_t observed) {
  size_t bytes = 0;
  ONCE_ASSIGN_OR_RETURN(AppendRequest sealed, Seal(req, &bytes));
  return target().AppendIfUnchanged(sealed, observed);
}

}  // namespace once::store
