// libFuzzer target for the rack message decoders (Decode: every message a
// sled takes from gossip or a client's POST /v1/submit; DecodePayload: the
// signed bytes of a request). Every input is either refused with a typed
// error or decodes to a value whose re-encoding is exactly the input (the
// decoders accept only canonical bytes, messages.h), and a decoded request
// verifies, or is refused with a typed error, against a trusted key list.
// Seeds: components/rack/fuzz/corpus/rack_messages_fuzz (every message kind,
// signed by a real key; kept by rack_test).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "once/base/rng.h"
#include "once/rack/messages.h"

namespace {

using namespace once;
using namespace once::rack;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool Typed(const Error& e) {
  return e.code == ErrorCode::kInvalidArgument || e.code == ErrorCode::kLimitExceeded;
}

const TrustedKeys& Trusted() {
  static const TrustedKeys trusted = [] {
    SeededRng rng(42);  // the seeds' signer (rack_test's FuzzSeeds)
    TrustedKeys keys;
    Check(keys.Add(KeyPair::Generate(rng).public_key).has_value());
    return keys;
  }();
  return trusted;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  const Bytes bytes(input.begin(), input.end());
  auto message = Decode(input);
  if (message) {
    auto again = Encode(*message);
    Check(again && *again == bytes);
    if (const auto* request = std::get_if<SignedRequest>(&*message)) {
      auto payload = DecodePayload(request->payload_bytes);
      Check(payload && *payload == request->payload);
      auto verified = Verify(*request, Trusted());
      Check(verified ? *verified == request->payload
                     : verified.error().code == ErrorCode::kPermissionDenied);
    }
  } else {
    Check(Typed(message.error()));
  }
  auto payload = DecodePayload(input);
  if (payload) {
    auto again = EncodePayload(*payload);
    Check(again && *again == bytes);
  } else {
    Check(Typed(payload.error()));
  }
  return 0;
}
