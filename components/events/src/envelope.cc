#include "once/events/envelope.h"

#include <limits>

namespace once::events {

Envelope KernelEvent(KernelKind kind, Json payload, int64_t fence) {
  Envelope e;
  e.kind = kind;
  e.payload = std::move(payload);
  e.metadata.kernel = true;
  e.metadata.fence = fence > 0 ? fence : 0;
  return e;
}

Envelope AppEvent(std::string kind, Json payload) {
  Envelope e;
  e.kind = std::move(kind);
  e.payload = std::move(payload);
  return e;
}

Result<Json> ParseJson(std::string_view text) {
  // The parser reads a non-negative integer as number_unsigned; a writer most
  // likely held a signed one (Json(17)). What fits in int64_t reads back as
  // number_integer, so values round-trip with their type.
  auto signed_ints = [](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::value && parsed.is_number_unsigned() &&
        parsed.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      parsed = static_cast<int64_t>(parsed.get<uint64_t>());
    }
    return true;
  };
  Json out = Json::parse(text, signed_ints, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    return MakeError(ErrorCode::kInvalidArgument, "malformed JSON");
  }
  return out;
}

namespace {

// Empties every container of `json` from the bottom up, `depth_left` levels
// down at most (below that the destructor's own walk frees them).
void Empty(Json& json, size_t depth_left) {
  if (depth_left == 0) return;
  if (json.is_object()) {
    for (auto& member : json.get_ref<Json::object_t&>()) {
      if (member.second.is_structured()) Empty(member.second, depth_left - 1);
    }
    json.get_ref<Json::object_t&>().clear();
  } else if (json.is_array()) {
    for (Json& v : json.get_ref<Json::array_t&>()) {
      if (v.is_structured()) Empty(v, depth_left - 1);
    }
    json.get_ref<Json::array_t&>().clear();
  }
}

}  // namespace

void FreeTree(Json& json) {
  Empty(json, kFreeTreeDepth);
  json = nullptr;
}

void FreePayloads(std::span<Envelope> events) {
  for (Envelope& e : events) FreeTree(e.payload);
}

}  // namespace once::events
