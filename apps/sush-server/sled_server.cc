#include "sled_server.h"

#include <httplib.h>

#include <charconv>
#include <cstdio>
#include <fstream>

#include "once/base/hex.h"
#include "once/rack/chain.h"

namespace once::sush {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

void Log(const std::string& line) { std::fprintf(stderr, "sush-server: %s\n", line.c_str()); }

void Answer(httplib::Response& res, const json& body, int status = 200) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void AnswerError(httplib::Response& res, const Error& error) {
  Answer(res, sush_net::ErrorToJson(error), sush_net::HttpStatusOf(error.code));
}

Result<json> ParseBody(const httplib::Request& req) {
  if (req.body.size() > sush_net::kRequestBodyBytesMax) {
    return LimitError("request_body_bytes_max", static_cast<int64_t>(req.body.size()),
                      sush_net::kRequestBodyBytesMax);
  }
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "the body is not a JSON object");
  }
  return body;
}

// The session skip an encoded signed request carries, if it is one.
std::optional<rack::SessionSkip> SkipIn(const Bytes& request) {
  auto message = rack::Decode(request);
  const auto* signed_request = message ? std::get_if<rack::SignedRequest>(&*message) : nullptr;
  if (signed_request == nullptr) return std::nullopt;
  const auto* skip = std::get_if<rack::SessionSkip>(&signed_request->payload);
  return skip == nullptr ? std::nullopt : std::optional<rack::SessionSkip>(*skip);
}

size_t QueryNumber(const httplib::Request& req, const char* name, size_t fallback) {
  if (!req.has_param(name)) return fallback;
  const std::string text = req.get_param_value(name);
  size_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : fallback;
}

}  // namespace

Status CheckConfig(const ServerConfig& config) {
  const size_t colon = config.baseboard.find(':');
  if (config.baseboard.empty() || colon == std::string::npos || colon == 0 ||
      colon + 1 == config.baseboard.size() || config.baseboard.size() > rack::kBaseboardBytesMax) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--baseboard must be PART:SERIAL, got '" + config.baseboard + "'");
  }
  if (config.cubby < 0 || config.cubby > rack::kCubbyMax) {
    return MakeError(ErrorCode::kInvalidArgument, "--cubby must be 0-31");
  }
  if (config.data_dir.empty()) return MakeError(ErrorCode::kInvalidArgument, "--data-dir needed");
  if (config.gossip.port == 0) return MakeError(ErrorCode::kInvalidArgument, "--gossip needed");
  if (config.http.port == 0) return MakeError(ErrorCode::kInvalidArgument, "--http needed");
  if (config.trusted_key_files.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "at least one --trusted-key needed");
  }
  if (config.peers.size() > kPeersMax) {
    return LimitError("peers_max", static_cast<int64_t>(config.peers.size()), kPeersMax);
  }
  return Ok();
}

// Broadcasts go into the gossip host; a nudge runs a round at once.
class SledServer::Sender final : public rack::GossipSender {
 public:
  explicit Sender(gossip::Node& node) : node_(node) {}
  Status Send(Bytes payload) override {
    ONCE_RETURN_IF_ERROR(node_.host().Send(std::move(payload)));
    node_.Nudge();
    return Ok();
  }

 private:
  gossip::Node& node_;
};

SledServer::SledServer(ServerConfig config) : config_(std::move(config)) {}

SledServer::~SledServer() { Stop(); }

uint16_t SledServer::gossip_port() const { return node_->port(); }

Result<std::unique_ptr<SledServer>> SledServer::Start(ServerConfig config) {
  ONCE_RETURN_IF_ERROR(CheckConfig(config));
  std::unique_ptr<SledServer> server(new SledServer(std::move(config)));
  SledServer& s = *server;
  for (const auto& path : s.config_.trusted_key_files) {
    ONCE_ASSIGN_OR_RETURN(rack::PublicKey key, sush_net::LoadPublicKey(path));
    ONCE_RETURN_IF_ERROR(s.trusted_.Add(key));
  }
  std::error_code ec;
  std::filesystem::create_directories(s.config_.data_dir / "output", ec);
  if (ec) return MakeError(ErrorCode::kUnavailable, "cannot create " + s.config_.data_dir.string());
  std::filesystem::permissions(s.config_.data_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);

  rack::ExecutorConfig executor;
  executor.base_dir = s.config_.data_dir / "output";
  executor.home = s.config_.home;
  executor.limits = s.config_.limits;
  executor.output_bytes_max = s.config_.output_bytes_max;
  ONCE_ASSIGN_OR_RETURN(s.executor_, rack::ProcessExecutor::Create(std::move(executor)));

  gossip::NodeOptions options;
  options.port = s.config_.gossip.port;
  for (const auto& peer : s.config_.peers) {
    options.peers.push_back(gossip::PeerAddress{peer.host, peer.port});
  }
  options.gossip_interval_ms = s.config_.gossip_interval_ms;
  options.bookmark_path = (s.config_.data_dir / "gossip.bookmark").string();
  options.peer_allowed = [raw = &s](size_t peer) { return raw->PeerAllowed(peer); };
  ONCE_ASSIGN_OR_RETURN(s.node_, gossip::Node::Start(std::move(options)));
  s.sender_ = std::make_unique<Sender>(*s.node_);
  {
    std::lock_guard lock(s.mu_);
    s.ResetLocked(s.node_->host().network());
    s.resets_ = 0;
  }

  s.http_ = std::make_unique<httplib::Server>();
  s.http_->set_payload_max_length(sush_net::kRequestBodyBytesMax);
  s.Route();
  if (!s.http_->bind_to_port(s.config_.http.host, s.config_.http.port)) {
    s.node_->Stop();
    return MakeError(ErrorCode::kUnavailable, "cannot bind HTTP " + s.config_.http.ToString());
  }
  s.http_port_ = s.config_.http.port;
  s.loop_thread_ = std::thread([raw = &s] { raw->Loop(); });
  s.http_thread_ = std::thread([raw = &s] { raw->http_->listen_after_bind(); });
  Log(s.config_.baseboard + " (cubby " + std::to_string(s.config_.cubby) + ") http " +
      s.config_.http.ToString() + " gossip " + s.config_.gossip.ToString());
  return server;
}

void SledServer::Stop() {
  if (stopped_.exchange(true)) return;
  const auto deadline = std::chrono::steady_clock::now() + kDrainBudget;
  stopping_ = true;
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
  if (loop_thread_.joinable()) loop_thread_.join();
  {
    std::lock_guard lock(mu_);
    // Kill what still runs; the ends that are reaped in time are gossiped.
    if (sled_ != nullptr && core_->running_jobs() > 0) {
      std::vector<rack::JobId> running;
      for (const rack::JobId& id : job_order_) {
        const rack::JobStatus* status = core_->StatusOf(id, config_.baseboard);
        if (status != nullptr && status->state == rack::JobState::kStarted) running.push_back(id);
      }
      for (const rack::JobId& id : running) (void)executor_->Stop(id);
      while (core_->running_jobs() > 0 && std::chrono::steady_clock::now() < deadline - 1s) {
        Consume(sled_->PollProcesses(20ms));
      }
    }
    sled_.reset();
    core_.reset();
    executor_.reset();  // kills and reaps anything left
  }
  if (node_ != nullptr) {
    node_->Nudge();
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(
        kDrainGossipGrace,
        std::max<std::chrono::nanoseconds>(0ns, deadline - 1s - std::chrono::steady_clock::now())));
    node_->Stop();
  }
}

bool SledServer::PeerAllowed(size_t peer) {
  std::lock_guard lock(partition_mu_);
  return peer >= config_.peers.size() || !partitioned_.contains(config_.peers[peer].ToString());
}

// ---- The serving loop ----

void SledServer::Loop() {
  auto next_tick = std::chrono::steady_clock::now();
  while (!stopping_) {
    {
      std::lock_guard lock(mu_);
      DeliverLocked();
      Consume(sled_->PollProcesses(0ms));
      if (std::chrono::steady_clock::now() >= next_tick) {
        Consume(sled_->Handle(rack::TimerTick{clock_.Now()}));
        next_tick = std::chrono::steady_clock::now() + kTickPeriod;
      }
    }
    std::this_thread::sleep_for(kLoopPeriod);
  }
}

void SledServer::DeliverLocked() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto [network, seen] = node_->host().Read([&](const gossip::Replica& replica) {
      return std::make_pair(replica.network(), replica.Observe(checkpoint_));
    });
    if (network != network_) {
      ResetLocked(network);
      continue;
    }
    for (gossip::Message& message : seen.messages) {
      TrackLocked(message.payload);
      Consume(
          sled_->Handle(rack::Delivered{std::move(message.version), std::move(message.payload)}));
    }
    checkpoint_ = std::move(seen.checkpoint);
    return;
  }
}

void SledServer::ResetLocked(const gossip::NetworkId& network) {
  if (core_ != nullptr) {
    Log("gossip universe " + network_.ToHex() + " dropped for " + network.ToHex() +
        ": sled state reset");
  }
  sled_.reset();
  core_ = std::make_unique<rack::SledCore>(
      rack::SledConfig{rack::SledIdentity{config_.baseboard, static_cast<uint8_t>(config_.cubby)},
                       std::string("once-sush ") + kSushVersion,
                       trusted_,
                       {}},
      rng_, boundary_);
  sled_ = std::make_unique<rack::Sled>(*core_, *executor_, *sender_);
  network_ = network;
  checkpoint_ = itc::Version{};
  tracked_.clear();
  job_order_.clear();
  sled_errors_.clear();
  ++resets_;
}

// Remembers the order in which trusted job starts were delivered, for the
// history listing (the core keeps the jobs themselves).
void SledServer::TrackLocked(const Bytes& payload) {
  auto message = rack::Decode(payload);
  if (!message) return;
  const auto* request = std::get_if<rack::SignedRequest>(&*message);
  if (request == nullptr || !rack::Verify(*request, trusted_)) return;
  const rack::JobStart* job = rack::AsJobStart(*request);
  if (job == nullptr || !tracked_.insert(job->job_id).second) return;
  job_order_.push_back(job->job_id);
  while (job_order_.size() > kTrackedJobsMax) {
    tracked_.erase(job_order_.front());
    job_order_.pop_front();
  }
}

void SledServer::Consume(std::vector<rack::Output> outputs) {
  for (const rack::Output& output : outputs) {
    if (const auto* diagnostic = std::get_if<rack::Diagnostic>(&output)) {
      Log("diagnostic: " + diagnostic->error.ToString());
    } else if (const auto* seen = std::get_if<rack::SledErrorSeen>(&output)) {
      Log("sled error from " + seen->error.baseboard + ": " + seen->error.message);
      sled_errors_.push_back(seen->error);
      if (sled_errors_.size() > kSledErrorsKept) sled_errors_.pop_front();
    } else if (const auto* changed = std::get_if<rack::SessionChanged>(&output)) {
      Log("session now " + (changed->active ? changed->active->ToString() : std::string("none")));
    }
  }
}

// ---- HTTP ----

void SledServer::Route() {
  httplib::Server& http = *http_;

  http.Get("/v1/info", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mu_);
    json sleds = json::array();
    for (const auto& [baseboard, announcement] : core_->known_sleds()) {
      json sled{{"baseboard", baseboard}, {"build_version", announcement.build_version}};
      sled["cubby"] =
          announcement.cubby == rack::kCubbyUnknown ? json(nullptr) : json(announcement.cubby);
      sleds.push_back(sled);
    }
    const auto active = core_->active_session();
    Answer(res, json{{"baseboard", config_.baseboard},
                     {"cubby", config_.cubby},
                     {"build_version", std::string("once-sush ") + kSushVersion},
                     {"http", config_.http.ToString()},
                     {"gossip", config_.gossip.ToString()},
                     {"network", network_.ToHex()},
                     {"universe_resets", resets_},
                     {"active_session", active ? json(active->ToString()) : json(nullptr)},
                     {"running_jobs", core_->running_jobs()},
                     {"executions", core_->executions()},
                     {"sleds", sleds}});
  });

  http.Get("/v1/session", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mu_);
    const auto active = core_->active_session();
    const auto next = core_->next_free_job_id();
    json errors = json::array();
    for (const rack::SledError& error : sled_errors_) {
      errors.push_back(sush_net::SledErrorToJson(error));
    }
    Answer(res, json{{"active", active ? json(active->ToString()) : json(nullptr)},
                     {"next_job_id", next ? json(next->ToString()) : json(nullptr)},
                     {"baseboard", config_.baseboard},
                     {"errors", errors}});
  });

  http.Post("/v1/session/nonce", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mu_);
    for (const rack::Output& output : sled_->Handle(rack::IssueSessionNonce{})) {
      const auto* reply = std::get_if<rack::Reply>(&output);
      if (reply == nullptr) continue;
      if (!reply->status) return AnswerError(res, reply->status.error());
      if (reply->nonce) return Answer(res, json{{"nonce", reply->nonce->ToString()}});
    }
    AnswerError(res, Error{ErrorCode::kInternal, "the core issued no nonce", "", {}});
  });

  http.Post("/v1/submit", [this](const httplib::Request& req, httplib::Response& res) {
    auto body = ParseBody(req);
    if (!body) return AnswerError(res, body.error());
    if (!body->contains("request") || !(*body)["request"].is_string()) {
      return AnswerError(res, Error{ErrorCode::kInvalidArgument, "request (hex) needed", "", {}});
    }
    auto bytes = HexDecode((*body)["request"].get<std::string>());
    if (!bytes) return AnswerError(res, bytes.error());
    if (bytes->size() > rack::kRequestBytesMax) {
      return AnswerError(res, LimitError("request_bytes_max", static_cast<int64_t>(bytes->size()),
                                         rack::kRequestBytesMax)
                                  .error());
    }
    const std::optional<rack::SessionSkip> skip = SkipIn(*bytes);
    std::lock_guard lock(mu_);
    std::optional<rack::Reply> reply;
    std::vector<rack::Output> outputs = sled_->Handle(rack::ClientSubmit{std::move(*bytes)});
    for (const rack::Output& output : outputs) {
      if (const auto* r = std::get_if<rack::Reply>(&output)) reply = *r;
    }
    Consume(std::move(outputs));
    DeliverLocked();  // the own send now, so the next job start sees its chain position
    if (!reply) {
      return AnswerError(res, Error{ErrorCode::kInternal, "the core did not reply", "", {}});
    }
    if (!reply->status) return AnswerError(res, reply->status.error());
    json answer = json::object();
    if (reply->session_id) answer["session_id"] = reply->session_id->ToString();
    if (skip) {
      const auto next = core_->next_free_job_id();
      answer["session_id"] = skip->session_id.ToString();
      answer["job_id"] = skip->job_id.ToString();
      answer["next_job_id"] = next ? json(next->ToString()) : json(nullptr);
    }
    Answer(res, answer);
  });

  http.Get("/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    const size_t offset = QueryNumber(req, "offset", 0);
    const size_t limit = std::min(QueryNumber(req, "limit", 20), sush_net::kHistoryPageEntriesMax);
    std::lock_guard lock(mu_);
    json jobs = json::array();
    size_t skipped = 0;
    for (auto it = job_order_.rbegin(); it != job_order_.rend() && jobs.size() < limit; ++it) {
      const rack::JobRecord* record = core_->FindJob(*it);
      if (record == nullptr) continue;
      if (skipped++ < offset) continue;
      jobs.push_back(sush_net::JobToJson(*record));
    }
    Answer(res, json{{"jobs", jobs}, {"total", job_order_.size()}});
  });

  http.Get(R"(/v1/jobs/([A-Za-z-]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = rack::JobId::Parse(req.matches[1].str());
    if (!id) return AnswerError(res, id.error());
    std::lock_guard lock(mu_);
    const rack::JobRecord* record = core_->FindJob(*id);
    if (record == nullptr) {
      return AnswerError(res, Error{ErrorCode::kNotFound, "no job " + id->ToString(), "", {}});
    }
    Answer(res, sush_net::JobToJson(*record));
  });

  http.Get(R"(/v1/jobs/([A-Za-z-]+)/(stdout|stderr))", [this](const httplib::Request& req,
                                                              httplib::Response& res) {
    auto id = rack::JobId::Parse(req.matches[1].str());
    if (!id) return AnswerError(res, id.error());
    // The id is re-rendered from its bytes: no path can sneak in.
    const auto path = config_.data_dir / "output" / "jobs" / id->ToString() / req.matches[2].str();
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return AnswerError(res, Error{ErrorCode::kNotFound,
                                    "no output of " + id->ToString() + " on " + config_.baseboard,
                                    "",
                                    {}});
    }
    std::string data(sush_net::kOutputAnswerBytesMax + 1, '\0');
    in.read(data.data(), static_cast<std::streamsize>(data.size()));
    data.resize(static_cast<size_t>(in.gcount()));
    if (data.size() > sush_net::kOutputAnswerBytesMax) {
      data.resize(sush_net::kOutputAnswerBytesMax);
      res.set_header("X-Sush-Truncated", "1");
    }
    res.set_content(data, "application/octet-stream");
  });

  http.Post("/admin/partition", [this](const httplib::Request& req, httplib::Response& res) {
    if (!config_.test_admin) {
      return AnswerError(res, Error{ErrorCode::kNotFound, "admin endpoints are off", "", {}});
    }
    auto body = ParseBody(req);
    if (!body) return AnswerError(res, body.error());
    std::set<std::string> peers;
    if (body->contains("peers") && (*body)["peers"].is_array()) {
      for (const json& peer : (*body)["peers"]) {
        if (!peer.is_string()) continue;
        auto address = sush_net::ParseAddress(peer.get<std::string>());
        if (!address) return AnswerError(res, address.error());
        peers.insert(address->ToString());
      }
    }
    {
      std::lock_guard lock(partition_mu_);
      partitioned_ = peers;
    }
    Log("partitioned from " + std::to_string(peers.size()) + " peer(s)");
    Answer(res, json{{"partitioned", json(std::vector<std::string>(peers.begin(), peers.end()))}});
  });
}

}  // namespace once::sush
