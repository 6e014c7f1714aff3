#include "once/events/metadata.h"

#include <charconv>
#include <limits>

#include "once/events/envelope.h"
#include "once/events/json_text.h"

namespace once::events {
namespace {

constexpr std::string_view kFence = "fence";
constexpr std::string_view kKernel = "kernel";

// An integer >= 1 that fits in int64_t: the value the `fence` field owns.
std::optional<int64_t> FenceValue(const Json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u >= 1 && u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(u);
    }
    return std::nullopt;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 1) return v.get<int64_t>();
  return std::nullopt;
}

bool IsTrue(const Json& v) { return v.is_boolean() && v.get<bool>(); }

bool NoExtra(const Json& extra) { return extra.is_null() || (extra.is_object() && extra.empty()); }

void AppendFence(int64_t fence, std::string& out) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, fence).ptr;
  out += "\"fence\":";
  out.append(digits, end);
}

}  // namespace

Metadata Metadata::FromJson(Json json) {
  Metadata m;
  if (json.is_null()) return m;
  if (!json.is_object()) {
    m.extra = std::move(json);
    return m;
  }
  auto& members = json.get_ref<Json::object_t&>();
  if (auto it = members.find(std::string(kFence)); it != members.end()) {
    if (std::optional<int64_t> token = FenceValue(it->second)) {
      m.fence = *token;
      members.erase(it);
    }
  }
  if (auto it = members.find(std::string(kKernel)); it != members.end() && IsTrue(it->second)) {
    m.kernel = true;
    members.erase(it);
  }
  if (!members.empty()) m.extra = std::move(json);
  return m;
}

Json Metadata::ToJson() const {
  if (!extra.is_null() && !extra.is_object()) return extra;  // as given; Problem() says why
  Json out = extra.is_object() ? extra : Json::object();
  if (fence != 0) out[std::string(kFence)] = fence;
  if (kernel) out[std::string(kKernel)] = true;
  return out;
}

std::optional<std::string_view> Metadata::Problem() const {
  if (!extra.is_null() && !extra.is_object()) return "metadata must be a JSON object";
  if (fence < 0) return "metadata fence must be >= 0";
  if (!extra.is_object()) return std::nullopt;
  if (auto it = extra.find(kFence); it != extra.end() && (fence != 0 || FenceValue(*it))) {
    return "metadata extra holds a fence token: set Metadata::fence";
  }
  if (auto it = extra.find(kKernel); it != extra.end() && (kernel || IsTrue(*it))) {
    return "metadata extra holds kernel: true: set Metadata::kernel";
  }
  return std::nullopt;
}

bool operator==(const Metadata& a, const Metadata& b) {
  if (a.fence != b.fence || a.kernel != b.kernel) return false;
  if (NoExtra(a.extra) && NoExtra(b.extra)) return true;
  return a.extra == b.extra;
}

bool IsAnswering(const Kind& kind, const Metadata& metadata) {
  std::optional<KernelKind> k = kind.interned();
  return IsAnswering(k ? k : ParseKernelKind(kind.view()), metadata.kernel);
}

bool AppendMetadataText(const Metadata& m, std::string& out) {
  if (!NoExtra(m.extra) && !m.extra.is_object()) return AppendJsonText(m.extra, out);
  out += '{';
  bool first = true;
  bool fence_due = m.fence != 0;
  bool kernel_due = m.kernel;
  auto separate = [&] {
    if (!first) out += ',';
    first = false;
  };
  // Writes the fields whose keys sort before `key` (all of them at the end).
  auto fields_before = [&](std::optional<std::string_view> key) {
    if (fence_due && (!key || kFence < *key)) {
      separate();
      AppendFence(m.fence, out);
      fence_due = false;
    }
    if (kernel_due && (!key || kKernel < *key)) {
      separate();
      out += "\"kernel\":true";
      kernel_due = false;
    }
  };
  if (m.extra.is_object()) {
    for (const auto& [key, value] : m.extra.get_ref<const Json::object_t&>()) {
      fields_before(key);
      separate();
      if (!AppendJsonStringLiteral(key, out)) return false;
      out += ':';
      if (!AppendJsonText(value, out)) return false;
    }
  }
  fields_before(std::nullopt);
  out += '}';
  return true;
}

Result<Metadata> ParseMetadataText(std::string_view text) {
  constexpr std::string_view kKernelOnly = R"({"kernel":true})";
  constexpr std::string_view kFencePrefix = R"({"fence":)";
  constexpr std::string_view kKernelSuffix = R"(,"kernel":true})";
  if (text == "{}") return Metadata{};
  if (text == kKernelOnly) return Metadata{.kernel = true};
  if (text.starts_with(kFencePrefix) && text.size() > kFencePrefix.size() &&
      text[kFencePrefix.size()] >= '1' && text[kFencePrefix.size()] <= '9') {
    int64_t token = 0;
    const char* begin = text.data() + kFencePrefix.size();
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, token);
    if (ec == std::errc()) {
      std::string_view rest(ptr, static_cast<size_t>(end - ptr));
      if (rest == "}") return Metadata{.fence = token};
      if (rest == kKernelSuffix) return Metadata{.fence = token, .kernel = true};
    }
  }
  ONCE_ASSIGN_OR_RETURN(Json json, ParseJson(text));
  if (!json.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "metadata is not a JSON object");
  }
  return Metadata::FromJson(std::move(json));
}

}  // namespace once::events
