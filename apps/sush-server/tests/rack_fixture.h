// File: rack_fixture.h
//
// The fixture of the real-process sush tests (rack_test.cc, boundary_test.cc):
// real sush-server processes on loopback TCP (gossip) and HTTP (the API), each
// with its data folder, its home and its two drive folders (m2a, m2b) under
// ROOT/sledI, started and killed (SIGKILL) only by pid, driven through the
// API and through the `sush` client binary (a rack.json the fixture writes,
// as `sush rack up` would). SUSH_SERVER_BINARY and SUSH_CLIENT_BINARY name
// the binaries.

#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "once/base/hex.h"
#include "once/rack/chain.h"
#include "once/rack/executor.h"
#include "once/sush_net/api.h"

namespace once::sush {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using sush_net::Address;
using sush_net::SushClient;

constexpr auto kConverge = 30s;

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = kConverge) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

// A loopback port free when chosen, from [10000, 20000): below the kernel's
// ephemeral range (32768 and up by default), so the servers' own outgoing
// connections and tests using port 0 alongside cannot take it between this
// choice and the server's bind. Successive calls walk the range from a
// per-process start (the gossip cluster test uses [20000, 32000)).
uint16_t FreePort() {
  constexpr int kLow = 10000, kHigh = 20000;
  static int next = kLow + (::getpid() * 131) % (kHigh - kLow);
  for (int tries = 0; tries < kHigh - kLow; ++tries) {
    next = next + 1 >= kHigh ? kLow : next + 1;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(next));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (free) return static_cast<uint16_t>(next);
  }
  ADD_FAILURE() << "no free loopback port in [10000, 20000)";
  return 0;
}

struct Sled {
  int cubby = 0;
  std::string baseboard;
  Address http;
  Address gossip;
  std::filesystem::path data_dir;
  std::vector<std::string> extra_args;  // e.g. job limits
  std::vector<Address> cut;             // --cut at boot: gossip peers cut both ways
  bool make_drives = true;              // Spawn creates the drive folders (as rack up does)
  bool lists_peers = true;              // --peer for every other sled (false: none)
  pid_t pid = -1;
  SushClient client() const { return SushClient(http, {3000ms}); }
  // data_dir holds the sled's folders: data (the server's --data-dir), home,
  // the two drive folders, the server's log and the ledger jobs append to.
  std::filesystem::path home() const { return data_dir / "home"; }
  std::filesystem::path data() const { return data_dir / "data"; }
  std::filesystem::path drive(int i) const { return data_dir / (i == 0 ? "m2a" : "m2b"); }
  std::filesystem::path ledger() const { return data_dir / "ledger"; }
};

// What one run of the `sush` client printed.
struct ClientRun {
  int code = -1;
  std::string out;
  std::string err;
  json Json() const { return json::parse(out, nullptr, /*allow_exceptions=*/false); }
};

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

[[maybe_unused]] std::string Upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

[[maybe_unused]] std::string HashHex(std::string_view bytes) {
  return HexEncode(rack::Blake2b256({rack::AsBytes(bytes)}));
}

class RackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sush-rack-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    ASSERT_TRUE(sush_net::SavePublicKey(root_ / "operator.pub", "operator", operator_.public_key));
  }
  void TearDown() override {
    if (HasFailure()) DumpSleds();
    for (Sled& sled : sleds_) Kill(sled);
    if (!HasFailure()) std::filesystem::remove_all(root_);
  }

  // After a failure: what each running sled says about itself and the last
  // lines of every sled's log, so that a failure on a machine nobody can
  // inspect afterwards (CI) still says what happened.
  void DumpSleds() {
    constexpr size_t kLogTailLines = 40;
    std::cerr << "rack test folder kept: " << root_ << "\n";
    for (const Sled& sled : sleds_) {
      std::cerr << "---- " << sled.baseboard << " (pid " << sled.pid << ")\n";
      if (sled.pid > 0) {
        auto info = sled.client().Info();
        std::cerr << "info: " << (info ? info->dump() : info.error().ToString()) << "\n";
        auto session = sled.client().Session();
        std::cerr << "session: " << (session ? session->dump() : session.error().ToString())
                  << "\n";
      }
      std::istringstream log(ReadFile(sled.data_dir / "server.log"));
      std::vector<std::string> lines;
      for (std::string line; std::getline(log, line);) lines.push_back(line);
      const size_t from = lines.size() > kLogTailLines ? lines.size() - kLogTailLines : 0;
      for (size_t i = from; i < lines.size(); ++i) std::cerr << "log: " << lines[i] << "\n";
    }
  }

  // Plans n sleds (ports, baseboards, data dirs, each the peer of all).
  void PlanRack(int n, const std::vector<std::string>& extra_args = {}) {
    for (int i = 0; i < n; ++i) {
      Sled sled;
      sled.cubby = i;
      sled.baseboard = "913-0000019:TEST" + std::to_string(i);
      sled.http = Address{"127.0.0.1", FreePort()};
      sled.gossip = Address{"127.0.0.1", FreePort()};
      sled.data_dir = root_ / ("sled" + std::to_string(i));
      sled.extra_args = extra_args;
      sleds_.push_back(sled);
    }
  }
  // Plans n sleds, then starts them all.
  void StartRack(int n, const std::vector<std::string>& extra_args = {}) {
    PlanRack(n, extra_args);
    for (Sled& sled : sleds_) Spawn(sled);
    for (Sled& sled : sleds_) WaitHttp(sled);
  }

  // The rack as `sush rack up` describes it (rack.json, the operator's key
  // pair), so that `sush --rack DIR` reaches every sled. The pids are 0:
  // `sush rack down` must never touch the fixture's servers.
  void WriteRackFile() {
    const auto key = root_ / "operator.key";
    if (!std::filesystem::exists(key)) {
      ASSERT_TRUE(sush_net::SaveKeyPair(key, "operator", operator_));
    }
    json sleds = json::array();
    for (const Sled& sled : sleds_) {
      sleds.push_back(json{{"cubby", sled.cubby},
                           {"baseboard", sled.baseboard},
                           {"http", sled.http.ToString()},
                           {"gossip", sled.gossip.ToString()},
                           {"pid", 0},
                           {"data_dir", (sled.data_dir / "data").string()}});
    }
    std::ofstream out(root_ / "rack.json", std::ios::trunc);
    out << json{{"dir", root_.string()},
                {"key", key.string()},
                {"trusted_key", (root_ / "operator.pub").string()},
                {"sleds", sleds}}
               .dump(2);
  }

  // Runs `sush --rack ROOT ARGS...` and collects what it printed.
  ClientRun Sush(const std::vector<std::string>& sush_args) {
    std::vector<std::string> args{SUSH_CLIENT_BINARY, "--rack", root_.string()};
    args.insert(args.end(), sush_args.begin(), sush_args.end());
    const auto err_path = root_ / "sush.stderr";
    int out_pipe[2];
    EXPECT_EQ(::pipe(out_pipe), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(out_pipe[0]);
      ::dup2(out_pipe[1], 1);
      const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(err, 2);
      const int null_fd = ::open("/dev/null", O_RDONLY);
      ::dup2(null_fd, 0);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ClientRun run;
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(out_pipe[0], buffer, sizeof buffer)) > 0) run.out.append(buffer, n);
    ::close(out_pipe[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    run.err = ReadFile(err_path);
    return run;
  }

  void Spawn(Sled& sled) {
    std::filesystem::create_directories(sled.data_dir / "home");
    for (int i : {0, 1}) {
      if (sled.make_drives) std::filesystem::create_directories(sled.drive(i));  // as rack up does
    }
    std::vector<std::string> args{SUSH_SERVER_BINARY,
                                  "--baseboard",
                                  sled.baseboard,
                                  "--cubby",
                                  std::to_string(sled.cubby),
                                  "--data-dir",
                                  sled.data().string(),
                                  "--drive",
                                  sled.drive(0).string(),
                                  "--drive",
                                  sled.drive(1).string(),
                                  "--home",
                                  (sled.data_dir / "home").string(),
                                  "--http",
                                  sled.http.ToString(),
                                  "--gossip",
                                  sled.gossip.ToString(),
                                  "--trusted-key",
                                  (root_ / "operator.pub").string(),
                                  "--gossip-interval-ms",
                                  "30",
                                  "--test-admin"};
    args.insert(args.end(), sled.extra_args.begin(), sled.extra_args.end());
    for (const Address& peer : sled.cut) {
      args.push_back("--cut");
      args.push_back(peer.ToString());
    }
    for (const Sled& peer : sleds_) {
      if (peer.cubby == sled.cubby || !sled.lists_peers) continue;
      args.push_back("--peer");
      args.push_back(peer.gossip.ToString());
    }
    const std::string log = (sled.data_dir / "server.log").string();
    sled.pid = ::fork();
    ASSERT_GE(sled.pid, 0);
    if (sled.pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }

  // The sled answers and its replay drained (it takes requests: before, it
  // refuses them as Unavailable, see SledCore).
  void WaitHttp(const Sled& sled) {
    ASSERT_TRUE(Eventually(
        [&] {
          auto info = sled.client().Info();
          return info && (*info)["gate"] != "replaying" && (*info)["gate"] != "not joined";
        },
        15s))
        << sled.baseboard << " never answered; see " << (sled.data_dir / "server.log");
  }

  void Kill(Sled& sled) {
    if (sled.pid <= 0) return;
    ::kill(sled.pid, SIGKILL);
    ::waitpid(sled.pid, nullptr, 0);
    sled.pid = -1;
  }

  // Every running sled answers from one universe and knows every sled.
  bool Converged() {
    std::set<std::string> networks;
    for (const Sled& sled : sleds_) {
      if (sled.pid <= 0) continue;
      auto info = sled.client().Info();
      if (!info) return false;
      networks.insert((*info)["network"].get<std::string>());
      std::set<std::string> known;
      for (const json& s : (*info)["sleds"]) known.insert(s["baseboard"].get<std::string>());
      for (const Sled& other : sleds_) {
        if (other.pid > 0 && !known.contains(other.baseboard)) return false;
      }
    }
    return networks.size() == 1;
  }

  std::optional<std::string> ActiveSession(const Sled& sled) {
    auto session = sled.client().Session();
    if (!session || (*session)["active"].is_null()) return std::nullopt;
    return (*session)["active"].get<std::string>();
  }

  std::string StateOn(const Sled& reader, const rack::JobId& id, const std::string& baseboard) {
    auto job = reader.client().Job(id);
    if (!job || !(*job)["statuses"].contains(baseboard)) return "";
    return (*job)["statuses"][baseboard]["state"].get<std::string>();
  }

  // Every running sled's view of a job, for a failure's message.
  std::string JobViews(const rack::JobId& id) {
    std::string out;
    for (const Sled& sled : sleds_) {
      if (sled.pid <= 0) continue;
      auto job = sled.client().Job(id);
      out += "\n" + sled.baseboard + " sees " + (job ? job->dump() : job.error().ToString());
    }
    return out;
  }

  std::filesystem::path JobDir(const Sled& sled, const rack::JobId& id) {
    return sled.data_dir / "data" / "output" / "jobs" / id.ToString();
  }

  // Every reader sees `state` for the job on every sled of `runners`. Queued
  // is a sled's own, local status (no event carries it): only the runner
  // itself is asked for it.
  void ExpectEverywhere(const rack::JobId& id, const std::string& state,
                        const std::vector<const Sled*>& runners) {
    for (const Sled& reader : sleds_) {
      for (const Sled* runner : runners) {
        if (state == "Queued" && runner->baseboard != reader.baseboard) continue;
        EXPECT_TRUE(Eventually([&] { return StateOn(reader, id, runner->baseboard) == state; }))
            << reader.baseboard << " never saw " << runner->baseboard << " " << state << " for "
            << id.ToString() << " (it saw '" << StateOn(reader, id, runner->baseboard) << "')";
      }
    }
  }

  rack::JobId NextJobId(const Sled& sled) {
    auto session = sled.client().Session();
    EXPECT_TRUE(session) << session.error().ToString();
    auto next = sush_net::IdField<rack::JobId>(*session, "next_job_id");
    EXPECT_TRUE(next && next->has_value());
    return next && next->has_value() ? **next : rack::JobId{};
  }

  // Two converged sleds reachable by `sush --rack`, a session started on
  // the first and active on both.
  std::optional<rack::SessionId> TwoSledsWithASession() {
    StartRack(2);
    EXPECT_TRUE(Eventually([&] { return Converged(); }));
    WriteRackFile();
    auto session = sleds_[0].client().StartSession(operator_);
    if (!session) {
      ADD_FAILURE() << session.error().ToString();
      return std::nullopt;
    }
    EXPECT_TRUE(Eventually([&] { return ActiveSession(sleds_[1]) == session->ToString(); }));
    return *session;
  }

  rack::SignedRequest SignJob(const rack::JobId& id, const rack::SessionId& session,
                              const std::string& command) {
    auto request = rack::Sign(rack::JobStart{id, session, command, "*", false}, operator_);
    EXPECT_TRUE(request);
    return *request;
  }
  Status SubmitSigned(const Sled& sled, const rack::SignedRequest& request) {
    ONCE_ASSIGN_OR_RETURN(Bytes wire, rack::Encode(rack::Message{request}));
    ONCE_RETURN_IF_ERROR(sled.client().SubmitBytes(wire));
    return Ok();
  }

  void Partition(const Sled& sled, const std::vector<const Sled*>& from) {
    json peers = json::array();
    for (const Sled* other : from) peers.push_back(other->gossip.ToString());
    ASSERT_TRUE(sled.client().Post("/admin/partition", json{{"peers", peers}}));
  }

  std::filesystem::path root_;
  rack::KeyPair operator_ = rack::KeyPair::GenerateFromOs();
  std::vector<Sled> sleds_;
};

}  // namespace
}  // namespace once::sush
