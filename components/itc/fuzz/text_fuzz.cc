// libFuzzer target for the itc text parsers (ParseParty, ParseVersion: what
// the itc tool, the sush client and the simulator read from people and
// files). Every input is either refused with a typed error or parses to a
// value that
//   - formats to canonical text that parses back to the same value, and
//     formats again to the same text (Format is a fixed point of Parse);
//   - equals the value its binary encoding decodes to.
// The parser accepts non-canonical text on purpose (whitespace, leading zeros,
// unnormalised trees such as `(1,1)` or `(0,2,2)`; text.h), so the property
// on the input side is the weaker Parse(Format(Parse(t))) == Parse(t), not
// Format(Parse(t)) == t. Seeds: components/itc/fuzz/corpus/itc_text_fuzz.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "once/itc/text.h"

namespace {

using namespace once;
using namespace once::itc;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool Typed(const Error& e) {
  return e.code == ErrorCode::kInvalidArgument || e.code == ErrorCode::kLimitExceeded;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto party = ParseParty(text);
  if (party) {
    const std::string canonical = FormatParty(*party);
    auto again = ParseParty(canonical);
    Check(again && *again == *party && FormatParty(*again) == canonical);
    auto decoded = Party::Decode(party->Encode());
    Check(decoded && *decoded == *party);
  } else {
    Check(Typed(party.error()));
  }
  auto version = ParseVersion(text);
  if (version) {
    const std::string canonical = FormatVersion(*version);
    auto again = ParseVersion(canonical);
    Check(again && *again == *version && FormatVersion(*again) == canonical);
    auto decoded = Version::Decode(version->Encode());
    Check(decoded && *decoded == *version);
    Check(Leq(*version, *version) && Join(*version, *version) == *version);
  } else {
    Check(Typed(version.error()));
  }
  return 0;
}
