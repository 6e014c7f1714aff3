#include "once/events/envelope.h"

namespace once::events {

int64_t Envelope::fence() const {
  if (!metadata.is_object()) return 0;
  auto it = metadata.find("fence");
  if (it == metadata.end() || !it->is_number_integer()) return 0;
  return it->get<int64_t>();
}

Envelope KernelEvent(KernelKind kind, Json payload, int64_t fence) {
  Envelope e;
  e.kind = std::string(Name(kind));
  e.payload = std::move(payload);
  e.metadata = Json::object({{"kernel", true}});
  if (fence > 0) e.metadata["fence"] = fence;
  return e;
}

Envelope AppEvent(std::string kind, Json payload) {
  Envelope e;
  e.kind = std::move(kind);
  e.payload = std::move(payload);
  e.metadata = Json::object();
  return e;
}

Result<Json> ParseJson(std::string_view text) {
  Json out = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    return MakeError(ErrorCode::kInvalidArgument, "malformed JSON");
  }
  return out;
}

}  // namespace once::events
