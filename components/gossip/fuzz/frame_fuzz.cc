// libFuzzer target for the gossip frame decoder (wire::Decode, the bodies of
// Hello, Data, Donate, Ack and Refuse frames). Every input must either be
// refused with a typed error or decode to a frame whose re-encoding is exactly
// the input: the decoder accepts only canonical bytes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "wire.h"

namespace {

using namespace once;
using namespace once::gossip;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool Typed(const Error& e) {
  return e.code == ErrorCode::kInvalidArgument || e.code == ErrorCode::kCorruption ||
         e.code == ErrorCode::kLimitExceeded || e.code == ErrorCode::kUnsupported;
}

// The frame rebuilt with the production encoder, without its length prefix.
Bytes Reencode(const wire::Frame& f) {
  wire::FrameBuilder fb(f.kind, kFrameBytesMax);
  switch (f.kind) {
    case wire::Kind::kHello:
      fb.PutHello(f.hello);
      break;
    case wire::Kind::kDonate:
      fb.PutParty(f.party);
      break;
    case wire::Kind::kRefuse:
      fb.PutReason(f.reason);
      break;
    default:
      break;
  }
  if (f.kind == wire::Kind::kHello || f.kind == wire::Kind::kData) {
    for (const wire::Record& rec : f.data.records) Check(fb.AddRecord(rec));
    for (const auto& leaf : f.data.messages) Check(fb.AddMessage(*leaf));
  }
  Bytes out = fb.Finish(f.data.idle);
  return Bytes(out.begin() + wire::kFrameHeaderBytes, out.end());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> body(data, size);
  auto frame = wire::Decode(body);
  if (!frame) {
    Check(Typed(frame.error()));
    return 0;
  }
  Check(Reencode(*frame) == Bytes(body.begin(), body.end()));
  for (const wire::Record& rec : frame->data.records) {
    Check(rec.key.depth < internal::kDepthMax);
    if (rec.listing) {
      Check(!rec.bounded && (rec.lacking || !rec.fingerprints.empty()));
      Check(rec.fingerprints.size() <= wire::kListingLeavesMax);
      Check(std::is_sorted(rec.fingerprints.begin(), rec.fingerprints.end()));
      continue;
    }
    for (int c = 0; c < internal::kFanout; ++c) Check(!rec.Has(c) || rec.children[c].count > 0);
    (void)rec.Total();
  }
  return 0;
}
