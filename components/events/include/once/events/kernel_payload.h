// File: kernel_payload.h
//
// The shape a kernel event's payload must have (docs/event-schema.md): what
// the kernel's readers (the fold, the replay, the supervisor, the inbox)
// rely on when they read a log. One rule with two callers: every store
// refuses an append whose kernel event breaks it (kInvalidArgument, nothing
// written), and the runtime's fold reports a stored log that breaks it (a
// row written by hand or by an older build) as kCorruption instead of
// reading it.
//
//   if (auto problem = events::KernelPayloadProblem(KernelKind::kStepCompleted, payload)) {
//     return MakeError(ErrorCode::kInvalidArgument, *problem);
//   }
//
// The rules (a member marked ? may be absent; when present it must have
// this type):
//   EXECUTION_STARTED    object {workflow?: string, parent?: null | {execution_id: string,
//                        key: string}, principal?: string, continued_from?: null | string}
//   EXECUTION_RESUMED    null (a status-only re-open) or object {park_seq?: integer,
//                        wait?: null | object, by?: string}
//   EXECUTION_SUSPENDED  object {call?: string, group?: string, waits?: [wait...]}; a wait is
//                        an object {type?: string, key?: string, topic?: string,
//                        wake_at_ms?: integer, group?: string}
//   EXECUTION_COMPLETED, EXECUTION_CANCELLED, EXECUTION_DENIED, OUTCOME_RECORDED: object
//   EXECUTION_FAILED     object {error?: object}
//   EXECUTION_CONTINUED  object {next?: string}
//   STEP_COMPLETED, STEP_FAILED  object {name: string}
//   CHILD_STARTED        object {key: string, child_id?: string, workflow?: string,
//                        group?: string}
//   MESSAGE_CONSUMED     object {topic: string}
//   EXECUTION_MIGRATED, ANNOTATION: any JSON
// A sealed payload ({"$sealed": string}, written by a payload-encrypting
// decorator such as CryptoStore, which checks the plaintext before it seals
// it) passes for every kind: it cannot be read here.
//
// Threads: pure; any thread.

#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "once/events/kinds.h"

namespace once::events {

// What is wrong with `payload` for `kind`, or nullopt when it has the shape.
std::optional<std::string> KernelPayloadProblem(KernelKind kind, const nlohmann::json& payload);

// {"$sealed": string}: a payload a decorator sealed.
bool IsSealedPayload(const nlohmann::json& payload);

}  // namespace once::events
