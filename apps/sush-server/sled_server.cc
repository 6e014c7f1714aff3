#include "sled_server.h"

#include <spdlog/logger.h>
#include <sys/resource.h>

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
void LogRefusal(std::string_view method, std::string_view path, const sush_net::HttpResponse& res) {
  if (!g_log || res.status < 400) return;
  json body = json::parse(res.body, nullptr, false);
  std::string code = "?", message;
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    code = body["error"].value("code", "?");
    message = body["error"].value("message", "");
  }
  telemetry::LogRefusal(*g_log, method.empty() ? "?" : method, path.empty() ? "?" : path,
                        res.status, code, message);
}

sush_net::HttpResponse Reply(const sush_net::HttpAnswer& answer) {
  return sush_net::JsonResponse(answer.status, answer.body);
}

std::optional<std::string_view> View(const std::optional<std::string>& text) {
  return text ? std::optional<std::string_view>(*text) : std::nullopt;
}

// Raises the soft descriptor limit to the hard one; returns the soft limit.
size_t RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
    ::getrlimit(RLIMIT_NOFILE, &limit);
  }
  return static_cast<size_t>(limit.rlim_cur);
}

// Descriptors kept for everything but HTTP connections (gossip links, job
// pipes, drives, files).
constexpr size_t kDescriptorsReserved = 512;

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

  // A previous life killed an instant ago may have left a job's child
  // between fork and exec, which still shares the drive lock until it sees
  // its parent gone and exits: the lock is asked for again, for a while.
  const auto lock_deadline = std::chrono::steady_clock::now() + kDriveLockWait;
  bool waited = false;
  while (true) {
    auto opened = rack::LockerBoundaryStore::Open(
        locker::LockerOptions{s.config_.drives, &s.fs_, &s.rng_, "boundary"});
    if (opened) {
      s.drives_ = std::move(*opened);
      break;
    }
    if (opened.error().code != ErrorCode::kPermissionDenied ||
        std::chrono::steady_clock::now() > lock_deadline) {
      return std::unexpected(opened.error());
    }
    if (!waited) Log("waiting for a drive lock: " + opened.error().message);
    waited = true;
    std::this_thread::sleep_for(50ms);
  }
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

  rack::SledConfig core_config{
      rack::SledIdentity{s.config_.baseboard, static_cast<uint8_t>(s.config_.cubby)},
      s.facts_.build_version,
      s.trusted_,
      {},
      {}};
  core_config.limits.unchained_job_age_max = s.config_.unchained_job_age_ms_max;
  s.rng_.Fill(core_config.nonce_key.data(), core_config.nonce_key.size());
  s.core_ = std::make_unique<rack::SledCore>(std::move(core_config), s.rng_, *s.timed_drives_);

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
  options.on_received = [raw = &s] { raw->Wake(); };
  ONCE_ASSIGN_OR_RETURN(s.node_, gossip::Node::Start(std::move(options)));
  gossip::Node* node = s.node_.get();
  s.port_ = std::make_unique<rack::HostPort>(
      node->host(),
      rack::HostPort::Hooks{[node] { node->Nudge(); }, [node] { return node->stats().sessions_ok; },
                            !s.config_.peers.empty()});
  s.sled_ = std::make_unique<rack::Sled>(
      *s.core_, *s.executor_, *s.port_,
      rack::SledOptions{.drain_timeout = s.config_.drain_timeout_ms, .tick_period = kTickPeriod});
  {
    std::lock_guard lock(s.mu_);
    s.Consume(s.sled_->Pump(s.clock_.Now()));  // joins the universe before the first request
  }

  sush_net::HttpServerOptions http;
  http.host = s.config_.http.host;
  http.port = s.config_.http.port;
  http.limits = s.config_.http_limits;
  http.on_refusal = LogRefusal;
  const size_t descriptors = RaiseDescriptorLimit();
  http.limits.connections_max = std::min(
      http.limits.connections_max,
      descriptors > 2 * kDescriptorsReserved ? descriptors - kDescriptorsReserved : size_t{64});
  // A Unix socket path has at most 107 bytes: a deeper data folder has none.
  const std::filesystem::path socket = s.config_.data_dir / "api.sock";
  if (socket.string().size() < 100) {
    http.operator_socket = socket;
  } else {
    Log("no operator socket: " + socket.string() + " is too long a path for a Unix socket");
  }
  s.jobs_dir_ = s.config_.data_dir / "output" / "jobs";
  s.http_ = std::make_unique<sush_net::HttpServer>(http);
  s.Route();
  if (auto bound = s.http_->Start(); !bound) {
    s.node_->Stop();
    return std::unexpected(bound.error());
  }
  s.http_port_ = s.http_->port();
  s.loop_thread_ = std::thread([raw = &s] { raw->Loop(); });
  Log(s.config_.baseboard + " (cubby " + std::to_string(s.config_.cubby) + ") http " +
      s.config_.http.ToString() + " (at most " + std::to_string(http.limits.connections_max) +
      " connections) gossip " + s.config_.gossip.ToString() +
      (s.config_.cut.empty() ? std::string()
                             : " cut from " + std::to_string(s.config_.cut.size()) + " peer(s)"));
  return server;
}

void SledServer::Stop() {
  if (stopped_.exchange(true)) return;
  const auto deadline = std::chrono::steady_clock::now() + kDrainBudget;
  stopping_ = true;
  if (http_) http_->Stop();
  Wake();
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
  auto last_sweep = std::chrono::steady_clock::now();
  while (!stopping_) {
    bool busy = false;
    bool sweep = false;
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard lock(mu_);
      Consume(sled_->Pump(clock_.Now()));
      ShipStatuses();
      // Process output and exits are polled, and the gate is waited for,
      // every kLoopPeriod; an idle sled sleeps until woken or the next tick.
      busy = core_->running_jobs() > 0 || core_->gate() == rack::GateState::kReplaying ||
             core_->gate() == rack::GateState::kMintingMarker;
      sweep = (sweep_due_ && now - last_sweep >= kOutputSweepMinPeriod) ||
              now - last_sweep >= kOutputSweepPeriod;
    }
    if (sweep) {
      SweepOutput(clock_.Now());
      last_sweep = now;
    }
    std::unique_lock wait(wake_mu_);
    wake_cv_.wait_for(wait, busy ? kLoopPeriod : kTickPeriod,
                      [&] { return woken_ || stopping_.load(); });
    woken_ = false;
  }
}

void SledServer::Wake() {
  {
    std::lock_guard lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_one();
}

// Under mu_: a terminal status is carried to a peer by any reconciliation
// session that began after it was sent; at most one session per link was in
// flight when it was, so once sessions_ok passed the count noted then plus
// the links, one such session completed.
void SledServer::ShipStatuses() {
  if (unshipped_.empty()) return;
  const uint64_t sessions = node_->stats().sessions_ok;
  // Output held back only for this may go now: the rule runs again.
  if (std::erase_if(unshipped_, [&](const auto& entry) { return entry.second <= sessions; }) > 0) {
    sweep_due_ = true;
  }
}

// The retention rule (sush_net::RetentionVictims): the folders are listed
// without the sled's lock, judged under it, removed without it.
void SledServer::SweepOutput(TimePoint now) {
  const std::vector<sush_net::OutputFolder> folders = sush_net::ListOutput(jobs_dir_);
  std::vector<sush_net::OutputFolder> victims;
  {
    std::lock_guard lock(mu_);
    sweep_due_ = false;
    if (core_->gate() == rack::GateState::kNotJoined ||
        core_->gate() == rack::GateState::kReplaying) {
      return;  // statuses are still being relearned
    }
    std::set<rack::JobId> unshipped;
    for (const auto& [id, mark] : unshipped_) unshipped.insert(id);
    victims = sush_net::RetentionVictims(
        folders, now, config_.retention,
        [&](const rack::JobId& id) { return sush_net::WhyKeepOutput(*core_, unshipped, id); });
  }
  uint64_t freed = 0;
  for (const sush_net::OutputFolder& folder : victims) {
    if (auto bytes = sush_net::DeleteOutput(jobs_dir_, folder.id)) freed += *bytes;
  }
  if (!victims.empty()) {
    Log("output retention removed " + std::to_string(victims.size()) + " job folder(s), " +
        std::to_string(freed) + " bytes");
  }
}

json SledServer::Purge(const std::optional<std::vector<rack::JobId>>& jobs) {
  const std::vector<sush_net::OutputFolder> folders = sush_net::ListOutput(jobs_dir_);
  std::vector<rack::JobId> asked;
  if (jobs) {
    asked = *jobs;
  } else {
    for (const sush_net::OutputFolder& folder : folders) asked.push_back(folder.id);
  }
  std::vector<std::pair<rack::JobId, std::string>> kept;
  std::vector<rack::JobId> go;
  {
    std::lock_guard lock(mu_);
    std::set<rack::JobId> unshipped;
    for (const auto& [id, mark] : unshipped_) unshipped.insert(id);
    const bool relearning = core_->gate() == rack::GateState::kNotJoined ||
                            core_->gate() == rack::GateState::kReplaying;
    for (const rack::JobId& id : asked) {
      auto why = relearning ? std::optional<std::string>("this sled is replaying gossip")
                            : sush_net::WhyKeepOutput(*core_, unshipped, id);
      if (why) {
        kept.emplace_back(id, *why);
      } else {
        go.push_back(id);
      }
    }
  }
  json purged = json::array(), kept_json = json::array();
  uint64_t freed = 0;
  for (const rack::JobId& id : go) {
    auto bytes = sush_net::DeleteOutput(jobs_dir_, id);
    if (bytes) {
      purged.push_back(json{{"job_id", id.ToString()}, {"bytes", *bytes}});
      freed += *bytes;
    } else {
      kept_json.push_back(json{{"job_id", id.ToString()}, {"reason", bytes.error().message}});
    }
  }
  for (const auto& [id, why] : kept) {
    kept_json.push_back(json{{"job_id", id.ToString()}, {"reason", why}});
  }
  if (!go.empty()) {
    Log("purge removed " + std::to_string(purged.size()) + " job folder(s), " +
        std::to_string(freed) + " bytes");
  }
  return json{{"baseboard", config_.baseboard},
              {"purged", purged},
              {"kept", kept_json},
              {"bytes_freed", freed}};
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
      if (status->baseboard == config_.baseboard && status->status.terminal()) {
        sweep_due_ = true;
        if (!config_.peers.empty() && node_ != nullptr) {
          if (unshipped_.size() >= kUnshippedStatusesMax) unshipped_.erase(unshipped_.begin());
          unshipped_[status->job_id] = node_->stats().sessions_ok + node_->links().size() + 1;
        }
      }
    }
  }
  if (core_ != nullptr && core_->joins() != joins_) {
    if (network_) {
      notes_.universe_resets += core_->joins() - joins_;
      Log("gossip universe " + network_->ToHex() + " dropped for " + core_->network()->ToHex() +
          (*network_ == *core_->network() ? " (a fresh replica of it)" : "") +
          ": what it held is forgotten here");
    }
    network_ = core_->network();
    joins_ = core_->joins();
  }
}

sush_net::OutputSink SledServer::Sink() {
  return [this](std::vector<rack::Output> outputs) { Consume(std::move(outputs)); };
}

itc::Version SledServer::HeardLocked() {
  return node_->host().Read([](const gossip::Replica& replica) { return replica.ceiling(); });
}

// ---- HTTP: the endpoints of once/sush_net/server.h ----

json SledServer::GossipView() {
  const gossip::NodeStats stats = node_->stats();
  json errors = json::array();
  for (const gossip::GossipError& error : node_->errors()) {
    errors.push_back(json{{"peer", error.peer},
                          {"message", error.message},
                          {"at", sush_net::Iso8601(error.at)},
                          {"count", error.count}});
  }
  json split = nullptr;
  if (const auto seen = node_->split()) {
    split =
        json{{"network", seen->network.ToHex()},
             {"peer", seen->peer},
             {"since", sush_net::Iso8601(seen->since)},
             {"seconds",
              std::chrono::duration_cast<std::chrono::seconds>(seen->last - seen->since).count()},
             {"meetings", seen->meetings},
             {"message", "this sled keeps meeting another gossip universe through " + seen->peer +
                             " and neither side joins the other"}};
  }
  return json{{"rounds", stats.rounds},
              {"sessions_ok", stats.sessions_ok},
              {"sessions_failed", stats.sessions_failed},
              {"bootstraps", stats.bootstraps},
              {"links", node_->links().size()},
              {"split", split},
              {"errors", errors}};
}

// ---- HTTP: the endpoints of once/sush_net/server.h ----

void SledServer::Route() {
  using sush_net::HttpRequest;
  using sush_net::HttpResponse;
  sush_net::HttpServer& http = *http_;

  http.Route("GET", "/metrics", [this](const HttpRequest&) {
    std::lock_guard lock(mu_);
    HttpResponse answer;
    answer.content_type = "text/plain; version=0.0.4";
    answer.body = metrics_.Text(core_.get(), node_.get());
    return answer;
  });

  http.Route("GET", "/v1/info", [this](const HttpRequest&) {
    json gossip = GossipView();
    std::lock_guard lock(mu_);
    sush_net::HttpAnswer answer = sush_net::GetInfo(facts_, *core_, notes_);
    answer.body["gossip"] = std::move(gossip);
    const sush_net::HttpStats stats = http_->stats();
    answer.body["http"] = json{{"open", stats.open},
                               {"open_operator", stats.open_operator},
                               {"refused", stats.refused},
                               {"evicted", stats.evicted},
                               {"timed_out", stats.timed_out},
                               {"limit_refusals", stats.limit_refusals},
                               {"busy", stats.busy}};
    return Reply(answer);
  });
  http.Route("GET", "/v1/session", [this](const HttpRequest&) {
    std::lock_guard lock(mu_);
    return Reply(sush_net::GetSession(facts_, *core_, notes_));
  });
  http.Route("GET", "/v1/boundary", [this](const HttpRequest&) {
    std::lock_guard lock(mu_);
    return Reply(sush_net::GetBoundary(facts_, *core_, *drives_, notes_, HeardLocked()));
  });
  http.Route("POST", "/v1/session/nonce", [this](const HttpRequest&) {
    std::lock_guard lock(mu_);
    return Reply(sush_net::PostSessionNonce(*sled_, Sink()));
  });
  http.Route("POST", "/v1/submit", [this](const HttpRequest& req) {
    HttpResponse response;
    {
      std::lock_guard lock(mu_);
      response = Reply(sush_net::PostSubmit(*sled_, clock_.Now(), req.body, Sink()));
    }
    Wake();  // the loop starts what the submit made runnable
    return response;
  });
  http.Route("GET", "/v1/jobs", [this](const HttpRequest& req) {
    const auto offset = req.Param("offset"), limit = req.Param("limit");
    std::lock_guard lock(mu_);
    return Reply(sush_net::GetJobs(*core_, View(offset), View(limit)));
  });
  http.Route("GET", R"(/v1/jobs/([A-Za-z-]+))", [this](const HttpRequest& req) {
    std::lock_guard lock(mu_);
    return Reply(sush_net::GetJob(*core_, req.matches[0]));
  });
  http.Route("GET", R"(/v1/jobs/([A-Za-z-]+)/(stdout|stderr))", [this](const HttpRequest& req) {
    return sush_net::GetJobOutput(
        jobs_dir_, req.matches[0], req.matches[1], config_.baseboard,
        sush_net::AuthorizeOperator(req, trusted_, config_.baseboard, clock_.Now()));
  });
  http.Route("POST", "/v1/output/purge", [this](const HttpRequest& req) {
    if (auto allowed = sush_net::AuthorizeOperator(req, trusted_, config_.baseboard, clock_.Now());
        !allowed) {
      return sush_net::ErrorResponse(allowed.error());
    }
    auto jobs = sush_net::ParsePurge(req.body);
    if (!jobs) return sush_net::ErrorResponse(jobs.error());
    return sush_net::JsonResponse(200, Purge(*jobs));
  });
  http.Route("POST", "/admin/partition", [this](const HttpRequest& req) {
    return Reply(sush_net::PostPartition(
        config_.test_admin, req.body, [this](const std::vector<sush_net::Address>& peers) {
          SetCut(peers);
          Log("cut from " + std::to_string(peers.size()) + " peer(s)");
        }));
  });
}

}  // namespace once::sush
