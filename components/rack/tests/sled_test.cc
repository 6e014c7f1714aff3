// One sled with real processes: the core, the ProcessExecutor and a real
// gossip Host (no peers) behind the HostPort the server uses.

#include "once/rack/sled.h"

#include <gtest/gtest.h>

#include <deque>
#include <fstream>
#include <sstream>

#include "once/itc/clock.h"
#include "once/rack/chain.h"

namespace once::rack {
namespace {

class SledTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rack-sled-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    std::filesystem::create_directories(root_ / "home");
    ExecutorConfig config;
    config.base_dir = root_ / "base";
    config.home = (root_ / "home").string();
    auto executor = ProcessExecutor::Create(config);
    ASSERT_TRUE(executor.has_value());
    executor_ = std::move(*executor);
    TrustedKeys trusted;
    ASSERT_TRUE(trusted.Add(support_.public_key).has_value());
    core_ = std::make_unique<SledCore>(
        SledConfig{SledIdentity{"913-0000019:BRM1", 0}, "test", trusted, {}}, rng_, drives_);
    sled_ = std::make_unique<Sled>(*core_, *executor_, port_);
    Pump({});
  }
  void TearDown() override {
    sled_.reset();
    executor_.reset();
    std::filesystem::remove_all(root_);
  }

  // Delivers everything gossiped, collecting what the sled hands back.
  void Pump(std::vector<Output> outputs, std::chrono::milliseconds wait = {}) {
    for (auto& o : outputs) rest_.push_back(std::move(o));
    for (int round = 0; round < 3; ++round) {
      for (auto& o : sled_->Pump(now_, wait)) rest_.push_back(std::move(o));
    }
  }
  Reply Call(const Input& input) {
    rest_.clear();
    Pump(sled_->Handle(input));
    for (const auto& o : rest_) {
      if (const auto* reply = std::get_if<Reply>(&o)) return *reply;
    }
    ADD_FAILURE() << "no reply";
    return Reply{};
  }
  SignedRequest SignOrDie(const RequestPayload& payload) { return *Sign(payload, support_); }
  const JobStatus* RunUntilTerminal(const JobId& id) {
    for (int i = 0; i < 200; ++i) {
      Pump({}, std::chrono::milliseconds(50));
      const JobStatus* status = core_->StatusOf(id, "913-0000019:BRM1");
      if (status != nullptr && status->terminal()) return status;
    }
    return core_->StatusOf(id, "913-0000019:BRM1");
  }

  std::filesystem::path root_;
  SeededRng rng_{3};
  KeyPair support_ = KeyPair::Generate(rng_);
  MemoryBoundaryStore drives_;
  gossip::Host host_{gossip::Replica::Seed(rng_)};
  HostPort port_{host_, {}};
  TimePoint now_ = FromUnixMillis(1'700'000'000'000);
  std::unique_ptr<ProcessExecutor> executor_;
  std::unique_ptr<SledCore> core_;
  std::unique_ptr<Sled> sled_;
  std::vector<Output> rest_;
};

TEST_F(SledTest, ASignedJobRunsAsARealProcessAndItsStatusIsGossiped) {
  Reply nonce = Call(IssueSessionNonce{});
  ASSERT_TRUE(nonce.nonce.has_value());
  Reply session = Call(
      ClientSubmit{*Encode(SignOrDie(SessionStart{"913-0000019:BRM1", *nonce.nonce, Nonce{}}))});
  ASSERT_TRUE(session.session_id.has_value());
  JobId id = FirstJobId(*session.session_id);
  SignedRequest job = SignOrDie(JobStart{id, *session.session_id, "echo hi; exit 4", "*", false});
  ASSERT_TRUE(Call(ClientSubmit{*Encode(job)}).status.has_value());
  const JobStatus* status = RunUntilTerminal(id);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->state, JobState::kStopped);
  EXPECT_EQ(status->outcome.code, 4);
  EXPECT_EQ(status->stdout_summary.bytes, 3u);
  std::ifstream out(executor_->JobDir(id) / "stdout");
  std::stringstream text;
  text << out.rdbuf();
  EXPECT_EQ(text.str(), "hi\n");
  ASSERT_FALSE(drives_.records().empty());
  EXPECT_EQ(drives_.current()->here.last_executed, id);
  EXPECT_EQ(drives_.current()->here.outcome->outcome.code, 4);  // recorded when it ended
}

TEST_F(SledTest, AJobWhoseOutputFolderExistsIsAnErrorAndDoesNotRun) {
  Reply nonce = Call(IssueSessionNonce{});
  Reply session = Call(
      ClientSubmit{*Encode(SignOrDie(SessionStart{"913-0000019:BRM1", *nonce.nonce, Nonce{}}))});
  JobId id = FirstJobId(*session.session_id);
  std::filesystem::create_directories(executor_->JobDir(id));  // "a previous life ran it"
  SignedRequest job = SignOrDie(JobStart{id, *session.session_id, "touch ran", "*", false});
  ASSERT_TRUE(Call(ClientSubmit{*Encode(job)}).status.has_value());
  const JobStatus* status = core_->StatusOf(id, "913-0000019:BRM1");
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->state, JobState::kError);
  EXPECT_NE(status->error.find("folder exists"), std::string::npos);
  EXPECT_EQ(status->error_code, ErrorCode::kPermissionDenied);
  EXPECT_FALSE(std::filesystem::exists(root_ / "home" / "ran"));
  EXPECT_EQ(core_->running_jobs(), 0u);
}

// The announcements of `baseboard` the host's replica holds now.
int AnnouncementsIn(const gossip::Host& host, const std::string& baseboard) {
  return host.Read([&](const gossip::Replica& replica) {
    int n = 0;
    for (const gossip::Message& m : replica.Observe(itc::Version{}).messages) {
      auto message = Decode(m.payload);
      const auto* a = message ? std::get_if<VersionAnnouncement>(&*message) : nullptr;
      n += a != nullptr && a->baseboard == baseboard;
    }
    return n;
  });
}

// The host drops its universe and comes back to it between two reads of the
// sled (a bootstrap that lost, then one that won: seen in the rack test's
// cold starts): the fresh replica of the same network holds none of what the
// core sent before. The sled takes it for the new universe it is, so the
// core joins it and announces itself there. Before, the sled compared
// networks only, and the sled stayed out of every sled's list.
TEST_F(SledTest, AReturnToTheSameNetworkIsJoinedAsANewUniverse) {
  const std::string me = "913-0000019:BRM1";
  ASSERT_EQ(AnnouncementsIn(host_, me), 1);
  ASSERT_EQ(core_->joins(), 1u);
  const NetworkId network = host_.network();
  SeededRng other(11);
  ASSERT_TRUE(host_.Adopt(gossip::Replica::Seed(other)).has_value());
  ASSERT_TRUE(host_.Adopt(gossip::Replica::Fresh(network, itc::Party::Seed())).has_value());
  ASSERT_EQ(AnnouncementsIn(host_, me), 0);
  now_ += std::chrono::milliseconds(150);  // one tick; the re-announcement waits 2 s
  Pump({});
  EXPECT_EQ(core_->joins(), 2u);
  EXPECT_EQ(core_->network(), network);
  EXPECT_EQ(AnnouncementsIn(host_, me), 1);
  EXPECT_TRUE(core_->known_sleds().contains(me));
}

}  // namespace
}  // namespace once::rack
