// File: envelope.h
//
// The event envelope: one entry of an execution's log.
//
//   Envelope e{.execution_id = "order-7", .sequence = 1,
//              .kind = "EXECUTION_STARTED", .payload = {{"input", 3}},
//              .metadata = {.kernel = true}, .time_ms = clock.NowUnixMillis()};
//
// Sequences are 1-based and dense per execution. metadata (metadata.h) holds
// `fence` (the token the append was made under, 0 when none was held) and
// `kernel: true` on every kernel event; applications may add other members
// in metadata.extra.

#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "once/base/result.h"
#include "once/events/kind.h"
#include "once/events/kinds.h"
#include "once/events/metadata.h"

namespace once::events {

using Json = nlohmann::json;

struct Envelope {
  std::string execution_id;
  int64_t sequence = 0;
  Kind kind;
  Json payload;  // any JSON value; null when absent
  Metadata metadata;
  int64_t time_ms = 0;  // Unix milliseconds when appended

  // The token the append was made under (metadata.fence), or 0.
  int64_t fence() const { return metadata.fence; }
  bool is_kernel() const { return metadata.kernel; }
  bool answering() const { return IsAnswering(kind, metadata); }
  bool Is(KernelKind k) const { return kind.Is(k); }

  friend bool operator==(const Envelope&, const Envelope&) = default;
};

// A JSON object from key/value pairs, built in place:
//   JsonObject("name", name, "value", std::move(v))  ==  Json{{"name", name}, {"value", v}}
// (an initializer list builds a [key, value] array per member, copies it and
// frees it again; this emplaces each member once, moving rvalues).
template <class... KeysAndValues>
Json JsonObject(KeysAndValues&&... members);

// A JSON array of the values, built in place (rvalues moved):
//   JsonArray(std::move(wait))  ==  Json::array({wait})
// (as with JsonObject, an initializer list copies each value once more).
template <class... Values>
Json JsonArray(Values&&... values);

// Frees the tree `json` holds, leaving null: the same as destroying it, for
// less. (nlohmann's destructor flattens a container's members into a
// std::vector it allocates, whatever the container's size; emptying each
// container from the bottom first allocates nothing. Containers nested past
// kFreeTreeDepth are left to the destructor.)
inline constexpr size_t kFreeTreeDepth = 32;
void FreeTree(Json& json);
// FreeTree on each event's payload.
void FreePayloads(std::span<Envelope> events);

// Builds a kernel event (metadata.kernel = true; metadata.fence when fence > 0).
Envelope KernelEvent(KernelKind kind, Json payload, int64_t fence = 0);
// Builds an application event (no kernel stamp).
Envelope AppEvent(std::string kind, Json payload);

// Parses JSON text; malformed text is kInvalidArgument. Non-negative integers
// that fit in int64_t come back signed (number_integer), as a writer of
// Json(17) had them.
Result<Json> ParseJson(std::string_view text);

namespace internal {
inline void EmplaceMembers(Json::object_t&) {}
template <class V, class... Rest>
void EmplaceMembers(Json::object_t& object, std::string_view key, V&& value, Rest&&... rest) {
  object.emplace(std::string(key), Json(std::forward<V>(value)));
  EmplaceMembers(object, std::forward<Rest>(rest)...);
}
}  // namespace internal

template <class... KeysAndValues>
Json JsonObject(KeysAndValues&&... members) {
  static_assert(sizeof...(members) % 2 == 0, "JsonObject takes key, value pairs");
  Json out(Json::value_t::object);
  internal::EmplaceMembers(out.get_ref<Json::object_t&>(), std::forward<KeysAndValues>(members)...);
  return out;
}

template <class... Values>
Json JsonArray(Values&&... values) {
  Json out(Json::value_t::array);
  Json::array_t& array = out.get_ref<Json::array_t&>();
  array.reserve(sizeof...(values));
  (array.emplace_back(std::forward<Values>(values)), ...);
  return out;
}

}  // namespace once::events
