#include "once/events/kernel_payload.h"

#include <initializer_list>
#include <string_view>

namespace once::events {
namespace {

using Json = nlohmann::json;

enum class Type { kString, kInteger, kObject, kNullOrObject, kNullOrString };

bool HasType(const Json& v, Type t) {
  switch (t) {
    case Type::kString:
      return v.is_string();
    case Type::kInteger:
      return v.is_number_integer();
    case Type::kObject:
      return v.is_object();
    case Type::kNullOrObject:
      return v.is_null() || v.is_object();
    case Type::kNullOrString:
      return v.is_null() || v.is_string();
  }
  return false;
}

std::string_view TypeName(Type t) {
  switch (t) {
    case Type::kString:
      return "a string";
    case Type::kInteger:
      return "an integer";
    case Type::kObject:
      return "an object";
    case Type::kNullOrObject:
      return "null or an object";
    case Type::kNullOrString:
      return "null or a string";
  }
  return "?";
}

struct Member {
  const char* name;
  Type type;
  bool required = false;
};

// nullopt when every listed member of `object` (an object) has its type.
std::optional<std::string> CheckMembers(const Json& object, std::string_view what,
                                        std::initializer_list<Member> members) {
  for (const Member& m : members) {
    auto it = object.find(m.name);
    if (it == object.end()) {
      if (m.required) return std::string(what) + " has no \"" + m.name + "\"";
      continue;
    }
    if (!HasType(*it, m.type)) {
      return std::string(what) + "'s \"" + m.name + "\" is not " + std::string(TypeName(m.type));
    }
  }
  return std::nullopt;
}

std::optional<std::string> CheckParent(const Json& payload) {
  auto it = payload.find("parent");
  if (it == payload.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return std::string("the payload's \"parent\" is not null or an object");
  return CheckMembers(*it, "the parent",
                      {{"execution_id", Type::kString, true}, {"key", Type::kString, true}});
}

std::optional<std::string> CheckWaits(const Json& payload) {
  auto it = payload.find("waits");
  if (it == payload.end()) return std::nullopt;
  if (!it->is_array()) return std::string("the payload's \"waits\" is not an array");
  for (const Json& wait : *it) {
    if (!wait.is_object()) return std::string("a wait is not an object");
    if (auto p = CheckMembers(wait, "a wait",
                              {{"type", Type::kString},
                               {"key", Type::kString},
                               {"topic", Type::kString},
                               {"wake_at_ms", Type::kInteger},
                               {"group", Type::kString}})) {
      return p;
    }
  }
  return std::nullopt;
}

std::optional<std::string> CheckObject(KernelKind kind, const Json& p) {
  constexpr std::string_view kPayload = "the payload";
  switch (kind) {
    case KernelKind::kExecutionStarted:
      if (auto e = CheckMembers(p, kPayload,
                                {{"workflow", Type::kString},
                                 {"principal", Type::kString},
                                 {"continued_from", Type::kNullOrString}})) {
        return e;
      }
      return CheckParent(p);
    case KernelKind::kExecutionResumed:
      return CheckMembers(
          p, kPayload,
          {{"park_seq", Type::kInteger}, {"wait", Type::kNullOrObject}, {"by", Type::kString}});
    case KernelKind::kExecutionSuspended:
      if (auto e = CheckMembers(p, kPayload, {{"call", Type::kString}, {"group", Type::kString}})) {
        return e;
      }
      return CheckWaits(p);
    case KernelKind::kExecutionFailed:
      return CheckMembers(p, kPayload, {{"error", Type::kObject}});
    case KernelKind::kExecutionContinued:
      return CheckMembers(p, kPayload, {{"next", Type::kString}});
    case KernelKind::kStepCompleted:
    case KernelKind::kStepFailed:
      return CheckMembers(p, kPayload, {{"name", Type::kString, true}});
    case KernelKind::kChildStarted:
      return CheckMembers(p, kPayload,
                          {{"key", Type::kString, true},
                           {"child_id", Type::kString},
                           {"workflow", Type::kString},
                           {"group", Type::kString}});
    case KernelKind::kMessageConsumed:
      return CheckMembers(p, kPayload, {{"topic", Type::kString, true}});
    default:
      return std::nullopt;
  }
}

}  // namespace

bool IsSealedPayload(const Json& payload) {
  if (!payload.is_object() || payload.size() != 1) return false;
  auto it = payload.find("$sealed");
  return it != payload.end() && it->is_string();
}

std::optional<std::string> KernelPayloadProblem(KernelKind kind, const Json& payload) {
  switch (kind) {
    case KernelKind::kExecutionMigrated:
    case KernelKind::kAnnotation:
      return std::nullopt;
    case KernelKind::kExecutionResumed:
      if (payload.is_null()) return std::nullopt;
      break;
    default:
      break;
  }
  if (IsSealedPayload(payload)) return std::nullopt;
  if (!payload.is_object()) {
    return std::string(Name(kind)) + "'s payload is not " +
           (kind == KernelKind::kExecutionResumed ? "null or an object" : "an object");
  }
  if (auto problem = CheckObject(kind, payload)) {
    return std::string(Name(kind)) + ": " + *problem;
  }
  return std::nullopt;
}

}  // namespace once::events
