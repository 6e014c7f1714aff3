#include "rack.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "once/rack/keys.h"
#include "once/rack/target.h"

namespace once::sush {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

Result<std::vector<uint16_t>> FreePorts(size_t count) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      for (int open_fd : fds) ::close(open_fd);
      if (fd >= 0) ::close(fd);
      return MakeError(ErrorCode::kUnavailable, "no free loopback port");
    }
    fds.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

std::string ReadCmdline(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return s;
}

// A pid is ours if it runs sush-server with this rack's directory.
bool IsOurServer(int pid, const std::filesystem::path& dir) {
  if (pid <= 0) return false;
  const std::string cmdline = ReadCmdline(pid);
  return cmdline.find("sush-server") != std::string::npos &&
         cmdline.find(dir.string() + "/") != std::string::npos;
}

bool Alive(int pid) {
  // Our child (rack up in this process, as in tests): reap it if it ended.
  const pid_t reaped = ::waitpid(pid, nullptr, WNOHANG);
  if (reaped == pid) return false;
  if (reaped == 0) return true;
  // Someone else's child: a zombie has an empty cmdline.
  return ::kill(pid, 0) == 0 && !ReadCmdline(pid).empty();
}

Status WriteRack(const RackFile& rack) {
  const auto path = rack.dir / "rack.json";
  const auto tmp = rack.dir / "rack.json.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << RackToJson(rack).dump(2) << "\n";
    if (!out) return MakeError(ErrorCode::kUnavailable, "cannot write " + tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return MakeError(ErrorCode::kUnavailable, "cannot write " + path.string());
  return Ok();
}

int Spawn(const std::filesystem::path& binary, const std::vector<std::string>& args,
          const std::filesystem::path& log) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setsid();
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
  }
  if (null_fd >= 0) ::dup2(null_fd, 0);
  std::vector<char*> argv;
  std::string program = binary.string();
  argv.push_back(program.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  std::perror("sush rack up: exec sush-server");
  ::_exit(127);
}

// Stops the servers this process spawned (its children, so no pid reuse).
void StopSpawned(const RackFile& rack) {
  for (const RackSled& sled : rack.sleds) {
    if (sled.pid > 0) ::kill(sled.pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + kRackDownWait;
  for (const RackSled& sled : rack.sleds) {
    while (sled.pid > 0 && Alive(sled.pid) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
    }
    if (sled.pid > 0 && Alive(sled.pid)) ::kill(sled.pid, SIGKILL);
    if (sled.pid > 0) ::waitpid(sled.pid, nullptr, 0);
  }
}

}  // namespace

std::filesystem::path FindServerBinary() {
  if (const char* env = std::getenv("SUSH_SERVER"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const auto& candidate :
         {self.parent_path() / "sush-server",
          self.parent_path().parent_path() / "sush-server" / "sush-server"}) {
      if (std::filesystem::exists(candidate, ec)) return candidate;
    }
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      const auto candidate = std::filesystem::path(dir) / "sush-server";
      if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "sush-server";
}

json RackToJson(const RackFile& rack) {
  json sleds = json::array();
  for (const RackSled& s : rack.sleds) {
    json drives = json::array();
    for (const auto& drive : s.drives) drives.push_back(drive.string());
    sleds.push_back(json{{"cubby", s.cubby},
                         {"baseboard", s.baseboard},
                         {"http", s.http.ToString()},
                         {"gossip", s.gossip.ToString()},
                         {"pid", s.pid},
                         {"data_dir", s.data_dir.string()},
                         {"drives", drives},
                         {"args", s.args}});
  }
  return json{{"dir", rack.dir.string()},
              {"key", rack.key.string()},
              {"trusted_key", rack.trusted_key.string()},
              {"server_binary", rack.server_binary.string()},
              {"sleds", sleds}};
}

Result<RackFile> LoadRack(const std::filesystem::path& dir) {
  const auto path = dir / "rack.json";
  std::ifstream in(path);
  if (!in) return MakeError(ErrorCode::kNotFound, "no rack at " + dir.string() + " (rack.json)");
  std::stringstream text;
  text << in.rdbuf();
  json body = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  RackFile rack;
  try {
    rack.dir = body.at("dir").get<std::string>();
    rack.key = body.at("key").get<std::string>();
    rack.trusted_key = body.at("trusted_key").get<std::string>();
    rack.server_binary = body.value("server_binary", std::string());
    for (const json& s : body.at("sleds")) {
      RackSled sled;
      sled.cubby = s.at("cubby").get<int>();
      sled.baseboard = s.at("baseboard").get<std::string>();
      ONCE_ASSIGN_OR_RETURN(sled.http, sush_net::ParseAddress(s.at("http").get<std::string>()));
      ONCE_ASSIGN_OR_RETURN(sled.gossip, sush_net::ParseAddress(s.at("gossip").get<std::string>()));
      sled.pid = s.at("pid").get<int>();
      sled.data_dir = s.at("data_dir").get<std::string>();
      for (const std::string& drive : s.value("drives", std::vector<std::string>{})) {
        sled.drives.emplace_back(drive);
      }
      sled.args = s.value("args", std::vector<std::string>{});
      rack.sleds.push_back(std::move(sled));
    }
  } catch (const json::exception& e) {
    return MakeError(ErrorCode::kCorruption, "bad " + path.string() + ": " + e.what());
  }
  return rack;
}

Result<RackFile> RackUp(const RackUpOptions& options) {
  if (options.sleds < 1 || options.sleds > kRackSledsMax) {
    return MakeError(ErrorCode::kInvalidArgument, "a rack has 1-32 sleds");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.dir / "keys", ec);
  if (ec) return MakeError(ErrorCode::kUnavailable, "cannot create " + options.dir.string());
  const std::filesystem::path dir = std::filesystem::canonical(options.dir, ec);
  if (ec) return MakeError(ErrorCode::kUnavailable, "cannot resolve " + options.dir.string());
  if (auto old = LoadRack(dir)) {
    for (const RackSled& sled : old->sleds) {
      if (IsOurServer(sled.pid, dir)) {
        return MakeError(ErrorCode::kPermissionDenied,
                         "a rack is already up in " + dir.string() + " (sush rack down)");
      }
    }
  }
  RackFile rack;
  rack.dir = dir;
  rack.key = dir / "keys" / "operator.key";
  rack.trusted_key = dir / "keys" / "operator.pub";
  if (!std::filesystem::exists(rack.key, ec)) {
    std::filesystem::remove(rack.trusted_key, ec);
    const rack::KeyPair keys = rack::KeyPair::GenerateFromOs();
    ONCE_RETURN_IF_ERROR(sush_net::SaveKeyPair(rack.key, "operator", keys));
    ONCE_RETURN_IF_ERROR(sush_net::SavePublicKey(rack.trusted_key, "operator", keys.public_key));
  }
  rack.server_binary = options.server_binary.empty() ? FindServerBinary() : options.server_binary;
  ONCE_ASSIGN_OR_RETURN(std::vector<uint16_t> ports, FreePorts(2 * options.sleds));
  for (int i = 0; i < options.sleds; ++i) {
    RackSled sled;
    sled.cubby = i;
    char serial[32];
    std::snprintf(serial, sizeof(serial), "SLED%05d", i);
    sled.baseboard = std::string("913-0000019:") + serial;
    sled.http = sush_net::Address{"127.0.0.1", ports[2 * i]};
    sled.gossip = sush_net::Address{"127.0.0.1", ports[2 * i + 1]};
    const auto sled_dir = dir / ("sled" + std::to_string(i));
    sled.data_dir = sled_dir / "data";
    sled.drives = {sled_dir / "m2a", sled_dir / "m2b"};
    rack.sleds.push_back(sled);
  }
  for (RackSled& sled : rack.sleds) {
    const auto sled_dir = sled.data_dir.parent_path();
    std::filesystem::create_directories(sled_dir / "home", ec);
    // The drive folders stand for the sled's two M.2 drives: rack up makes
    // them; a server never does (a missing folder is a missing drive).
    for (const auto& drive : sled.drives) {
      std::filesystem::create_directories(drive, ec);
      if (ec) return MakeError(ErrorCode::kUnavailable, "cannot create " + drive.string());
      std::filesystem::permissions(drive, std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::replace, ec);
    }
    sled.args = {"--baseboard",
                 sled.baseboard,
                 "--cubby",
                 std::to_string(sled.cubby),
                 "--data-dir",
                 sled.data_dir.string(),
                 "--drive",
                 sled.drives[0].string(),
                 "--drive",
                 sled.drives[1].string(),
                 "--home",
                 (sled_dir / "home").string(),
                 "--http",
                 sled.http.ToString(),
                 "--gossip",
                 sled.gossip.ToString(),
                 "--trusted-key",
                 rack.trusted_key.string(),
                 "--gossip-interval-ms",
                 std::to_string(options.gossip_interval_ms)};
    for (const RackSled& peer : rack.sleds) {
      if (peer.cubby == sled.cubby) continue;
      sled.args.push_back("--peer");
      sled.args.push_back(peer.gossip.ToString());
    }
    if (options.test_admin) sled.args.push_back("--test-admin");
    sled.pid = Spawn(rack.server_binary, sled.args, sled_dir / "server.log");
    if (sled.pid < 0) return MakeError(ErrorCode::kUnavailable, "fork failed");
  }
  ONCE_RETURN_IF_ERROR(WriteRack(rack));

  // Every sled answers, and all are in one gossip universe knowing each other.
  const auto deadline = std::chrono::steady_clock::now() + kRackUpWait;
  while (true) {
    std::set<std::string> networks;
    size_t converged = 0;
    for (const RackSled& sled : rack.sleds) {
      auto info = sush_net::SushClient(sled.http, {500ms}).Info();
      if (!info) continue;
      networks.insert(info->value("network", std::string()));
      if ((*info)["sleds"].size() == rack.sleds.size()) ++converged;
    }
    if (networks.size() == 1 && converged == rack.sleds.size()) break;
    for (const RackSled& sled : rack.sleds) {
      if (!Alive(sled.pid)) {
        StopSpawned(rack);
        return MakeError(ErrorCode::kUnavailable,
                         "sush-server " + sled.baseboard + " exited; see " +
                             (sled.data_dir.parent_path() / "server.log").string());
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      StopSpawned(rack);
      return MakeError(ErrorCode::kTimeout, "the rack did not converge in time");
    }
    std::this_thread::sleep_for(100ms);
  }
  return rack;
}

Result<std::vector<RackSled>> SledsOf(const RackFile& rack, const std::string& target_text) {
  ONCE_ASSIGN_OR_RETURN(rack::Target target, rack::Target::Parse(target_text));
  std::vector<RackSled> out;
  for (const RackSled& sled : rack.sleds) {
    if (target.Matches(rack::SledIdentity{sled.baseboard, static_cast<uint8_t>(sled.cubby)})) {
      out.push_back(sled);
    }
  }
  return out;
}

Result<RackSled> RackRestart(const std::filesystem::path& dir_in,
                             const RackRestartOptions& options) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::canonical(dir_in, ec);
  if (ec) return MakeError(ErrorCode::kNotFound, "no rack at " + dir_in.string());
  ONCE_ASSIGN_OR_RETURN(RackFile rack, LoadRack(dir));
  ONCE_ASSIGN_OR_RETURN(std::vector<RackSled> named, SledsOf(rack, options.target));
  if (named.size() != 1) {
    return MakeError(ErrorCode::kInvalidArgument, "-T " + options.target + " names " +
                                                      std::to_string(named.size()) + " sleds of " +
                                                      dir.string() + ": restart names one");
  }
  RackSled* sled = nullptr;
  for (RackSled& s : rack.sleds) {
    if (s.baseboard == named[0].baseboard) sled = &s;
  }
  if (sled->args.empty() || rack.server_binary.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "rack.json has no server flags for " + sled->baseboard + " (rack up again)");
  }
  if (IsOurServer(sled->pid, dir)) {
    ::kill(sled->pid, options.kill ? SIGKILL : SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kRackDownWait;
    while (Alive(sled->pid) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    if (Alive(sled->pid) && IsOurServer(sled->pid, dir)) ::kill(sled->pid, SIGKILL);
    while (Alive(sled->pid)) std::this_thread::sleep_for(20ms);
  }
  if (options.cut) {
    std::vector<std::string> args;
    for (size_t i = 0; i < sled->args.size(); ++i) {
      if (sled->args[i] == "--cut" && i + 1 < sled->args.size()) {
        ++i;
        continue;
      }
      args.push_back(sled->args[i]);
    }
    for (const std::string& peer : *options.cut) {
      args.push_back("--cut");
      args.push_back(peer);
    }
    sled->args = std::move(args);
  }
  sled->pid = Spawn(rack.server_binary, sled->args, sled->data_dir.parent_path() / "server.log");
  if (sled->pid < 0) return MakeError(ErrorCode::kUnavailable, "fork failed");
  ONCE_RETURN_IF_ERROR(WriteRack(rack));
  const auto deadline = std::chrono::steady_clock::now() + kRackUpWait;
  while (!sush_net::SushClient(sled->http, {500ms}).Info()) {
    if (!Alive(sled->pid)) {
      return MakeError(ErrorCode::kUnavailable,
                       "sush-server " + sled->baseboard + " exited; see " +
                           (sled->data_dir.parent_path() / "server.log").string());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return MakeError(ErrorCode::kTimeout, sled->baseboard + " did not answer in time");
    }
    std::this_thread::sleep_for(50ms);
  }
  return *sled;
}

namespace {

// Every sush-server process whose --data-dir is `data_dir` (a sled started
// by rack up, rack restart or by hand).
std::vector<int> ServersOf(const std::filesystem::path& data_dir) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const int pid = std::stoi(name);
    const std::string cmdline = ReadCmdline(pid);
    if (cmdline.find("sush-server") == std::string::npos) continue;
    if (cmdline.find(" --data-dir " + data_dir.string() + " ") != std::string::npos) {
      pids.push_back(pid);
    }
  }
  return pids;
}

}  // namespace

Result<RackDownResult> RackDown(const std::filesystem::path& dir_in) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::canonical(dir_in, ec);
  if (ec) return MakeError(ErrorCode::kNotFound, "no rack at " + dir_in.string());
  ONCE_ASSIGN_OR_RETURN(RackFile rack, LoadRack(dir));
  std::set<int> ours;
  for (const RackSled& sled : rack.sleds) {
    if (IsOurServer(sled.pid, dir)) ours.insert(sled.pid);
    if (!sled.data_dir.empty()) {
      for (int pid : ServersOf(sled.data_dir)) ours.insert(pid);
    }
  }
  for (int pid : ours) ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + kRackDownWait;
  while (std::chrono::steady_clock::now() < deadline) {
    bool any = false;
    for (int pid : ours) any = any || Alive(pid);
    if (!any) break;
    std::this_thread::sleep_for(50ms);
  }
  for (int pid : ours) {
    if (Alive(pid) && ReadCmdline(pid).find("sush-server") != std::string::npos) {
      ::kill(pid, SIGKILL);
    }
  }
  const auto killed = std::chrono::steady_clock::now() + 1s;
  for (int pid : ours) {
    while (Alive(pid) && std::chrono::steady_clock::now() < killed) {
      std::this_thread::sleep_for(20ms);
    }
  }
  RackDownResult result;
  result.stopped.assign(ours.begin(), ours.end());
  for (RackSled& sled : rack.sleds) {
    sled.pid = 0;
    if (sush_net::SushClient(sled.http, {300ms}).Info()) {
      result.still_up.emplace_back(sled.baseboard, "something still answers on http://" +
                                                       sled.http.ToString() +
                                                       " (no sush-server process serving " +
                                                       sled.data_dir.string() + " was found)");
    }
  }
  ONCE_RETURN_IF_ERROR(WriteRack(rack));
  return result;
}

}  // namespace once::sush
