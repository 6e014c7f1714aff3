// File: crypto_store.h
//
// CryptoStore encrypts every event payload with a key of its own execution
// (XChaCha20-Poly1305 from libsodium), so that destroying that one key
// ("crypto-shredding") makes the execution's payloads unreadable forever while
// the log's shape (kinds, sequences, metadata, fences) stays intact for the
// kernel: fences, conditional acquires and park scans work unchanged, because
// kinds and metadata stay in the clear.
//
//   MemoryKeyVault vault;
//   CryptoStore store(sqlite, vault);
//   store.Append(req);                  // payloads stored as {"$sealed": "<base64>"}
//   vault.Shred("order-7");
//   store.ReadRange("order-7", 1);      // kPayloadShredded, by design
//
// The sealed payload binds (execution id, sequence, kind) as associated data,
// so a ciphertext moved to another event does not open (kCorruption).
// Limits seen through the decorator: by default event_bytes_max and
// batch_bytes_max are the wrapped store's, less the sealing overhead (base64
// grows 4/3, plus a 24-byte nonce and a 16-byte tag); or pass the plaintext
// limits explicitly (the wrapped store must then admit their sealed size). CopyPrefix is refused: a
// copy would need the source key for another execution (read and re-append instead). Thread-safe
// when the vault is.

#pragma once

#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "once/store/wrapper.h"

namespace once::store {

using ExecutionKey = std::array<uint8_t, 32>;

// Where per-execution keys live. Implementations must be thread-safe.
class KeyVault {
 public:
  virtual ~KeyVault() = default;
  // The execution's key, creating one if it has none and was never shredded.
  // kPayloadShredded if it was shredded.
  virtual Result<ExecutionKey> KeyFor(std::string_view execution_id) = 0;
  // The execution's key if it exists; kPayloadShredded if shredded; nullopt if none yet.
  virtual Result<std::optional<ExecutionKey>> Find(std::string_view execution_id) = 0;
  // Destroys the key for good.
  virtual Status Shred(std::string_view execution_id) = 0;
};

// Keys in process memory (tests, and services that keep keys elsewhere).
class MemoryKeyVault final : public KeyVault {
 public:
  Result<ExecutionKey> KeyFor(std::string_view execution_id) override;
  Result<std::optional<ExecutionKey>> Find(std::string_view execution_id) override;
  Status Shred(std::string_view execution_id) override;

 private:
  std::mutex mu_;
  std::map<std::string, std::optional<ExecutionKey>, std::less<>> keys_;  // nullopt = shredded
};

struct CryptoDecisions {
  static constexpr Decide kAcquireFence = Decide::kForward;
  static constexpr Decide kAcquireFenceIf = Decide::kForward;
  static constexpr Decide kAppendIfUnchanged = Decide::kCustom;
  static constexpr Decide kCopyPrefix = Decide::kRefuse;
  static constexpr Decide kTruncatePrefixKeeping = Decide::kForward;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kCustom;  // opens the tail
  static constexpr Decide kOwnership = Decide::kForward;
  static constexpr Decide kTransaction = Decide::kCustom;  // seals the returned append
};

class CryptoStore final : public EventStoreWrapper<CryptoStore, CryptoDecisions> {
 public:
  // `target` and `vault` must outlive the decorator. `limits`: the plaintext
  // limits callers see (default: derived from the wrapped store's).
  CryptoStore(EventStore& target, KeyVault& vault, std::optional<Limits> limits = std::nullopt);

  // The wrapped limits a store needs for these plaintext limits.
  static Limits SealedLimitsFor(const Limits& plain);

  Result<int64_t> Append(const AppendRequest& req) override;
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const AppendRequest> requests) override;
  Result<std::vector<Envelope>> ReadRange(std::string_view id, int64_t first,
                                          int64_t last) override;
  const Limits& limits() const override { return limits_; }

  Result<int64_t> CustomAppendIfUnchanged(const AppendRequest& req, int64_t observed);
  Result<int64_t> CustomAppendInTransaction(std::string_view id, TransactionWorkRef work);
  Result<AcquireWithTail> CustomAcquireFenceIfReadTail(std::string_view id, FenceExpectation e,
                                                       int64_t read_after);

 protected:
  std::string_view name() const override { return "CryptoStore"; }

 private:
  // Seals one request; adds its plaintext bytes to *bytes.
  Result<AppendRequest> Seal(const AppendRequest& req, size_t* bytes);
  Result<Envelope> Open(Envelope sealed, const std::optional<ExecutionKey>& key);
  // Opens every event of one execution in place.
  Status OpenAll(std::string_view id, std::vector<Envelope>& events);

  KeyVault& vault_;
  Limits limits_;
};

}  // namespace once::store
