// Real sush-server processes on loopback TCP (gossip) and HTTP (the API),
// driven through the API and through the `sush` client binary (a rack.json
// the fixture writes, as `sush rack up` would): sessions and jobs cross
// processes; true / false / echo as stored and as `job output` prints them;
// a job behind a hole cancelled by `job stop`; `session skip` burning a
// cancelled position; the CPU and output limits; partitions (POST
// /admin/partition, on with --test-admin) make concurrent sessions annihilate
// when they heal; refused jobs never run; a cold start and a staggered start
// converge; a replaced sled rejoins; SIGTERM drains within 5 s. Each test
// kills only the pids it started.

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
  pid_t pid = -1;
  SushClient client() const { return SushClient(http, {3000ms}); }
  std::filesystem::path home() const { return data_dir / "home"; }
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

std::string Upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

std::string HashHex(std::string_view bytes) {
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
    for (Sled& sled : sleds_) Kill(sled);
    if (!HasFailure()) std::filesystem::remove_all(root_);
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
    std::vector<std::string> args{SUSH_SERVER_BINARY,
                                  "--baseboard",
                                  sled.baseboard,
                                  "--cubby",
                                  std::to_string(sled.cubby),
                                  "--data-dir",
                                  (sled.data_dir / "data").string(),
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
    for (const Sled& peer : sleds_) {
      if (peer.cubby == sled.cubby) continue;
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

  void WaitHttp(const Sled& sled) {
    ASSERT_TRUE(Eventually([&] { return sled.client().Info().has_value(); }, 15s))
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

TEST_F(RackTest, ThreeSledsColdStartAndConverge) {
  StartRack(3);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  auto info = sleds_[1].client().Info();
  ASSERT_TRUE(info);
  std::map<std::string, int> cubbies;
  for (const json& s : (*info)["sleds"]) {
    cubbies[s["baseboard"].get<std::string>()] = s["cubby"].get<int>();
  }
  EXPECT_EQ(cubbies,
            (std::map<std::string, int>{
                {"913-0000019:TEST0", 0}, {"913-0000019:TEST1", 1}, {"913-0000019:TEST2", 2}}));
}

TEST_F(RackTest, ASessionOnAIsActiveOnBAndAJobSubmittedToARunsOnBoth) {
  StartRack(2);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  const Sled& a = sleds_[0];
  const Sled& b = sleds_[1];
  auto session = a.client().StartSession(operator_);
  ASSERT_TRUE(session) << session.error().ToString();
  ASSERT_TRUE(Eventually([&] { return ActiveSession(b) == session->ToString(); }));

  auto job = a.client().StartJob(operator_, "echo $SUSH_JOB_ID", "*", false);
  ASSERT_TRUE(job) << job.error().ToString();
  for (const Sled* reader : {&a, &b}) {
    for (const Sled* runner : {&a, &b}) {
      EXPECT_TRUE(Eventually([&] {
        return StateOn(*reader, *job, runner->baseboard) == "Stopped";
      })) << reader->baseboard
          << " never saw " << runner->baseboard << " Stopped";
    }
  }
  for (const Sled* sled : {&a, &b}) {
    auto out = sled->client().Output(*job, "stdout");
    ASSERT_TRUE(out) << out.error().ToString();
    EXPECT_EQ(*out, job->ToString() + "\n");
    struct stat st {};
    ASSERT_EQ(::stat(JobDir(*sled, *job).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat((JobDir(*sled, *job) / "stdout").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  auto view = b.client().Job(*job);
  ASSERT_TRUE(view);
  EXPECT_EQ((*view)["statuses"][a.baseboard]["exit"]["code"], 0);

  // The chain moves on: a second job, `false`, exits 1 on both.
  auto second = b.client().StartJob(operator_, "false", "*", false);
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_NE(second->ToString(), job->ToString());
  ASSERT_TRUE(Eventually([&] { return StateOn(a, *second, b.baseboard) == "Stopped"; }));
  EXPECT_EQ((*a.client().Job(*second))["statuses"][b.baseboard]["exit"]["code"], 1);
}

TEST_F(RackTest, ASessionStartedOnBSupersedesAs) {
  StartRack(2);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  auto first = sleds_[0].client().StartSession(operator_);
  ASSERT_TRUE(first);
  ASSERT_TRUE(Eventually([&] { return ActiveSession(sleds_[1]) == first->ToString(); }));
  auto second = sleds_[1].client().StartSession(operator_);
  ASSERT_TRUE(second) << second.error().ToString();
  for (const Sled& sled : sleds_) {
    EXPECT_TRUE(Eventually([&] { return ActiveSession(sled) == second->ToString(); }))
        << sled.baseboard;
  }
}

TEST_F(RackTest, TwoSessionsStartedInAPartitionAnnihilateWhenItHeals) {
  StartRack(2);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  Sled& a = sleds_[0];
  Sled& b = sleds_[1];
  Partition(a, {&b});
  Partition(b, {&a});
  std::this_thread::sleep_for(200ms);  // rounds in flight finish
  auto on_a = a.client().StartSession(operator_);
  auto on_b = b.client().StartSession(operator_);
  ASSERT_TRUE(on_a && on_b);
  ASSERT_TRUE(Eventually([&] { return ActiveSession(a) == on_a->ToString(); }));
  ASSERT_TRUE(Eventually([&] { return ActiveSession(b) == on_b->ToString(); }));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(ActiveSession(a), on_a->ToString()) << "the partition leaked";
  EXPECT_EQ(ActiveSession(b), on_b->ToString()) << "the partition leaked";

  Partition(a, {});
  Partition(b, {});
  for (const Sled& sled : sleds_) {
    EXPECT_TRUE(Eventually([&] { return !ActiveSession(sled).has_value(); })) << sled.baseboard;
  }
  // Each sled says why: the ConcurrentSessions errors gossiped by both.
  const std::set<std::string> both{on_a->ToString(), on_b->ToString()};
  for (const Sled& sled : sleds_) {
    std::set<std::string> reporters;
    EXPECT_TRUE(Eventually([&] {
      auto session = sled.client().Session();
      if (!session) return false;
      for (const json& e : (*session)["errors"]) {
        EXPECT_EQ(e["kind"], "ConcurrentSessions");
        EXPECT_EQ((std::set<std::string>{e["first"], e["second"]}), both) << e.dump();
        reporters.insert(e["baseboard"].get<std::string>());
      }
      return reporters.size() == 2;
    })) << sled.baseboard
        << " does not show both sleds' ConcurrentSessions errors";
  }
  // A job of either dead session never runs.
  auto job = a.client().StartJob(operator_, "true", "*", false);
  EXPECT_FALSE(job);
}

TEST_F(RackTest, UnsignedWronglySignedOrUnknownKeyJobsNeverRun) {
  StartRack(2);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  const Sled& a = sleds_[0];
  auto session = a.client().StartSession(operator_);
  ASSERT_TRUE(session);
  ASSERT_TRUE(Eventually([&] { return ActiveSession(sleds_[1]) == session->ToString(); }));
  const rack::JobId id = rack::FirstJobId(*session);
  const rack::JobStart job{id, *session, "touch ran", "*", false};

  // Unknown key.
  const rack::KeyPair stranger = rack::KeyPair::GenerateFromOs();
  auto unknown = a.client().Submit(job, stranger);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kPermissionDenied) << unknown.error().ToString();

  // Wrongly signed: a trusted key id with a flipped signature bit.
  auto forged = rack::Sign(job, operator_);
  ASSERT_TRUE(forged);
  forged->signature[5] ^= 0x01;
  auto wrong = a.client().SubmitBytes(*rack::Encode(rack::Message{*forged}));
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::kPermissionDenied) << wrong.error().ToString();

  // Unsigned: an all-zero signature, and bytes that are no message at all.
  forged = rack::Sign(job, operator_);
  forged->signature = {};
  EXPECT_FALSE(a.client().SubmitBytes(*rack::Encode(rack::Message{*forged})));
  EXPECT_FALSE(a.client().SubmitBytes(Bytes{1, 2, 3}));
  EXPECT_FALSE(a.client().Post("/v1/submit", json{{"request", "not hex"}}));

  std::this_thread::sleep_for(1s);
  for (const Sled& sled : sleds_) {
    EXPECT_FALSE(std::filesystem::exists(JobDir(sled, id))) << sled.baseboard;
    EXPECT_FALSE(std::filesystem::exists(sled.data_dir / "home" / "ran")) << sled.baseboard;
    EXPECT_EQ((*sled.client().Info())["executions"], 0);
  }
  // The position is still free: the genuine job takes it and runs.
  auto genuine = a.client().StartJob(operator_, "true", "*", false);
  ASSERT_TRUE(genuine);
  EXPECT_EQ(*genuine, id);
  EXPECT_TRUE(Eventually([&] { return StateOn(a, id, sleds_[1].baseboard) == "Stopped"; }));
}

TEST_F(RackTest, RequestsPastTheirLimitsAreRefusedAsLimitErrors) {
  StartRack(1);
  const SushClient a = sleds_[0].client();
  // Past kRequestBodyBytesMax: the HTTP layer refuses the body.
  auto body =
      a.Post("/v1/submit", json{{"request", std::string(sush_net::kRequestBodyBytesMax, 'a')}});
  ASSERT_FALSE(body);
  EXPECT_EQ(body.error().code, ErrorCode::kLimitExceeded) << body.error().ToString();
  // Within it but past rack::kRequestBytesMax once decoded.
  auto request = a.SubmitBytes(Bytes(rack::kRequestBytesMax + 1, 0x01));
  ASSERT_FALSE(request);
  EXPECT_EQ(request.error().code, ErrorCode::kLimitExceeded) << request.error().ToString();
  EXPECT_NE(request.error().message.find("request_bytes_max"), std::string::npos);
  auto unknown = a.Get("/v1/jobs/abandon-abandon");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(RackTest, ARunningJobIsStoppedBySigkillWithinOneSecond) {
  StartRack(1);
  const Sled& a = sleds_[0];
  auto session = a.client().StartSession(operator_);
  ASSERT_TRUE(session);
  auto job = a.client().StartJob(operator_, "sleep 10", "*", false);
  ASSERT_TRUE(job);
  ASSERT_TRUE(Eventually([&] { return StateOn(a, *job, a.baseboard) == "Started"; }));
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_TRUE(a.client().StopJob(operator_, *job));
  ASSERT_TRUE(Eventually([&] { return StateOn(a, *job, a.baseboard) == "Stopped"; }, 5s));
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 1s);
  auto view = a.client().Job(*job);
  EXPECT_EQ((*view)["statuses"][a.baseboard]["exit"]["kind"], "signaled");
  EXPECT_EQ((*view)["statuses"][a.baseboard]["exit"]["code"], SIGKILL);
}

TEST_F(RackTest, AReplacedSledRejoins) {
  StartRack(3);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  auto session = sleds_[0].client().StartSession(operator_);
  ASSERT_TRUE(session);
  auto first = sleds_[0].client().StartJob(operator_, "echo one", "*", false);
  ASSERT_TRUE(first);
  ASSERT_TRUE(
      Eventually([&] { return StateOn(sleds_[0], *first, sleds_[2].baseboard) == "Stopped"; }));

  // Sled 2 dies for good; a new board takes its cubby, addresses and nothing else.
  Kill(sleds_[2]);
  Sled& fresh = sleds_[2];
  fresh.baseboard = "913-0000019:TESTNEW";
  fresh.data_dir = root_ / "replacement";
  Spawn(fresh);
  WaitHttp(fresh);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  EXPECT_TRUE(Eventually([&] { return ActiveSession(fresh) == session->ToString(); }));
  auto second = sleds_[1].client().StartJob(operator_, "echo two", "2", false);
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_TRUE(
      Eventually([&] { return StateOn(sleds_[0], *second, fresh.baseboard) == "Stopped"; }));
  auto out = fresh.client().Output(*second, "stdout");
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, "two\n");
  // Cubby 2 only: the others skipped it.
  EXPECT_FALSE(std::filesystem::exists(JobDir(sleds_[0], *second)));
}

TEST_F(RackTest, SigtermDrainsWithinFiveSecondsAndKillsRunningJobs) {
  StartRack(1);
  Sled& a = sleds_[0];
  auto session = a.client().StartSession(operator_);
  ASSERT_TRUE(session);
  auto job = a.client().StartJob(operator_, "sleep 37.4321", "*", false);
  ASSERT_TRUE(job);
  ASSERT_TRUE(Eventually([&] { return StateOn(a, *job, a.baseboard) == "Started"; }));
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(a.pid, SIGTERM), 0);
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(a.pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - asked < 10s) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(done, a.pid);
  a.pid = -1;
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 5s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  bool sleeping = false;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "cmdline");
    std::stringstream text;
    text << in.rdbuf();
    sleeping = sleeping || text.str().find("37.4321") != std::string::npos;
  }
  EXPECT_FALSE(sleeping) << "the job outlived its server";
}

TEST_F(RackTest, TrueFalseAndEchoOfTheJobIdAsStoredAndAsJobOutputPrintsThem) {
  StartRack(2);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  WriteRackFile();
  const Sled& a = sleds_[0];
  const Sled& b = sleds_[1];
  ClientRun started = Sush({"--json", "session", "start"});
  ASSERT_EQ(started.code, 0) << started.err;
  const std::string session = started.Json()["session_id"].get<std::string>();
  ASSERT_TRUE(Eventually([&] { return ActiveSession(b) == session; }));

  // true on every sled: exit 0, nothing written.
  ClientRun ran = Sush({"--json", "job", "start", "-w", "true"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  json view = ran.Json();
  for (const Sled* sled : {&a, &b}) {
    const json& status = view["job"]["statuses"][sled->baseboard];
    EXPECT_EQ(status["state"], "Stopped") << view.dump();
    EXPECT_EQ(status["exit"]["kind"], "exited");
    EXPECT_EQ(status["exit"]["code"], 0);
    EXPECT_EQ(status["stdout_bytes"], 0);
    EXPECT_EQ(status["stdout_hash"], HashHex(""));
    EXPECT_EQ(view["stdout"][sled->baseboard], "");
  }

  // false on the sled whose serial is TEST1 only: exit 1.
  ran = Sush({"--json", "job", "start", "-w", "-T", "TEST1", "false"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  view = ran.Json();
  auto false_id = rack::JobId::Parse(view["job"]["job_id"].get<std::string>());
  ASSERT_TRUE(false_id);
  EXPECT_EQ(view["job"]["statuses"][b.baseboard]["exit"]["code"], 1) << view.dump();
  EXPECT_FALSE(view["job"]["statuses"].contains(a.baseboard)) << "TEST0 was not targeted";
  EXPECT_FALSE(std::filesystem::exists(JobDir(a, *false_id)));
  ClientRun status = Sush({"job", "status", Upper(false_id->ToString()), "--full"});
  ASSERT_EQ(status.code, 0) << status.err;
  EXPECT_NE(status.out.find(b.baseboard + "  Stopped exit 1"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("signed by " + operator_.id().ToString() + "\n"), std::string::npos)
      << status.out;
  EXPECT_EQ(view["job"]["key_id"], operator_.id().ToString()) << "attributed to its signer";

  // echo $SUSH_JOB_ID on both, named by baseboard id and by cubby.
  ran = Sush({"job", "start", "-T", a.baseboard + ",1", "echo $SUSH_JOB_ID"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  ASSERT_TRUE(ran.out.starts_with("job ")) << ran.out;
  const std::string echo_text = ran.out.substr(4, ran.out.size() - 5);
  auto echo_id = rack::JobId::Parse(echo_text);
  ASSERT_TRUE(echo_id) << ran.out;
  ASSERT_EQ(Sush({"job", "status", echo_text, "-w"}).code, 0);
  const std::string line = echo_text + "\n";
  view = *b.client().Job(*echo_id);
  for (const Sled* sled : {&a, &b}) {
    EXPECT_EQ(ReadFile(JobDir(*sled, *echo_id) / "stdout"), line) << sled->baseboard;
    EXPECT_EQ(ReadFile(JobDir(*sled, *echo_id) / "stderr"), "");
    const json& st = view["statuses"][sled->baseboard];
    EXPECT_EQ(st["state"], "Stopped");
    EXPECT_EQ(st["stdout_bytes"], line.size());
    EXPECT_EQ(st["stdout_hash"], HashHex(line)) << "the gossiped hash is the stored bytes' hash";
  }
  // One sled: the raw bytes, for pipes. Several: a block a sled.
  ClientRun one = Sush({"job", "output", Upper(echo_text), "-T", "1"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(one.out, line);
  ClientRun both = Sush({"job", "output", echo_text});
  ASSERT_EQ(both.code, 0) << both.err;
  EXPECT_EQ(both.out, "== " + a.baseboard + ": Stopped exit 0  out " + std::to_string(line.size()) +
                          " B, err 0 B ==\n" + line + "== " + b.baseboard +
                          ": Stopped exit 0  out " + std::to_string(line.size()) +
                          " B, err 0 B ==\n" + line);
  ClientRun as_json = Sush({"--json", "job", "output", echo_text, "stdout"});
  ASSERT_EQ(as_json.code, 0) << as_json.err;
  EXPECT_EQ(as_json.Json()["stdout"], (json{{a.baseboard, line}, {b.baseboard, line}}))
      << as_json.out;
}

TEST_F(RackTest, AQueuedJobBehindAHoleInTheChainIsCancelledByJobStop) {
  const std::optional<rack::SessionId> session = TwoSledsWithASession();
  ASSERT_TRUE(session.has_value());
  const Sled& a = sleds_[0];
  const Sled& b = sleds_[1];

  // The hole: a job signed at the chain's head but not submitted (yet).
  const rack::SignedRequest hole = SignJob(NextJobId(a), *session, "echo filled");
  const rack::JobId hole_id = std::get<rack::JobStart>(hole.payload).job_id;
  const rack::SignedRequest queued =
      SignJob(rack::NextJobId(rack::ToBeSignedDigest(hole)), *session, "touch queued-ran");
  const rack::JobId queued_id = std::get<rack::JobStart>(queued.payload).job_id;
  ASSERT_TRUE(SubmitSigned(a, queued));
  ExpectEverywhere(queued_id, "Queued", {&a, &b});
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(StateOn(a, queued_id, a.baseboard), "Queued") << "it ran behind a hole";

  ClientRun stop = Sush({"--json", "job", "stop", Upper(queued_id.ToString())});
  ASSERT_EQ(stop.code, 0) << stop.err;
  EXPECT_EQ(stop.Json()["stop_requested"], true);
  ExpectEverywhere(queued_id, "Cancelled", {&a, &b});

  // The hole fills: its job runs, the cancelled one never does, the chain moves on.
  ASSERT_TRUE(SubmitSigned(b, hole));
  ExpectEverywhere(hole_id, "Stopped", {&a, &b});
  ClientRun after = Sush({"--json", "job", "start", "-w", "echo after"});
  ASSERT_EQ(after.code, 0) << after.err;
  EXPECT_EQ(after.Json()["stdout"], (json{{a.baseboard, "after\n"}, {b.baseboard, "after\n"}}));
  for (const Sled* sled : {&a, &b}) {
    EXPECT_FALSE(std::filesystem::exists(JobDir(*sled, queued_id))) << sled->baseboard;
    EXPECT_FALSE(std::filesystem::exists(sled->home() / "queued-ran")) << sled->baseboard;
    EXPECT_EQ(StateOn(*sled, queued_id, sled->baseboard), "Cancelled");
  }
}

TEST_F(RackTest, SessionSkipBurnsACancelledPositionAndTheJobQueuedBehindItRuns) {
  const std::optional<rack::SessionId> session = TwoSledsWithASession();
  ASSERT_TRUE(session.has_value());
  const Sled& a = sleds_[0];
  const Sled& b = sleds_[1];

  // A job lost between signing and the rack: `job stop` cancels its position,
  // but the chain cannot pass a position whose job it never saw.
  const rack::SignedRequest lost = SignJob(NextJobId(a), *session, "touch lost-ran");
  const rack::JobId lost_id = std::get<rack::JobStart>(lost.payload).job_id;
  ASSERT_EQ(Sush({"job", "stop", lost_id.ToString()}).code, 0);
  const rack::SignedRequest behind =
      SignJob(rack::NextJobIdAfterBurned(lost_id), *session, "echo after the burn");
  const rack::JobId behind_id = std::get<rack::JobStart>(behind.payload).job_id;
  ASSERT_TRUE(SubmitSigned(b, behind));
  ExpectEverywhere(behind_id, "Queued", {&a, &b});
  std::this_thread::sleep_for(1s);
  for (const Sled* sled : {&a, &b}) {
    EXPECT_EQ(StateOn(*sled, behind_id, sled->baseboard), "Queued") << sled->baseboard;
  }

  // Skipping a position that is not cancelled is refused, with a typed error.
  ClientRun refused = Sush({"--json", "session", "skip", behind_id.ToString()});
  EXPECT_EQ(refused.code, 1);
  EXPECT_EQ(refused.Json()["error"]["code"], "InvalidArgument") << refused.out;
  EXPECT_NE(refused.out.find("not cancelled"), std::string::npos) << refused.out;
  ClientRun text = Sush({"session", "skip", behind_id.ToString()});
  EXPECT_EQ(text.code, 1);
  EXPECT_NE(text.err.find("InvalidArgument"), std::string::npos) << text.err;

  // The skip, by codephrase in any case, burns it: the queued job runs everywhere.
  ClientRun skipped = Sush({"--json", "session", "skip", Upper(lost_id.ToString())});
  ASSERT_EQ(skipped.code, 0) << skipped.out << skipped.err;
  EXPECT_EQ(skipped.Json()["job_id"], lost_id.ToString());
  EXPECT_EQ(skipped.Json()["session_id"], session->ToString());
  EXPECT_EQ(skipped.Json()["next_job_id"],
            rack::NextJobId(rack::ToBeSignedDigest(behind)).ToString());
  ExpectEverywhere(behind_id, "Stopped", {&a, &b});
  for (const Sled* sled : {&a, &b}) {
    EXPECT_EQ(ReadFile(JobDir(*sled, behind_id) / "stdout"), "after the burn\n");
  }

  // Burned for good: skipping it again is refused, and the lost job arriving late is refused
  // by the accepting sled and never runs.
  refused = Sush({"--json", "session", "skip", lost_id.ToString()});
  EXPECT_EQ(refused.code, 1);
  EXPECT_EQ(refused.Json()["error"]["code"], "InvalidArgument") << refused.out;
  EXPECT_NE(refused.out.find("already passed"), std::string::npos) << refused.out;
  Status late = SubmitSigned(a, lost);
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(late.error().message.find("chain position already passed"), std::string::npos)
      << late.error().message;
  ClientRun after = Sush({"job", "start", "-w", "echo next"});
  ASSERT_EQ(after.code, 0) << after.err;
  for (const Sled* sled : {&a, &b}) {
    EXPECT_FALSE(std::filesystem::exists(JobDir(*sled, lost_id))) << sled->baseboard;
    EXPECT_FALSE(std::filesystem::exists(sled->home() / "lost-ran")) << sled->baseboard;
  }

  // Without a session there is nothing to skip.
  ASSERT_EQ(Sush({"session", "stop"}).code, 0);
  ASSERT_TRUE(Eventually([&] { return !ActiveSession(a) && !ActiveSession(b); }));
  refused = Sush({"--json", "session", "skip", lost_id.ToString()});
  EXPECT_EQ(refused.code, 1);
  EXPECT_EQ(refused.Json()["error"]["code"], "NotFound") << refused.out;
}

TEST_F(RackTest, TheConfiguredLimitsApplyCpuGivesSigxcpuAndOutputGivesAnError) {
  StartRack(1, {"--cpu-seconds", "1", "--output-bytes-max", "4096", "--memory-bytes", "2147483648",
                "--file-bytes", "1048576"});
  WriteRackFile();
  const Sled& a = sleds_[0];
  ASSERT_EQ(Sush({"session", "start"}).code, 0);

  // The configured limits are the job's rlimits (bash: KiB, KiB blocks, seconds).
  ClientRun limits = Sush({"--json", "job", "start", "-w", "ulimit -v; ulimit -f; ulimit -t"});
  ASSERT_EQ(limits.code, 0) << limits.err;
  EXPECT_EQ(limits.Json()["stdout"][a.baseboard], "2097152\n1024\n1\n") << limits.out;

  ClientRun spin =
      Sush({"--json", "job", "start", "-w", "--timeout-s", "50", "while :; do :; done"});
  ASSERT_EQ(spin.code, 0) << spin.err;
  const json spin_view = spin.Json();
  const json& spun = spin_view["job"]["statuses"][a.baseboard];
  EXPECT_EQ(spun["state"], "Stopped") << spin.out;
  EXPECT_EQ(spun["exit"]["kind"], "signaled");
  EXPECT_EQ(spun["exit"]["code"], SIGXCPU);
  EXPECT_EQ(spun["exit"]["signal"], "SIGXCPU");
  ClientRun shown = Sush({"job", "status", spin_view["job"]["job_id"].get<std::string>()});
  EXPECT_NE(shown.out.find("Stopped signal 24 (SIGXCPU)"), std::string::npos) << shown.out;

  ClientRun flood =
      Sush({"--json", "job", "start", "-w", "head -c 100000 /dev/zero; echo unreachable"});
  ASSERT_EQ(flood.code, 0) << flood.err;
  const json flood_view = flood.Json();
  const json& flooded = flood_view["job"]["statuses"][a.baseboard];
  EXPECT_EQ(flooded["state"], "Error") << flood.out;
  EXPECT_EQ(flooded["error_code"], "LimitExceeded");
  EXPECT_NE(flooded["error"].get<std::string>().find("output_bytes_max"), std::string::npos);
  EXPECT_EQ(flooded["refused"], false) << "it ran, then the executor stopped it";
  EXPECT_EQ(flooded["stdout_bytes"], 4096);
  const std::string flood_id = flood_view["job"]["job_id"].get<std::string>();
  auto id = rack::JobId::Parse(flood_id);
  EXPECT_EQ(std::filesystem::file_size(JobDir(a, *id) / "stdout"), 4096u);
  EXPECT_EQ(flooded["stdout_hash"], HashHex(std::string(4096, '\0')));
  shown = Sush({"job", "status", flood_id});
  EXPECT_NE(shown.out.find("Error failed: output_bytes_max exceeded"), std::string::npos)
      << shown.out;
  EXPECT_EQ(Sush({"job", "output", flood_id}).out, std::string(4096, '\0'));
}

TEST_F(RackTest, AJobLimitAboveItsCeilingIsRefusedAtStart) {
  PlanRack(1, {"--cpu-seconds", std::to_string(rack::kResourceCeilings.cpu_seconds + 1)});
  Sled& a = sleds_[0];
  Spawn(a);
  int status = 0;
  ASSERT_EQ(::waitpid(a.pid, &status, 0), a.pid);
  a.pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  const std::string log = ReadFile(a.data_dir / "server.log");
  EXPECT_NE(log.find("LimitExceeded"), std::string::npos) << log;
  EXPECT_NE(log.find("cpu_seconds"), std::string::npos) << log;
}

TEST_F(RackTest, AStaggeredStartConvergesAndEarlyWorkRunsOnLateSledsExactlyOnce) {
  PlanRack(3);
  Sled& first = sleds_[0];
  Spawn(first);
  WaitHttp(first);
  auto session = first.client().StartSession(operator_);
  ASSERT_TRUE(session) << session.error().ToString();
  auto job = first.client().StartJob(operator_, "echo $SUSH_JOB_ID >> runs; echo ran", "*", false);
  ASSERT_TRUE(job) << job.error().ToString();
  ASSERT_TRUE(Eventually([&] { return StateOn(first, *job, first.baseboard) == "Stopped"; }));

  // The others come up seconds apart, long after the session and the job.
  for (size_t i : {1, 2}) {
    std::this_thread::sleep_for(2s);
    Spawn(sleds_[i]);
    WaitHttp(sleds_[i]);
  }
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  for (const Sled& sled : sleds_) {
    EXPECT_TRUE(Eventually([&] { return ActiveSession(sled) == session->ToString(); }))
        << sled.baseboard;
  }
  ExpectEverywhere(*job, "Stopped", {&sleds_[0], &sleds_[1], &sleds_[2]});
  // A new job still runs everywhere once, after the old one.
  auto second = sleds_[2].client().StartJob(operator_, "echo $SUSH_JOB_ID >> runs", "*", false);
  ASSERT_TRUE(second) << second.error().ToString();
  ExpectEverywhere(*second, "Stopped", {&sleds_[0], &sleds_[1], &sleds_[2]});
  std::this_thread::sleep_for(500ms);
  for (const Sled& sled : sleds_) {
    EXPECT_EQ(ReadFile(sled.home() / "runs"), job->ToString() + "\n" + second->ToString() + "\n")
        << sled.baseboard << " ran a job twice or not at all";
    auto info = sled.client().Info();
    ASSERT_TRUE(info);
    EXPECT_EQ((*info)["executions"], 2) << sled.baseboard;
  }
  // The first sled's universe won: it never reset (and so never lost its session).
  EXPECT_EQ((*first.client().Info())["universe_resets"], 0);
}

TEST_F(RackTest, AConcurrentJobStartsBesideARunningOneButStartsStayInChainOrder) {
  StartRack(1);
  WriteRackFile();
  const Sled& a = sleds_[0];
  ASSERT_EQ(Sush({"session", "start"}).code, 0);
  auto running = a.client().StartJob(operator_, "sleep 30", "*", false);
  ASSERT_TRUE(running) << running.error().ToString();
  ASSERT_TRUE(Eventually([&] { return StateOn(a, *running, a.baseboard) == "Started"; }));

  ClientRun beside = Sush({"--json", "job", "start", "-w", "--concurrent", "echo beside"});
  ASSERT_EQ(beside.code, 0) << beside.err;
  EXPECT_EQ(beside.Json()["job"]["concurrent"], true);
  EXPECT_EQ(beside.Json()["stdout"][a.baseboard], "beside\n");
  EXPECT_EQ(StateOn(a, *running, a.baseboard), "Started");

  // A plain job waits for the running one; a concurrent job behind it waits too.
  auto waits = a.client().StartJob(operator_, "echo waited", "*", false);
  auto behind = a.client().StartJob(operator_, "echo behind", "*", true);
  ASSERT_TRUE(waits && behind);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(StateOn(a, *waits, a.baseboard), "Queued");
  EXPECT_EQ(StateOn(a, *behind, a.baseboard), "Queued") << "a start jumped the chain";

  ASSERT_TRUE(a.client().StopJob(operator_, *running));
  for (const rack::JobId& id : {*waits, *behind}) {
    EXPECT_TRUE(Eventually([&] { return StateOn(a, id, a.baseboard) == "Stopped"; }));
  }
}

TEST_F(RackTest, TheAcceptingSledChecksASessionStartsNonceAndBaseboard) {
  StartRack(2);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  const SushClient a = sleds_[0].client();
  auto issued = a.Post("/v1/session/nonce", json::object());
  ASSERT_TRUE(issued) << issued.error().ToString();
  auto nonce = sush_net::IdField<rack::Nonce>(*issued, "nonce");
  ASSERT_TRUE(nonce && nonce->has_value());
  const rack::SessionStart start{sleds_[0].baseboard, **nonce, rack::Nonce{}};

  // Another sled refuses a start that names A; a nonce A never issued is refused.
  auto elsewhere = sleds_[1].client().Submit(start, operator_);
  ASSERT_FALSE(elsewhere);
  EXPECT_EQ(elsewhere.error().code, ErrorCode::kInvalidArgument) << elsewhere.error().ToString();
  auto invented =
      a.Submit(rack::SessionStart{sleds_[0].baseboard, rack::Nonce{}, rack::Nonce{}}, operator_);
  ASSERT_FALSE(invented);
  EXPECT_EQ(invented.error().code, ErrorCode::kPermissionDenied);
  // A's own nonce works once.
  auto accepted = a.Submit(start, operator_);
  ASSERT_TRUE(accepted) << accepted.error().ToString();
  EXPECT_EQ(
      (*accepted)["session_id"],
      rack::DeriveSessionId(start.baseboard, start.server_nonce, start.signer_nonce).ToString());
  auto again = a.Submit(start, operator_);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kPermissionDenied) << again.error().ToString();
}

TEST_F(RackTest, TheThousandAndFirstQueuedJobOfASessionIsALimitError) {
  StartRack(1);
  const Sled& a = sleds_[0];
  auto session = a.client().StartSession(operator_);
  ASSERT_TRUE(session) << session.error().ToString();
  // Behind a hole nothing runs: every submitted job stays queued.
  rack::SignedRequest previous = SignJob(NextJobId(a), *session, "true");
  rack::JobId last;
  for (size_t i = 0; i < 1000; ++i) {
    previous = SignJob(rack::NextJobId(rack::ToBeSignedDigest(previous)), *session, "true");
    last = std::get<rack::JobStart>(previous.payload).job_id;
    auto submitted = SubmitSigned(a, previous);
    ASSERT_TRUE(submitted) << i << ": " << submitted.error().ToString();
  }
  EXPECT_EQ(StateOn(a, last, a.baseboard), "Queued");
  const rack::SignedRequest past =
      SignJob(rack::NextJobId(rack::ToBeSignedDigest(previous)), *session, "true");
  auto refused = SubmitSigned(a, past);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kLimitExceeded) << refused.error().ToString();
  EXPECT_NE(refused.error().message.find("queued_jobs_per_session_max"), std::string::npos);
  EXPECT_EQ((*a.client().Info())["executions"], 0);
}

}  // namespace
}  // namespace once::sush
