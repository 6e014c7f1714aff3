#include "once/sush_net/api.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "once/base/hex.h"
#include "once/base/rng.h"
#include "once/itc/text.h"
#include "once/rack/chain.h"

namespace once::sush_net {

using nlohmann::json;

Result<Address> ParseAddress(std::string_view text) {
  std::string_view rest = text;
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  if (rest.ends_with('/')) rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return MakeError(ErrorCode::kInvalidArgument, "address needs HOST:PORT: " + std::string(text));
  }
  const std::string_view port_text = rest.substr(colon + 1);
  uint32_t port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    return MakeError(ErrorCode::kInvalidArgument, "bad port in address: " + std::string(text));
  }
  const std::string_view host = rest.substr(0, colon);
  if (host.size() > kHostBytesMax) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "host longer than " + std::to_string(kHostBytesMax) + " bytes");
  }
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' &&
        c != ':' && c != '[' && c != ']') {
      return MakeError(ErrorCode::kInvalidArgument, "bad host in address: " + std::string(text));
    }
  }
  return Address{std::string(host), static_cast<uint16_t>(port)};
}

std::string JsonText(const json& view) {
  return view.dump(-1, ' ', false, json::error_handler_t::replace);
}

json SubmitBody(std::span<const uint8_t> request) { return json{{"request", HexEncode(request)}}; }

json PartitionBody(const std::vector<Address>& peers) {
  json list = json::array();
  for (const Address& peer : peers) list.push_back(peer.ToString());
  return json{{"peers", std::move(list)}};
}

// ---- Key files ----

namespace {

Status WriteNewPrivateFile(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) {
      return MakeError(ErrorCode::kPermissionDenied, "key file exists: " + path.string());
    }
    return MakeError(ErrorCode::kUnavailable, "cannot create " + path.string());
  }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return MakeError(ErrorCode::kUnavailable, "cannot write " + path.string());
  return Ok();
}

Result<json> ReadKeyFile(const std::filesystem::path& path, bool need_private) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return MakeError(ErrorCode::kNotFound, "no key file " + path.string());
  }
  if (static_cast<size_t>(st.st_size) > kKeyFileBytesMax) {
    return LimitError("key_file_bytes_max", st.st_size, kKeyFileBytesMax, path.string());
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  json body = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object() || !body.contains("public_key") ||
      !body["public_key"].is_string()) {
    return MakeError(ErrorCode::kInvalidArgument, "not a key file: " + path.string());
  }
  if (need_private) {
    if (!body.contains("secret_key") || !body["secret_key"].is_string()) {
      return MakeError(ErrorCode::kInvalidArgument, "no secret key in " + path.string());
    }
    if ((st.st_mode & 077) != 0) {
      return MakeError(ErrorCode::kPermissionDenied,
                       "secret key file readable by others (chmod 600): " + path.string());
    }
  }
  return body;
}

template <size_t N>
Result<std::array<uint8_t, N>> FixedHex(const json& body, const char* field) {
  ONCE_ASSIGN_OR_RETURN(Bytes raw, HexDecode(body[field].get<std::string>()));
  if (raw.size() != N) {
    return MakeError(ErrorCode::kInvalidArgument, std::string(field) + " has the wrong length");
  }
  std::array<uint8_t, N> out{};
  std::copy(raw.begin(), raw.end(), out.begin());
  return out;
}

}  // namespace

Status SaveKeyPair(const std::filesystem::path& path, const std::string& name,
                   const rack::KeyPair& keys) {
  json body{{"name", name},
            {"key_id", keys.id().ToString()},
            {"public_key", HexEncode(keys.public_key)},
            {"secret_key", HexEncode(keys.secret_key)}};
  return WriteNewPrivateFile(path, body.dump(2) + "\n");
}

Status SavePublicKey(const std::filesystem::path& path, const std::string& name,
                     const rack::PublicKey& public_key) {
  json body{{"name", name},
            {"key_id", rack::KeyIdOf(public_key).ToString()},
            {"public_key", HexEncode(public_key)}};
  return WriteNewPrivateFile(path, body.dump(2) + "\n");
}

Result<rack::KeyPair> LoadKeyPair(const std::filesystem::path& path) {
  ONCE_ASSIGN_OR_RETURN(json body, ReadKeyFile(path, /*need_private=*/true));
  rack::KeyPair keys;
  ONCE_ASSIGN_OR_RETURN(keys.public_key, FixedHex<32>(body, "public_key"));
  ONCE_ASSIGN_OR_RETURN(keys.secret_key, FixedHex<64>(body, "secret_key"));
  // An Ed25519 secret key carries its public half in its last 32 bytes.
  if (!std::equal(keys.public_key.begin(), keys.public_key.end(), keys.secret_key.begin() + 32)) {
    return MakeError(ErrorCode::kInvalidArgument, "public and secret key differ: " + path.string());
  }
  return keys;
}

Result<rack::PublicKey> LoadPublicKey(const std::filesystem::path& path) {
  ONCE_ASSIGN_OR_RETURN(json body, ReadKeyFile(path, /*need_private=*/false));
  return FixedHex<32>(body, "public_key");
}

// ---- JSON views ----

std::string ExitKindName(rack::ExitOutcome::Kind kind) {
  switch (kind) {
    case rack::ExitOutcome::Kind::kExited:
      return "exited";
    case rack::ExitOutcome::Kind::kSignaled:
      return "signaled";
    case rack::ExitOutcome::Kind::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string SignalName(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev == nullptr ? std::string("SIG?") : std::string("SIG") + abbrev;
}

namespace {

json OutcomeToJson(const rack::ExitOutcome& outcome) {
  json out{{"kind", ExitKindName(outcome.kind)}, {"code", outcome.code}, {"error", outcome.error}};
  if (outcome.kind == rack::ExitOutcome::Kind::kSignaled) out["signal"] = SignalName(outcome.code);
  return out;
}

template <class Id>
json IdOrNull(const std::optional<Id>& id) {
  return id ? json(id->ToString()) : json(nullptr);
}

json VersionOrNull(const std::optional<itc::Version>& version) {
  return version ? json(itc::FormatVersion(*version)) : json(nullptr);
}

}  // namespace

json StatusToJson(const rack::JobStatus& status) {
  json out{{"state", std::string(rack::JobStateName(status.state))},
           {"terminal", status.terminal()}};
  const bool ran = status.state == rack::JobState::kStopped ||
                   (status.state == rack::JobState::kError && !status.refused &&
                    status.stdout_summary.bytes + status.stderr_summary.bytes > 0);
  if (status.state == rack::JobState::kSkipped) {
    out["skip_reason"] = std::string(rack::SkipReasonName(status.skip_reason));
    out["detail"] = status.detail;
  }
  if (status.state == rack::JobState::kInterrupted) {
    out["detail"] =
        "started in an earlier life of this sled and no end of it is known: its process was "
        "killed (or found gone) when the sled restarted";
  }
  if (status.state == rack::JobState::kStopped || ran) {
    out["exit"] = OutcomeToJson(status.outcome);
    out["stdout_bytes"] = status.stdout_summary.bytes;
    out["stderr_bytes"] = status.stderr_summary.bytes;
    out["stdout_hash"] = HexEncode(status.stdout_summary.hash);
    out["stderr_hash"] = HexEncode(status.stderr_summary.hash);
  }
  if (status.state == rack::JobState::kError) {
    out["error_code"] = std::string(ErrorCodeName(status.error_code));
    out["error"] = status.error;
    out["refused"] = status.refused;
  }
  return out;
}

json JobToJson(const rack::JobRecord& record) {
  json statuses = json::object();
  for (const auto& [baseboard, status] : record.statuses) {
    statuses[baseboard] = StatusToJson(status);
  }
  return json{{"job_id", record.job.job_id.ToString()},
              {"session_id", record.job.session_id.ToString()},
              {"command", record.job.command},
              {"target", record.job.target},
              {"concurrent", record.job.concurrent},
              {"key_id", record.key_id.ToString()},
              {"verified", record.verified},
              {"statuses", statuses}};
}

json SledErrorToJson(const rack::SledError& error) {
  json out{{"kind", std::string(rack::SledErrorKindName(error.kind))},
           {"baseboard", error.baseboard},
           {"message", error.message}};
  switch (error.kind) {
    case rack::SledErrorKind::kConcurrentSessions:
      out["first"] = error.first.ToString();
      out["second"] = error.second.ToString();
      break;
    case rack::SledErrorKind::kSessionHop:
      // The core names no recorded session with an all-zero id.
      out["first"] =
          error.first == rack::SessionId{} ? json(nullptr) : json(error.first.ToString());
      out["second"] = error.second.ToString();
      break;
    case rack::SledErrorKind::kUniverseDropped:
      out["session"] = error.first.ToString();
      out["count"] = error.count;
      break;
    case rack::SledErrorKind::kUniverseFlipFlop:
    case rack::SledErrorKind::kUntrusted:
    case rack::SledErrorKind::kBoundaryReset:
      break;
  }
  return out;
}

json ExitToJson(const rack::ExitReport& report) {
  json out = OutcomeToJson(report.outcome);
  out["stdout_bytes"] = report.stdout_summary.bytes;
  out["stderr_bytes"] = report.stderr_summary.bytes;
  return out;
}

std::string_view AmnesiaName(rack::Amnesia amnesia) {
  switch (amnesia) {
    case rack::Amnesia::kNone:
      return "none";
    case rack::Amnesia::kUntilFirstExecution:
      return "until first execution";
    case rack::Amnesia::kPermanent:
      return "permanent";
  }
  return "?";
}

std::string_view SessionVerdictName(rack::SessionVerdict verdict) {
  switch (verdict) {
    case rack::SessionVerdict::kResume:
      return "resume";
    case rack::SessionVerdict::kNew:
      return "new";
    case rack::SessionVerdict::kPastForgotten:
      return "past forgotten";
    case rack::SessionVerdict::kGated:
      return "gated";
    case rack::SessionVerdict::kNeedsHop:
      return "needs hop";
  }
  return "?";
}

json Versions(const std::vector<itc::Version>& versions) {
  json out = json::array();
  for (const itc::Version& v : versions) out.push_back(itc::FormatVersion(v));
  return out;
}

json LeftSessions(const std::vector<rack::SessionChain>& chains) {
  json out = json::array();
  for (const rack::SessionChain& c : chains) {
    out.push_back(json{{"session", c.session.ToString()},
                       {"last_job", c.last_executed.ToString()},
                       {"successor", c.successor.ToString()},
                       {"outcome", c.outcome ? ExitToJson(*c.outcome) : json(nullptr)}});
  }
  return out;
}

json UniverseBoundaryToJson(const rack::UniverseBoundary& b) {
  return json{{"V", itc::FormatVersion(b.executed)},
              {"session", IdOrNull(b.session)},
              {"last_job", IdOrNull(b.last_executed)},
              {"successor", IdOrNull(b.successor)},
              {"outcome", b.outcome ? ExitToJson(*b.outcome) : json(nullptr)},
              {"floor", Versions(b.floor)},
              {"lightcone", Versions(b.markers)},
              {"left_sessions", LeftSessions(b.left_sessions)}};
}

json BoundaryRecordToJson(const rack::BoundaryRecord& record) {
  json out = UniverseBoundaryToJson(record.here);
  out["network"] = record.network ? json(record.network->ToHex()) : json(nullptr);
  out["amnesia"] = std::string(AmnesiaName(record.amnesia));
  out["resets"] = record.resets;
  out["last_reset"] = IdOrNull(record.last_reset);
  json map = json::array();
  for (const rack::LeftUniverse& left : record.left) {
    json entry = UniverseBoundaryToJson(left.boundary);
    entry["network"] = left.network.ToHex();
    map.push_back(std::move(entry));
  }
  out["map"] = std::move(map);
  const size_t set = record.evicted.bits_set();
  const double fill = static_cast<double>(set) / static_cast<double>(rack::kNetworkFilterBits);
  out["filter"] = json{{"bits_set", set},
                       {"bits", rack::kNetworkFilterBits},
                       {"probes", rack::kNetworkFilterProbes},
                       {"capacity", rack::kNetworkFilterCapacity},
                       {"false_positive_rate", std::pow(fill, rack::kNetworkFilterProbes)}};
  auto bytes = rack::EncodeBoundary(record);
  out["bytes"] = bytes ? json(bytes->size()) : json(nullptr);
  return out;
}

json DriveStatusToJson(const rack::DriveStatus& drive) {
  return json{{"path", drive.path},
              {"state", drive.state},
              {"message", drive.message},
              {"sequence", drive.sequence}};
}

json ErrorToJson(const Error& error) {
  json out{{"code", std::string(ErrorCodeName(error.code))}, {"message", error.message}};
  if (const auto* limit = error.As<LimitDetail>()) {
    out["limit"] = json{{"name", limit->limit}, {"value", limit->value}, {"max", limit->max}};
  }
  return json{{"error", out}};
}

Error ErrorFromJson(const json& body, int http_status) {
  if (!body.is_object() || !body.contains("error") || !body["error"].is_object()) {
    // The HTTP layer itself refused (e.g. a body past the server's limit).
    const ErrorCode code = http_status == 413   ? ErrorCode::kLimitExceeded
                           : http_status == 404 ? ErrorCode::kNotFound
                                                : ErrorCode::kInternal;
    return Error{code, "HTTP " + std::to_string(http_status) + " without error", "", {}};
  }
  const json& e = body["error"];
  Error error{ErrorCode::kInternal, e.value("message", std::string("")), "", {}};
  const std::string name = e.value("code", std::string(""));
  for (int c = 0; c <= static_cast<int>(ErrorCode::kInternal); ++c) {
    if (ErrorCodeName(static_cast<ErrorCode>(c)) == name) error.code = static_cast<ErrorCode>(c);
  }
  return error;
}

int HttpStatusOf(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kPermissionDenied:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kLimitExceeded:
      return 413;
    case ErrorCode::kUnavailable:
    case ErrorCode::kBusy:
      return 503;
    case ErrorCode::kTimeout:
      return 504;
    default:
      return 500;
  }
}

// ---- Client ----

namespace {

Error TransportError(httplib::Error error, const Address& address) {
  const ErrorCode code = error == httplib::Error::Read || error == httplib::Error::Write
                             ? ErrorCode::kTimeout
                             : ErrorCode::kUnavailable;
  return Error{code, "sled " + address.ToString() + ": " + httplib::to_string(error), "", {}};
}

}  // namespace

SushClient::SushClient(Address address, ClientOptions options)
    : address_(std::move(address)), options_(options) {}

namespace {

std::unique_ptr<httplib::Client> MakeClient(const Address& address, const ClientOptions& o) {
  auto client = std::make_unique<httplib::Client>(address.host, address.port);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(o.timeout_ms);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(o.timeout_ms - seconds);
  client->set_connection_timeout(seconds.count(), micros.count());
  client->set_read_timeout(seconds.count(), micros.count());
  client->set_write_timeout(seconds.count(), micros.count());
  return client;
}

Result<json> JsonAnswer(const httplib::Result& res, const Address& address) {
  if (!res) return std::unexpected(TransportError(res.error(), address));
  json body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (res->status >= 300) return std::unexpected(ErrorFromJson(body, res->status));
  if (body.is_discarded()) {
    return MakeError(ErrorCode::kInternal, "sled " + address.ToString() + " answered non-JSON");
  }
  return body;
}

}  // namespace

Result<json> SushClient::Get(const std::string& path) const {
  auto client = MakeClient(address_, options_);
  return JsonAnswer(client->Get(path), address_);
}

Result<json> SushClient::Post(const std::string& path, const json& body) const {
  auto client = MakeClient(address_, options_);
  return JsonAnswer(client->Post(path, body.dump(), "application/json"), address_);
}

Result<std::string> SushClient::GetBytes(const std::string& path) const {
  auto client = MakeClient(address_, options_);
  auto res = client->Get(path);
  if (!res) return std::unexpected(TransportError(res.error(), address_));
  if (res->status >= 300) {
    return std::unexpected(ErrorFromJson(json::parse(res->body, nullptr, false), res->status));
  }
  return res->body;
}

Result<json> SushClient::Info() const { return Get("/v1/info"); }
Result<json> SushClient::Session() const { return Get("/v1/session"); }
Result<json> SushClient::Boundary() const { return Get("/v1/boundary"); }
Result<json> SushClient::Job(const rack::JobId& id) const {
  return Get("/v1/jobs/" + id.ToString());
}
Result<json> SushClient::History(size_t offset, size_t limit) const {
  return Get("/v1/jobs?offset=" + std::to_string(offset) + "&limit=" + std::to_string(limit));
}
Result<std::string> SushClient::Output(const rack::JobId& id, const std::string& stream) const {
  return GetBytes("/v1/jobs/" + id.ToString() + "/" + stream);
}

Result<json> SushClient::SubmitBytes(std::span<const uint8_t> request) const {
  return Post("/v1/submit", SubmitBody(request));
}

Result<json> SushClient::Submit(const rack::RequestPayload& payload,
                                const rack::KeyPair& keys) const {
  ONCE_ASSIGN_OR_RETURN(rack::SignedRequest signed_request, rack::Sign(payload, keys));
  ONCE_ASSIGN_OR_RETURN(Bytes wire, rack::Encode(rack::Message{std::move(signed_request)}));
  return SubmitBytes(wire);
}

Result<rack::SessionId> SushClient::StartSession(const rack::KeyPair& keys) const {
  ONCE_ASSIGN_OR_RETURN(json info, Info());
  ONCE_ASSIGN_OR_RETURN(json issued, Post("/v1/session/nonce", json::object()));
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::Nonce> nonce, IdField<rack::Nonce>(issued, "nonce"));
  if (!nonce) return MakeError(ErrorCode::kInternal, "the sled issued no nonce");
  rack::Nonce signer_nonce;
  SystemRng rng;
  rng.Fill(signer_nonce.bytes.data(), signer_nonce.bytes.size());
  ONCE_ASSIGN_OR_RETURN(
      json answer,
      Submit(rack::SessionStart{info.value("baseboard", std::string()), *nonce, signer_nonce},
             keys));
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::SessionId> id,
                        IdField<rack::SessionId>(answer, "session_id"));
  if (!id) return MakeError(ErrorCode::kInternal, "the sled answered no session id");
  return *id;
}

Result<rack::SessionId> SushClient::StopSession(const rack::KeyPair& keys) const {
  ONCE_ASSIGN_OR_RETURN(json session, Session());
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::SessionId> active,
                        IdField<rack::SessionId>(session, "active"));
  if (!active) return MakeError(ErrorCode::kNotFound, "no active session");
  ONCE_RETURN_IF_ERROR(Submit(rack::SessionStop{*active}, keys));
  return *active;
}

Result<rack::JobId> SushClient::StartJob(const rack::KeyPair& keys, const std::string& command,
                                         const std::string& target, bool concurrent) const {
  ONCE_ASSIGN_OR_RETURN(json session, Session());
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::SessionId> active,
                        IdField<rack::SessionId>(session, "active"));
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::JobId> next,
                        IdField<rack::JobId>(session, "next_job_id"));
  if (!active || !next) {
    return MakeError(ErrorCode::kNotFound, "no active session (sush session start)");
  }
  ONCE_RETURN_IF_ERROR(Submit(rack::JobStart{*next, *active, command, target, concurrent}, keys));
  return *next;
}

Result<json> SushClient::SkipJob(const rack::KeyPair& keys, const rack::JobId& id) const {
  ONCE_ASSIGN_OR_RETURN(json session, Session());
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::SessionId> active,
                        IdField<rack::SessionId>(session, "active"));
  if (!active) return MakeError(ErrorCode::kNotFound, "no active session");
  return Submit(rack::SessionSkip{*active, id}, keys);
}

Result<rack::Nonce> SushClient::ResetSled(const rack::KeyPair& keys) const {
  ONCE_ASSIGN_OR_RETURN(json boundary, Boundary());
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::Nonce> nonce,
                        IdField<rack::Nonce>(boundary, "reset_nonce"));
  const std::string baseboard = boundary.value("baseboard", std::string());
  if (!nonce) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the boundary record of " + baseboard + " is trusted: nothing to reset");
  }
  ONCE_RETURN_IF_ERROR(Submit(rack::SledReset{baseboard, *nonce}, keys));
  return *nonce;
}

Result<json> SushClient::Partition(const std::vector<Address>& peers) const {
  return Post("/admin/partition", PartitionBody(peers));
}

Status SushClient::StopJob(const rack::KeyPair& keys, const rack::JobId& id) const {
  ONCE_RETURN_IF_ERROR(Submit(rack::JobStop{id}, keys));
  return Ok();
}

}  // namespace once::sush_net
