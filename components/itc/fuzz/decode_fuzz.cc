// libFuzzer target for the itc decoders. Every input must either be refused
// with a typed error or decode to a value that re-encodes to exactly the
// input and survives the operations unharmed.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "once/itc/clock.h"
#include "once/itc/text.h"

namespace {

using namespace once;
using namespace once::itc;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool Typed(const Error& e) {
  return e.code == ErrorCode::kInvalidArgument || e.code == ErrorCode::kCorruption ||
         e.code == ErrorCode::kLimitExceeded;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto party = Party::Decode(bytes);
  if (party) {
    Check(party->Encode() == Bytes(bytes.begin(), bytes.end()));
    Check(*ParseParty(FormatParty(*party)) == *party);
    Check(Tick(Version(), *party).has_value());
  } else {
    Check(Typed(party.error()));
  }
  auto version = Version::Decode(bytes);
  if (version) {
    Check(version->Encode() == Bytes(bytes.begin(), bytes.end()));
    Check(*ParseVersion(FormatVersion(*version)) == *version);
    Check(Leq(*version, Join(*version, Version())));
    (void)MinTicks(*version);
    (void)RankOf(*version);
    auto t = Tick(*version, Party::Seed());
    Check(t.has_value() || t.error().code == ErrorCode::kLimitExceeded);
  } else {
    Check(Typed(version.error()));
  }
  auto clock = Clock::Decode(bytes);
  if (clock) {
    Check(clock->Encode() == Bytes(bytes.begin(), bytes.end()));
    auto t = Tick(clock->version(), clock->party());
    Check(t.has_value() || t.error().code == ErrorCode::kLimitExceeded);
    if (t) Check(Leq(clock->version(), *t) && !(clock->version() == *t));
  } else {
    Check(Typed(clock.error()));
  }
  return 0;
}
