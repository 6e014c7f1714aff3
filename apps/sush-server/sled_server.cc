#include "sled_server.h"

#include <httplib.h>
#include <spdlog/logger.h>

#include <cstdio>

#include "once/telemetry/log.h"

namespace once::sush {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// The server's log (spdlog, telemetry::MakeLogger); set at Start, stderr
// text before.
std::shared_ptr<spdlog::logger> g_log;

void Log(const std::string& line) {
  if (g_log) {
    g_log->info("{}", line);
  } else {
    std::fprintf(stderr, "sush-server: %s\n", line.c_str());
  }
}

// One line for every refusal a client gets: its status and error code.
void LogRefusal(const httplib::Request& req, const httplib::Response& res) {
  if (!g_log || res.status < 400) return;
  json body = json::parse(res.body, nullptr, false);
  std::string code = "?", message;
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    code = body["error"].value("code", "?");
    message = body["error"].value("message", "");
  }
  telemetry::LogRefusal(*g_log, req.method, req.path, res.status, code, message);
}

void Reply(httplib::Response& res, const sush_net::HttpAnswer& answer) {
  res.status = answer.status;
  res.set_content(sush_net::AnswerText(answer), "application/json");
}

std::optional<std::string> Param(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) return std::nullopt;
  return req.get_param_value(name);
}

std::optional<std::string_view> View(const std::optional<std::string>& text) {
  return text ? std::optional<std::string_view>(*text) : std::nullopt;
}

std::string JobStatusLine(const rack::JobStatusChanged& changed) {
  std::string line = "job " + changed.job_id.ToString() + " " +
                     std::string(rack::JobStateName(changed.status.state));
  if (changed.status.state == rack::JobState::kSkipped) {
    line += " (" + std::string(rack::SkipReasonName(changed.status.skip_reason)) + ")";
  }
  if (changed.status.state == rack::JobState::kError) line += ": " + changed.status.error;
  return line;
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
  if (config.drives.size() != kDrives) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "two --drive folders needed, one per M.2 drive (the boundary record is kept "
                     "on both), got " +
                         std::to_string(config.drives.size()));
  }
  for (const auto& drive : config.drives) {
    if (drive.empty()) return MakeError(ErrorCode::kInvalidArgument, "--drive is empty");
  }
  if (config.gossip.port == 0) return MakeError(ErrorCode::kInvalidArgument, "--gossip needed");
  if (config.http.port == 0) return MakeError(ErrorCode::kInvalidArgument, "--http needed");
  if (config.trusted_key_files.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "at least one --trusted-key needed");
  }
  if (config.peers.size() > kPeersMax) {
    return LimitError("peers_max", static_cast<int64_t>(config.peers.size()), kPeersMax);
  }
  if (!config.cut.empty() && !config.test_admin) {
    return MakeError(ErrorCode::kInvalidArgument, "--cut is a test flag: only with --test-admin");
  }
  if (config.cut.size() > kPeersMax) {
    return LimitError("cut_peers_max", static_cast<int64_t>(config.cut.size()), kPeersMax);
  }
  return Ok();
}

SledServer::SledServer(ServerConfig config) : config_(std::move(config)) {}

SledServer::~SledServer() { Stop(); }

uint16_t SledServer::gossip_port() const { return node_->port(); }

Result<std::unique_ptr<SledServer>> SledServer::Start(ServerConfig config) {
  ONCE_RETURN_IF_ERROR(CheckConfig(config));
  ONCE_ASSIGN_OR_RETURN(g_log, telemetry::MakeLogger("sush-server", {.format = config.log_format,
                                                                     .level = config.log_level}));
  std::unique_ptr<SledServer> server(new SledServer(std::move(config)));
  SledServer& s = *server;
  s.facts_ = sush_net::SledFacts{
      s.config_.baseboard, s.config_.cubby,  std::string("once-sush ") + kSushVersion,
      s.config_.http,      s.config_.gossip, s.clock_.Now()};
  for (const auto& path : s.config_.trusted_key_files) {
    ONCE_ASSIGN_OR_RETURN(rack::PublicKey key, sush_net::LoadPublicKey(path));
    ONCE_RETURN_IF_ERROR(s.trusted_.Add(key));
  }
  std::error_code ec;
  std::filesystem::create_directories(s.config_.data_dir / "output", ec);
  if (ec) return MakeError(ErrorCode::kUnavailable, "cannot create " + s.config_.data_dir.string());
  std::filesystem::permissions(s.config_.data_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);

  // The executor first: it kills what a previous life left running before
  // anything of this life can start a job.
  rack::ExecutorConfig executor;
  executor.base_dir = s.config_.data_dir / "output";
  executor.home = s.config_.home;
  executor.limits = s.config_.limits;
  executor.output_bytes_max = s.config_.output_bytes_max;
  ONCE_ASSIGN_OR_RETURN(s.executor_, rack::ProcessExecutor::Create(std::move(executor)));
  s.notes_.orphans_killed = s.executor_->orphans_killed();
  for (const rack::JobId& id : s.notes_.orphans_killed) {
    Log("killed the process group of job " + id.ToString() + ", left running by a previous life");
  }

  ONCE_ASSIGN_OR_RETURN(s.drives_, rack::LockerBoundaryStore::Open(locker::LockerOptions{
                                       s.config_.drives, &s.fs_, &s.rng_, "boundary"}));
  s.timed_drives_ = std::make_unique<TimedBoundaryStore>(*s.drives_, s.metrics_);
  const rack::BoundaryLoad& load = s.drives_->loaded();
  Log("boundary record: locker verdict " + load.verdict +
      (load.record ? std::string()
                   : "; UNTRUSTED: " + load.untrusted_reason +
                         " (every job is skipped until `sush sled reset`)"));
  for (const rack::DriveStatus& drive : load.drives) {
    Log("  drive " + drive.path + ": " + drive.state +
        (drive.message.empty() ? std::string() : " (" + drive.message + ")"));
  }

  s.core_ = std::make_unique<rack::SledCore>(
      rack::SledConfig{
          rack::SledIdentity{s.config_.baseboard, static_cast<uint8_t>(s.config_.cubby)},
          s.facts_.build_version,
          s.trusted_,
          {},
          {}},
      s.rng_, *s.timed_drives_);

  s.SetCut(s.config_.cut);
  gossip::NodeOptions options;
  options.port = s.config_.gossip.port;
  for (const auto& peer : s.config_.peers) {
    options.peers.push_back(gossip::PeerAddress{peer.host, peer.port});
  }
  options.gossip_interval_ms = s.config_.gossip_interval_ms;
  options.bookmark_path = (s.config_.data_dir / "gossip.bookmark").string();
  options.peer_allowed = [raw = &s](size_t peer) {
    return peer >= raw->config_.peers.size() || !raw->Cut(raw->config_.peers[peer].ToString());
  };
  options.peer_allowed_inbound = [raw = &s](const gossip::PeerAddress& peer) {
    return !raw->Cut(sush_net::Address{peer.host, peer.port}.ToString());
  };
  ONCE_ASSIGN_OR_RETURN(s.node_, gossip::Node::Start(std::move(options)));
  gossip::Node* node = s.node_.get();
  s.port_ = std::make_unique<rack::HostPort>(
      node->host(),
      rack::HostPort::Hooks{[node] { node->Nudge(); }, [node] { return node->stats().sessions_ok; },
                            !s.config_.peers.empty()});
  s.sled_ = std::make_unique<rack::Sled>(
      *s.core_, *s.executor_, *s.port_,
      rack::SledOptions{.drain_timeout = kDrainTimeout, .tick_period = kTickPeriod});
  {
    std::lock_guard lock(s.mu_);
    s.Consume(s.sled_->Pump(s.clock_.Now()));  // joins the universe before the first request
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
      s.config_.http.ToString() + " gossip " + s.config_.gossip.ToString() +
      (s.config_.cut.empty() ? std::string()
                             : " cut from " + std::to_string(s.config_.cut.size()) + " peer(s)"));
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
    // Kill what still runs; the ends that are reaped in time are recorded and gossiped.
    if (sled_ != nullptr) {
      for (const rack::JobId& id : core_->running()) (void)executor_->Stop(id);
      while (core_->running_jobs() > 0 && std::chrono::steady_clock::now() < deadline - 1s) {
        Consume(sled_->Pump(clock_.Now(), 20ms));
      }
    }
    sled_.reset();
    port_.reset();
    core_.reset();
    executor_.reset();  // kills and reaps anything left
    drives_.reset();
  }
  if (node_ != nullptr) {
    node_->Nudge();
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(
        kDrainGossipGrace,
        std::max<std::chrono::nanoseconds>(0ns, deadline - 1s - std::chrono::steady_clock::now())));
    node_->Stop();
  }
}

bool SledServer::Cut(const std::string& peer) {
  std::lock_guard lock(cut_mu_);
  return cut_.contains(peer);
}

void SledServer::SetCut(const std::vector<sush_net::Address>& peers) {
  std::set<std::string> cut;
  for (const sush_net::Address& peer : peers) cut.insert(peer.ToString());
  std::lock_guard lock(cut_mu_);
  cut_ = std::move(cut);
}

// ---- The serving loop ----

void SledServer::Loop() {
  while (!stopping_) {
    {
      std::lock_guard lock(mu_);
      Consume(sled_->Pump(clock_.Now()));
    }
    std::this_thread::sleep_for(kLoopPeriod);
  }
}

// Under mu_, after every call on the sled: logs, and keeps what the
// endpoints show beside the core.
void SledServer::Consume(std::vector<rack::Output> outputs) {
  for (const rack::Output& output : outputs) {
    if (const auto* diagnostic = std::get_if<rack::Diagnostic>(&output)) {
      Log("diagnostic: " + diagnostic->error.ToString());
    } else if (const auto* seen = std::get_if<rack::SledErrorSeen>(&output)) {
      Log("sled error " + std::string(rack::SledErrorKindName(seen->error.kind)) + " from " +
          seen->error.baseboard + ": " + seen->error.message);
      notes_.Note(seen->error);
    } else if (const auto* changed = std::get_if<rack::SessionChanged>(&output)) {
      Log("session now " + (changed->active ? changed->active->ToString() : std::string("none")));
    } else if (const auto* boundary = std::get_if<rack::BoundaryChanged>(&output)) {
      Log("boundary record: " + boundary->why);
    } else if (const auto* status = std::get_if<rack::JobStatusChanged>(&output)) {
      if (status->baseboard == config_.baseboard &&
          status->status.state != rack::JobState::kQueued) {
        Log(JobStatusLine(*status));
      }
    }
  }
  if (core_ != nullptr && core_->network() != network_) {
    if (network_) {
      ++notes_.universe_resets;
      Log("gossip universe " + network_->ToHex() + " dropped for " + core_->network()->ToHex() +
          ": what it held is forgotten here");
    }
    network_ = core_->network();
  }
}

sush_net::OutputSink SledServer::Sink() {
  return [this](std::vector<rack::Output> outputs) { Consume(std::move(outputs)); };
}

itc::Version SledServer::HeardLocked() {
  return node_->host().Read([](const gossip::Replica& replica) { return replica.ceiling(); });
}

// ---- HTTP: the endpoints of once/sush_net/server.h ----

void SledServer::Route() {
  using httplib::Request;
  using httplib::Response;
  httplib::Server& http = *http_;

  http.set_logger([](const Request& req, const Response& res) { LogRefusal(req, res); });
  http.Get("/metrics", [this](const Request&, Response& res) {
    std::lock_guard lock(mu_);
    res.set_content(metrics_.Text(core_.get(), node_.get()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/info", [this](const Request&, Response& res) {
    std::lock_guard lock(mu_);
    Reply(res, sush_net::GetInfo(facts_, *core_, notes_));
  });
  http.Get("/v1/session", [this](const Request&, Response& res) {
    std::lock_guard lock(mu_);
    Reply(res, sush_net::GetSession(facts_, *core_, notes_));
  });
  http.Get("/v1/boundary", [this](const Request&, Response& res) {
    std::lock_guard lock(mu_);
    Reply(res, sush_net::GetBoundary(facts_, *core_, *drives_, notes_, HeardLocked()));
  });
  http.Post("/v1/session/nonce", [this](const Request&, Response& res) {
    std::lock_guard lock(mu_);
    Reply(res, sush_net::PostSessionNonce(*sled_, Sink()));
  });
  http.Post("/v1/submit", [this](const Request& req, Response& res) {
    std::lock_guard lock(mu_);
    Reply(res, sush_net::PostSubmit(*sled_, clock_.Now(), req.body, Sink()));
  });
  http.Get("/v1/jobs", [this](const Request& req, Response& res) {
    const auto offset = Param(req, "offset"), limit = Param(req, "limit");
    std::lock_guard lock(mu_);
    Reply(res, sush_net::GetJobs(*core_, View(offset), View(limit)));
  });
  http.Get(R"(/v1/jobs/([A-Za-z-]+))", [this](const Request& req, Response& res) {
    std::lock_guard lock(mu_);
    Reply(res, sush_net::GetJob(*core_, req.matches[1].str()));
  });
  http.Get(R"(/v1/jobs/([A-Za-z-]+)/(stdout|stderr))", [this](const Request& req, Response& res) {
    sush_net::BytesAnswer answer =
        sush_net::GetJobOutput(config_.data_dir / "output" / "jobs", req.matches[1].str(),
                               req.matches[2].str(), config_.baseboard);
    res.status = answer.status;
    if (answer.truncated) res.set_header("X-Sush-Truncated", "1");
    res.set_content(std::move(answer.body), answer.content_type);
  });
  http.Post("/admin/partition", [this](const Request& req, Response& res) {
    Reply(res,
          sush_net::PostPartition(config_.test_admin, req.body,
                                  [this](const std::vector<sush_net::Address>& peers) {
                                    SetCut(peers);
                                    Log("cut from " + std::to_string(peers.size()) + " peer(s)");
                                  }));
  });
}

}  // namespace once::sush
