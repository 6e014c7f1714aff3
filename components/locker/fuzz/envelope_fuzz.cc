// libFuzzer target for the locker's envelope decoder (DecodeEnvelope, what
// Locker::Open reads from each drive). Every input must either be refused
// with a typed error or decode to an envelope whose re-encoding is exactly the
// input: the decoder accepts only the bytes EncodeEnvelope writes. Seeds:
// components/locker/fuzz/corpus/locker_envelope_fuzz (real encodings; scripts/fuzz
// copies them).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "once/locker/envelope.h"

namespace {

using namespace once;
using namespace once::locker;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool Typed(const Error& e) {
  return e.code == ErrorCode::kCorruption || e.code == ErrorCode::kInvalidArgument ||
         e.code == ErrorCode::kLimitExceeded;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  auto envelope = DecodeEnvelope(input);
  if (!envelope) {
    Check(Typed(envelope.error()));
    return 0;
  }
  Check(envelope->record.size() <= kRecordBytesMax);
  auto again = EncodeEnvelope(*envelope);
  Check(again.has_value());
  Check(*again == Bytes(input.begin(), input.end()));
  return 0;
}
