// File: api.h
//
// The sush HTTP+JSON API shared by `sush-server`, the `sush` client and the
// multi-process tests: the endpoint names, the request limits, the JSON views
// of sled state, key files, addresses, and a small blocking client.
//
//   SushClient sled(*ParseAddress("127.0.0.1:7100"));
//   ONCE_ASSIGN_OR_RETURN(KeyPair keys, LoadKeyPair("rack/keys/operator.key"));
//   ONCE_ASSIGN_OR_RETURN(SessionId session, sled.StartSession(keys));
//   ONCE_ASSIGN_OR_RETURN(JobId job, sled.StartJob(keys, "uptime", "*", false));
//   ONCE_ASSIGN_OR_RETURN(nlohmann::json view, sled.Job(job));   // statuses by baseboard
//
// Endpoints (every body is JSON unless said otherwise; errors answer
// {"error": {"code": "PermissionDenied", "message": "..."}} with a 4xx/5xx):
//   GET  /v1/info                  this sled: baseboard, cubby, build, network, known sleds,
//                                  the boundary gate, trusted and why not
//   GET  /v1/session               {"active": id|null, "next_job_id": id|null,
//                                   "errors": [the latest sled errors, e.g. ConcurrentSessions],
//                                   "message": "no session known since this sled started at T"
//                                   when it knows none}
//   GET  /v1/boundary              the boundary record (versions as ITC text), the gate, the
//                                  locker's verdict and each drive's health; the reset nonce
//                                  while untrusted (BoundaryToJson)
//   POST /v1/session/nonce         {"nonce": id}   a server nonce for a session start
//   POST /v1/submit                {"request": hex of an encoded signed request: session
//                                  start/stop/skip, job start/stop}
//                                  -> {"session_id": id} for a session start,
//                                     {"session_id", "job_id", "next_job_id"} for a skip,
//                                     else {}
//   GET  /v1/jobs?offset=N&limit=N the history, newest first: {"jobs": [job view...]}
//   GET  /v1/jobs/ID               one job view
//   GET  /v1/jobs/ID/stdout|stderr this sled's output bytes (application/octet-stream)
//   POST /admin/partition          {"peers": ["127.0.0.1:PORT", ...]} gossip addresses cut
//                                  both ways: no round to them, no link or session from them
//                                  ([] heals; a missing or non-array "peers" is refused);
//                                  only with --test-admin
//
// Ids are codephrases (8 words), accepted in any case. The client is
// thread-compatible (one per thread); every call is bounded by its timeout.

#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "once/base/result.h"
#include "once/rack/boundary.h"
#include "once/rack/keys.h"
#include "once/rack/messages.h"
#include "once/rack/sled_core.h"

namespace once::sush_net {

// Largest HTTP request body a server reads (a signed request is at most
// rack::kRequestBytesMax, hex doubles it).
inline constexpr size_t kRequestBodyBytesMax = 64 * 1024;
// Most history entries one /v1/jobs page returns.
inline constexpr size_t kHistoryPageEntriesMax = 1000;
// Most output bytes one /v1/jobs/ID/stdout answer carries (the rest is cut;
// "X-Sush-Truncated: 1" says so).
inline constexpr size_t kOutputAnswerBytesMax = size_t{16} << 20;
// Longest key file a loader reads.
inline constexpr size_t kKeyFileBytesMax = 4096;

// ---- Addresses ----

struct Address {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const Address&, const Address&) = default;
};
// The longest host name of an address (a DNS name's).
inline constexpr size_t kHostBytesMax = 253;
// "HOST:PORT" or "http://HOST:PORT" (a trailing '/' is ignored). HOST is a
// name or an IP address: letters, digits and . - _ : [ ] only, at most
// kHostBytesMax bytes, so that ToString() parses back to the same address.
// kInvalidArgument otherwise.
Result<Address> ParseAddress(std::string_view text);

// ---- Key files ----
// JSON {"name", "key_id" (codephrase), "public_key" (hex), "secret_key" (hex)}
// written with mode 0600 (the file must not exist yet: kPermissionDenied if
// it does). A public key file has no "secret_key".

Status SaveKeyPair(const std::filesystem::path& path, const std::string& name,
                   const rack::KeyPair& keys);
Status SavePublicKey(const std::filesystem::path& path, const std::string& name,
                     const rack::PublicKey& public_key);
// kNotFound, kInvalidArgument (malformed), kLimitExceeded (kKeyFileBytesMax),
// kPermissionDenied (a secret key file readable by group or others).
Result<rack::KeyPair> LoadKeyPair(const std::filesystem::path& path);
// Reads the public key of a key pair file or of a public key file.
Result<rack::PublicKey> LoadPublicKey(const std::filesystem::path& path);

// ---- JSON views ----

std::string ExitKindName(rack::ExitOutcome::Kind kind);
// "SIGXCPU" for 24 on Linux; "SIG?" for a number this system has no name for.
std::string SignalName(int signal);
// A status as JSON: {"state", "terminal"}, and once the job ran "exit"
// {"kind": exited|signaled|failed, "code", "error", and for signaled "signal"
// (its name)} with stdout/stderr bytes and hashes; for Error also
// "error_code", "error" and "refused" (it never ran here); for Skipped
// "skip_reason" (lightcone, already executed, untrusted) and "detail"; for
// Interrupted "detail".
nlohmann::json StatusToJson(const rack::JobStatus& status);
// ITC versions as a JSON array of their text forms.
nlohmann::json Versions(const std::vector<itc::Version>& versions);
nlohmann::json JobToJson(const rack::JobRecord& record);
// {"kind" (rack::SledErrorKindName), "baseboard", "message"}, and by kind:
// ConcurrentSessions "first", "second" (the two sessions); SessionHop
// "first" (the recorded session, null if none), "second" (the one hopped
// to); UniverseDropped "session" and "count" (its jobs).
nlohmann::json SledErrorToJson(const rack::SledError& error);
// How a job ended (kind, code, error, signal name, output bytes).
nlohmann::json ExitToJson(const rack::ExitReport& report);
std::string_view AmnesiaName(rack::Amnesia amnesia);  // none, until first execution, permanent
std::string_view SessionVerdictName(rack::SessionVerdict verdict);  // resume, new, gated, needs hop
// One universe's boundary: "V" (ITC text), "session", "last_job", "successor"
// (codephrases or null), "outcome" (ExitToJson or null), "marker" (ITC text or null).
nlohmann::json UniverseBoundaryToJson(const rack::UniverseBoundary& boundary);
// The record, flat for operators: "network" (hex or null: the universe
// `here` is about), the fields of `here`, "amnesia", "resets", "last_reset",
// "map" (left universes, oldest first: "network" and the UniverseBoundary
// fields), "filter" {"bits_set", "bits", "probes", "capacity",
// "false_positive_rate" (estimated from the fill: (bits_set/bits)^probes)},
// "bytes" (encoded size).
nlohmann::json BoundaryRecordToJson(const rack::BoundaryRecord& record);
nlohmann::json DriveStatusToJson(const rack::DriveStatus& drive);
nlohmann::json ErrorToJson(const Error& error);
// The JSON text of a view, with text that is not UTF-8 (a signed job's
// command or target, a peer's event text, an id in a request path) shown
// with U+FFFD: json.dump() would throw, and fail the whole answer.
std::string JsonText(const nlohmann::json& view);
// The error of a JSON error answer (kInternal for an unknown code name).
Error ErrorFromJson(const nlohmann::json& body, int http_status);
// The HTTP status an error code is answered with.
int HttpStatusOf(ErrorCode code);

// ---- Client ----

// The request bodies the client posts (and the server's ParseSubmit and
// ParsePartition read, server.h): {"request": HEX} of an encoded message,
// {"peers": ["HOST:PORT", ...]}.
nlohmann::json SubmitBody(std::span<const uint8_t> request);
nlohmann::json PartitionBody(const std::vector<Address>& peers);

struct ClientOptions {
  std::chrono::milliseconds timeout_ms{5000};
};

class SushClient {
 public:
  explicit SushClient(Address address, ClientOptions options = {});

  const Address& address() const { return address_; }

  // Raw calls: the JSON answer, or the answer's error (kUnavailable when
  // the server cannot be reached, kTimeout when it does not answer in time).
  Result<nlohmann::json> Get(const std::string& path) const;
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body) const;
  Result<std::string> GetBytes(const std::string& path) const;

  Result<nlohmann::json> Info() const;
  Result<nlohmann::json> Session() const;
  Result<nlohmann::json> Boundary() const;
  Result<nlohmann::json> Job(const rack::JobId& id) const;
  Result<nlohmann::json> History(size_t offset, size_t limit) const;
  // "stdout" or "stderr".
  Result<std::string> Output(const rack::JobId& id, const std::string& stream) const;
  Result<nlohmann::json> Submit(const rack::RequestPayload& payload,
                                const rack::KeyPair& keys) const;
  // Submits already encoded bytes (tests use it for forged requests).
  Result<nlohmann::json> SubmitBytes(std::span<const uint8_t> request) const;

  // Asks this sled for a nonce and signs a session start it accepts.
  Result<rack::SessionId> StartSession(const rack::KeyPair& keys) const;
  // Stops the active session (kNotFound if there is none).
  Result<rack::SessionId> StopSession(const rack::KeyPair& keys) const;
  // Signs the job at the active session's next chain position.
  // kNotFound if there is no active session.
  Result<rack::JobId> StartJob(const rack::KeyPair& keys, const std::string& command,
                               const std::string& target, bool concurrent) const;
  Status StopJob(const rack::KeyPair& keys, const rack::JobId& id) const;
  // Burns the cancelled chain position `id` of the active session (session
  // skip). Returns the sled's answer {"session_id", "job_id", "next_job_id"}.
  // kNotFound without an active session; kInvalidArgument if the position is
  // not cancelled (no job stop named it), already passed or already skipped.
  Result<nlohmann::json> SkipJob(const rack::KeyPair& keys, const rack::JobId& id) const;
  // Resets this sled's untrusted boundary record: reads its baseboard and
  // reset nonce from GET /v1/boundary, signs rack::SledReset and submits it
  // here. kInvalidArgument if the sled is trusted (nothing to reset); the
  // sled's refusal otherwise (kPermissionDenied: the nonce changed).
  // Returns the nonce the reset named.
  Result<rack::Nonce> ResetSled(const rack::KeyPair& keys) const;
  // POST /admin/partition: cut these gossip peers both ways ([] heals).
  Result<nlohmann::json> Partition(const std::vector<Address>& peers) const;

 private:
  Address address_;
  ClientOptions options_;
};

// Parses a codephrase id field of a JSON answer (null or absent: nullopt).
template <class Id>
Result<std::optional<Id>> IdField(const nlohmann::json& body, const char* field) {
  if (!body.contains(field) || body[field].is_null()) return std::optional<Id>{};
  if (!body[field].is_string()) {
    return MakeError(ErrorCode::kInvalidArgument, std::string(field) + " is not a string");
  }
  ONCE_ASSIGN_OR_RETURN(Id id, Id::Parse(body[field].get<std::string>()));
  return std::optional<Id>{id};
}

}  // namespace once::sush_net
