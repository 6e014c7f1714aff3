// libFuzzer target for the memory store's packed payloads (packed_json.h,
// UnpackJson). Every input is either refused with kCorruption or unpacks to
// a value that packs back to exactly the input: the reader accepts only
// what PackJson writes. Seeds: components/store/fuzz/corpus/
// store_packed_json_fuzz (kept by store_test).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "packed_json.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  once::Result<once::events::Json> json = once::store::internal::UnpackJson(bytes, 64);
  if (!json) {
    Check(json.error().code == once::ErrorCode::kCorruption);
    return 0;
  }
  std::string again;
  once::store::internal::PackJson(*json, again);
  Check(again == bytes);
  return 0;
}
