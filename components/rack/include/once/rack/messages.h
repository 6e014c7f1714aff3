// File: messages.h
//
// Everything sush gossips, and its one binary encoding (docs/sush-messages.md).
// A message is either a signed request (session start/stop/skip, job
// start/stop), attributed to the signing key, or an event a sled reports about
// itself (job started/stopped/cancelled/error, sled errors such as
// ConcurrentSessions, version announcements). Encode and Decode are exact
// inverses; Decode reads hostile bytes and answers a typed error, never a
// crash: kInvalidArgument for malformed bytes (truncated, unknown kind or
// format, bad flag, trailing bytes), kLimitExceeded when a size passes a named
// limit (limits.h).
//
//   RequestPayload job = JobStart{id, session, "uptime", "*", false};
//   ONCE_ASSIGN_OR_RETURN(SignedRequest request, Sign(job, support_keys));
//   ONCE_ASSIGN_OR_RETURN(Bytes wire, Encode(Message{request}));
//   ONCE_ASSIGN_OR_RETURN(Message back, Decode(wire));
//   ONCE_ASSIGN_OR_RETURN(RequestPayload ok, Verify(request, trusted));
//
// Signatures are Ed25519 over ToBeSigned(payload bytes) = "once.sush.request.v1"
// || 0x00 || payload bytes; the request's to-be-signed digest is BLAKE2b-256 of
// those bytes and is what the job chain hashes.

#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "once/base/result.h"
#include "once/rack/ids.h"
#include "once/rack/keys.h"
#include "once/rack/limits.h"

namespace once::rack {

// ---- Request payloads (signed by a support key) ----

// Starts a session accepted by the sled `baseboard`, which issued
// `server_nonce`; `signer_nonce` is the signer's own fresh nonce.
struct SessionStart {
  std::string baseboard;
  Nonce server_nonce;
  Nonce signer_nonce;
  friend bool operator==(const SessionStart&, const SessionStart&) = default;
};
struct SessionStop {
  SessionId session_id;
  friend bool operator==(const SessionStop&, const SessionStop&) = default;
};
// Burns the chain position `job_id` of the session: the chain moves past it
// to H("Burned" || job_id) whether or not the job is known.
struct SessionSkip {
  SessionId session_id;
  JobId job_id;
  friend bool operator==(const SessionSkip&, const SessionSkip&) = default;
};
struct JobStart {
  JobId job_id;
  SessionId session_id;
  std::string command;
  std::string target;  // "*" or a comma list of cubbies, serials, baseboard ids
  bool concurrent = false;
  friend bool operator==(const JobStart&, const JobStart&) = default;
};
struct JobStop {
  JobId job_id;
  friend bool operator==(const JobStop&, const JobStop&) = default;
};
// An operator's reset of the boundary record of the untrusted sled
// `baseboard`, naming the reset nonce that sled shows while it is untrusted
// (GET /v1/boundary): a reset replayed from gossip in a later life, or meant
// for another discard, names a nonce no longer shown and does nothing.
struct SledReset {
  std::string baseboard;
  Nonce reset_nonce;
  friend bool operator==(const SledReset&, const SledReset&) = default;
};
using RequestPayload =
    std::variant<SessionStart, SessionStop, SessionSkip, JobStart, JobStop, SledReset>;

// A payload, its exact encoded bytes, the signing key's id and the signature.
struct SignedRequest {
  RequestPayload payload;
  Bytes payload_bytes;
  KeyId key_id;
  Signature signature{};
  friend bool operator==(const SignedRequest&, const SignedRequest&) = default;
};

// ---- Events (reported by a sled about itself) ----

// Length and BLAKE2b-256 of one output stream.
struct OutputSummary {
  uint64_t bytes = 0;
  Digest256 hash{};
  friend bool operator==(const OutputSummary&, const OutputSummary&) = default;
};

// How a started job ended: an exit status, a signal, or an error of the
// executor (e.g. the output limit) after which the job was killed.
struct ExitOutcome {
  enum class Kind : uint8_t { kExited = 1, kSignaled = 2, kFailed = 3 };
  Kind kind = Kind::kExited;
  int32_t code = 0;   // exit status, signal number, or for kFailed a once::ErrorCode
  std::string error;  // for kFailed
  friend bool operator==(const ExitOutcome&, const ExitOutcome&) = default;
};

// What an executor reports when a started job ends.
struct ExitReport {
  ExitOutcome outcome;
  OutputSummary stdout_summary;
  OutputSummary stderr_summary;
  friend bool operator==(const ExitReport&, const ExitReport&) = default;
};

struct JobStarted {
  std::string baseboard;
  JobId job_id;
  friend bool operator==(const JobStarted&, const JobStarted&) = default;
};
struct JobStopped {
  std::string baseboard;
  JobId job_id;
  ExitOutcome outcome;
  OutputSummary stdout_summary;
  OutputSummary stderr_summary;
  friend bool operator==(const JobStopped&, const JobStopped&) = default;
};
struct JobCancelled {
  std::string baseboard;
  JobId job_id;
  friend bool operator==(const JobCancelled&, const JobCancelled&) = default;
};
// The job never ran on this sled, and why (a refused key or signature, a
// malformed request, an inactive session, a limit).
struct JobError {
  std::string baseboard;
  JobId job_id;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  friend bool operator==(const JobError&, const JobError&) = default;
};
// Why a sled skipped a job it was targeted by (a terminal status; the job
// never runs there).
enum class SkipReason : uint8_t {
  kLightcone = 1,        // queued before this sled's marker: it moved, or lost its record
  kAlreadyExecuted = 2,  // this sled passed the position in an earlier life
  kUntrusted = 3,        // the sled's drives cannot be trusted (see GET /v1/boundary)
};
std::string_view SkipReasonName(SkipReason reason);

// The sled will never run the job (see SkipReason).
struct JobSkipped {
  std::string baseboard;
  JobId job_id;
  SkipReason reason = SkipReason::kLightcone;
  std::string detail;  // operator-legible, at most error_text_bytes_max
  friend bool operator==(const JobSkipped&, const JobSkipped&) = default;
};
// The job started in an earlier life of the sled and no end of it is known:
// its process was killed (or found gone) when the sled restarted.
struct JobInterrupted {
  std::string baseboard;
  JobId job_id;
  friend bool operator==(const JobInterrupted&, const JobInterrupted&) = default;
};
// A point in causality minted by a sled when it starts, or when it enters a
// universe: its version is the sled's birth marker (and, for an empty
// boundary record, its entry marker). `nonce` lets the sled recognise its
// own marker when gossip delivers it back.
struct LifeMarker {
  std::string baseboard;
  Nonce nonce;
  friend bool operator==(const LifeMarker&, const LifeMarker&) = default;
};

enum class SledErrorKind : uint8_t {
  kConcurrentSessions = 1,  // first: the active session, second: the concurrent start
  kSessionHop = 2,          // first: the recorded session, second: the one hopped to
  kUniverseFlipFlop = 3,    // the sled returned to a universe it left (filter hit)
  kUntrusted = 4,           // the drives disagree or failed: every job is refused
  kUniverseDropped = 5,     // first: the session dropped with a lost universe, count: jobs
  kBoundaryReset = 6,       // an operator reset the untrusted record
};
std::string_view SledErrorKindName(SledErrorKind kind);
struct SledError {
  std::string baseboard;
  SledErrorKind kind = SledErrorKind::kConcurrentSessions;
  SessionId first;
  SessionId second;
  // For kSessionHop and kUniverseFlipFlop: this error's version is the
  // sled's new lightcone marker; the nonce lets the sled recognise it.
  Nonce marker;
  uint32_t count = 0;  // kUniverseDropped: jobs of the dropped session
  std::string message;
  friend bool operator==(const SledError&, const SledError&) = default;
};
inline constexpr uint8_t kCubbyUnknown = 0xff;
struct VersionAnnouncement {
  std::string baseboard;
  uint8_t cubby = kCubbyUnknown;
  std::string build_version;
  friend bool operator==(const VersionAnnouncement&, const VersionAnnouncement&) = default;
};

using Message =
    std::variant<SignedRequest, JobStarted, JobStopped, JobCancelled, JobError, SledError,
                 VersionAnnouncement, JobSkipped, JobInterrupted, LifeMarker>;

// ---- Encoding ----

inline constexpr uint8_t kMessageFormat = 2;
inline constexpr uint8_t kPayloadFormat = 1;

// kLimitExceeded if a field or the whole message passes its limit.
Result<Bytes> EncodePayload(const RequestPayload& payload);
Result<RequestPayload> DecodePayload(std::span<const uint8_t> bytes);
Result<Bytes> Encode(const Message& message);
Result<Message> Decode(std::span<const uint8_t> bytes);

// ---- Signing ----

Bytes ToBeSigned(std::span<const uint8_t> payload_bytes);
Digest256 ToBeSignedDigest(const SignedRequest& request);
Result<SignedRequest> Sign(const RequestPayload& payload, const KeyPair& keys);
// The payload if `request` is signed by a trusted key. kPermissionDenied:
// "unknown key" or "bad signature"; kInvalidArgument if payload_bytes do not
// decode to payload.
Result<RequestPayload> Verify(const SignedRequest& request, const TrustedKeys& trusted);

// The job of a job-start request, or nullptr.
const JobStart* AsJobStart(const SignedRequest& request);

}  // namespace once::rack
