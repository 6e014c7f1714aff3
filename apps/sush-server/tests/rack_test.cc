// Real sush-server processes on loopback TCP (gossip) and HTTP (the API):
// sessions and jobs cross processes, partitions (POST /admin/partition, on
// with --test-admin) make concurrent sessions annihilate when they heal,
// refused jobs never run, a cold start converges, a replaced sled rejoins,
// SIGTERM drains within 5 s. Each test kills only the pids it started.

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

#include "once/rack/chain.h"
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

uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct Sled {
  int cubby = 0;
  std::string baseboard;
  Address http;
  Address gossip;
  std::filesystem::path data_dir;
  pid_t pid = -1;
  SushClient client() const { return SushClient(http, {3000ms}); }
};

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

  // Plans n sleds (ports, baseboards, data dirs), then starts them all.
  void StartRack(int n) {
    for (int i = 0; i < n; ++i) {
      Sled sled;
      sled.cubby = i;
      sled.baseboard = "913-0000019:TEST" + std::to_string(i);
      sled.http = Address{"127.0.0.1", FreePort()};
      sled.gossip = Address{"127.0.0.1", FreePort()};
      sled.data_dir = root_ / ("sled" + std::to_string(i));
      sleds_.push_back(sled);
    }
    for (Sled& sled : sleds_) Spawn(sled);
    for (Sled& sled : sleds_) WaitHttp(sled);
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

}  // namespace
}  // namespace once::sush
