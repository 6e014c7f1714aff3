// File: metadata.h
//
// An event's metadata: a JSON object whose two kernel members are held as
// fields, so the metadata of a kernel event costs no allocation and no tree.
//
//   Metadata m;                 // {}
//   m.kernel = true;            // {"kernel":true}
//   m.fence = 7;                // {"fence":7,"kernel":true}
//   m.extra["trace"] = "ab-1";  // {"fence":7,"kernel":true,"trace":"ab-1"}
//
// The object and the struct map one to one:
//   "fence"  -> `fence` when it is an integer >= 1 (the token the append was
//               made under; 0 means none was held and writes no member),
//   "kernel" -> `kernel` when it is the boolean true,
//   every other member, and a "fence" or "kernel" of any other value (the
//   string "true", 0, ...), stays in `extra`, a JSON object (or null: none).
// So a stored object reads back as the struct that wrote it, and the text
// is byte for byte json.dump() of ToJson() (members in key order).

#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "once/base/result.h"
#include "once/events/kind.h"
#include "once/events/kinds.h"

namespace once::events {

using Json = nlohmann::json;

struct Metadata {
  int64_t fence = 0;    // "fence"; 0: none
  bool kernel = false;  // "kernel": true
  Json extra;           // every other member: an object, or null for none

  // The struct for a JSON object (null reads as {}). A value that is not an
  // object is kept in `extra`, where Problem() reports it.
  static Metadata FromJson(Json json);
  Json ToJson() const;

  // Why this metadata cannot be stored, or nullopt: `extra` is not an
  // object; `fence` < 0; `extra` holds a member the fields own ("fence" as an
  // integer >= 1 or "kernel": true, which would read back as the field), or
  // one a set field also writes.
  std::optional<std::string_view> Problem() const;

  friend bool operator==(const Metadata& a, const Metadata& b);
};

// The three rules of IsAnswering (kinds.h) on a struct.
bool IsAnswering(const Kind& kind, const Metadata& metadata);

// Appends json.dump() of metadata.ToJson() to `out`; false when a string in
// `extra` is not UTF-8 (as AppendJsonText). Metadata without `extra` is
// written without building any JSON.
bool AppendMetadataText(const Metadata& metadata, std::string& out);

// Parses stored metadata text. The texts kernel events write ({}, {"kernel":
// true}, {"fence":N,"kernel":true}, {"fence":N}) are read without the JSON
// parser. Malformed text or a value that is not an object is kInvalidArgument.
Result<Metadata> ParseMetadataText(std::string_view text);

}  // namespace once::events
