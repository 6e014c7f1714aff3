// File: rack.h
//
// A local rack for demos and tests: `sush rack up N --dir DIR` starts N
// sush-server processes on loopback ports (cubbies 0..N-1, baseboards
// 913-0000019:SLED0000i), all peers of one another, trusting a fresh key
// DIR/keys/operator.key (0600; DIR/keys/operator.pub is what the sleds
// load), and writes DIR/rack.json. Each sled gets DIR/sledI/{data, home,
// m2a, m2b, server.log}: m2a and m2b stand for its two M.2 drives (--drive
// twice); rack up creates them (0700), a server never does (a missing drive
// folder is a missing drive). `sush rack down --dir DIR` SIGTERMs the pids of
// DIR/rack.json that are still ours (their /proc/PID/cmdline names
// sush-server and DIR) and every sush-server process whose --data-dir is a
// sled's of DIR (restarted by hand), waits, SIGKILLs stragglers, and says
// which sleds still answer. `sush rack restart
// -T SLED` stops one sled (SIGTERM, or SIGKILL with --kill: a crash) and
// starts it again with the same flags (data, drives, --cut), as tests do by
// hand.
//
//   ONCE_ASSIGN_OR_RETURN(RackFile rack, RackUp(RackUpOptions{4, "/tmp/rack"}));
//   ONCE_ASSIGN_OR_RETURN(RackFile again, LoadRack("/tmp/rack"));
//   ONCE_ASSIGN_OR_RETURN(RackSled one, RackRestart("/tmp/rack", {.target = "2", .kill = true}));
//   ONCE_RETURN_IF_ERROR(RackDown("/tmp/rack"));

#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "once/base/result.h"
#include "once/sush_net/api.h"

namespace once::sush {

// Most sleds `rack up` starts (a rack has 32 cubbies).
inline constexpr int kRackSledsMax = 32;
// How long `rack up` waits for every sled's HTTP answer and one universe.
inline constexpr auto kRackUpWait = std::chrono::milliseconds(30000);
// How long `rack down` waits after SIGTERM before SIGKILL.
inline constexpr auto kRackDownWait = std::chrono::milliseconds(6000);

struct RackSled {
  int cubby = 0;
  std::string baseboard;
  sush_net::Address http;
  sush_net::Address gossip;
  int pid = 0;
  std::filesystem::path data_dir;
  std::vector<std::filesystem::path> drives;  // the two drive folders
  std::vector<std::string> args;              // the server's flags, for a restart
};

struct RackFile {
  std::filesystem::path dir;
  std::filesystem::path key;          // the operator's key pair
  std::filesystem::path trusted_key;  // its public half, loaded by the sleds
  std::filesystem::path server_binary;
  std::vector<RackSled> sleds;
};

struct RackUpOptions {
  int sleds = 4;
  std::filesystem::path dir;
  std::filesystem::path server_binary;  // empty: found next to this program or on PATH
  int gossip_interval_ms = 50;
  bool test_admin = false;
};

nlohmann::json RackToJson(const RackFile& rack);
Result<RackFile> LoadRack(const std::filesystem::path& dir);
// kInvalidArgument for a count outside 1..kRackSledsMax; kPermissionDenied
// if DIR already has a rack with live servers; kUnavailable/kTimeout if a
// server does not come up (the started ones are stopped again).
Result<RackFile> RackUp(const RackUpOptions& options);
// What `rack down` did: the pids it stopped, and the sleds that still
// answer afterwards (baseboard, why: not found, or not ours to stop).
struct RackDownResult {
  std::vector<int> stopped;
  std::vector<std::pair<std::string, std::string>> still_up;
};
// Stops the servers of rack.json's pids that are still ours, and any other
// sush-server process serving a sled's data folder (one restarted by hand),
// then asks each sled's HTTP address whether something still answers there.
Result<RackDownResult> RackDown(const std::filesystem::path& dir);

struct RackRestartOptions {
  std::string target;  // must name exactly one sled of the rack (cubby, serial, baseboard)
  bool kill = false;   // SIGKILL (a crash) instead of SIGTERM (a drain)
  // Replace the sled's --cut flags (needs a rack up --test-admin); nullopt keeps them.
  std::optional<std::vector<std::string>> cut;
};
// Stops the sled (if it still runs) and starts it with its flags, waits until
// it answers over HTTP, and records its new pid. kInvalidArgument if the
// target names no sled or several; kUnavailable/kTimeout if it does not come
// back.
Result<RackSled> RackRestart(const std::filesystem::path& dir, const RackRestartOptions& options);
// The sleds of `rack` that `target` names ("*": all).
Result<std::vector<RackSled>> SledsOf(const RackFile& rack, const std::string& target);
// The sush-server binary: $SUSH_SERVER, next to this program, in the build
// tree's apps/sush-server, or on PATH.
std::filesystem::path FindServerBinary();

}  // namespace once::sush
