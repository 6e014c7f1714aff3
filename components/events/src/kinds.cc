#include "once/events/kinds.h"

#include <nlohmann/json.hpp>
#include <ostream>

#include "once/events/kind.h"

namespace once::events {
namespace {

constexpr size_t CountAnswering() {
  size_t n = 0;
  for (const auto& row : kKernelKinds) n += row.effect == ParkEffect::kAnswering ? 1 : 0;
  return n;
}

constexpr auto kAnsweringNames = [] {
  std::array<std::string_view, CountAnswering()> out{};
  size_t i = 0;
  for (const auto& row : kKernelKinds) {
    if (row.effect == ParkEffect::kAnswering) out[i++] = row.name;
  }
  return out;
}();

constexpr bool IsStatusRow(const KernelKindInfo& row) {
  return row.terminal || row.kind == KernelKind::kExecutionStarted ||
         row.kind == KernelKind::kExecutionSuspended;
}

constexpr size_t CountStatus() {
  size_t n = 0;
  for (const auto& row : kKernelKinds) n += IsStatusRow(row) ? 1 : 0;
  return n;
}

constexpr auto kStatusNames = [] {
  std::array<std::string_view, CountStatus()> out{};
  size_t i = 0;
  for (const auto& row : kKernelKinds) {
    if (IsStatusRow(row)) out[i++] = row.name;
  }
  return out;
}();

constexpr auto kAllNames = [] {
  std::array<std::string_view, kKernelKindCount> out{};
  for (size_t i = 0; i < kKernelKinds.size(); ++i) out[i] = kKernelKinds[i].name;
  return out;
}();

}  // namespace

std::optional<KernelKind> ParseKernelKind(std::string_view name) {
  for (const auto& row : kKernelKinds) {
    if (row.name == name) return row.kind;
  }
  return std::nullopt;
}

bool IsKernelStamped(const nlohmann::json& metadata) {
  if (!metadata.is_object()) return false;
  auto it = metadata.find("kernel");
  return it != metadata.end() && it->is_boolean() && it->get<bool>();
}

bool IsAnswering(std::optional<KernelKind> kernel_kind, bool kernel_stamped) {
  if (kernel_kind) return Info(*kernel_kind).effect == ParkEffect::kAnswering;
  return kernel_stamped;
}

bool IsAnswering(std::string_view kind, const nlohmann::json& metadata) {
  return IsAnswering(ParseKernelKind(kind), IsKernelStamped(metadata));
}

std::span<const std::string_view> AnsweringKernelKindNames() { return kAnsweringNames; }
std::span<const std::string_view> AllKernelKindNames() { return kAllNames; }
bool IsStatusKind(KernelKind kind) { return IsStatusRow(Info(kind)); }
std::span<const std::string_view> StatusKernelKindNames() { return kStatusNames; }

Kind Kind::FromStored(std::string name) {
  if (std::optional<KernelKind> k = ParseKernelKind(name)) return Kind(*k);
  return Kind(std::move(name));
}

std::ostream& operator<<(std::ostream& os, const Kind& kind) { return os << kind.view(); }

std::string operator+(std::string text, const Kind& kind) {
  text += kind.view();
  return text;
}

}  // namespace once::events
