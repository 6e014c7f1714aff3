// File: validate.h
//
// Input checks every backend applies before it writes, and the encoded form
// SQL backends store. Shared so that every backend refuses the same inputs
// with the same codes.
//
//   ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(req, limits, clock));
//   for (const EncodedEvent& e : enc.events) { /* bind e.payload_json ... */ }

#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/store/event_store.h"

namespace once::store {

// Non-empty, at most limits.execution_id_bytes_max bytes, valid UTF-8, no
// control characters (U+0000..U+001F, U+007F). kInvalidArgument otherwise.
Status ValidateExecutionId(std::string_view id, const Limits& limits);

// The arguments of AcquireFenceIf (read_after: of AcquireFenceIfReadTail):
// a valid id, and fence, park_seq and read_after >= 0. kInvalidArgument
// otherwise.
Status ValidateFenceIf(std::string_view id, FenceExpectation expect, const Limits& limits,
                       int64_t read_after = 0);

// DeleteEnded's whole-call checks: at most limits.delete_batch_executions_max
// ids (kLimitExceeded) and no id twice (kInvalidArgument).
Status CheckDeleteEnded(std::span<const std::string> ids, const Limits& limits);

// ListEnded's limit: 0 is kInvalidArgument; else capped by
// limits.list_page_executions_max.
Result<size_t> EndedPageLimit(size_t limit, const Limits& limits);
// A ListEnded page of `found` (in place order, up to limit + 1 entries: the
// one past the limit says that another page follows).
EndedPage EndedPageOf(std::vector<EndedExecution> found, size_t limit);

// DeleteEnded's refusal of an execution with no ending event at or before
// the cutoff (kNotFound).
std::unexpected<Error> NotEndedBy(std::string_view id, int64_t ended_ms_max);

// Whether a stored kind is one of EndingKindNames.
bool IsEndingKind(std::string_view kind);

// Kind names as SQL string literals joined by ", " ('A', 'B'), for the SQL
// stores' IN lists and index predicates. Only for the kernel's constant
// names (upper-case identifiers: nothing to escape), never for user input.
std::string SqlQuotedList(std::span<const std::string_view> names);

// A kernel kind's payload has the shape events::KernelPayloadProblem
// demands (kInvalidArgument naming what is wrong); any other kind passes.
// EncodeAppend and CheckAppend apply it to every event.
Status CheckKernelPayload(const Envelope& e, std::string_view execution_id);

// A node id named as an owner (kOwnership): as an execution id (non-empty,
// at most execution_id_bytes_max bytes, UTF-8, no control characters).
Status ValidateOwner(std::string_view owner, const Limits& limits);

// Non-empty, at most limits.kind_bytes_max bytes, printable ASCII, no spaces.
Status ValidateKind(std::string_view kind, const Limits& limits);

struct EncodedEvent {
  int64_t sequence = 0;
  std::string kind;
  std::string payload_json;   // serialized payload ("null" when absent)
  std::string metadata_json;  // serialized metadata object ("{}" when absent)
  int64_t time_ms = 0;
  bool answering = false;  // events::IsAnswering(kind, metadata)
  bool suspends = false;   // kind == EXECUTION_SUSPENDED
};

struct EncodedAppend {
  std::vector<EncodedEvent> events;
  size_t bytes = 0;                           // sum of payload and metadata bytes
  bool answering = false;                     // some event answers a park
  bool suspends = false;                      // some event is a park
  RunRowChange run_row = RunRowChange::kRun;  // what the append does to the run row
};

// Validates one request (id, kinds, kernel payload shapes, sequences,
// metadata shape, sizes, nesting depth) and encodes it. An empty events list is kInvalidArgument.
// Times of 0 become clock.Now().
Result<EncodedAppend> EncodeAppend(const AppendRequest& req, const Limits& limits,
                                   const Clock& clock);

// The checks a store applies to `e` as the only event of an append to
// `execution_id` (id, kind, metadata, kernel payload shape, nesting depth,
// event_bytes_max), with the same codes, without copying or serializing it:
// the runtime refuses a Start the store is certain to refuse before the
// body's first step runs.
Status CheckFirstEvent(std::string_view execution_id, const Envelope& e, const Limits& limits);

// What CheckAppend learns about a valid request, without encoding it.
struct CheckedAppend {
  size_t bytes = 0;    // sum of payload and metadata bytes, exactly as EncodeAppend counts
  int64_t now_ms = 0;  // the time for events whose time_ms is 0 (0 when none has)
  RunRowChange run_row = RunRowChange::kRun;  // what the append does to the run row
};

// EncodeAppend's checks, with the same errors in the same order, for a
// backend that keeps the Envelopes themselves (MemoryEventStore): sizes are
// computed by SerializedJsonSize, so nothing is serialized or allocated.
Result<CheckedAppend> CheckAppend(const AppendRequest& req, const Limits& limits,
                                  const Clock& clock);
// CheckAppend that also packs each event's payload (the memory store's form
// at rest, src/packed_json.h) in the walk that measures it: `packed` holds
// them in order, event i's ending at payload_end[i] (both cleared first).
// On an error their contents are unspecified.
Result<CheckedAppend> CheckAndPackAppend(const AppendRequest& req, const Limits& limits,
                                         const Clock& clock, std::string& packed,
                                         std::vector<size_t>& payload_end);

// The exact length of json.dump() (compact, UTF-8 kept as is), computed
// without serializing. nullopt when dump() would throw (a string that is not
// valid UTF-8) or when a container lies more than depth_max levels down
// (events::JsonDepthWithin; the walk stops there).
std::optional<size_t> SerializedJsonSize(const Json& json, size_t depth_max = kJsonDepthMaxDefault);
// The same for metadata text (events::AppendMetadataText), for metadata
// without a Problem().
std::optional<size_t> SerializedMetadataSize(const events::Metadata& metadata,
                                             size_t depth_max = kJsonDepthMaxDefault);

// kLimitExceeded naming `limit` (LimitDetail value depth_max + 1: the walk
// stops there): `what` (a payload, an input, ...) nests more than depth_max
// containers deep (events::JsonDepthWithin).
std::unexpected<Error> JsonDepthError(std::string_view what, std::string subject, size_t depth_max,
                                      std::string limit = "json_depth_max");

// The json_depth_max check alone, for a decorator that copies a request
// before its target validates it: copying a tree recurses as deep as the
// tree goes.
Status CheckJsonDepth(const AppendRequest& req, const Limits& limits);

// Validates a batch's shape: count, distinct executions, total bytes.
Status ValidateBatchShape(std::span<const AppendRequest> requests, const Limits& limits);
Status CheckBatchBytes(size_t bytes, const Limits& limits);

// Decodes a stored row back into an Envelope; bad JSON is kCorruption.
Result<Envelope> DecodeRow(std::string_view execution_id, int64_t sequence, std::string kind,
                           std::string_view payload_json, std::string_view metadata_json,
                           int64_t time_ms);

std::unexpected<Error> SequenceConflict(std::string_view execution_id, int64_t expected,
                                        int64_t given);
std::unexpected<Error> StaleFence(std::string_view execution_id, int64_t presented,
                                  int64_t current);

}  // namespace once::store
