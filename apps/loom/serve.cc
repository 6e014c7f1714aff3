// loom serve (serve.h, docs/operations.md "HTTP API").
#include "serve.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "once/base/decimal.h"
#include "once/base/hex.h"
#include "once/telemetry/log.h"
#include "once/telemetry/metrics.h"
#include "ops.h"
#include "ui_assets.h"

namespace once::loom_app {
namespace {

using httplib::Request;
using httplib::Response;

// The text of a JSON answer. Strings that are not UTF-8 (an id or a cursor
// from the URL, echoed in a refusal; a stored value) are written with U+FFFD
// where json's dump() would throw.
std::string AnswerText(const Json& answer) {
  return answer.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The decimal query parameter `name`, or `fallback` when it is absent; any
// other text is kInvalidArgument (400), not a number read as far as it goes.
template <class T>
Result<T> NumberParam(const Request& req, const char* name, T fallback) {
  if (!req.has_param(name)) return fallback;
  const std::string text = req.get_param_value(name);
  if (std::optional<T> value = ParseDecimal<T>(text)) return *value;
  return MakeError(ErrorCode::kInvalidArgument, std::string("query parameter ") + name +
                                                    " is not a decimal integer in range: '" + text +
                                                    "'");
}

// The string member `name` of an action's body (an object), nullopt when it
// is absent; a member of another type is kInvalidArgument (400).
Result<std::optional<std::string>> OptionalString(const Json& body, const char* name,
                                                  std::string_view action) {
  const auto it = body.find(name);
  if (it == body.end()) return std::optional<std::string>();
  if (!it->is_string()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(action) + "'s \"" + name + "\" is not a string");
  }
  return std::optional<std::string>(it->get<std::string>());
}

std::atomic<httplib::Server*> g_server{nullptr};

void StopOnSignal(int) {
  if (auto* s = g_server.load()) s->stop();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The bearer token: read from the file, or created there (0600) at first
// start. A file others may read is refused: the token is the key to act.
Result<std::string> LoadOrCreateToken(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if ((st.st_mode & 077) != 0) {
      return MakeError(ErrorCode::kPermissionDenied,
                       "the token file " + path + " is readable by others (chmod 600 it)");
    }
    std::ifstream in(path);
    std::string token;
    std::getline(in, token);
    if (token.size() < 32) {
      return MakeError(ErrorCode::kInvalidArgument, "the token file " + path + " holds no token");
    }
    return token;
  }
  if (sodium_init() < 0) return MakeError(ErrorCode::kInternal, "libsodium did not start");
  unsigned char raw[32];
  randombytes_buf(raw, sizeof raw);
  std::string token = HexEncode(std::string_view(reinterpret_cast<char*>(raw), sizeof raw));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return MakeError(ErrorCode::kUnavailable, "cannot create the token file " + path);
  std::string line = token + "\n";
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return MakeError(ErrorCode::kUnavailable, "cannot write the token file " + path);
  return token;
}

int HttpStatusOf(const Error& e) {
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kPermissionDenied:
      return 401;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kResumeRefused:
    case ErrorCode::kResumeContended:
    case ErrorCode::kStaleFence:
    case ErrorCode::kSequenceConflict:
      return 409;
    case ErrorCode::kLimitExceeded:
      return 413;
    case ErrorCode::kUnsupported:
      return 501;
    case ErrorCode::kUnavailable:
    case ErrorCode::kBusy:
    case ErrorCode::kTimeout:
      return 503;
    default:
      return 500;
  }
}

// A few Ops (each with its own read-only connection) shared by the
// request threads: one request uses one at a time.
class OpsPool {
 public:
  static Result<std::unique_ptr<OpsPool>> Open(const visibility::Target& target, size_t n) {
    auto pool = std::unique_ptr<OpsPool>(new OpsPool());
    for (size_t i = 0; i < std::max<size_t>(1, n); ++i) {
      ONCE_ASSIGN_OR_RETURN(auto ops, Ops::Open(target));
      pool->idle_.push_back(std::move(ops));
    }
    return pool;
  }
  template <class F>
  auto With(F&& f) {
    std::unique_ptr<Ops> ops;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !idle_.empty(); });
      ops = std::move(idle_.back());
      idle_.pop_back();
    }
    auto out = f(*ops);
    {
      std::lock_guard lock(mu_);
      idle_.push_back(std::move(ops));
    }
    cv_.notify_one();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Ops>> idle_;
};

// The status counts, recomputed every refresh_ms on a thread of its own (a
// count reads the whole status index: BENCHMARKS.md, "Visibility"), and
// never more often than kCountsDutyInverse times its own duration.
constexpr int64_t kCountsDutyInverse = 10;
class CountsCache {
 public:
  CountsCache(std::unique_ptr<Ops> ops, int64_t refresh_ms, telemetry::ServeMetrics& metrics,
              std::shared_ptr<spdlog::logger> log)
      : ops_(std::move(ops)), refresh_ms_(refresh_ms), metrics_(metrics), log_(std::move(log)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~CountsCache() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Json Get() {
    std::lock_guard lock(mu_);
    return latest_;
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      int64_t start = NowMs();
      auto counts = ops_->view().Counts();
      int64_t took = NowMs() - start;
      lock.lock();
      if (counts) {
        latest_ =
            Json{{"counts", visibility::ToJson(*counts)}, {"as_of_ms", start}, {"query_ms", took}};
        metrics_.SetCounts(*counts, took);
      } else {
        log_->warn("counts: {}", counts.error().ToString());
        latest_["error"] = counts.error().ToString();
      }
      // At most a tenth of one connection's time goes to counting: a store
      // whose counts take 4 s is counted every 40 s, not every refresh_ms.
      int64_t wait_ms = std::max<int64_t>(refresh_ms_, took * kCountsDutyInverse);
      cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return stop_; });
    }
  }
  std::unique_ptr<Ops> ops_;
  int64_t refresh_ms_;
  telemetry::ServeMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Json latest_ = Json{{"counts", nullptr}};
  std::thread thread_;
};

// The sleds of a rack: from DIR/rack.json, or given by URL.
struct SledTarget {
  int cubby = -1;
  std::string baseboard;
  std::string host;
  int port = 0;
};

Result<std::vector<SledTarget>> LoadSleds(const ServeOptions& options) {
  std::vector<SledTarget> out;
  if (!options.rack_dir.empty()) {
    std::ifstream in(std::filesystem::path(options.rack_dir) / "rack.json");
    if (!in) return MakeError(ErrorCode::kNotFound, "no rack.json in " + options.rack_dir);
    std::stringstream text;
    text << in.rdbuf();
    Json rack = Json::parse(text.str(), nullptr, false);
    if (rack.is_discarded() || !rack.contains("sleds") || !rack["sleds"].is_array()) {
      return MakeError(ErrorCode::kInvalidArgument, "rack.json has no sleds array");
    }
    for (const Json& s : rack["sleds"]) {
      // An entry of another shape is skipped (json's value() would throw on
      // a member of another type).
      auto member = [&](const char* name) -> const Json* {
        return s.is_object() && s.contains(name) ? &s[name] : nullptr;
      };
      const Json* http = member("http");
      if (!http || !http->is_string()) continue;
      const std::string& address = http->get_ref<const std::string&>();
      const size_t colon = address.rfind(':');
      std::optional<uint16_t> port = colon == std::string::npos
                                         ? std::nullopt
                                         : ParseDecimal<uint16_t>(address.substr(colon + 1));
      if (!port || *port == 0) continue;
      const Json* cubby = member("cubby");
      const Json* baseboard = member("baseboard");
      out.push_back(
          {.cubby = cubby && cubby->is_number_integer() ? cubby->get<int>() : -1,
           .baseboard = baseboard && baseboard->is_string() ? baseboard->get<std::string>() : "",
           .host = address.substr(0, colon),
           .port = *port});
    }
  }
  for (const std::string& url : options.sled_urls) {
    std::string rest = url.starts_with("http://") ? url.substr(7) : url;
    while (rest.ends_with("/")) rest.pop_back();
    size_t colon = rest.rfind(':');
    std::optional<uint16_t> port =
        colon == std::string::npos ? std::nullopt : ParseDecimal<uint16_t>(rest.substr(colon + 1));
    if (!port || *port == 0) {
      return MakeError(ErrorCode::kInvalidArgument, "a sled URL is http://HOST:PORT, not " + url);
    }
    out.push_back({.host = rest.substr(0, colon), .port = *port});
  }
  return out;
}

Json FetchJson(httplib::Client& client, const std::string& path) {
  auto res = client.Get(path);
  if (!res) return Json{{"error", httplib::to_string(res.error())}};
  Json body = Json::parse(res->body, nullptr, false);
  if (body.is_discarded())
    return Json{{"error", "not JSON (HTTP " + std::to_string(res->status) + ")"}};
  if (res->status != 200 && body.is_object()) body["http_status"] = res->status;
  return body;
}

// What the rack page shows of one sled: its own answers, unchanged.
Json SledView(const SledTarget& sled, const std::string& job_id) {
  httplib::Client client(sled.host, sled.port);
  client.set_connection_timeout(0, 500'000);
  client.set_read_timeout(1, 0);
  Json out{{"cubby", sled.cubby},
           {"baseboard", sled.baseboard},
           {"url", "http://" + sled.host + ":" + std::to_string(sled.port)}};
  if (!job_id.empty()) {
    out["job"] = FetchJson(client, "/v1/jobs/" + job_id);
    return out;
  }
  out["info"] = FetchJson(client, "/v1/info");
  if (out["info"].contains("error") && out["info"].size() == 1) {
    out["reachable"] = false;
    return out;
  }
  out["reachable"] = true;
  out["session"] = FetchJson(client, "/v1/session");
  out["boundary"] = FetchJson(client, "/v1/boundary");
  out["jobs"] = FetchJson(client, "/v1/jobs?offset=0&limit=20");
  return out;
}

class Server {
 public:
  Server(const ServeOptions& options, visibility::Target target, std::unique_ptr<OpsPool> pool,
         std::string token, std::vector<SledTarget> sleds, std::shared_ptr<spdlog::logger> log)
      : options_(options),
        target_(std::move(target)),
        pool_(std::move(pool)),
        token_(std::move(token)),
        sleds_(std::move(sleds)),
        log_(std::move(log)) {}

  telemetry::ServeMetrics& metrics() { return metrics_; }
  void set_counts(std::unique_ptr<CountsCache> counts) { counts_ = std::move(counts); }

  void Route(httplib::Server& http) {
    http.set_payload_max_length(options_.request_body_bytes_max);
    // What httplib refuses itself (no route, a body past a limit, a request
    // it cannot parse) answers the same typed JSON as every other refusal;
    // a refusal of ours already has its body.
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          const int status = res.status;  // kept: 414 and 431 say more than 400
          Refuse(res, HttplibRefusal(status), &req);
          res.status = status;
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_logger([this](const Request& req, const Response& res) {
      metrics_.Request(req.method, RouteOf(req), res.status);
      log_->debug("{} {} {}", req.method, req.path, res.status);
    });
    for (const UiAsset& asset : UiAssets()) {
      http.Get(std::string(asset.path), [&asset](const Request&, Response& res) {
        res.set_content(std::string(asset.body), std::string(asset.content_type));
      });
    }
    http.Get("/", [](const Request&, Response& res) {
      for (const UiAsset& asset : UiAssets()) {
        if (asset.path == "/index.html") {
          res.set_content(std::string(asset.body), std::string(asset.content_type));
        }
      }
    });
    http.Get("/api/v1/info", [this](const Request&, Response& res) {
      Reply(res, pool_->With([&](Ops& ops) -> Result<Json> {
        return Json{{"store", ops.view().SchemaDescription()},
                    {"rack", !sleds_.empty()},
                    {"sleds", sleds_.size()}};
      }));
    });
    http.Get("/api/v1/executions",
             [this](const Request& req, Response& res) { Reply(res, List(req), req); });
    http.Get("/api/v1/counts", [this](const Request&, Response& res) {
      Reply(res, Result<Json>(counts_ ? counts_->Get() : Json()));
    });
    http.Get(R"(/api/v1/executions/(.+))", [this](const Request& req, Response& res) {
      std::string id = req.matches[1].str();
      Result<size_t> events = NumberParam<size_t>(req, "events", 2'000);
      if (!events) return Reply(res, Result<Json>(std::unexpected(events.error())), req);
      Reply(res, pool_->With([&](Ops& ops) {
        return ops.Show(id, std::clamp<size_t>(*events, 1, 10'000));
      }),
            req);
    });
    http.Get("/api/v1/timers",
             [this](const Request& req, Response& res) { Reply(res, Timers(req), req); });
    http.Get("/api/v1/nodes", [this](const Request& req, Response& res) {
      Reply(res, pool_->With([&](Ops& ops) -> Result<Json> {
        ONCE_ASSIGN_OR_RETURN(auto nodes, ops.view().Nodes(1000));
        Json rows = Json::array();
        for (const auto& n : nodes) rows.push_back(visibility::ToJson(n));
        return Json{{"nodes", std::move(rows)}};
      }),
            req);
    });
    http.Get("/api/v1/queues", [this](const Request& req, Response& res) {
      Reply(res, pool_->With([&](Ops& ops) -> Result<Json> {
        ONCE_ASSIGN_OR_RETURN(auto queues, ops.view().Queues(1000));
        Json rows = Json::array();
        for (const auto& q : queues) rows.push_back(visibility::ToJson(q));
        return Json{{"queues", std::move(rows)}};
      }),
            req);
    });
    http.Get("/api/v1/rack", [this](const Request&, Response& res) {
      Json sleds = Json::array();
      for (const SledTarget& s : sleds_) sleds.push_back(SledView(s, ""));
      res.set_content(AnswerText(Json{{"sleds", std::move(sleds)}, {"as_of_ms", NowMs()}}),
                      "application/json");
    });
    http.Get(R"(/api/v1/rack/jobs/([A-Za-z-]+))", [this](const Request& req, Response& res) {
      Json sleds = Json::array();
      for (const SledTarget& s : sleds_) sleds.push_back(SledView(s, req.matches[1].str()));
      res.set_content(
          AnswerText(Json{{"job_id", req.matches[1].str()}, {"sleds", std::move(sleds)}}),
          "application/json");
    });
    Act(http, "cancel", [](Ops& ops, const std::string& id, const Json& body) -> Result<Json> {
      ONCE_ASSIGN_OR_RETURN(std::optional<std::string> reason,
                            OptionalString(body, "reason", "cancel"));
      return ops.Cancel(id, reason.value_or("cancelled from loom serve"));
    });
    Act(http, "resume",
        [](Ops& ops, const std::string& id, const Json&) { return ops.Resume(id); });
    Act(http, "send", [](Ops& ops, const std::string& id, const Json& body) -> Result<Json> {
      if (!body.contains("topic") || !body["topic"].is_string() || !body.contains("message")) {
        return MakeError(ErrorCode::kInvalidArgument, "send needs {\"topic\": t, \"message\": m}");
      }
      return ops.Send(id, body["topic"].get<std::string>(), body["message"]);
    });
    Act(http, "fork", [](Ops& ops, const std::string& id, const Json& body) -> Result<Json> {
      if (!body.contains("from_step") || !body["from_step"].is_number_integer()) {
        return MakeError(ErrorCode::kInvalidArgument, "fork needs {\"from_step\": n}");
      }
      ONCE_ASSIGN_OR_RETURN(std::optional<std::string> fork_id, OptionalString(body, "id", "fork"));
      return ops.Fork(id, body["from_step"].get<int64_t>(), fork_id.value_or(""), {});
    });
    http.Get("/metrics", [this](const Request&, Response& res) {
      res.set_content(metrics_.Text(), "text/plain; version=0.0.4");
    });
  }

 private:
  static std::string RouteOf(const Request& req) {
    if (req.path.starts_with("/api/v1/executions/")) {
      return req.method == "POST" ? "/api/v1/executions/{id}/act" : "/api/v1/executions/{id}";
    }
    if (req.path.starts_with("/api/v1/rack/jobs/")) return "/api/v1/rack/jobs/{id}";
    if (req.path.starts_with("/api/")) return req.path;
    if (req.path == "/metrics") return req.path;
    return "/ui";
  }

  void Reply(Response& res, const Result<Json>& out, const Request* req = nullptr) {
    if (out) {
      res.set_content(AnswerText(*out), "application/json");
      return;
    }
    Refuse(res, out.error(), req);
  }
  void Reply(Response& res, const Result<Json>& out, const Request& req) { Reply(res, out, &req); }

  // The error for a status httplib set without a body.
  Error HttplibRefusal(int status) const {
    switch (status) {
      case 404:
        return Error{ErrorCode::kNotFound, "no such endpoint", "", {}};
      case 413:
        return Error{ErrorCode::kLimitExceeded,
                     "the request is larger than this server takes (request_body_bytes_max " +
                         std::to_string(options_.request_body_bytes_max) +
                         " bytes; a form-encoded body: 8192 bytes; send application/json)",
                     "",
                     {}};
      case 400:
      case 414:
      case 431:
        return Error{ErrorCode::kInvalidArgument, "malformed request", "", {}};
      default:
        return Error{ErrorCode::kInternal, "HTTP " + std::to_string(status), "", {}};
    }
  }

  void Refuse(Response& res, const Error& e, const Request* req) {
    res.status = HttpStatusOf(e);
    std::string code(ErrorCodeName(e.code));
    res.set_content(
        AnswerText(
            Json{{"error", {{"code", code}, {"message", e.message}, {"subject", e.subject}}}}),
        "application/json");
    metrics_.Refusal(code);
    telemetry::LogRefusal(*log_, req ? req->method : "GET", req ? req->path : "?", res.status, code,
                          e.message + (e.subject.empty() ? "" : " (" + e.subject + ")"));
  }

  Result<Json> List(const Request& req) {
    visibility::ListQuery q;
    q.status = req.get_param_value("status");
    q.workflow = req.get_param_value("workflow");
    q.parked_on = req.get_param_value("parked_on");
    q.id_prefix = req.get_param_value("id_prefix");
    q.cursor = req.get_param_value("cursor");
    ONCE_ASSIGN_OR_RETURN(q.limit, NumberParam<size_t>(req, "limit", q.limit));
    for (auto [name, out] : {std::pair{"started_after", &q.started_after_ms},
                             std::pair{"started_before", &q.started_before_ms},
                             std::pair{"updated_after", &q.updated_after_ms},
                             std::pair{"updated_before", &q.updated_before_ms}}) {
      ONCE_ASSIGN_OR_RETURN(*out, ParseTimeArg(req.get_param_value(name)));
    }
    return pool_->With([&](Ops& ops) -> Result<Json> {
      ONCE_ASSIGN_OR_RETURN(visibility::ListPage page, ops.view().List(q));
      Json rows = Json::array();
      for (const auto& r : page.rows) rows.push_back(visibility::ToJson(r));
      return Json{{"executions", std::move(rows)},
                  {"next_cursor", page.next_cursor.empty() ? Json() : Json(page.next_cursor)},
                  {"scanned", page.scanned}};
    });
  }

  Result<Json> Timers(const Request& req) {
    int64_t due_before = 0;
    if (req.has_param("due_within_ms")) {
      ONCE_ASSIGN_OR_RETURN(int64_t within, NumberParam<int64_t>(req, "due_within_ms", 0));
      // Within more than the clock can count: every timer (no overflow).
      if (__builtin_add_overflow(NowMs(), within, &due_before)) {
        due_before = std::numeric_limits<int64_t>::max();
      }
    }
    ONCE_ASSIGN_OR_RETURN(size_t limit, NumberParam<size_t>(req, "limit", 50));
    return pool_->With([&](Ops& ops) -> Result<Json> {
      ONCE_ASSIGN_OR_RETURN(visibility::TimersPage page,
                            ops.view().Timers(due_before, limit, req.get_param_value("cursor")));
      Json rows = Json::array();
      for (const auto& t : page.timers) rows.push_back(visibility::ToJson(t));
      return Json{{"timers", std::move(rows)},
                  {"now_ms", NowMs()},
                  {"next_cursor", page.next_cursor.empty() ? Json() : Json(page.next_cursor)}};
    });
  }

  bool Authorized(const Request& req) {
    std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (!header.starts_with(prefix)) return false;
    std::string given = header.substr(prefix.size());
    return given.size() == token_.size() &&
           sodium_memcmp(given.data(), token_.data(), token_.size()) == 0;
  }

  using ActFn = std::function<Result<Json>(Ops&, const std::string&, const Json&)>;
  void Act(httplib::Server& http, const std::string& verb, ActFn act) {
    http.Post(
        "/api/v1/executions/(.+)/" + verb, [this, verb, act](const Request& req, Response& res) {
          if (!Authorized(req)) {
            Refuse(res,
                   Error{ErrorCode::kPermissionDenied,
                         "acting needs the bearer token of " + options_.token_file},
                   &req);
            return;
          }
          Json body = req.body.empty() ? Json::object() : Json::parse(req.body, nullptr, false);
          if (body.is_discarded() || !body.is_object()) {
            Refuse(res, Error{ErrorCode::kInvalidArgument, "the body is not a JSON object"}, &req);
            return;
          }
          std::string id = req.matches[1].str();
          auto out = pool_->With([&](Ops& ops) { return act(ops, id, body); });
          if (out) {
            metrics_.Action(verb);
            log_->info("{} {}: {}", verb, id, AnswerText(*out));
          }
          Reply(res, out, req);
        });
  }

  const ServeOptions& options_;
  visibility::Target target_;
  std::unique_ptr<OpsPool> pool_;
  std::string token_;
  std::vector<SledTarget> sleds_;
  std::shared_ptr<spdlog::logger> log_;
  telemetry::ServeMetrics metrics_;
  std::unique_ptr<CountsCache> counts_;
};

}  // namespace

int RunServe(const StoreFlags& flags, const ServeOptions& options) {
  auto log = telemetry::MakeLogger("loom.serve",
                                   {.format = options.log_format, .level = options.log_level});
  if (!log) {
    std::fprintf(stderr, "loom: %s\n", log.error().message.c_str());
    return 2;
  }
  auto fail = [&](const Error& e) {
    (*log)->error("{} ({})", e.message, ErrorCodeName(e.code));
    return ExitCodeOf(e);
  };
  auto target = flags.ToTarget();
  if (!target) return fail(target.error());
  size_t colon = options.listen.rfind(':');
  std::optional<uint16_t> listen_port =
      colon == std::string::npos ? std::nullopt
                                 : ParseDecimal<uint16_t>(options.listen.substr(colon + 1));
  const int port = listen_port.value_or(0);
  if (!listen_port) {
    return fail(
        Error{ErrorCode::kInvalidArgument, "--listen is ADDRESS:PORT, not " + options.listen});
  }
  std::string host = options.listen.substr(0, colon);
  auto sleds = LoadSleds(options);
  if (!sleds) return fail(sleds.error());
  auto pool = OpsPool::Open(*target, options.connections_max);
  if (!pool) return fail(pool.error());
  auto token = LoadOrCreateToken(options.token_file);
  if (!token) return fail(token.error());
  auto counts_ops = Ops::Open(*target);
  if (!counts_ops) return fail(counts_ops.error());

  Server server(options, *target, std::move(*pool), *token, std::move(*sleds), *log);
  server.set_counts(std::make_unique<CountsCache>(std::move(*counts_ops), options.counts_refresh_ms,
                                                  server.metrics(), *log));
  httplib::Server http;
  server.Route(http);
  int bound = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    return fail(Error{ErrorCode::kUnavailable, "cannot listen on " + options.listen});
  }
  g_server = &http;
  ::signal(SIGTERM, StopOnSignal);
  ::signal(SIGINT, StopOnSignal);
  (*log)->info(
      "serving {} on http://{}:{} (token in {})",
      target->sqlite_path.empty() ? "schema " + target->postgres_schema : target->sqlite_path, host,
      bound, options.token_file);
  // One line on stdout for scripts and tests: the port actually bound.
  std::printf("listening %s:%d\n", host.c_str(), bound);
  std::fflush(stdout);
  http.listen_after_bind();
  g_server = nullptr;
  (*log)->info("stopped");
  return 0;
}

}  // namespace once::loom_app
