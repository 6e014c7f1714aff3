// File: kinds.h
//
// The kernel's event kinds and how each one relates to a park.
//
// An event ANSWERS a park when it moves the execution out of "parked on this
// wait": a resume (any payload, even a null status-only re-open), a later
// park, or a terminal kind. Everything else the kernel writes after a park is
// an audit append that leaves the park open (a denial, an outcome, a failed
// step, a consumed message, a migration, an annotation, ...). The
// classification table below is exhaustive: adding a KernelKind without a
// row does not compile.
//
// IsAnswering(kind, metadata) applies three rules:
//   1. a kernel kind is classified by its row;
//   2. any other kind is an application event (Emit, a sibling's output) and
//      is ignorable, so a body that keeps emitting can still be resumed;
//   3. except an unknown kind stamped metadata.kernel == true (boolean): a
//      kernel kind from a newer node. It answers: fail closed.
//
//   if (events::IsAnswering(e.kind, e.metadata)) { /* the park is answered */ }

#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string_view>

namespace once::events {

enum class KernelKind : uint8_t {
  kExecutionStarted,
  kExecutionResumed,
  kExecutionSuspended,
  kExecutionCompleted,
  kExecutionFailed,
  kExecutionCancelled,
  kExecutionContinued,
  kExecutionDenied,
  kOutcomeRecorded,
  kStepCompleted,
  kStepFailed,
  kMessageConsumed,
  kExecutionMigrated,
  kAnnotation,
  kChildStarted,
  kCount,  // keep last
};

inline constexpr size_t kKernelKindCount = static_cast<size_t>(KernelKind::kCount);

enum class ParkEffect : uint8_t { kAnswering, kIgnorable };

struct KernelKindInfo {
  KernelKind kind;
  std::string_view name;  // the kind as stored, e.g. "EXECUTION_RESUMED"
  ParkEffect effect;
  bool terminal;  // ends the execution (no further body events)
};

// Row i describes KernelKind(i).
inline constexpr std::array<KernelKindInfo, kKernelKindCount> kKernelKinds = {{
    {KernelKind::kExecutionStarted, "EXECUTION_STARTED", ParkEffect::kIgnorable, false},
    {KernelKind::kExecutionResumed, "EXECUTION_RESUMED", ParkEffect::kAnswering, false},
    {KernelKind::kExecutionSuspended, "EXECUTION_SUSPENDED", ParkEffect::kAnswering, false},
    {KernelKind::kExecutionCompleted, "EXECUTION_COMPLETED", ParkEffect::kAnswering, true},
    {KernelKind::kExecutionFailed, "EXECUTION_FAILED", ParkEffect::kAnswering, true},
    {KernelKind::kExecutionCancelled, "EXECUTION_CANCELLED", ParkEffect::kAnswering, true},
    {KernelKind::kExecutionContinued, "EXECUTION_CONTINUED", ParkEffect::kAnswering, true},
    {KernelKind::kExecutionDenied, "EXECUTION_DENIED", ParkEffect::kIgnorable, false},
    {KernelKind::kOutcomeRecorded, "OUTCOME_RECORDED", ParkEffect::kIgnorable, false},
    {KernelKind::kStepCompleted, "STEP_COMPLETED", ParkEffect::kIgnorable, false},
    {KernelKind::kStepFailed, "STEP_FAILED", ParkEffect::kIgnorable, false},
    {KernelKind::kMessageConsumed, "MESSAGE_CONSUMED", ParkEffect::kIgnorable, false},
    {KernelKind::kExecutionMigrated, "EXECUTION_MIGRATED", ParkEffect::kIgnorable, false},
    {KernelKind::kAnnotation, "ANNOTATION", ParkEffect::kIgnorable, false},
    {KernelKind::kChildStarted, "CHILD_STARTED", ParkEffect::kIgnorable, false},
}};

namespace internal {
constexpr bool RowsInOrder() {
  for (size_t i = 0; i < kKernelKinds.size(); ++i) {
    if (static_cast<size_t>(kKernelKinds[i].kind) != i || kKernelKinds[i].name.empty()) {
      return false;
    }
  }
  return true;
}
}  // namespace internal
static_assert(internal::RowsInOrder(),
              "every KernelKind needs its row in kKernelKinds, in enum order");

constexpr std::string_view Name(KernelKind kind) {
  return kKernelKinds[static_cast<size_t>(kind)].name;
}
constexpr const KernelKindInfo& Info(KernelKind kind) {
  return kKernelKinds[static_cast<size_t>(kind)];
}

// The kernel kind with this stored name, if any.
std::optional<KernelKind> ParseKernelKind(std::string_view name);

// True if metadata is an object whose "kernel" member is the boolean true
// (the string "true" does not count).
bool IsKernelStamped(const nlohmann::json& metadata);

// The three rules above, given the kernel kind the event's kind names (if
// any) and whether its metadata is kernel-stamped.
bool IsAnswering(std::optional<KernelKind> kernel_kind, bool kernel_stamped);
bool IsAnswering(std::string_view kind, const nlohmann::json& metadata);

// For SQL scans: the names of the answering kernel kinds, and of all kernel
// kinds. The scan for an answering event is
//   kind IN (answering) OR (kind NOT IN (all) AND metadata.kernel = true).
std::span<const std::string_view> AnsweringKernelKindNames();
std::span<const std::string_view> AllKernelKindNames();

// The kinds whose event places an execution in a status: EXECUTION_STARTED,
// EXECUTION_SUSPENDED and the terminal kinds, in kKernelKinds order. The SQL
// stores' partial status indexes hold exactly their events
// (docs/event-store.md); components/visibility lists executions from them.
bool IsStatusKind(KernelKind kind);
std::span<const std::string_view> StatusKernelKindNames();

}  // namespace once::events
