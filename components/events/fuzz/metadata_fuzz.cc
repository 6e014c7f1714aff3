// libFuzzer target for the event metadata reader (ParseMetadataText: what
// the SQLite and PostgreSQL stores read back from their metadata column, the
// kernel events' texts without the JSON parser). Every input is either
// refused with kInvalidArgument or parses to a Metadata that
//   - equals what the JSON parser makes of the same text (ParseJson, then
//     Metadata::FromJson): the fast path may only be quicker, never differ;
//   - can be stored (Problem() is nullopt);
//   - writes (AppendMetadataText) exactly json.dump() of its ToJson(), text
//     that parses back to the same Metadata and writes again to itself.
// JSON allows whitespace, escapes and member orders the writer never makes
// (PostgreSQL's jsonb::text adds spaces), so the property on the input side
// is the weaker Parse(Write(Parse(t))) == Parse(t), not Write(Parse(t)) == t.
// Seeds: components/events/fuzz/corpus/events_metadata_fuzz (kept by events_test).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "once/events/envelope.h"
#include "once/events/metadata.h"

namespace {

using namespace once;
using namespace once::events;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<Metadata> m = ParseMetadataText(text);
  Result<Json> json = ParseJson(text);
  const bool object = json && json->is_object();
  Check(m.has_value() == object);
  if (!m) {
    Check(m.error().code == ErrorCode::kInvalidArgument);
    return 0;
  }
  Check(*m == Metadata::FromJson(std::move(*json)));
  Check(!m->Problem());
  std::string written;
  Check(AppendMetadataText(*m, written));
  Check(written == m->ToJson().dump());
  Result<Metadata> back = ParseMetadataText(written);
  Check(back && *back == *m);
  std::string again;
  Check(AppendMetadataText(*back, again) && again == written);
  return 0;
}
