#include "once/sush_net/api.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "once/base/decimal.h"
#include "once/base/hex.h"
#include "once/base/rng.h"
#include "once/itc/text.h"
#include "once/rack/chain.h"

namespace once::sush_net {

using nlohmann::json;

Result<Address> ParseAddress(std::string_view text) {
  if (text.starts_with("unix:")) {
    if (text.size() == 5) return MakeError(ErrorCode::kInvalidArgument, "unix: needs a path");
    Address address;
    address.host = "localhost";
    address.socket_path = std::string(text.substr(5));
    return address;
  }
  std::string_view rest = text;
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  if (rest.ends_with('/')) rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return MakeError(ErrorCode::kInvalidArgument, "address needs HOST:PORT: " + std::string(text));
  }
  const std::string_view port_text = rest.substr(colon + 1);
  const std::optional<uint16_t> port = ParseDecimal<uint16_t>(port_text);
  if (!port || *port == 0) {
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
  return Address{std::string(host), *port};
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

// ---- Signed HTTP requests ----

namespace {

Bytes HttpToBeSigned(std::string_view baseboard, std::string_view method, std::string_view target,
                     std::string_view body, int64_t at) {
  const rack::Digest256 body_hash = rack::Blake2b256({rack::AsBytes(body)});
  std::string text = "once.sush.http.v1";
  for (std::string_view part : {baseboard, method, target}) {
    text.push_back('\0');
    text += part;
  }
  text.push_back('\0');
  text += std::to_string(at);
  text.push_back('\0');
  Bytes out(text.begin(), text.end());
  out.insert(out.end(), body_hash.begin(), body_hash.end());
  return out;
}

// "key=..., at=..., sig=..." after the "Sush " scheme.
std::optional<std::string_view> AuthField(std::string_view params, std::string_view name) {
  while (!params.empty()) {
    const size_t comma = params.find(',');
    std::string_view item = params.substr(0, comma);
    params = comma == std::string_view::npos ? std::string_view() : params.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.size() > name.size() && item.starts_with(name) && item[name.size()] == '=') {
      return item.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

std::string SignHttpRequest(const rack::KeyPair& keys, std::string_view baseboard,
                            std::string_view method, std::string_view target, std::string_view body,
                            TimePoint at) {
  const int64_t seconds =
      std::chrono::duration_cast<std::chrono::seconds>(at.time_since_epoch()).count();
  const rack::Signature sig =
      rack::SignBytes(HttpToBeSigned(baseboard, method, target, body, seconds), keys.secret_key);
  return "Sush key=" + keys.id().ToString() + ", at=" + std::to_string(seconds) +
         ", sig=" + HexEncode(sig);
}

Result<rack::KeyId> VerifyHttpRequest(std::optional<std::string_view> authorization,
                                      const rack::TrustedKeys& trusted, std::string_view baseboard,
                                      std::string_view method, std::string_view target,
                                      std::string_view body, TimePoint now) {
  auto refuse = [](std::string why) {
    return MakeError(
        ErrorCode::kPermissionDenied,
        "a signed request is needed (an operator key: Authorization: Sush ...): " + why);
  };
  if (!authorization) return refuse("no Authorization header");
  if (!authorization->starts_with("Sush ")) return refuse("not the Sush scheme");
  const std::string_view params = authorization->substr(5);
  const auto key_text = AuthField(params, "key");
  const auto at_text = AuthField(params, "at");
  const auto sig_text = AuthField(params, "sig");
  if (!key_text || !at_text || !sig_text) return refuse("key, at and sig needed");
  auto key_id = rack::KeyId::Parse(*key_text);
  if (!key_id) return refuse("malformed key id");
  int64_t at = 0;
  if (!ParseDecimal(*at_text, at)) return refuse("malformed time");
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  // The window's edges, not now - at: a client's `at` may be any int64, and
  // the difference would overflow (undefined behaviour) at the extremes.
  const int64_t skew = kSignedHttpSkewMax.count();
  if (at < now_s - skew || at > now_s + skew) {
    return refuse("signed at " + std::to_string(at) + ", more than " + std::to_string(skew) +
                  " s from this sled's clock (" + std::to_string(now_s) + ")");
  }
  auto sig_bytes = HexDecode(*sig_text);
  if (!sig_bytes || sig_bytes->size() != rack::Signature{}.size()) {
    return refuse("malformed signature");
  }
  const rack::PublicKey* key = trusted.Find(*key_id);
  if (key == nullptr) return refuse("unknown key " + key_id->ToString());
  rack::Signature sig{};
  std::copy(sig_bytes->begin(), sig_bytes->end(), sig.begin());
  if (!rack::VerifyBytes(HttpToBeSigned(baseboard, method, target, body, at), sig, *key)) {
    return refuse("bad signature (another sled, path or body?)");
  }
  return *key_id;
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

namespace {

// obj[key] when obj is an object whose `key` holds a T (a string or an
// int64), else `fallback`: what a client reads of a server's answer never
// throws (json's value() does when the member has another type).
template <class T>
T MemberOr(const json& obj, const char* key, T fallback) {
  static_assert(std::is_same_v<T, std::string> || std::is_same_v<T, int64_t>);
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else {
    return it->is_number_integer() &&
                   !(it->is_number_unsigned() && it->template get<uint64_t>() > uint64_t{INT64_MAX})
               ? it->template get<int64_t>()
               : fallback;
  }
}

}  // namespace

Error ErrorFromJson(const json& body, int http_status) {
  if (!body.is_object() || !body.contains("error") || !body["error"].is_object()) {
    // The HTTP layer itself refused (e.g. a body past the server's limit).
    const ErrorCode code = http_status == 413   ? ErrorCode::kLimitExceeded
                           : http_status == 404 ? ErrorCode::kNotFound
                                                : ErrorCode::kInternal;
    return Error{code, "HTTP " + std::to_string(http_status) + " without error", "", {}};
  }
  const json& e = body["error"];
  Error error{ErrorCode::kInternal, MemberOr(e, "message", std::string()), "", {}};
  const std::string name = MemberOr(e, "code", std::string());
  for (int c = 0; c <= static_cast<int>(ErrorCode::kInternal); ++c) {
    if (ErrorCodeName(static_cast<ErrorCode>(c)) == name) error.code = static_cast<ErrorCode>(c);
  }
  if (e.contains("limit") && e["limit"].is_object()) {
    const json& limit = e["limit"];
    error.detail =
        LimitDetail{MemberOr(limit, "name", std::string()), MemberOr(limit, "value", int64_t{0}),
                    MemberOr(limit, "max", int64_t{0})};
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
    case ErrorCode::kUnsupported:
      return 501;
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

httplib::Client& SushClient::Http() const {
  if (http_ == nullptr) {
    const bool unix_socket = !address_.socket_path.empty();
    http_ = std::make_shared<httplib::Client>(unix_socket ? address_.socket_path : address_.host,
                                              unix_socket ? 80 : address_.port);
    if (unix_socket) http_->set_address_family(AF_UNIX);
    const auto o = options_.timeout_ms;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(o);
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(o - seconds);
    http_->set_connection_timeout(seconds.count(), micros.count());
    http_->set_read_timeout(seconds.count(), micros.count());
    http_->set_write_timeout(seconds.count(), micros.count());
    http_->set_keep_alive(true);
    // A POST leaves in two writes (head, body): without this, Nagle holds the
    // body until the server's delayed ACK (40 ms a request).
    http_->set_tcp_nodelay(true);
  }
  return *http_;
}

namespace {

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
  return JsonAnswer(Http().Get(path), address_);
}

Result<json> SushClient::Post(const std::string& path, const json& body) const {
  return JsonAnswer(Http().Post(path, body.dump(), "application/json"), address_);
}

namespace {

Result<std::string> BytesAnswer(const httplib::Result& res, const Address& address) {
  if (!res) return std::unexpected(TransportError(res.error(), address));
  if (res->status >= 300) {
    return std::unexpected(ErrorFromJson(json::parse(res->body, nullptr, false), res->status));
  }
  return res->body;
}

httplib::Headers SignedHeaders(const OutputCredentials& credentials, std::string_view method,
                               const std::string& target, std::string_view body) {
  if (credentials.keys == nullptr) return {};
  return {{"Authorization", SignHttpRequest(*credentials.keys, credentials.baseboard, method,
                                            target, body, std::chrono::system_clock::now())}};
}

}  // namespace

Result<std::string> SushClient::GetBytes(const std::string& path) const {
  return BytesAnswer(Http().Get(path), address_);
}

Result<std::string> SushClient::GetBytesSigned(const std::string& path,
                                               const OutputCredentials& credentials) const {
  return BytesAnswer(Http().Get(path, SignedHeaders(credentials, "GET", path, "")), address_);
}

Result<json> SushClient::PostSigned(const std::string& path, const json& body,
                                    const OutputCredentials& credentials) const {
  const std::string text = body.dump();
  return JsonAnswer(
      Http().Post(path, SignedHeaders(credentials, "POST", path, text), text, "application/json"),
      address_);
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
Result<std::string> SushClient::Output(const rack::JobId& id, const std::string& stream,
                                       const OutputCredentials& credentials) const {
  return GetBytesSigned("/v1/jobs/" + id.ToString() + "/" + stream, credentials);
}

Result<json> SushClient::PurgeOutput(const std::vector<rack::JobId>& jobs,
                                     const OutputCredentials& credentials) const {
  json body = json::object();
  if (jobs.empty()) {
    body["finished"] = true;
  } else {
    json ids = json::array();
    for (const rack::JobId& id : jobs) ids.push_back(id.ToString());
    body["jobs"] = ids;
  }
  return PostSigned("/v1/output/purge", body, credentials);
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
      Submit(rack::SessionStart{MemberOr(info, "baseboard", std::string()), *nonce, signer_nonce},
             keys));
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::SessionId> id,
                        IdField<rack::SessionId>(answer, "session_id"));
  if (!id) return MakeError(ErrorCode::kInternal, "the sled answered no session id");
  return *id;
}

Result<rack::SessionId> SushClient::StopSession(const rack::KeyPair& keys,
                                                std::optional<rack::SessionId> expected) const {
  ONCE_ASSIGN_OR_RETURN(json session, Session());
  ONCE_ASSIGN_OR_RETURN(std::optional<rack::SessionId> active,
                        IdField<rack::SessionId>(session, "active"));
  if (expected && active != expected) {
    return MakeError(ErrorCode::kNotFound,
                     "session " + expected->ToString() + " is not active (the active one: " +
                         (active ? active->ToString() : std::string("none")) + ")");
  }
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
  const std::string baseboard = MemberOr(boundary, "baseboard", std::string());
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
