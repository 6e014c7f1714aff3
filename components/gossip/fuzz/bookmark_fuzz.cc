// libFuzzer target for the gossip bookmark decoder (DecodeBookmark, what a
// restarted node reads from its data folder before it reclaims its identity).
// Every input is tried twice: as the file's bytes, and sealed (its own
// BLAKE2b-128 appended, as EncodeBookmark does), so that mutations reach the
// fields behind the checksum. Each is either refused with a typed error or
// decodes to a bookmark whose re-encoding is exactly the bytes read (the
// decoder accepts only what EncodeBookmark writes), and from which a replica
// reclaims its identity and sends. Seeds: components/gossip/fuzz/corpus/
// gossip_bookmark_fuzz (bookmarks of real replicas, kept by gossip_test).

#include <sodium.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "once/gossip/bookmark.h"

namespace {

using namespace once;
using namespace once::gossip;

void Check(bool ok) {
  if (!ok) std::abort();
}

void Try(std::span<const uint8_t> bytes) {
  auto bookmark = DecodeBookmark(bytes);
  if (!bookmark) {
    Check(bookmark.error().code == ErrorCode::kCorruption ||
          bookmark.error().code == ErrorCode::kLimitExceeded);
    return;
  }
  Check(EncodeBookmark(*bookmark) == Bytes(bytes.begin(), bytes.end()));
  const bool has_party = bookmark->party.has_value();
  Replica replica = Replica::Reclaim(std::move(*bookmark));
  auto sent = replica.Send(Bytes{1, 2, 3});
  // A retired bookmark sends nothing; a party sends unless a height would
  // pass 2^64-1.
  if (!has_party) Check(!sent && sent.error().code == ErrorCode::kUnsupported);
  if (has_party) Check(sent || sent.error().code == ErrorCode::kLimitExceeded);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  Try(input);
  Bytes sealed(input.begin(), input.end());
  uint8_t sum[16];
  crypto_generichash(sum, sizeof sum, sealed.data(), sealed.size(), nullptr, 0);
  sealed.insert(sealed.end(), sum, sum + sizeof sum);
  Try(sealed);
  return 0;
}
