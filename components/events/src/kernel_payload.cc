#include "once/events/kernel_payload.h"

#include <array>
#include <span>
#include <string_view>

namespace once::events {
namespace {

using Json = nlohmann::json;

// A member's type. kParent and kWaits are checked in depth (CheckParent,
// CheckWaits).
enum class Type { kString, kInteger, kObject, kNullOrObject, kNullOrString, kParent, kWaits };

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
    case Type::kParent:
    case Type::kWaits:
      break;  // checked in depth, by CheckMember
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
    case Type::kParent:
    case Type::kWaits:
      break;
  }
  return "?";
}

struct Member {
  std::string_view name;
  Type type;
  bool required = false;
};

std::optional<std::string> CheckParent(const Json& parent);
std::optional<std::string> CheckWaits(const Json& waits);

// nullopt when `v`, the member `m` of `what`, has m's type.
std::optional<std::string> CheckMember(const Json& v, const Member& m, std::string_view what) {
  if (m.type == Type::kParent) return CheckParent(v);
  if (m.type == Type::kWaits) return CheckWaits(v);
  if (HasType(v, m.type)) return std::nullopt;
  return std::string(what) + "'s \"" + std::string(m.name) + "\" is not " +
         std::string(TypeName(m.type));
}

// The bytewise order of a key and a member's name (< 0, 0, > 0), as
// std::string_view::compare gives it. The names of one payload's members
// mostly differ in their first byte, which is compared here without a call.
int CompareName(std::string_view key, std::string_view name) {
  if (!key.empty() && key[0] != name[0]) {  // a member's name is never empty
    return static_cast<unsigned char>(key[0]) < static_cast<unsigned char>(name[0]) ? -1 : 1;
  }
  return key.compare(name);
}

// nullopt when every listed member of `object` (an object) has its shape
// and every required one is there. `members` is sorted by name, as the
// object's own members are (bytewise), so one walk over both finds them
// all: no lookup per member, and one comparison per step of the walk.
std::optional<std::string> CheckMembers(const Json& object, std::string_view what,
                                        std::span<const Member> members) {
  const Json::object_t& have = object.get_ref<const Json::object_t&>();
  auto it = have.begin();
  for (const Member& m : members) {
    int order = 1;  // the key at `it` against m's name; 1 past the last key
    for (; it != have.end(); ++it) {
      order = CompareName(it->first, m.name);
      if (order >= 0) break;
    }
    if (order != 0) {
      if (m.required) return std::string(what) + " has no \"" + std::string(m.name) + "\"";
      continue;
    }
    if (auto problem = CheckMember(it->second, m, what)) return problem;
    ++it;
  }
  return std::nullopt;
}

template <size_t N>
constexpr bool SortedByName(const std::array<Member, N>& members) {
  for (size_t i = 0; i < N; ++i) {
    if (members[i].name.empty()) return false;  // CompareName reads a name's first byte
    if (i > 0 && !(members[i - 1].name < members[i].name)) return false;
  }
  return true;
}

// The members of each payload and nested object, sorted by name, none empty
// (checked at compile time).
constexpr std::array<Member, 2> kParentMembers{
    {{"execution_id", Type::kString, true}, {"key", Type::kString, true}}};
constexpr std::array<Member, 5> kWaitMembers{{{"group", Type::kString},
                                              {"key", Type::kString},
                                              {"topic", Type::kString},
                                              {"type", Type::kString},
                                              {"wake_at_ms", Type::kInteger}}};
constexpr std::array<Member, 4> kStartedMembers{{{"continued_from", Type::kNullOrString},
                                                 {"parent", Type::kParent},
                                                 {"principal", Type::kString},
                                                 {"workflow", Type::kString}}};
constexpr std::array<Member, 3> kResumedMembers{
    {{"by", Type::kString}, {"park_seq", Type::kInteger}, {"wait", Type::kNullOrObject}}};
constexpr std::array<Member, 3> kSuspendedMembers{
    {{"call", Type::kString}, {"group", Type::kString}, {"waits", Type::kWaits}}};
constexpr std::array<Member, 1> kFailedMembers{{{"error", Type::kObject}}};
constexpr std::array<Member, 1> kContinuedMembers{{{"next", Type::kString}}};
constexpr std::array<Member, 1> kStepMembers{{{"name", Type::kString, true}}};
constexpr std::array<Member, 4> kChildMembers{{{"child_id", Type::kString},
                                               {"group", Type::kString},
                                               {"key", Type::kString, true},
                                               {"workflow", Type::kString}}};
constexpr std::array<Member, 1> kConsumedMembers{{{"topic", Type::kString, true}}};
static_assert(SortedByName(kParentMembers) && SortedByName(kWaitMembers) &&
              SortedByName(kStartedMembers) && SortedByName(kResumedMembers) &&
              SortedByName(kSuspendedMembers) && SortedByName(kFailedMembers) &&
              SortedByName(kContinuedMembers) && SortedByName(kStepMembers) &&
              SortedByName(kChildMembers) && SortedByName(kConsumedMembers));

std::optional<std::string> CheckParent(const Json& parent) {
  if (parent.is_null()) return std::nullopt;
  if (!parent.is_object()) return std::string("the payload's \"parent\" is not null or an object");
  return CheckMembers(parent, "the parent", kParentMembers);
}

std::optional<std::string> CheckWaits(const Json& waits) {
  if (!waits.is_array()) return std::string("the payload's \"waits\" is not an array");
  for (const Json& wait : waits) {
    if (!wait.is_object()) return std::string("a wait is not an object");
    if (auto p = CheckMembers(wait, "a wait", kWaitMembers)) return p;
  }
  return std::nullopt;
}

std::optional<std::string> CheckObject(KernelKind kind, const Json& p) {
  constexpr std::string_view kPayload = "the payload";
  switch (kind) {
    case KernelKind::kExecutionStarted:
      return CheckMembers(p, kPayload, kStartedMembers);
    case KernelKind::kExecutionResumed:
      return CheckMembers(p, kPayload, kResumedMembers);
    case KernelKind::kExecutionSuspended:
      return CheckMembers(p, kPayload, kSuspendedMembers);
    case KernelKind::kExecutionFailed:
      return CheckMembers(p, kPayload, kFailedMembers);
    case KernelKind::kExecutionContinued:
      return CheckMembers(p, kPayload, kContinuedMembers);
    case KernelKind::kStepCompleted:
    case KernelKind::kStepFailed:
      return CheckMembers(p, kPayload, kStepMembers);
    case KernelKind::kChildStarted:
      return CheckMembers(p, kPayload, kChildMembers);
    case KernelKind::kMessageConsumed:
      return CheckMembers(p, kPayload, kConsumedMembers);
    default:
      return std::nullopt;
  }
}

}  // namespace

bool IsSealedPayload(const Json& payload) {
  if (!payload.is_object() || payload.size() != 1) return false;
  const auto& only = *payload.get_ref<const Json::object_t&>().begin();
  return only.first == "$sealed" && only.second.is_string();
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
