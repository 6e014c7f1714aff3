// File: sled_server.h
//
// One sled as a process: a gossip Node (TCP, peers from the configuration),
// the boundary record on two drives (a LockerBoundaryStore over PosixFs), a
// rack::Sled (the core, a ProcessExecutor and a HostPort on the node) and the
// HTTP+JSON API, whose endpoints are the functions of
// once/sush_net/server.h: this file only registers them with the sled's
// HttpServer (once/sush_net/http_server.h: TCP, and the operator socket
// DATA_DIR/api.sock).
//
//   the serving loop: sled.Pump(clock.Now()) every kLoopPeriod while a job
//     runs or the gate is not open; otherwise when woken (a submit, gossip
//     that brought messages) or every kTickPeriod
//     (deliveries and universe changes, the drain signal, process output and
//     exits, a TimerTick every kTickPeriod); the output retention sweep
//   POST /v1/submit: sled.Handle(ClientSubmit), then sled.Deliver
//
// One mutex (mu_) guards the Sled, its core, the executor and the drives:
// the serving loop and the HTTP handlers take it; the gossip node has its own
// lock and never calls back into the sled (its filters read cut_, under
// cut_mu_).
//
//   ONCE_ASSIGN_OR_RETURN(auto server, SledServer::Start(config));
//   ... wait for SIGTERM ...
//   server->Stop();   // drains within kDrainBudget
//
// What a restart keeps: the boundary record on the drives (what this sled
// executed), the gossip bookmark and the job output in the data folder; a
// job a previous life left running is killed at start (its pidfile).

#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "once/base/result.h"
#include "once/base/rng.h"
#include "once/gossip/node.h"
#include "once/locker/fs.h"
#include "once/rack/executor.h"
#include "once/rack/locker_boundary_store.h"
#include "once/rack/sled.h"
#include "once/sush_net/http_server.h"
#include "once/sush_net/server.h"
#include "sled_metrics.h"

namespace once::sush {

inline constexpr char kSushVersion[] = "0.1.0";
// The serving loop's cadence (deliveries, process output and exits).
inline constexpr auto kLoopPeriod = std::chrono::milliseconds(10);
// How often the core sees time pass.
inline constexpr auto kTickPeriod = std::chrono::milliseconds(100);
// After joining a universe, the boundary gate opens by this time even if no
// peer answered (rack::SledOptions::drain_timeout; ServerConfig::drain_timeout_ms).
inline constexpr auto kDrainTimeout = std::chrono::milliseconds(2000);
// Shutdown finishes within this (the issue asks for 5 s).
inline constexpr auto kDrainBudget = std::chrono::milliseconds(5000);
// How long a drain lets gossip carry the last events out.
inline constexpr auto kDrainGossipGrace = std::chrono::milliseconds(300);
// Most --peer addresses (a rack has 32 sleds), and most --cut addresses.
inline constexpr size_t kPeersMax = 64;
// Drive folders: one per M.2 drive (locker::kSlots).
inline constexpr size_t kDrives = 2;
// How often the job output retention rule runs (also after a job ends, at
// most every kOutputSweepMinPeriod).
inline constexpr auto kOutputSweepPeriod = std::chrono::seconds(30);
inline constexpr auto kOutputSweepMinPeriod = std::chrono::milliseconds(500);
// How long Start asks again for a drive lock another process holds (a
// previous life's job child between fork and exec lets go within moments).
inline constexpr auto kDriveLockWait = std::chrono::milliseconds(3000);
// Terminal statuses of this sled remembered until gossip carried them.
inline constexpr size_t kUnshippedStatusesMax = 65536;

struct ServerConfig {
  std::string baseboard;  // "part:serial"
  int cubby = -1;         // 0..31
  std::filesystem::path data_dir;
  // The boundary record's two slot folders, one per M.2 drive. They must
  // exist: a missing folder is a missing drive (the sled starts untrusted).
  std::vector<std::filesystem::path> drives;
  sush_net::Address http{"127.0.0.1", 0};
  sush_net::Address gossip{"127.0.0.1", 0};
  std::vector<sush_net::Address> peers;
  std::vector<std::filesystem::path> trusted_key_files;
  std::chrono::milliseconds gossip_interval_ms{100};
  bool test_admin = false;  // enables POST /admin/partition
  // With test_admin only: gossip peers cut (both ways) from the start, as if
  // POST /admin/partition had been told before the first round.
  std::vector<sush_net::Address> cut;
  std::string home;  // jobs' HOME and cwd; empty: this user's home
  rack::ResourceLimits limits;
  uint64_t output_bytes_max = uint64_t{1} << 30;
  sush_net::OutputRetention retention;
  // Connections, request and idle times (connections_max is lowered to
  // what the process's descriptor limit allows, which Start raises to its
  // hard limit first).
  sush_net::HttpLimits http_limits;
  // An unchained job gets a terminal status after this long (SledLimits).
  std::chrono::milliseconds unchained_job_age_ms_max{600000};
  // The gate opens this long after a join if no peer answered (kDrainTimeout).
  std::chrono::milliseconds drain_timeout_ms = kDrainTimeout;
  // Logs (spdlog on stderr): text or json (one JSON object a line), and the
  // lowest level written.
  std::string log_format = "text";
  std::string log_level = "info";
};

// kInvalidArgument for a missing or malformed field (two drives needed,
// --cut without --test-admin), kLimitExceeded for kPeersMax.
Status CheckConfig(const ServerConfig& config);

class SledServer {
 public:
  // Checks the configuration, loads the trusted keys, kills what a previous
  // life left running (the executor), opens the drives, binds both ports and
  // starts the threads. kUnavailable if a port cannot be bound; key file
  // errors as LoadPublicKey; kPermissionDenied if another process holds a
  // drive (still, after kDriveLockWait). What the drives hold is never an
  // error: a discarded record
  // starts the sled untrusted.
  static Result<std::unique_ptr<SledServer>> Start(ServerConfig config);
  ~SledServer();

  // Stops serving HTTP, kills running jobs (their ends are gossiped if gossip
  // can still carry them within kDrainGossipGrace), stops gossip. Idempotent.
  void Stop();

  uint16_t http_port() const { return http_port_; }
  uint16_t gossip_port() const;

 private:
  explicit SledServer(ServerConfig config);
  void Loop();
  void Wake();
  void Consume(std::vector<rack::Output> outputs);
  void Route();
  void ShipStatuses();
  void SweepOutput(TimePoint now);
  nlohmann::json Purge(const std::optional<std::vector<rack::JobId>>& jobs);
  nlohmann::json GossipView();
  // The answers of the endpoints that touch the sled, under mu_.
  sush_net::OutputSink Sink();
  itc::Version HeardLocked();
  bool Cut(const std::string& peer);
  void SetCut(const std::vector<sush_net::Address>& peers);

  ServerConfig config_;
  sush_net::SledFacts facts_;
  rack::TrustedKeys trusted_;
  SystemRng rng_;
  SystemClock clock_;
  locker::PosixFs fs_;
  std::unique_ptr<gossip::Node> node_;
  std::unique_ptr<sush_net::HttpServer> http_;
  uint16_t http_port_ = 0;
  std::filesystem::path jobs_dir_;

  std::mutex mu_;  // guards everything below
  std::unique_ptr<rack::LockerBoundaryStore> drives_;
  SledMetrics metrics_;
  std::unique_ptr<TimedBoundaryStore> timed_drives_;  // drives_, timed into metrics_
  std::unique_ptr<rack::ProcessExecutor> executor_;
  std::unique_ptr<rack::SledCore> core_;
  std::unique_ptr<rack::HostPort> port_;
  std::unique_ptr<rack::Sled> sled_;
  std::optional<rack::NetworkId> network_;  // the core's, as of the last Pump
  uint64_t joins_ = 0;                      // the core's joins(), as of the last Pump
  sush_net::SledNotes notes_;
  // This sled's terminal statuses gossip has not carried to a peer yet, with
  // the node's sessions_ok count past which it has (see ShipStatuses).
  std::map<rack::JobId, uint64_t> unshipped_;
  bool sweep_due_ = false;  // a job ended since the last sweep

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool woken_ = false;

  std::mutex cut_mu_;
  std::set<std::string> cut_;  // gossip addresses cut both ways

  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  std::thread loop_thread_;
};

}  // namespace once::sush
