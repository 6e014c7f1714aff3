// sush-server: one sled of a sush rack (docs/sush.md).
//
//   sush-server --baseboard 913-0000019:SLED00000 --cubby 0 --data-dir /var/lib/sush
//               --drive /m2a/sush --drive /m2b/sush
//               --http 127.0.0.1:7100 --gossip 127.0.0.1:7200
//               --peer 127.0.0.1:7201 --peer 127.0.0.1:7202 --trusted-key operator.pub
//   sush-server --config sled.json     # the same keys in JSON; flags given too override it
//
// Prints "ready HTTP_PORT GOSSIP_PORT" on stdout once both ports serve.
// SIGTERM or SIGINT: drains (kDrainBudget) and exits 0.

#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "sled_server.h"

namespace {

using namespace once;
using nlohmann::json;

// The list-valued keys of a configuration file (flags given too replace them).
struct FileLists {
  std::vector<std::string> peers, keys, drives, cut;
  std::string http, gossip;
};

Status ApplyConfigFile(const std::string& path, sush::ServerConfig& config, FileLists& lists) {
  std::ifstream in(path);
  if (!in) return MakeError(ErrorCode::kNotFound, "no config file " + path);
  std::stringstream text;
  text << in.rdbuf();
  json body = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "config is not a JSON object: " + path);
  }
  try {
    if (body.contains("baseboard")) config.baseboard = body["baseboard"].get<std::string>();
    if (body.contains("cubby")) config.cubby = body["cubby"].get<int>();
    if (body.contains("data_dir")) config.data_dir = body["data_dir"].get<std::string>();
    if (body.contains("http")) lists.http = body["http"].get<std::string>();
    if (body.contains("gossip")) lists.gossip = body["gossip"].get<std::string>();
    if (body.contains("peers")) lists.peers = body["peers"].get<std::vector<std::string>>();
    if (body.contains("trusted_keys")) {
      lists.keys = body["trusted_keys"].get<std::vector<std::string>>();
    }
    if (body.contains("drives")) lists.drives = body["drives"].get<std::vector<std::string>>();
    if (body.contains("cut")) lists.cut = body["cut"].get<std::vector<std::string>>();
    if (body.contains("gossip_interval_ms")) {
      config.gossip_interval_ms = std::chrono::milliseconds(body["gossip_interval_ms"].get<int>());
    }
    if (body.contains("home")) config.home = body["home"].get<std::string>();
    if (body.contains("test_admin")) config.test_admin = body["test_admin"].get<bool>();
    if (body.contains("cpu_seconds"))
      config.limits.cpu_seconds = body["cpu_seconds"].get<uint64_t>();
    if (body.contains("memory_bytes")) {
      config.limits.memory_bytes = body["memory_bytes"].get<uint64_t>();
    }
    if (body.contains("file_bytes")) config.limits.file_bytes = body["file_bytes"].get<uint64_t>();
    if (body.contains("output_bytes_max")) {
      config.output_bytes_max = body["output_bytes_max"].get<uint64_t>();
    }
  } catch (const json::exception& e) {
    return MakeError(ErrorCode::kInvalidArgument, std::string("config: ") + e.what());
  }
  return Ok();
}

int Fail(const Error& error) {
  std::fprintf(stderr, "sush-server: %s\n", error.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sush-server: one sled of a sush rack"};
  sush::ServerConfig config;
  std::string config_file, http, gossip, data_dir;
  std::vector<std::string> peers, keys, drives, cut;
  int interval_ms = 0;
  uint64_t cpu_seconds = 0, memory_bytes = 0, file_bytes = 0, output_bytes_max = 0;
  app.add_option("--config", config_file, "JSON configuration file");
  app.add_option("--baseboard", config.baseboard, "baseboard id PART:SERIAL");
  app.add_option("--cubby", config.cubby, "cubby number 0-31");
  app.add_option("--data-dir", data_dir, "output storage and the gossip bookmark");
  app.add_option("--drive", drives,
                 "a folder on one M.2 drive for the boundary record (twice: one per drive; it "
                 "must exist, a missing one is a missing drive)");
  app.add_option("--http", http, "HTTP API address 127.0.0.1:PORT");
  app.add_option("--gossip", gossip, "gossip address 127.0.0.1:PORT");
  app.add_option("--peer", peers, "another sled's gossip address (repeatable)");
  app.add_option("--trusted-key", keys, "a trusted public key file (repeatable)");
  app.add_option("--gossip-interval-ms", interval_ms, "gossip round interval");
  app.add_option("--home", config.home, "jobs' HOME and working directory");
  app.add_option("--cpu-seconds", cpu_seconds, "a job's CPU limit (RLIMIT_CPU; default 3600)");
  app.add_option("--memory-bytes", memory_bytes,
                 "a job's address space (RLIMIT_AS; default 8 GiB)");
  app.add_option("--file-bytes", file_bytes, "a job's largest file (RLIMIT_FSIZE; default 10 GiB)");
  app.add_option("--output-bytes-max", output_bytes_max,
                 "a job's stdout+stderr limit (default 1 GiB)");
  app.add_flag("--test-admin", config.test_admin, "enable POST /admin/partition (tests only)");
  app.add_option("--log-format", config.log_format, "text, or json (one object a line)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-level", config.log_level, "trace, debug, info, warn, error, off");
  app.add_option("--cut", cut,
                 "a peer's gossip address cut both ways from the start (repeatable; tests only, "
                 "with --test-admin)");
  CLI11_PARSE(app, argc, argv);

  if (!config_file.empty()) {
    FileLists file;
    if (auto applied = ApplyConfigFile(config_file, config, file); !applied) {
      return Fail(applied.error());
    }
    if (peers.empty()) peers = file.peers;
    if (keys.empty()) keys = file.keys;
    if (drives.empty()) drives = file.drives;
    if (cut.empty()) cut = file.cut;
    if (http.empty()) http = file.http;
    if (gossip.empty()) gossip = file.gossip;
  }
  if (!data_dir.empty()) config.data_dir = data_dir;
  if (interval_ms > 0) config.gossip_interval_ms = std::chrono::milliseconds(interval_ms);
  if (cpu_seconds > 0) config.limits.cpu_seconds = cpu_seconds;
  if (memory_bytes > 0) config.limits.memory_bytes = memory_bytes;
  if (file_bytes > 0) config.limits.file_bytes = file_bytes;
  if (output_bytes_max > 0) config.output_bytes_max = output_bytes_max;
  for (const auto& [text, out] : {std::pair{&http, &config.http}, {&gossip, &config.gossip}}) {
    if (text->empty()) continue;
    auto address = sush_net::ParseAddress(*text);
    if (!address) return Fail(address.error());
    *out = *address;
  }
  for (const auto& [texts, out] : {std::pair{&peers, &config.peers}, {&cut, &config.cut}}) {
    for (const std::string& text : *texts) {
      auto address = sush_net::ParseAddress(text);
      if (!address) return Fail(address.error());
      out->push_back(*address);
    }
  }
  for (const std::string& drive : drives) config.drives.emplace_back(drive);
  for (const std::string& key : keys) config.trusted_key_files.emplace_back(key);

  // Every thread inherits the blocked set; only sigwait below takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto server = sush::SledServer::Start(std::move(config));
  if (!server) return Fail(server.error());
  std::printf("ready %u %u\n", (*server)->http_port(), (*server)->gossip_port());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::fprintf(stderr, "sush-server: signal %d, draining\n", signal_number);
  (*server)->Stop();
  std::fprintf(stderr, "sush-server: stopped\n");
  return 0;
}
