// Real sush-server processes on loopback TCP (gossip) and HTTP (the API),
// driven through the API and through the `sush` client binary (a rack.json
// the fixture writes, as `sush rack up` would): sessions and jobs cross
// processes; true / false / echo as stored and as `job output` prints them;
// a job behind a hole cancelled by `job stop`; `session skip` burning a
// cancelled position; the CPU and output limits; partitions (POST
// /admin/partition, on with --test-admin) make concurrent sessions annihilate
// when they heal; refused jobs never run; a cold start and a staggered start
// converge (late, brand-new sleds skip the early job: rule 6 of issue 13); a
// replaced sled rejoins; SIGTERM drains within 5 s. Each test kills only the
// pids it started. The boundary record across restarts, wiped drives and
// partitions: boundary_test.cc.

#include "rack_fixture.h"

namespace once::sush {
namespace {

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
    auto out = sled->client().Output(*job, "stdout", {&operator_, sled->baseboard});
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
  // A malformed body is refused (typed, 400) and heals nothing.
  for (const json& body : {json::object(), json{{"peers", "x"}}, json{{"peers", {1}}}}) {
    auto refused = a.client().Post("/admin/partition", body);
    ASSERT_FALSE(refused) << body.dump();
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument) << body.dump();
  }
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
  ASSERT_TRUE(Eventually([&] {
    return StateOn(sleds_[0], *first, sleds_[2].baseboard) == "Stopped";
  })) << JobViews(*first);

  // Sled 2 dies for good; a new board takes its cubby, addresses and nothing else.
  Kill(sleds_[2]);
  Sled& fresh = sleds_[2];
  fresh.baseboard = "913-0000019:TESTNEW";
  fresh.data_dir = root_ / "replacement";
  Spawn(fresh);
  WaitHttp(fresh);
  ASSERT_TRUE(Eventually([&] { return Converged(); }));
  EXPECT_TRUE(Eventually([&] { return ActiveSession(fresh) == session->ToString(); }));
  // The new board's record is empty: its entry marker came after the session
  // and after `first`, so the next position (derived from `first`) may have
  // held another job in a past it cannot know: skipped. The one after is new.
  auto old_position = sleds_[1].client().StartJob(operator_, "echo skipped", "2", false);
  ASSERT_TRUE(old_position) << old_position.error().ToString();
  EXPECT_TRUE(
      Eventually([&] { return StateOn(sleds_[0], *old_position, fresh.baseboard) == "Skipped"; }));
  auto second = sleds_[1].client().StartJob(operator_, "echo two", "2", false);
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_TRUE(
      Eventually([&] { return StateOn(sleds_[0], *second, fresh.baseboard) == "Stopped"; }));
  auto out = fresh.client().Output(*second, "stdout", {&operator_, fresh.baseboard});
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
  // -w waited on the sled the client asked; TEST0's outcome reaches TEST1 by gossip.
  for (const Sled* sled : {&a, &b}) {
    ASSERT_TRUE(Eventually([&] { return StateOn(b, *echo_id, sled->baseboard) == "Stopped"; }))
        << sled->baseboard;
  }
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

// Rule 6 of issue 13: a brand-new sled's empty record mints an entry marker
// when it joins the universe, so a job queued before it joined is never run
// there (a terminal Skipped{lightcone}, not a silent Queued); a job submitted
// after it joined runs on every sled once.
TEST_F(RackTest, WithoutTwoDrivesTheServerRefusesToStartAndAMissingDriveFolderIsUntrusted) {
  PlanRack(2);
  Sled& three = sleds_[0];  // a third --drive
  three.extra_args = {"--drive", (root_ / "m2c").string()};
  Spawn(three);
  int status = 0;
  ASSERT_EQ(::waitpid(three.pid, &status, 0), three.pid);
  three.pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  const std::string log = ReadFile(three.data_dir / "server.log");
  EXPECT_NE(log.find("InvalidArgument"), std::string::npos) << log;
  EXPECT_NE(log.find("two --drive folders needed"), std::string::npos) << log;

  // The server never makes a drive folder: a missing one is a missing drive.
  Sled& missing = sleds_[1];
  missing.make_drives = false;
  std::filesystem::create_directories(missing.drive(0));
  Spawn(missing);
  WaitHttp(missing);
  auto boundary = missing.client().Boundary();
  ASSERT_TRUE(boundary) << boundary.error().ToString();
  EXPECT_EQ((*boundary)["trusted"], false);
  EXPECT_EQ((*boundary)["locker_verdict"], "discarded");
  EXPECT_EQ((*boundary)["drives"][1]["state"], "missing folder") << boundary->dump();
  EXPECT_FALSE(std::filesystem::exists(missing.drive(1)));
  EXPECT_EQ((*missing.client().Info())["gate"], "untrusted");
}

TEST_F(RackTest, AStaggeredStartConvergesAndLateSledsSkipEarlyWorkAndRunLaterWorkOnce) {
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
  ExpectEverywhere(*job, "Stopped", {&sleds_[0]});
  ExpectEverywhere(*job, "Skipped", {&sleds_[1], &sleds_[2]});
  auto late_view = sleds_[0].client().Job(*job);
  ASSERT_TRUE(late_view);
  EXPECT_EQ((*late_view)["statuses"][sleds_[1].baseboard]["skip_reason"], "lightcone");
  // A job submitted after they joined, at a position derived from the early
  // job, is older than their entry markers (another job may have held it in
  // a past a new record cannot know): it runs on the first sled only. The
  // next one's position is new everywhere: it runs everywhere once.
  auto bridge = sleds_[2].client().StartJob(operator_, "echo bridge", "*", false);
  ASSERT_TRUE(bridge) << bridge.error().ToString();
  ExpectEverywhere(*bridge, "Stopped", {&sleds_[0]});
  ExpectEverywhere(*bridge, "Skipped", {&sleds_[1], &sleds_[2]});
  auto second = sleds_[2].client().StartJob(operator_, "echo $SUSH_JOB_ID >> runs", "*", false);
  ASSERT_TRUE(second) << second.error().ToString();
  ExpectEverywhere(*second, "Stopped", {&sleds_[0], &sleds_[1], &sleds_[2]});
  std::this_thread::sleep_for(500ms);
  for (const Sled& sled : sleds_) {
    const bool early = &sled == &first;
    EXPECT_EQ(ReadFile(sled.home() / "runs"),
              (early ? job->ToString() + "\n" : std::string()) + second->ToString() + "\n")
        << sled.baseboard << " ran a job twice, or one it should not have";
    auto info = sled.client().Info();
    ASSERT_TRUE(info);
    EXPECT_EQ((*info)["executions"], early ? 3 : 1) << sled.baseboard;
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

// Issue 16: validly signed jobs at chain positions nothing leads to hold no
// queue slot. A thousand of them are accepted (their own limit), the
// 1,001st is a typed limit error, and a job at the chain's next position is
// still accepted and runs: the queue limit counts only jobs that can run.
TEST_F(RackTest, AThousandUnreachableJobsHoldNoQueueSlotAndTheNextJobStillRuns) {
  StartRack(1);
  const Sled& a = sleds_[0];
  auto session = a.client().StartSession(operator_);
  ASSERT_TRUE(session) << session.error().ToString();
  auto nowhere = [&](uint32_t n) {
    rack::JobId id;
    for (size_t i = 0; i < 4; ++i) id.bytes[i] = static_cast<uint8_t>(n >> (8 * i));
    id.bytes[10] = 0x5a;
    return SignJob(id, *session, "touch unreachable-ran");
  };
  for (uint32_t i = 0; i < 1000; ++i) {
    auto submitted = SubmitSigned(a, nowhere(i));
    ASSERT_TRUE(submitted) << i << ": " << submitted.error().ToString();
  }
  auto refused = SubmitSigned(a, nowhere(1000));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kLimitExceeded) << refused.error().ToString();
  EXPECT_NE(refused.error().message.find("unchained_jobs_per_session_max"), std::string::npos);
  auto runs = a.client().StartJob(operator_, "echo ran", "*", false);
  ASSERT_TRUE(runs) << runs.error().ToString();
  EXPECT_TRUE(Eventually([&] { return StateOn(a, *runs, a.baseboard) == "Stopped"; }));
  EXPECT_FALSE(std::filesystem::exists(a.home() / "unreachable-ran"));
}

// -w with a targeted sled down: it stops waiting for that sled once it has
// not answered for 3 s, prints the finished sleds' stdout and stderr, says
// which sled it gave up on, and exits 1.
TEST_F(RackTest, WaitPrintsTheFinishedSledsOutputWhenOneSledIsDown) {
  ASSERT_TRUE(TwoSledsWithASession().has_value());
  Sled& down = sleds_[1];
  Kill(down);
  const auto asked = std::chrono::steady_clock::now();
  ClientRun ran =
      Sush({"--json", "job", "start", "-w", "--timeout-s", "60", "echo out; echo err >&2"});
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 20s) << "-w waited for the down sled";
  EXPECT_EQ(ran.code, 1) << ran.out << ran.err;
  const json view = ran.Json();
  EXPECT_EQ(view["stdout"][sleds_[0].baseboard], "out\n") << ran.out;
  EXPECT_EQ(view["stderr"][sleds_[0].baseboard], "err\n") << ran.out;
  EXPECT_NE(view["unfinished"][down.baseboard].get<std::string>().find("does not answer"),
            std::string::npos)
      << ran.out;
  EXPECT_EQ(view["error"]["code"], "Timeout") << ran.out;
  ClientRun text =
      Sush({"job", "status", "-w", "--timeout-s", "60", view["job"]["job_id"].get<std::string>()});
  EXPECT_EQ(text.code, 1);
  EXPECT_NE(text.out.find("-- stderr --\nerr\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("(the sled does not answer (down?))"), std::string::npos) << text.out;
}

// The one-sided peer list: sled 1 lists no peer, sled 0 lists sled 1
// but is cut from it at boot, so each forms its own universe; sled 0's wins
// (a session and a job gave it more ticks). Healed, only sled 0 dials: sled
// 1 loses on an inbound link and must bootstrap over it as a dialler would.
// `sush version` shows the split before; after, the two joined, sled 1
// learned the session, and no split is reported.
TEST_F(RackTest, TwoUniversesJoinThroughAOneSidedPeerList) {
  PlanRack(2);
  Sled& dialler = sleds_[0];
  Sled& listener = sleds_[1];
  listener.lists_peers = false;
  dialler.cut = {listener.gossip};
  Spawn(listener);
  Spawn(dialler);
  WaitHttp(listener);
  WaitHttp(dialler);
  auto network = [](const Sled& sled) {
    auto info = sled.client().Info();
    return info ? (*info)["network"].dump() : std::string();
  };
  ASSERT_NE(network(dialler), network(listener));
  auto session = dialler.client().StartSession(operator_);
  ASSERT_TRUE(session) << session.error().ToString();
  auto job = dialler.client().StartJob(operator_, "true", "0", false);
  ASSERT_TRUE(job) << job.error().ToString();
  ASSERT_TRUE(Eventually([&] { return StateOn(dialler, *job, dialler.baseboard) == "Stopped"; }));
  WriteRackFile();
  ClientRun split = Sush({"version"});
  EXPECT_NE(split.out.find("gossip: 2 universe(s) (SPLIT)"), std::string::npos) << split.out;
  Partition(dialler, {});
  EXPECT_TRUE(Eventually([&] { return Converged(); }, 10s))
      << network(dialler) << " vs " << network(listener);
  EXPECT_TRUE(Eventually([&] { return ActiveSession(listener) == session->ToString(); }));
  for (const Sled& sled : sleds_) {
    auto info = sled.client().Info();
    ASSERT_TRUE(info);
    EXPECT_EQ((*info)["gossip"]["split"], nullptr) << sled.baseboard << ": " << info->dump();
  }
  ClientRun joined = Sush({"--json", "version"});
  EXPECT_EQ(joined.Json()["gossip"]["split"], false) << joined.out;
}

}  // namespace
}  // namespace once::sush
