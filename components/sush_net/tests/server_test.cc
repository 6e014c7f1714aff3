// The HTTP face of a sled (server.h) without sockets: the endpoint functions
// on a real core and Sled over a gossip Host with no peers, and a runner that
// only records what it was asked to start.

#include "once/sush_net/server.h"

#include <gtest/gtest.h>

#include <map>

#include "once/base/hex.h"
#include "once/fuzz_corpus/seeds.h"
#include "once/itc/text.h"
#include "once/rack/chain.h"

namespace once::sush_net {
namespace {

using nlohmann::json;

class RecordingRunner final : public rack::JobRunner {
 public:
  Status Start(const rack::JobSpec& spec) override {
    started.push_back(spec.job_id);
    return Ok();
  }
  Status Stop(const rack::JobId&) override { return Ok(); }
  std::vector<rack::ProcessExited> Poll(std::chrono::milliseconds) override { return {}; }
  size_t running() const override { return 0; }
  std::vector<rack::JobId> started;
};

constexpr char kBoard[] = "913-0000019:NET0";

class ServerTest : public ::testing::Test {
 protected:
  void Open(rack::BoundaryLoad load = rack::BoundaryLoad{rack::BoundaryRecord{}, "empty", "", {}}) {
    drives_ = std::make_unique<rack::MemoryBoundaryStore>(std::move(load));
    rack::TrustedKeys trusted;
    ASSERT_TRUE(trusted.Add(keys_.public_key));
    core_ = std::make_unique<rack::SledCore>(
        rack::SledConfig{rack::SledIdentity{kBoard, 0}, "test", trusted, {}, {}}, rng_, *drives_);
    sled_ = std::make_unique<rack::Sled>(*core_, runner_, port_);
    Pump();
  }
  void Pump() {
    for (int i = 0; i < 3; ++i) sink_(sled_->Pump(now_));
  }
  std::string Submit(const rack::RequestPayload& payload) {
    auto request = rack::Sign(payload, keys_);
    EXPECT_TRUE(request);
    auto wire = rack::Encode(rack::Message{*request});
    return SubmitBody(*wire).dump();
  }
  rack::SessionId StartSession() {
    HttpAnswer nonce = PostSessionNonce(*sled_, sink_);
    EXPECT_EQ(nonce.status, 200) << nonce.body.dump();
    auto parsed = rack::Nonce::Parse(nonce.body["nonce"].get<std::string>());
    HttpAnswer started =
        PostSubmit(*sled_, now_, Submit(rack::SessionStart{kBoard, *parsed, rack::Nonce{}}), sink_);
    EXPECT_EQ(started.status, 200) << started.body.dump();
    Pump();
    return *rack::SessionId::Parse(started.body["session_id"].get<std::string>());
  }

  SeededRng rng_{11};
  rack::KeyPair keys_ = rack::KeyPair::Generate(rng_);
  gossip::Host host_{gossip::Replica::Seed(rng_)};
  rack::HostPort port_{host_, {}};
  RecordingRunner runner_;
  TimePoint now_ = FromUnixMillis(1'700'000'000'000);
  SledFacts facts_{kBoard, 0, "test", {"127.0.0.1", 1}, {"127.0.0.1", 2}, now_};
  SledNotes notes_;
  OutputSink sink_ = [this](std::vector<rack::Output> outputs) {
    for (const rack::Output& o : outputs) {
      if (const auto* seen = std::get_if<rack::SledErrorSeen>(&o)) notes_.Note(seen->error);
    }
  };
  std::unique_ptr<rack::MemoryBoundaryStore> drives_;
  std::unique_ptr<rack::SledCore> core_;
  std::unique_ptr<rack::Sled> sled_;
};

TEST_F(ServerTest, ANewSledSaysItKnowsNoSessionSinceItStartedAndShowsItsEntryMarker) {
  Open();
  HttpAnswer session = GetSession(facts_, *core_, notes_);
  EXPECT_EQ(session.body["active"], nullptr);
  EXPECT_EQ(session.body["message"],
            "no session known since this sled started at 2023-11-14T22:13:20Z");
  HttpAnswer boundary = GetBoundary(facts_, *core_, *drives_, notes_, itc::Version{});
  EXPECT_EQ(boundary.body["trusted"], true);
  EXPECT_EQ(boundary.body["gate"], "open");
  EXPECT_EQ(boundary.body["locker_verdict"], "empty");
  EXPECT_EQ(boundary.body["amnesia"], "until first execution");
  ASSERT_TRUE(boundary.body["markers"]["entry"].is_string()) << boundary.body.dump();
  EXPECT_TRUE(itc::ParseVersion(boundary.body["markers"]["entry"].get<std::string>()));
  EXPECT_EQ(boundary.body["markers"]["entry"], boundary.body["lightcone"].back());
  EXPECT_EQ(boundary.body["floor"].back(), boundary.body["markers"]["entry"]);
  EXPECT_TRUE(boundary.body["markers"]["birth"].is_string());
  EXPECT_EQ(boundary.body["reset_nonce"], nullptr);
  EXPECT_EQ(boundary.body["filter"]["bits_set"], 0);
  EXPECT_EQ(boundary.body["filter"]["bits"], rack::kNetworkFilterBits);

  const rack::SessionId id = StartSession();
  session = GetSession(facts_, *core_, notes_);
  EXPECT_EQ(session.body["active"], id.ToString());
  EXPECT_FALSE(session.body.contains("message"));
  EXPECT_EQ(GetInfo(facts_, *core_, notes_).body["active_session"], id.ToString());
}

TEST_F(ServerTest, TheHistoryIsTheCoresDeliveryOrderNewestFirst) {
  Open();
  const rack::SessionId session = StartSession();
  std::vector<rack::JobId> ids;
  for (int i = 0; i < 3; ++i) {
    HttpAnswer next = GetSession(facts_, *core_, notes_);
    auto id = rack::JobId::Parse(next.body["next_job_id"].get<std::string>());
    ASSERT_TRUE(id);
    HttpAnswer submitted =
        PostSubmit(*sled_, now_,
                   Submit(rack::JobStart{*id, session, "true", "*", /*concurrent=*/true}), sink_);
    ASSERT_EQ(submitted.status, 200) << submitted.body.dump();
    ids.push_back(*id);
  }
  Pump();
  EXPECT_EQ(runner_.started, ids);
  HttpAnswer page = GetJobs(*core_, "1", "5");
  EXPECT_EQ(page.body["total"], 3);
  ASSERT_EQ(page.body["jobs"].size(), 2u);
  EXPECT_EQ(page.body["jobs"][0]["job_id"], ids[1].ToString());
  EXPECT_EQ(page.body["jobs"][1]["job_id"], ids[0].ToString());
  EXPECT_EQ(GetJobs(*core_, std::nullopt, std::nullopt).body["jobs"].size(), 3u);  // defaults
  EXPECT_EQ(GetJobs(*core_, "0", "5000").body["jobs"].size(), 3u);  // at most the page's max
  EXPECT_EQ(GetJobs(*core_, "0", "0").body["jobs"].size(), 0u);
  EXPECT_EQ(GetJobs(*core_, "7", "5").body["jobs"].size(), 0u);  // past the end
  for (const char* bad : {"x", "", "-1", "+1", " 1", "1e3", "0x10", "99999999999999999999999"}) {
    for (bool as_offset : {true, false}) {
      HttpAnswer refused =
          as_offset ? GetJobs(*core_, bad, std::nullopt) : GetJobs(*core_, std::nullopt, bad);
      EXPECT_EQ(refused.status, 400) << bad;
      EXPECT_EQ(refused.body["error"]["code"], "InvalidArgument") << refused.body.dump();
      EXPECT_NE(
          refused.body["error"]["message"].get<std::string>().find(as_offset ? "offset" : "limit"),
          std::string::npos);
    }
  }
  EXPECT_EQ(GetJob(*core_, ids[2].ToString()).body["statuses"][kBoard]["state"], "Started");
  EXPECT_EQ(GetJob(*core_, rack::JobId{}.ToString()).status, 404);
  EXPECT_EQ(GetJob(*core_, "not-an-id").status, 400);
}

TEST_F(ServerTest, AnUntrustedSledShowsWhyAndItsResetNonceAndSkipsJobsAsUntrusted) {
  Open(rack::BoundaryLoad{std::nullopt, "discarded", "drive 1 (/m2b): digest mismatch", {}});
  HttpAnswer boundary = GetBoundary(facts_, *core_, *drives_, notes_, itc::Version{});
  EXPECT_EQ(boundary.body["trusted"], false);
  EXPECT_EQ(boundary.body["gate"], "untrusted");
  EXPECT_EQ(boundary.body["locker_verdict"], "discarded");
  EXPECT_EQ(boundary.body["untrusted_reason"], "drive 1 (/m2b): digest mismatch");
  EXPECT_EQ(boundary.body["V"], nullptr);
  ASSERT_TRUE(boundary.body["reset_nonce"].is_string());
  HttpAnswer info = GetInfo(facts_, *core_, notes_);
  EXPECT_EQ(info.body["trusted"], false);
  EXPECT_EQ(info.body["untrusted_reason"], "drive 1 (/m2b): digest mismatch");
  ASSERT_FALSE(notes_.errors.empty());
  EXPECT_EQ(SledErrorToJson(notes_.errors.back())["kind"], "Untrusted");

  const rack::SessionId session = StartSession();
  HttpAnswer job = PostSubmit(
      *sled_, now_, Submit(rack::JobStart{rack::FirstJobId(session), session, "true", "*", false}),
      sink_);
  ASSERT_EQ(job.status, 200) << job.body.dump();
  Pump();
  EXPECT_TRUE(runner_.started.empty());
  const json status = GetJob(*core_, rack::FirstJobId(session).ToString()).body["statuses"][kBoard];
  EXPECT_EQ(status["state"], "Skipped");
  EXPECT_EQ(status["terminal"], true);
  EXPECT_EQ(status["skip_reason"], "untrusted");
  EXPECT_NE(status["detail"].get<std::string>().find("digest mismatch"), std::string::npos);

  auto nonce = rack::Nonce::Parse(boundary.body["reset_nonce"].get<std::string>());
  HttpAnswer reset = PostSubmit(*sled_, now_, Submit(rack::SledReset{kBoard, *nonce}), sink_);
  ASSERT_EQ(reset.status, 200) << reset.body.dump();
  Pump();
  boundary = GetBoundary(facts_, *core_, *drives_, notes_, itc::Version{});
  EXPECT_EQ(boundary.body["trusted"], true);
  EXPECT_EQ(boundary.body["resets"], 1);
  EXPECT_EQ(boundary.body["amnesia"], "permanent");
  EXPECT_EQ(boundary.body["reset_nonce"], nullptr);
  EXPECT_EQ(SledErrorToJson(notes_.errors.back())["kind"], "BoundaryReset");
}

// The seed corpus of sush_net_request_fuzz (fuzz/corpus): the bodies the
// client posts (signed requests of every kind, a forged one, partitions),
// request payloads alone (the fuzzer signs those itself), a job id and an
// address.
TEST_F(ServerTest, FuzzSeedsAreCurrentBodies) {
  Open();
  std::map<std::string, std::string> seeds;
  const rack::SessionId session = StartSession();
  const rack::JobId first = rack::FirstJobId(session);
  const std::pair<const char*, rack::RequestPayload> payloads[] = {
      {"session-start", rack::SessionStart{kBoard, rack::Nonce{}, rack::Nonce{}}},
      {"job-start", rack::JobStart{first, session, "uptime", "0,913-0000019:NET0", false}},
      {"job-stop", rack::JobStop{first}},
      {"session-skip", rack::SessionSkip{session, first}},
      {"session-stop", rack::SessionStop{session}},
      {"sled-reset", rack::SledReset{kBoard, rack::Nonce{}}}};
  for (const auto& [name, payload] : payloads) {
    seeds[std::string("submit-") + name] = Submit(payload);
    seeds[std::string("payload-") + name] = fuzz_corpus::AsString(*rack::EncodePayload(payload));
  }
  const rack::Message event = rack::JobStarted{kBoard, first};
  seeds["submit-forged-event"] = SubmitBody(*rack::Encode(event)).dump();
  seeds["partition"] = PartitionBody({{"127.0.0.1", 7201}, {"sled-3.rack", 7203}}).dump();
  seeds["partition-heal"] = PartitionBody({}).dump();
  seeds["job-id"] = first.ToString();
  seeds["address"] = "http://127.0.0.1:7100/";
  // Bytes on an HTTP connection (RequestParser): two requests kept alive, the
  // first with a chunked body.
  seeds["http-keep-alive"] =
      "POST /v1/submit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4;ext=1\r\nabcd\r\n0\r\nTrailer: t\r\n\r\n"
      "GET /v1/jobs?limit=5 HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
  // Found by the fuzzer: a chunk line of exactly the fuzzer's
  // chunk_line_bytes_max (32), taken whole but refused fed a byte at a time
  // (its CR counted against the limit before its LF came).
  seeds["http-chunk-line-at-its-limit"] = std::string(
      "POST /v1/\0\0\0ait HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4;ext=1\r\x1f\0\0\0dt=5 gth:http:// 2\xf6"
      "1\r\nCo{\"n",
      104);
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/sush_net_request_fuzz", seeds);
}

// Found by sush_net_request_fuzz: a signed job whose command or target is
// not UTF-8 made every view that shows it throw (json.dump), so the sled
// answered 500 to GET /v1/jobs for everyone from then on. It renders now,
// as JSON text a client can parse, and so does an id in a path.
TEST_F(ServerTest, TextThatIsNotUtf8StillRenders) {
  Open();
  const rack::SessionId session = StartSession();
  const rack::JobId first = rack::FirstJobId(session);
  HttpAnswer submitted = PostSubmit(
      *sled_, now_, Submit(rack::JobStart{first, session, "echo \xff\xfe", "*", false}), sink_);
  ASSERT_EQ(submitted.status, 200) << submitted.body.dump();
  Pump();
  const std::string job = AnswerText(GetJob(*core_, first.ToString()));
  EXPECT_TRUE(json::accept(job)) << job;
  EXPECT_TRUE(json::accept(AnswerText(GetJobs(*core_, std::nullopt, std::nullopt))));
  // An id in a request path that is not UTF-8 is echoed in the error.
  HttpAnswer bad_id = GetJob(*core_, "\xff\xfe");
  EXPECT_EQ(bad_id.status, 400);
  EXPECT_TRUE(json::accept(AnswerText(bad_id)));
  HttpResponse bad_output = GetJobOutput("/nonexistent", "\xff\xfe", "stdout", kBoard, Ok());
  EXPECT_EQ(bad_output.status, 400);
  EXPECT_TRUE(json::accept(bad_output.body)) << bad_output.body;
}

TEST(PartitionTest, AMalformedBodyIsRefusedAndAnEmptyListHeals) {
  std::optional<std::vector<Address>> cut;
  auto apply = [&](const std::vector<Address>& peers) { cut = peers; };
  for (const char* body : {"{}", R"({"peers": "127.0.0.1:1"})", R"({"peers": [1]})",
                           R"({"peers": ["nowhere"]})", "[]", "not json"}) {
    HttpAnswer answer = PostPartition(true, body, apply);
    EXPECT_EQ(answer.status, 400) << body;
    EXPECT_EQ(answer.body["error"]["code"], "InvalidArgument") << body;
    EXPECT_FALSE(cut.has_value()) << body << " changed the cut";
  }
  HttpAnswer answer = PostPartition(true, R"({"peers": ["127.0.0.1:7201"]})", apply);
  EXPECT_EQ(answer.status, 200);
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(*cut, (std::vector<Address>{{"127.0.0.1", 7201}}));
  EXPECT_EQ(answer.body["partitioned"], json::array({"127.0.0.1:7201"}));
  answer = PostPartition(true, R"({"peers": []})", apply);
  EXPECT_EQ(answer.status, 200);
  EXPECT_TRUE(cut->empty());
  EXPECT_EQ(PostPartition(false, R"({"peers": []})", apply).status, 404);
}

// A purge body of another shape is a typed refusal (a member of another
// type made json's value() throw: a 500 from the handler's catch).
TEST(PurgeTest, AMalformedBodyIsRefusedAndTheTwoFormsParse) {
  for (const char* body : {R"({"finished": "yes"})", R"({"finished": 1})", R"({"jobs": [1]})",
                           R"({"jobs": "x"})", "{}", "[]", "not json"}) {
    auto parsed = ParsePurge(body);
    ASSERT_FALSE(parsed.has_value()) << body;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument) << body;
  }
  auto finished = ParsePurge(R"({"finished": true})");
  ASSERT_TRUE(finished.has_value());
  EXPECT_FALSE(finished->has_value());  // every finished job
  auto none = ParsePurge(R"({"jobs": []})");
  ASSERT_TRUE(none.has_value());
  ASSERT_TRUE(none->has_value());
  EXPECT_TRUE((*none)->empty());
}

TEST(JsonViewTest, SkippedInterruptedAndTheNewSledErrorsAreShown) {
  rack::JobStatus skipped;
  skipped.state = rack::JobState::kSkipped;
  skipped.skip_reason = rack::SkipReason::kAlreadyExecuted;
  skipped.detail = "passed in an earlier life";
  json j = StatusToJson(skipped);
  EXPECT_EQ(j["state"], "Skipped");
  EXPECT_EQ(j["terminal"], true);
  EXPECT_EQ(j["skip_reason"], "already executed");
  EXPECT_EQ(j["detail"], "passed in an earlier life");
  EXPECT_FALSE(j.contains("exit"));
  rack::JobStatus interrupted;
  interrupted.state = rack::JobState::kInterrupted;
  j = StatusToJson(interrupted);
  EXPECT_EQ(j["state"], "Interrupted");
  EXPECT_EQ(j["terminal"], true);

  rack::SledError dropped{kBoard, rack::SledErrorKind::kUniverseDropped, {}, {}, {}, 4, "gone"};
  dropped.first.bytes.fill(1);
  j = SledErrorToJson(dropped);
  EXPECT_EQ(j["kind"], "UniverseDropped");
  EXPECT_EQ(j["session"], dropped.first.ToString());
  EXPECT_EQ(j["count"], 4);
  rack::SledError hop{kBoard, rack::SledErrorKind::kSessionHop, {}, dropped.first, {}, 0, "hop"};
  j = SledErrorToJson(hop);
  EXPECT_EQ(j["kind"], "SessionHop");
  EXPECT_EQ(j["first"], nullptr);
  EXPECT_EQ(j["second"], dropped.first.ToString());
  for (auto kind : {rack::SledErrorKind::kUniverseFlipFlop, rack::SledErrorKind::kUntrusted,
                    rack::SledErrorKind::kBoundaryReset}) {
    j = SledErrorToJson(rack::SledError{kBoard, kind, {}, {}, {}, 0, "m"});
    EXPECT_EQ(j["kind"], std::string(rack::SledErrorKindName(kind)));
    EXPECT_FALSE(j.contains("first"));
  }
}

TEST(JsonViewTest, TheFilterFillGivesItsEstimatedFalsePositiveRate) {
  rack::BoundaryRecord record;
  SeededRng rng(5);
  for (size_t i = 0; i < rack::kNetworkFilterCapacity; ++i) {
    record.evicted.Insert(gossip::NetworkId::Random(rng));
  }
  json j = BoundaryRecordToJson(record);
  const double fill = j["filter"]["bits_set"].get<double>() / rack::kNetworkFilterBits;
  EXPECT_GT(fill, 0.1);
  EXPECT_NEAR(j["filter"]["false_positive_rate"].get<double>(),
              std::pow(fill, rack::kNetworkFilterProbes), 1e-12);
  EXPECT_LE(j["filter"]["false_positive_rate"].get<double>(), rack::kNetworkFilterFalsePositiveMax);
  EXPECT_EQ(j["bytes"], rack::EncodeBoundary(record)->size());
}

}  // namespace
}  // namespace once::sush_net
