// Issue 13 on real sush-server processes: a job runs at most once on a sled
// whatever crashes, restarts, wiped drives and partitions do. Every job
// appends its id to its sled's ledger (ROOT/sledI/ledger, beside HOME), and
// the ledger, not a status, counts the runs: kill -9 after a job finished;
// kill -9 while it runs (its process group is killed by the next life, it is
// Interrupted, the job chained behind it starts only after); a wiped data
// folder with the drives kept; one wiped drive (restored); the seed's
// partition flip-flop with cuts held both ways and taken at boot; drives
// that disagree (untrusted, reset by a signed `sush sled reset`); the whole
// rack killed at once; 100 restarts of one sled while jobs arrive.

#include <random>

#include "once/itc/text.h"
#include "once/itc/version.h"
#include "rack_fixture.h"

namespace once::sush {
namespace {

constexpr char kLedgerJob[] = "echo $SUSH_JOB_ID >> $HOME/../ledger";

// The processes of a process group, from /proc/PID/stat (its 5th field).
std::vector<pid_t> ProcessesInGroup(pid_t group) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadFile(entry.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string state;
    pid_t parent = 0, pgrp = 0;
    fields >> state >> parent >> pgrp;
    if (pgrp == group && state != "Z") out.push_back(std::stoi(name));
  }
  return out;
}

class BoundaryTest : public RackTest {
 protected:
  // How often the ledger of `sled` names `id`.
  size_t Runs(const Sled& sled, const rack::JobId& id) {
    std::istringstream lines(ReadFile(sled.ledger()));
    size_t n = 0;
    for (std::string line; std::getline(lines, line);) n += line == id.ToString();
    return n;
  }
  json Boundary(const Sled& sled) {
    auto boundary = sled.client().Boundary();
    EXPECT_TRUE(boundary) << sled.baseboard << ": " << boundary.error().ToString();
    return boundary ? *boundary : json::object();
  }
  void Restart(Sled& sled) {
    Kill(sled);
    Spawn(sled);
    WaitHttp(sled);
  }
  // `group` is cut (both ways) from every other sled, at once and at each
  // later boot (--cut).
  void CutOff(const std::vector<Sled*>& group) {
    for (Sled& sled : sleds_) {
      const bool inside = std::find(group.begin(), group.end(), &sled) != group.end();
      sled.cut.clear();
      for (const Sled& other : sleds_) {
        const bool other_inside = std::find(group.begin(), group.end(), &other) != group.end();
        if (other_inside != inside) sled.cut.push_back(other.gossip);
      }
      if (sled.pid > 0) {
        ASSERT_TRUE(sled.client().Partition(sled.cut)) << sled.baseboard;
      }
    }
  }
  // Every sled of `group` answers with its gate open, in one universe, and
  // has heard every other one's lightcone marker: a job submitted to any of
  // them now is above every marker of the group (so it may run on all).
  bool Settled(const std::vector<const Sled*>& group) {
    std::vector<json> views;
    std::set<std::string> networks;
    unsettled_.clear();
    for (const Sled* sled : group) {
      auto view = sled->client().Boundary();
      if (!view || (*view)["gate"] != "open") {
        unsettled_ = sled->baseboard + " gate " + (view ? (*view)["gate"].dump() : "unreachable");
        return false;
      }
      networks.insert((*view)["joined_network"].dump());
      views.push_back(std::move(*view));
    }
    if (networks.size() != 1) {
      unsettled_ = "several universes";
      return false;
    }
    for (const json& marked : views) {
      if (!marked["markers"]["joined"].is_string()) continue;
      auto marker = itc::ParseVersion(marked["markers"]["joined"].get<std::string>());
      if (!marker) return false;
      for (const json& hearing : views) {
        auto heard = itc::ParseVersion(hearing["heard"].get<std::string>());
        if (!heard || !itc::Leq(*marker, *heard)) {
          unsettled_ = hearing["baseboard"].get<std::string>() + " (heard " +
                       hearing["heard"].get<std::string>() + ") has not heard the marker " +
                       marked["markers"]["joined"].get<std::string>() + " of " +
                       marked["baseboard"].get<std::string>();
          return false;
        }
      }
    }
    return true;
  }
  void WaitSettled(const std::vector<const Sled*>& group) {
    ASSERT_TRUE(Eventually([&] { return Settled(group); }))
        << "the group never settled: " << unsettled_;
  }
  std::string unsettled_;  // why Settled said no, last time
  void WaitActive(const std::vector<const Sled*>& group, const rack::SessionId& session) {
    for (const Sled* sled : group) {
      ASSERT_TRUE(Eventually([&] { return ActiveSession(*sled) == session.ToString(); }))
          << sled->baseboard << " never saw session " << session.ToString();
    }
  }
  std::vector<const Sled*> All() const {
    std::vector<const Sled*> all;
    for (const Sled& sled : sleds_) all.push_back(&sled);
    return all;
  }
  // A converged rack of n settled sleds with a session started on sled 0.
  rack::SessionId RackWithASession(int n) {
    StartRack(n);
    EXPECT_TRUE(Eventually([&] { return Converged(); }));
    WaitSettled(All());
    auto session = sleds_[0].client().StartSession(operator_);
    EXPECT_TRUE(session) << session.error().ToString();
    WaitActive(All(), *session);
    WaitSettled(All());
    return session ? *session : rack::SessionId{};
  }
  rack::JobId Submit(const Sled& via, const std::string& command, const std::string& target) {
    auto job = via.client().StartJob(operator_, command, target, false);
    EXPECT_TRUE(job) << job.error().ToString();
    return job ? *job : rack::JobId{};
  }
};

TEST_F(BoundaryTest, AKillAfterAJobFinishedRunsItOnce) {
  RackWithASession(2);
  Sled& a = sleds_[0];
  Sled& x = sleds_[1];
  const rack::JobId j1 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j1, "Stopped", {&a, &x});

  Restart(x);
  WaitSettled(All());
  const json boundary = Boundary(x);
  EXPECT_EQ(boundary["locker_verdict"], "adopted");
  EXPECT_EQ(boundary["last_job"], j1.ToString());
  EXPECT_EQ(boundary["outcome"]["code"], 0);
  const rack::JobId j2 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j2, "Stopped", {&a, &x});
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Runs(x, j1), 1u);
  EXPECT_EQ(Runs(x, j2), 1u);
  EXPECT_EQ(StateOn(a, j1, x.baseboard), "Stopped") << "a status was rewritten";
  EXPECT_EQ((*x.client().Info())["executions"], 1) << "this life ran only j2";
}

TEST_F(BoundaryTest, AKillWhileAJobRunsKillsItsProcessGroupAtRestartAndItIsInterrupted) {
  RackWithASession(2);
  Sled& a = sleds_[0];
  Sled& x = sleds_[1];
  const rack::JobId running = Submit(
      a,
      "echo $$ > $HOME/../running.pgid; echo $SUSH_JOB_ID >> $HOME/../ledger; sleep 31.4159; "
      "echo done >> $HOME/../ledger",
      "1");
  ASSERT_TRUE(Eventually([&] { return StateOn(a, running, x.baseboard) == "Started"; }));
  ASSERT_TRUE(Eventually([&] { return Runs(x, running) == 1; }));
  // Chained behind it (not concurrent): it must wait for the first to end.
  const rack::JobId next = Submit(
      a,
      "kill -0 -- -$(cat $HOME/../running.pgid) 2>/dev/null && echo overlap >> $HOME/../ledger; " +
          std::string(kLedgerJob),
      "1");
  ASSERT_TRUE(Eventually([&] { return StateOn(x, next, x.baseboard) == "Queued"; }));
  const pid_t group = std::stoi(ReadFile(x.data_dir / "running.pgid"));

  Kill(x);
  EXPECT_FALSE(ProcessesInGroup(group).empty()) << "the job died with its server: nothing to test";
  Spawn(x);
  WaitHttp(x);
  EXPECT_TRUE(ProcessesInGroup(group).empty()) << "the job outlived its server's restart";
  const json boundary = Boundary(x);
  EXPECT_EQ(boundary["orphans_killed"], json::array({running.ToString()}));
  for (const Sled* reader : {&a, &x}) {
    EXPECT_TRUE(Eventually([&] { return StateOn(*reader, running, x.baseboard) == "Interrupted"; }))
        << reader->baseboard << " saw '" << StateOn(*reader, running, x.baseboard) << "'";
  }
  ExpectEverywhere(next, "Stopped", {&x});
  const std::string ledger = ReadFile(x.ledger());
  EXPECT_EQ(ledger, running.ToString() + "\n" + next.ToString() + "\n")
      << "ran twice, finished after its kill, or the next job overlapped it";
}

TEST_F(BoundaryTest, AWipedDataFolderWithTheDrivesKeptRunsNothingTwice) {
  RackWithASession(2);
  Sled& a = sleds_[0];
  Sled& x = sleds_[1];
  const rack::JobId j1 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j1, "Stopped", {&a, &x});

  Kill(x);
  std::filesystem::remove_all(x.data());  // bookmark, output, pidfiles: gone
  Spawn(x);
  WaitHttp(x);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  WaitActive(All(), *rack::SessionId::Parse(*ActiveSession(a)));
  WaitSettled(All());
  EXPECT_EQ(Boundary(x)["last_job"], j1.ToString()) << "the drives kept the record";
  const rack::JobId j2 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j2, "Stopped", {&a, &x});
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Runs(x, j1), 1u);
  EXPECT_EQ(Runs(x, j2), 1u);
  EXPECT_FALSE(std::filesystem::exists(JobDir(x, j1))) << "it ran again";
}

TEST_F(BoundaryTest, OneWipedDriveIsRestoredFromTheOther) {
  RackWithASession(2);
  Sled& a = sleds_[0];
  Sled& x = sleds_[1];
  const rack::JobId j1 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j1, "Stopped", {&a, &x});

  Kill(x);
  for (const auto& entry : std::filesystem::directory_iterator(x.drive(0))) {
    std::filesystem::remove_all(entry.path());  // the drive is empty; its folder stays
  }
  Spawn(x);
  WaitHttp(x);
  WaitSettled(All());
  const json boundary = Boundary(x);
  EXPECT_EQ(boundary["locker_verdict"], "restored");
  EXPECT_EQ(boundary["trusted"], true);
  EXPECT_EQ(boundary["last_job"], j1.ToString());
  for (const json& drive : boundary["drives"]) EXPECT_EQ(drive["state"], "ok") << drive.dump();
  const rack::JobId j2 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j2, "Stopped", {&a, &x});
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Runs(x, j1), 1u);
  EXPECT_EQ(Runs(x, j2), 1u);
}

// The seed's steps 1-8: X runs J1 on side A, moves (restarted) to side B and
// runs J2 there, moves back to side A: J1 never runs again. Each move is a
// restart with the new cut given at boot, so X never gossips across.
TEST_F(BoundaryTest, ThePartitionFlipFlopRunsTheFirstSidesJobOnce) {
  StartRack(4);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  WaitSettled(All());
  Sled& s0 = sleds_[0];
  Sled& x = sleds_[1];
  Sled& s2 = sleds_[2];
  Sled& s3 = sleds_[3];
  CutOff({&s0, &x});                   // step 1: {0, X} | {2, 3}
  std::this_thread::sleep_for(300ms);  // rounds in flight finish
  auto side_a = s0.client().StartSession(operator_);
  auto side_b = s2.client().StartSession(operator_);  // step 2: concurrent sessions
  ASSERT_TRUE(side_a && side_b);
  WaitActive({&s0, &x}, *side_a);
  WaitActive({&s2, &s3}, *side_b);
  WaitSettled({&s0, &x});
  const rack::JobId j1 = Submit(s0, kLedgerJob, "1");  // step 3
  ASSERT_TRUE(Eventually([&] { return StateOn(s0, j1, x.baseboard) == "Stopped"; }));
  const rack::JobId queued_b = Submit(s2, kLedgerJob, "1");  // queued before X arrives

  Kill(x);  // step 4: X powers down and comes up on side B
  CutOff({&s0});
  Spawn(x);
  WaitHttp(x);
  WaitActive({&x}, *side_b);
  WaitSettled({&s2, &s3, &x});
  // X never executed under side B's session (its start is not below X's V):
  // side B's queue runs on X, the job queued before it came included.
  EXPECT_TRUE(Eventually([&] { return StateOn(s2, queued_b, x.baseboard) == "Stopped"; }))
      << "X shows '" << StateOn(s2, queued_b, x.baseboard) << "' for a job queued before it came";
  const rack::JobId j2 = Submit(s2, kLedgerJob, "1");  // step 5
  ASSERT_TRUE(Eventually([&] { return StateOn(s2, j2, x.baseboard) == "Stopped"; }));
  const rack::JobId queued_a = Submit(s0, kLedgerJob, "1");  // queued while X is away

  Kill(x);  // step 6: back to side A, whose session X did execute under
  CutOff({&s0, &x});
  Spawn(x);
  WaitHttp(x);
  WaitActive({&x}, *side_a);
  WaitSettled({&s0, &x});
  // X's record kept side A's session when it left it (rule 2's left
  // sessions): it resumes side A exactly where it stopped, so the job queued
  // while it was away runs, and nothing side A ran before runs again.
  EXPECT_TRUE(Eventually([&] { return StateOn(s0, queued_a, x.baseboard) == "Stopped"; }))
      << "X shows '" << StateOn(s0, queued_a, x.baseboard) << "' for a job queued while away";
  bool hopped = false;
  const json seen = *s0.client().Session();
  for (const json& e : seen["errors"]) {
    hopped = hopped || (e["kind"] == "SessionHop" && e["baseboard"] == x.baseboard);
  }
  EXPECT_FALSE(hopped) << "X hopped back into a session its record remembers";
  const rack::JobId j3 = Submit(s0, kLedgerJob, "1");
  ASSERT_TRUE(Eventually([&] { return StateOn(s0, j3, x.baseboard) == "Stopped"; }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Runs(x, j1), 1u) << "step 8: X ran side A's job again";
  EXPECT_EQ(Runs(x, queued_b), 1u);
  EXPECT_EQ(Runs(x, queued_a), 1u);
  EXPECT_EQ(Runs(x, j2), 1u);
  EXPECT_EQ(Runs(x, j3), 1u);
  const json record = Boundary(x);
  EXPECT_EQ(record["left_sessions"].size(), 1u) << record.dump();
  // The cuts held both ways: neither side ever heard of the other's jobs.
  auto on_a = s0.client().Job(j2);
  EXPECT_FALSE(on_a) << "side A heard of side B's job";
  auto on_b = s2.client().Job(j1);
  EXPECT_FALSE(on_b) << "side B heard of side A's job";
}

TEST_F(BoundaryTest, DrivesThatDisagreeLeaveTheSledUntrustedUntilASignedReset) {
  RackWithASession(2);
  WriteRackFile();
  Sled& a = sleds_[0];
  Sled& x = sleds_[1];
  const rack::JobId j1 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j1, "Stopped", {&a, &x});

  Kill(x);  // drive A now holds another sled's record: the drives disagree
  std::filesystem::copy_file(a.drive(0) / "boundary", x.drive(0) / "boundary",
                             std::filesystem::copy_options::overwrite_existing);
  Spawn(x);
  WaitHttp(x);
  json boundary = Boundary(x);
  EXPECT_EQ(boundary["trusted"], false);
  EXPECT_EQ(boundary["gate"], "untrusted");
  EXPECT_EQ(boundary["locker_verdict"], "discarded");
  EXPECT_FALSE(boundary["untrusted_reason"].get<std::string>().empty());
  EXPECT_TRUE(boundary["reset_nonce"].is_string());
  EXPECT_EQ((*x.client().Info())["trusted"], false);

  const rack::JobId j2 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j2, "Stopped", {&a});
  ExpectEverywhere(j2, "Skipped", {&x});
  EXPECT_EQ((*a.client().Job(j2))["statuses"][x.baseboard]["skip_reason"], "untrusted");
  EXPECT_TRUE(Eventually([&] {
    const json seen = *a.client().Session();
    for (const json& e : seen["errors"]) {
      if (e["kind"] == "Untrusted" && e["baseboard"] == x.baseboard) return true;
    }
    return false;
  })) << "the rack was not told";

  // Typed refusals: a trusted sled has nothing to reset; a stale nonce is refused.
  ClientRun trusted = Sush({"--json", "sled", "reset", "-T", "0"});
  EXPECT_EQ(trusted.code, 1);
  EXPECT_EQ(trusted.Json()["error"]["code"], "InvalidArgument") << trusted.out;
  auto stale = x.client().Submit(rack::SledReset{x.baseboard, rack::Nonce{}}, operator_);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kPermissionDenied);

  ClientRun reset = Sush({"--json", "sled", "reset", "-T", "1"});
  ASSERT_EQ(reset.code, 0) << reset.out << reset.err;
  boundary = Boundary(x);
  EXPECT_EQ(boundary["trusted"], true);
  EXPECT_EQ(boundary["resets"], 1);
  EXPECT_EQ(boundary["amnesia"], "permanent");
  WaitSettled(All());
  // The session predates the reset: the next position (derived from j2) is
  // older than the new entry marker and is skipped on X; the one after runs.
  const rack::JobId old_position = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(old_position, "Stopped", {&a});
  ExpectEverywhere(old_position, "Skipped", {&x});
  const rack::JobId j3 = Submit(a, kLedgerJob, "*");
  ExpectEverywhere(j3, "Stopped", {&a, &x});
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Runs(x, j1), 1u);
  EXPECT_EQ(Runs(x, j2), 0u);
  EXPECT_EQ(Runs(x, old_position), 0u);
  EXPECT_EQ(Runs(x, j3), 1u);
  ClientRun shown = Sush({"boundary", "-T", "1"});
  EXPECT_NE(shown.out.find("permanent, 1 operator reset(s)"), std::string::npos) << shown.out;
}

TEST_F(BoundaryTest, TheWholeRackKilledAndRestartedTogetherRunsNothingAgain) {
  RackWithASession(3);
  const rack::JobId j1 = Submit(sleds_[0], kLedgerJob, "*");
  ExpectEverywhere(j1, "Stopped", All());
  const rack::JobId j2 = Submit(sleds_[1], kLedgerJob, "*");
  ExpectEverywhere(j2, "Stopped", All());

  for (Sled& sled : sleds_) Kill(sled);
  for (Sled& sled : sleds_) Spawn(sled);
  for (Sled& sled : sleds_) WaitHttp(sled);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  for (const Sled& sled : sleds_) {
    auto session = sled.client().Session();
    ASSERT_TRUE(session);
    EXPECT_EQ((*session)["active"], nullptr);
    EXPECT_TRUE((*session)["message"].get<std::string>().starts_with(
        "no session known since this sled started at "))
        << session->dump();
  }
  WaitSettled(All());
  auto session = sleds_[2].client().StartSession(operator_);
  ASSERT_TRUE(session) << session.error().ToString();
  WaitActive(All(), *session);
  WaitSettled(All());
  const rack::JobId j3 = Submit(sleds_[2], kLedgerJob, "*");
  ExpectEverywhere(j3, "Stopped", All());
  std::this_thread::sleep_for(300ms);
  for (const Sled& sled : sleds_) {
    EXPECT_EQ(ReadFile(sled.ledger()),
              j1.ToString() + "\n" + j2.ToString() + "\n" + j3.ToString() + "\n")
        << sled.baseboard;
  }
}

TEST_F(BoundaryTest, AHundredRestartsOfOneSledWhileJobsArriveRunEveryJobAtMostOnce) {
  RackWithASession(3);
  Sled& x = sleds_[2];
  std::atomic<bool> done{false};
  std::vector<rack::JobId> submitted;
  std::thread submitter([&] {
    while (!done) {
      auto job = sleds_[0].client().StartJob(operator_, kLedgerJob, "*", false);
      if (job) submitted.push_back(*job);
      std::this_thread::sleep_for(150ms);
    }
  });
  std::mt19937 random(13);
  for (int i = 0; i < 100 && !HasFatalFailure(); ++i) {
    Restart(x);
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 200));
  }
  done = true;
  submitter.join();
  ASSERT_GT(submitted.size(), 20u);

  WaitSettled(All());
  const rack::JobId after = Submit(sleds_[0], kLedgerJob, "*");
  ExpectEverywhere(after, "Stopped", All());
  for (const rack::JobId& id : submitted) {  // none left waiting: every status is terminal
    EXPECT_TRUE(Eventually([&] {
      auto job = sleds_[0].client().Job(id);
      return job && (*job)["statuses"].contains(x.baseboard) &&
             (*job)["statuses"][x.baseboard]["terminal"] == true;
    })) << id.ToString();
  }
  std::this_thread::sleep_for(300ms);
  std::map<std::string, int> states;
  for (const rack::JobId& id : submitted) {
    auto job = sleds_[0].client().Job(id);
    if (!job) continue;
    const json& status = (*job)["statuses"][x.baseboard];
    ++states[status["state"].get<std::string>() +
             (status.contains("skip_reason") ? " (" + status["skip_reason"].get<std::string>() + ")"
                                             : "")];
  }
  std::string shown;
  for (const auto& [state, n] : states) shown += " " + std::to_string(n) + " " + state;
  std::printf("%zu jobs during 100 restarts; the restarted sled's statuses:%s\n", submitted.size(),
              shown.c_str());
  for (const Sled& sled : sleds_) {
    std::map<std::string, int> runs;
    std::istringstream lines(ReadFile(sled.ledger()));
    for (std::string line; std::getline(lines, line);) ++runs[line];
    for (const auto& [id, n] : runs) EXPECT_EQ(n, 1) << sled.baseboard << " ran " << id;
    if (&sled != &x) {
      EXPECT_EQ(runs.size(), submitted.size() + 1) << sled.baseboard << " missed a job";
    }
    EXPECT_EQ(runs[after.ToString()], 1) << sled.baseboard;
  }
}

}  // namespace
}  // namespace once::sush
