#include "once/sush_net/server.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <tuple>

#include "once/base/decimal.h"
#include "once/base/hex.h"
#include "once/itc/text.h"

namespace once::sush_net {

using nlohmann::json;

namespace {

template <class Id>
json IdOrNull(const std::optional<Id>& id) {
  return id ? json(id->ToString()) : json(nullptr);
}

Result<json> ParseObject(std::string_view body) {
  if (body.size() > kRequestBodyBytesMax) {
    return LimitError("request_body_bytes_max", static_cast<int64_t>(body.size()),
                      kRequestBodyBytesMax);
  }
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "the body is not a JSON object");
  }
  return parsed;
}

// The session skip an encoded signed request carries, if it is one.
std::optional<rack::SessionSkip> SkipIn(const Bytes& request) {
  auto message = rack::Decode(request);
  const auto* signed_request = message ? std::get_if<rack::SignedRequest>(&*message) : nullptr;
  if (signed_request == nullptr) return std::nullopt;
  const auto* skip = std::get_if<rack::SessionSkip>(&signed_request->payload);
  return skip == nullptr ? std::nullopt : std::optional<rack::SessionSkip>(*skip);
}

// A query parameter's count: `fallback` when it is missing; anything but a
// decimal integer of 0 or more is refused, naming the parameter.
Result<size_t> QueryCount(std::optional<std::string_view> text, std::string_view name,
                          size_t fallback) {
  if (!text) return fallback;
  if (std::optional<size_t> n = ParseDecimal<size_t>(*text)) return *n;
  return MakeError(ErrorCode::kInvalidArgument,
                   std::string(name) + " must be a decimal integer of 0 or more",
                   std::string(name));
}

// The Reply among `outputs`; the rest goes to the sink.
std::optional<rack::Reply> TakeReply(std::vector<rack::Output> outputs, const OutputSink& sink) {
  std::optional<rack::Reply> reply;
  for (const rack::Output& output : outputs) {
    if (const auto* r = std::get_if<rack::Reply>(&output)) reply = *r;
  }
  sink(std::move(outputs));
  return reply;
}

}  // namespace

std::string Iso8601(TimePoint t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void SledNotes::Note(const rack::SledError& error) {
  errors.push_back(error);
  while (errors.size() > kSledErrorsKept) errors.pop_front();
}

HttpAnswer ErrorAnswer(const Error& error) {
  return HttpAnswer{HttpStatusOf(error.code), ErrorToJson(error)};
}

HttpAnswer GetInfo(const SledFacts& facts, const rack::SledCore& core, const SledNotes& notes) {
  json sleds = json::array();
  for (const auto& [baseboard, announcement] : core.known_sleds()) {
    json sled{{"baseboard", baseboard}, {"build_version", announcement.build_version}};
    sled["cubby"] =
        announcement.cubby == rack::kCubbyUnknown ? json(nullptr) : json(announcement.cubby);
    sleds.push_back(sled);
  }
  return HttpAnswer{
      200,
      json{{"baseboard", facts.baseboard},
           {"cubby", facts.cubby},
           {"build_version", facts.build_version},
           {"http", facts.http.ToString()},
           {"gossip", facts.gossip.ToString()},
           {"network", core.network() ? json(core.network()->ToHex()) : json(nullptr)},
           {"universe_resets", notes.universe_resets},
           {"active_session", IdOrNull(core.active_session())},
           {"running_jobs", core.running_jobs()},
           {"executions", core.executions()},
           {"gate", std::string(rack::GateStateName(core.gate()))},
           {"trusted", core.trusted()},
           {"untrusted_reason", core.trusted() ? json(nullptr) : json(core.untrusted_reason())},
           {"started_at", Iso8601(facts.started_at)},
           {"sleds", sleds}}};
}

HttpAnswer GetSession(const SledFacts& facts, const rack::SledCore& core, const SledNotes& notes) {
  const auto active = core.active_session();
  json errors = json::array();
  for (const rack::SledError& error : notes.errors) errors.push_back(SledErrorToJson(error));
  json body{{"active", IdOrNull(active)},
            {"next_job_id", IdOrNull(core.next_free_job_id())},
            {"baseboard", facts.baseboard},
            {"errors", errors}};
  // The frontier joins every session start delivered in this universe: bottom
  // means this sled has heard of none since it started (or joined).
  if (!active && core.frontier() == itc::Version{}) {
    body["message"] = "no session known since this sled started at " + Iso8601(facts.started_at);
  }
  return HttpAnswer{200, std::move(body)};
}

std::string AnswerText(const HttpAnswer& answer) { return JsonText(answer.body); }

HttpAnswer PostSessionNonce(rack::Sled& sled, const OutputSink& sink) {
  const std::optional<rack::Reply> reply = TakeReply(sled.Handle(rack::IssueSessionNonce{}), sink);
  if (!reply) return ErrorAnswer(Error{ErrorCode::kInternal, "the core did not reply", "", {}});
  if (!reply->status) return ErrorAnswer(reply->status.error());
  if (!reply->nonce) return ErrorAnswer(Error{ErrorCode::kInternal, "no nonce issued", "", {}});
  return HttpAnswer{200, json{{"nonce", reply->nonce->ToString()}}};
}

Result<Bytes> ParseSubmit(std::string_view text) {
  ONCE_ASSIGN_OR_RETURN(json body, ParseObject(text));
  if (!body.contains("request") || !body["request"].is_string()) {
    return MakeError(ErrorCode::kInvalidArgument, "request (hex) needed");
  }
  ONCE_ASSIGN_OR_RETURN(Bytes bytes, HexDecode(body["request"].get<std::string>()));
  if (bytes.size() > rack::kRequestBytesMax) {
    return LimitError("request_bytes_max", static_cast<int64_t>(bytes.size()),
                      rack::kRequestBytesMax);
  }
  return bytes;
}

HttpAnswer PostSubmit(rack::Sled& sled, TimePoint now, std::string_view text,
                      const OutputSink& sink) {
  auto bytes = ParseSubmit(text);
  if (!bytes) return ErrorAnswer(bytes.error());
  const std::optional<rack::SessionSkip> skip = SkipIn(*bytes);
  const std::optional<rack::Reply> reply =
      TakeReply(sled.Handle(rack::ClientSubmit{std::move(*bytes)}), sink);
  sink(sled.Deliver(now));  // the own send now, so the next job start sees its chain position
  if (!reply) return ErrorAnswer(Error{ErrorCode::kInternal, "the core did not reply", "", {}});
  if (!reply->status) return ErrorAnswer(reply->status.error());
  json answer = json::object();
  if (reply->session_id) answer["session_id"] = reply->session_id->ToString();
  if (skip) {
    answer["session_id"] = skip->session_id.ToString();
    answer["job_id"] = skip->job_id.ToString();
    answer["next_job_id"] = IdOrNull(sled.core().next_free_job_id());
  }
  return HttpAnswer{200, std::move(answer)};
}

HttpAnswer GetJobs(const rack::SledCore& core, std::optional<std::string_view> offset,
                   std::optional<std::string_view> limit) {
  Result<size_t> first = QueryCount(offset, "offset", 0);
  if (!first) return ErrorAnswer(first.error());
  Result<size_t> count = QueryCount(limit, "limit", 20);
  if (!count) return ErrorAnswer(count.error());
  json jobs = json::array();
  for (const rack::JobId& id : core.History(*first, std::min(*count, kHistoryPageEntriesMax))) {
    if (const rack::JobRecord* record = core.FindJob(id)) jobs.push_back(JobToJson(*record));
  }
  return HttpAnswer{200, json{{"jobs", jobs}, {"total", core.history_total()}}};
}

HttpAnswer GetJob(const rack::SledCore& core, std::string_view text) {
  auto id = rack::JobId::Parse(text);
  if (!id) return ErrorAnswer(id.error());
  const rack::JobRecord* record = core.FindJob(*id);
  if (record == nullptr) {
    return ErrorAnswer(Error{ErrorCode::kNotFound, "no job " + id->ToString(), "", {}});
  }
  return HttpAnswer{200, JobToJson(*record)};
}

HttpAnswer GetBoundary(const SledFacts& facts, const rack::SledCore& core,
                       const rack::BoundaryStore& drives, const SledNotes& notes,
                       const itc::Version& heard) {
  const rack::BoundaryLoad& load = drives.loaded();
  json body;
  if (core.trusted()) {
    body = BoundaryRecordToJson(core.boundary());
  } else {  // the record in memory means nothing: the drives could not be trusted
    body = json{{"network", nullptr},  {"V", nullptr},          {"session", nullptr},
                {"last_job", nullptr}, {"successor", nullptr},  {"outcome", nullptr},
                {"floor", nullptr},    {"lightcone", nullptr},  {"amnesia", nullptr},
                {"resets", nullptr},   {"last_reset", nullptr}, {"map", json::array()},
                {"filter", nullptr},   {"bytes", nullptr},      {"left_sessions", nullptr}};
  }
  json drive_list = json::array();
  for (const rack::DriveStatus& drive : drives.Drives()) {
    drive_list.push_back(DriveStatusToJson(drive));
  }
  json orphans = json::array();
  for (const rack::JobId& id : notes.orphans_killed) orphans.push_back(id.ToString());
  const auto verdict = core.active_verdict();
  // The record's `here` is about the universe it last executed or minted a
  // marker in: a sled that returned to a universe of its map gates by that
  // entry's markers.
  const rack::UniverseBoundary* joined = nullptr;
  if (core.trusted() && core.network())
    joined = rack::BoundaryFor(core.boundary(), *core.network());
  auto newest = [](const std::vector<itc::Version>& v) {
    return v.empty() ? json(nullptr) : json(itc::FormatVersion(v.back()));
  };
  const rack::UniverseBoundary none{};
  const rack::UniverseBoundary& j = joined ? *joined : none;
  body["baseboard"] = facts.baseboard;
  body["versions"] = "ITC text (itc::FormatVersion)";
  body["joined_network"] = core.network() ? json(core.network()->ToHex()) : json(nullptr);
  body["markers"] =
      json{{"entry", core.trusted() ? newest(core.boundary().here.markers) : json(nullptr)},
           {"joined", !j.markers.empty() ? newest(j.markers) : newest(j.floor)},
           {"joined_lightcone", Versions(j.markers)},
           {"joined_floor", Versions(j.floor)},
           {"birth",
            core.birth_marker() ? json(itc::FormatVersion(*core.birth_marker())) : json(nullptr)}};
  body["gate"] = std::string(rack::GateStateName(core.gate()));
  body["active_session"] = IdOrNull(core.active_session());
  body["active_verdict"] =
      verdict ? json(std::string(SessionVerdictName(*verdict))) : json(nullptr);
  body["trusted"] = core.trusted();
  body["locker_verdict"] = load.verdict;
  body["drives"] = std::move(drive_list);
  body["untrusted_reason"] = core.trusted() ? json(nullptr) : json(core.untrusted_reason());
  body["reset_nonce"] = IdOrNull(core.reset_nonce());
  body["executions"] = core.executions();
  body["skipped"] = core.skipped();
  body["interrupted"] = core.interrupted();
  body["orphans_killed"] = std::move(orphans);
  body["heard"] = itc::FormatVersion(heard);
  return HttpAnswer{200, std::move(body)};
}

Status AuthorizeOperator(const HttpRequest& request, const rack::TrustedKeys& trusted,
                         std::string_view baseboard, TimePoint now) {
  if (request.operator_socket) return Ok();
  ONCE_RETURN_IF_ERROR(VerifyHttpRequest(request.Header("authorization"), trusted, baseboard,
                                         request.method, request.target, request.body, now));
  return Ok();
}

HttpResponse GetJobOutput(const std::filesystem::path& jobs_dir, std::string_view text,
                          std::string_view stream, std::string_view baseboard,
                          const Status& authorized) {
  auto id = rack::JobId::Parse(text);
  if (!id) return ErrorResponse(id.error());
  if (stream != "stdout" && stream != "stderr") {
    return ErrorResponse(Error{ErrorCode::kInvalidArgument, "stdout or stderr", "", {}});
  }
  if (!authorized) return ErrorResponse(authorized.error());
  // The id is re-rendered from its bytes: no path can sneak in.
  const std::filesystem::path path = jobs_dir / id->ToString() / std::string(stream);
  OwnedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return ErrorResponse(Error{ErrorCode::kNotFound,
                               "no output of " + id->ToString() + " on " + std::string(baseboard),
                               "",
                               {}});
  }
  HttpResponse answer;
  answer.content_type = "application/octet-stream";
  answer.file_bytes = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), kOutputAnswerBytesMax);
  if (static_cast<uint64_t>(st.st_size) > kOutputAnswerBytesMax) {
    answer.headers.emplace_back("X-Sush-Truncated", "1");
  }
  answer.file = std::move(fd);
  return answer;
}

std::vector<OutputFolder> ListOutput(const std::filesystem::path& jobs_dir) {
  std::vector<OutputFolder> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(jobs_dir, ec)) {
    auto id = rack::JobId::Parse(entry.path().filename().string());
    if (!id || id->ToString() != entry.path().filename().string()) continue;
    if (!entry.is_directory(ec)) continue;
    OutputFolder folder{*id, 0, TimePoint{}};
    auto modified = [](const struct stat& st) {
      return TimePoint(std::chrono::duration_cast<Duration>(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
    };
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) == 0) folder.written = modified(st);
    for (const auto& file : std::filesystem::directory_iterator(entry.path(), ec)) {
      if (::lstat(file.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      folder.bytes += static_cast<uint64_t>(st.st_size);
      folder.written = std::max(folder.written, modified(st));
    }
    out.push_back(folder);
  }
  std::sort(out.begin(), out.end(), [](const OutputFolder& a, const OutputFolder& b) {
    return std::tie(a.written, a.id) < std::tie(b.written, b.id);
  });
  return out;
}

std::optional<std::string> WhyKeepOutput(const rack::SledCore& core,
                                         const std::set<rack::JobId>& unshipped,
                                         const rack::JobId& id) {
  const std::vector<rack::JobId> running = core.running();
  if (std::find(running.begin(), running.end(), id) != running.end()) return "running";
  if (core.FindJob(id) == nullptr) {
    return "unknown to this sled (it cannot tell whether its end was gossiped; only "
           "output_age_s_max removes it)";
  }
  const rack::JobStatus* own = core.StatusOf(id, core.identity().baseboard);
  if (own != nullptr && !own->terminal()) return "not finished here";
  if (unshipped.contains(id)) return "its end is not gossiped yet";
  return std::nullopt;
}

std::vector<OutputFolder> RetentionVictims(const std::vector<OutputFolder>& folders, TimePoint now,
                                           const OutputRetention& rule, const KeepOutput& keep) {
  std::vector<OutputFolder> victims;
  uint64_t total = 0;
  for (const OutputFolder& folder : folders) total += folder.bytes;
  for (const OutputFolder& folder : folders) {  // oldest first
    const std::optional<std::string> why = keep(folder.id);
    const bool old = now - folder.written > rule.output_age_s_max;
    const bool unknown_only = why && why->starts_with("unknown");
    if (old && (!why || unknown_only)) {
      victims.push_back(folder);
      total -= folder.bytes;
    } else if (!why && total > rule.output_total_bytes_max) {
      victims.push_back(folder);
      total -= folder.bytes;
    }
  }
  return victims;
}

Result<uint64_t> DeleteOutput(const std::filesystem::path& jobs_dir, const rack::JobId& id) {
  const std::filesystem::path dir = jobs_dir / id.ToString();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return MakeError(ErrorCode::kNotFound, "no output of " + id.ToString());
  }
  uint64_t bytes = 0;
  for (const auto& file : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st {};
    if (::lstat(file.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      bytes += static_cast<uint64_t>(st.st_size);
    }
  }
  std::filesystem::remove_all(dir, ec);
  if (ec) {
    return MakeError(ErrorCode::kUnavailable,
                     "cannot remove " + dir.string() + ": " + ec.message());
  }
  return bytes;
}

Result<std::optional<std::vector<rack::JobId>>> ParsePurge(std::string_view text) {
  ONCE_ASSIGN_OR_RETURN(json body, ParseObject(text));
  if (body.contains("finished") && !body["finished"].is_boolean()) {
    return MakeError(ErrorCode::kInvalidArgument, "\"finished\" is not true or false");
  }
  if (body.value("finished", false) && !body.contains("jobs")) {
    return std::optional<std::vector<rack::JobId>>{};
  }
  if (!body.contains("jobs") || !body["jobs"].is_array()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "\"jobs\" (an array of job ids) or \"finished\": true needed");
  }
  if (body["jobs"].size() > kPurgeJobsMax) {
    return LimitError("purge_jobs_max", static_cast<int64_t>(body["jobs"].size()),
                      static_cast<int64_t>(kPurgeJobsMax));
  }
  std::vector<rack::JobId> ids;
  for (const json& item : body["jobs"]) {
    if (!item.is_string())
      return MakeError(ErrorCode::kInvalidArgument, "a job id is not a string");
    ONCE_ASSIGN_OR_RETURN(rack::JobId id, rack::JobId::Parse(item.get<std::string>()));
    ids.push_back(id);
  }
  return std::optional<std::vector<rack::JobId>>{std::move(ids)};
}

Result<std::vector<Address>> ParsePartition(std::string_view text) {
  ONCE_ASSIGN_OR_RETURN(json body, ParseObject(text));
  if (!body.contains("peers") || !body["peers"].is_array()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "\"peers\" (an array of gossip addresses) needed; [] heals");
  }
  std::vector<Address> peers;
  for (const json& peer : body["peers"]) {
    if (!peer.is_string()) {
      return MakeError(ErrorCode::kInvalidArgument, "a peer is not an address string", peer.dump());
    }
    ONCE_ASSIGN_OR_RETURN(Address address, ParseAddress(peer.get<std::string>()));
    peers.push_back(std::move(address));
  }
  return peers;
}

HttpAnswer PostPartition(bool enabled, std::string_view body,
                         const std::function<void(const std::vector<Address>&)>& cut) {
  if (!enabled) {
    return ErrorAnswer(
        Error{ErrorCode::kNotFound, "admin endpoints are off (--test-admin)", "", {}});
  }
  auto peers = ParsePartition(body);
  if (!peers) return ErrorAnswer(peers.error());
  cut(*peers);
  json list = json::array();
  for (const Address& peer : *peers) list.push_back(peer.ToString());
  return HttpAnswer{200, json{{"partitioned", list}}};
}

}  // namespace once::sush_net
