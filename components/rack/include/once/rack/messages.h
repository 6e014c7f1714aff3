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
using RequestPayload = std::variant<SessionStart, SessionStop, SessionSkip, JobStart, JobStop>;

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
enum class SledErrorKind : uint8_t { kConcurrentSessions = 1 };
struct SledError {
  std::string baseboard;
  SledErrorKind kind = SledErrorKind::kConcurrentSessions;
  SessionId first;   // the session that was active
  SessionId second;  // the concurrent start that met it
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

using Message = std::variant<SignedRequest, JobStarted, JobStopped, JobCancelled, JobError,
                             SledError, VersionAnnouncement>;

// ---- Encoding ----

inline constexpr uint8_t kMessageFormat = 1;
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
