#include "once/rack/messages.h"

#include <gtest/gtest.h>

#include <map>

#include "once/base/rng.h"
#include "once/fuzz_corpus/seeds.h"
#include "once/rack/chain.h"
#include "once/rack/target.h"

namespace once::rack {
namespace {

template <class Id>
Id MakeId(uint8_t fill) {
  Id id;
  id.bytes.fill(fill);
  return id;
}

class MessagesTest : public ::testing::Test {
 protected:
  SeededRng rng_{42};
  KeyPair support_ = KeyPair::Generate(rng_);
  KeyPair stranger_ = KeyPair::Generate(rng_);
  TrustedKeys trusted_;
  void SetUp() override { ASSERT_TRUE(trusted_.Add(support_.public_key).has_value()); }
};

std::vector<Message> Samples() {
  JobStopped stopped{"913-0000019:BRM1", MakeId<JobId>(3),
                     ExitOutcome{ExitOutcome::Kind::kSignaled, 9, ""},
                     OutputSummary{12, Digest256{1, 2, 3}}, OutputSummary{0, Digest256{}}};
  return {JobStarted{"913-0000019:BRM1", MakeId<JobId>(1)},
          stopped,
          JobCancelled{"b", MakeId<JobId>(4)},
          JobError{"b", MakeId<JobId>(5), ErrorCode::kPermissionDenied, "unknown key"},
          SledError{"b", SledErrorKind::kConcurrentSessions, MakeId<SessionId>(6),
                    MakeId<SessionId>(7), Nonce{}, 0, "concurrent sessions"},
          SledError{"b", SledErrorKind::kSessionHop, MakeId<SessionId>(6), MakeId<SessionId>(7),
                    MakeId<Nonce>(8), 0, "hop"},
          SledError{"b", SledErrorKind::kUniverseDropped, MakeId<SessionId>(6), SessionId{},
                    Nonce{}, 12, "dropped"},
          VersionAnnouncement{"b", 17, "once 0.1"},
          JobSkipped{"b", MakeId<JobId>(9), SkipReason::kAlreadyExecuted, "passed before"},
          JobInterrupted{"b", MakeId<JobId>(10)},
          LifeMarker{"b", MakeId<Nonce>(11)}};
}

TEST_F(MessagesTest, EveryMessageRoundTrips) {
  std::vector<Message> messages = Samples();
  std::vector<RequestPayload> payloads = {
      SessionStart{"913-0000019:BRM1", MakeId<Nonce>(1), MakeId<Nonce>(2)},
      SessionStop{MakeId<SessionId>(3)},
      SessionSkip{MakeId<SessionId>(3), MakeId<JobId>(4)},
      JobStart{MakeId<JobId>(5), MakeId<SessionId>(3), "uptime", "0,1", true},
      JobStop{MakeId<JobId>(5)},
      SledReset{"913-0000019:BRM1", MakeId<Nonce>(6)}};
  for (const auto& payload : payloads) {
    auto signed_request = Sign(payload, support_);
    ASSERT_TRUE(signed_request.has_value());
    messages.push_back(*signed_request);
  }
  for (const auto& message : messages) {
    auto bytes = Encode(message);
    ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
    auto back = Decode(*bytes);
    ASSERT_TRUE(back.has_value()) << back.error().ToString();
    EXPECT_EQ(*back, message);
    // Every strict prefix is refused as malformed, never a crash.
    for (size_t cut = 0; cut < bytes->size(); ++cut) {
      auto truncated = Decode(std::span<const uint8_t>(bytes->data(), cut));
      ASSERT_FALSE(truncated.has_value());
      EXPECT_EQ(truncated.error().code, ErrorCode::kInvalidArgument);
    }
    Bytes trailing = *bytes;
    trailing.push_back(0);
    EXPECT_FALSE(Decode(trailing).has_value());
  }
}

// The seed corpus of rack_messages_fuzz (fuzz/corpus): every message kind,
// the requests signed by the fixture's key (the fuzzer trusts the same one),
// and each request payload alone.
TEST_F(MessagesTest, FuzzSeedsAreCurrentEncodings) {
  std::map<std::string, std::string> seeds;
  const char* event_names[] = {"job-started",   "job-stopped",     "job-cancelled",   "job-error",
                               "sled-error-cs", "sled-error-hop",  "sled-error-drop", "version",
                               "job-skipped",   "job-interrupted", "life-marker"};
  std::vector<Message> samples = Samples();
  ASSERT_EQ(samples.size(), std::size(event_names));
  for (size_t i = 0; i < samples.size(); ++i) {
    seeds[event_names[i]] = fuzz_corpus::AsString(*Encode(samples[i]));
  }
  const std::pair<const char*, RequestPayload> payloads[] = {
      {"session-start", SessionStart{"913-0000019:BRM1", MakeId<Nonce>(1), MakeId<Nonce>(2)}},
      {"session-stop", SessionStop{MakeId<SessionId>(3)}},
      {"session-skip", SessionSkip{MakeId<SessionId>(3), MakeId<JobId>(4)}},
      {"job-start", JobStart{MakeId<JobId>(5), MakeId<SessionId>(3), "uptime", "0,1", true}},
      {"job-stop", JobStop{MakeId<JobId>(5)}},
      {"sled-reset", SledReset{"913-0000019:BRM1", MakeId<Nonce>(6)}}};
  for (const auto& [name, payload] : payloads) {
    auto request = Sign(payload, support_);
    ASSERT_TRUE(request.has_value());
    seeds[std::string("request-") + name] = fuzz_corpus::AsString(*Encode(Message{*request}));
    seeds[std::string("payload-") + name] = fuzz_corpus::AsString(request->payload_bytes);
  }
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/rack_messages_fuzz", seeds);
}

TEST_F(MessagesTest, HostileBytesGiveTypedErrors) {
  SeededRng rng(9);
  for (int round = 0; round < 20000; ++round) {
    Bytes bytes(rng.Below(64));
    rng.Fill(bytes.data(), bytes.size());
    if (!bytes.empty() && rng.Below(2) == 0) bytes[0] = kMessageFormat;
    if (bytes.size() > 1 && rng.Below(2) == 0) bytes[1] = static_cast<uint8_t>(1 + rng.Below(21));
    auto r = Decode(bytes);
    if (!r) {
      EXPECT_TRUE(r.error().code == ErrorCode::kInvalidArgument ||
                  r.error().code == ErrorCode::kLimitExceeded);
    }
  }
  // Flipping any byte of a valid message decodes or fails with a typed error.
  auto good = Encode(Samples()[1]);
  ASSERT_TRUE(good.has_value());
  for (size_t i = 0; i < good->size(); ++i) {
    for (uint8_t v : {0x00, 0x02, 0x7f, 0xff}) {
      Bytes bad = *good;
      bad[i] = v;
      auto r = Decode(bad);
      if (!r) {
        EXPECT_NE(r.error().code, ErrorCode::kInternal);
      }
    }
  }
}

TEST_F(MessagesTest, UnknownFormatAndKindAreRefused) {
  auto bytes = Encode(Samples()[0]);
  ASSERT_TRUE(bytes.has_value());
  Bytes wrong_format = *bytes;
  wrong_format[0] = kMessageFormat + 1;
  auto r = Decode(wrong_format);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("format"), std::string::npos);
  Bytes wrong_kind = *bytes;
  wrong_kind[1] = 99;
  r = Decode(wrong_kind);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("kind"), std::string::npos);
}

TEST_F(MessagesTest, LimitsAreNamedAndEnforcedBothWays) {
  JobStart job{MakeId<JobId>(1), MakeId<SessionId>(2), std::string(kCommandBytesMax + 1, 'x'), "*",
               false};
  auto encoded = EncodePayload(job);
  ASSERT_FALSE(encoded.has_value());
  EXPECT_EQ(encoded.error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(encoded.error().As<LimitDetail>()->limit, "command_bytes_max");

  // A hand-made payload claiming a huge command is refused before reading it.
  Bytes payload = {kPayloadFormat, 4};
  payload.insert(payload.end(), 22, 0);
  payload.insert(payload.end(), {0x7f, 0xff, 0xff, 0xff});
  auto decoded = DecodePayload(payload);
  ASSERT_FALSE(decoded.has_value());
  EXPECT_EQ(decoded.error().As<LimitDetail>()->limit, "command_bytes_max");

  Bytes huge(kMessageBytesMax + 1, 0);
  auto message = Decode(huge);
  ASSERT_FALSE(message.has_value());
  EXPECT_EQ(message.error().As<LimitDetail>()->limit, "message_bytes_max");

  EXPECT_EQ(Encode(JobError{std::string(kBaseboardBytesMax + 1, 'b'), MakeId<JobId>(1),
                            ErrorCode::kInternal, ""})
                .error()
                .code,
            ErrorCode::kLimitExceeded);
}

TEST_F(MessagesTest, VerifyAcceptsTrustedAndRefusesTheRest) {
  JobStart job{MakeId<JobId>(1), MakeId<SessionId>(2), "true", "*", false};
  auto good = Sign(job, support_);
  ASSERT_TRUE(good.has_value());
  auto payload = Verify(*good, trusted_);
  ASSERT_TRUE(payload.has_value());
  EXPECT_EQ(std::get<JobStart>(*payload), job);

  auto unknown = Sign(job, stranger_);
  auto r = Verify(*unknown, trusted_);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(r.error().message, "unknown key");

  SignedRequest forged = *good;
  forged.signature[5] ^= 1;
  r = Verify(forged, trusted_);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "bad signature");

  // A stranger's signature presented under the trusted key's id.
  SignedRequest impostor = *unknown;
  impostor.key_id = support_.id();
  EXPECT_EQ(Verify(impostor, trusted_).error().message, "bad signature");

  // The payload was changed after signing (bytes re-encoded to match).
  SignedRequest tampered = *good;
  std::get<JobStart>(tampered.payload).command = "rm -rf /";
  tampered.payload_bytes = *EncodePayload(tampered.payload);
  EXPECT_EQ(Verify(tampered, trusted_).error().message, "bad signature");
}

TEST_F(MessagesTest, KeyIdsAndTrustedListLimit) {
  EXPECT_EQ(support_.id(), KeyIdOf(support_.public_key));
  EXPECT_NE(support_.id(), stranger_.id());
  EXPECT_EQ(trusted_.Find(stranger_.id()), nullptr);
  ASSERT_TRUE(trusted_.Add(support_.public_key).has_value());  // twice is a no-op
  EXPECT_EQ(trusted_.size(), 1u);
  TrustedKeys full;
  for (size_t i = 0; i < kTrustedKeysMax; ++i) {
    ASSERT_TRUE(full.Add(KeyPair::Generate(rng_).public_key).has_value());
  }
  auto r = full.Add(support_.public_key);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().As<LimitDetail>()->limit, "trusted_keys_max");
}

TEST(ChainTest, LinksAreDomainSeparatedAndDeterministic) {
  SessionId session = MakeId<SessionId>(9);
  JobId first = FirstJobId(session);
  EXPECT_EQ(first, FirstJobId(session));
  EXPECT_NE(first, FirstJobId(MakeId<SessionId>(8)));
  // The same 11 bytes under different tags give different links.
  JobId as_job{session.bytes};
  EXPECT_NE(first, NextJobIdAfterBurned(as_job));
  Digest256 digest{};
  std::copy(session.bytes.begin(), session.bytes.end(), digest.begin());
  EXPECT_NE(NextJobId(digest), NextJobIdAfterBurned(as_job));
  // Known vector: BLAKE2b-256("None" || 11 zero bytes), low 88 bits.
  EXPECT_EQ(FirstJobId(SessionId{}),
            JobId::FromDigest(Blake2b256({AsBytes("None"), SessionId{}.bytes})));
}

TEST(ChainTest, SessionIdsBindBaseboardAndBothNonces) {
  Nonce a = MakeId<Nonce>(1), b = MakeId<Nonce>(2);
  SessionId id = DeriveSessionId("p:s1", a, b);
  EXPECT_EQ(id, DeriveSessionId("p:s1", a, b));
  EXPECT_NE(id, DeriveSessionId("p:s2", a, b));
  EXPECT_NE(id, DeriveSessionId("p:s1", b, a));
  EXPECT_NE(id, DeriveSessionId("p:s1", a, a));
  // Length-prefixed: moving a byte between baseboard and nonce changes the id.
  EXPECT_NE(DeriveSessionId("p:s1", a, b), DeriveSessionId("p:s", a, b));
}

TEST(IdsTest, CodephraseRoundTrip) {
  JobId id = MakeId<JobId>(0xab);
  auto back = JobId::Parse(id.ToString());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, id);
  EXPECT_EQ(JobId{}.ToString(), "abandon-abandon-abandon-abandon-abandon-abandon-abandon-abandon");
  EXPECT_FALSE(JobId::Parse("abandon").has_value());
}

TEST(TargetTest, ParsesAndMatches) {
  SledIdentity sled{"913-0000019:BRM23230010", 3};
  EXPECT_TRUE(Target::Parse("*")->Matches(sled));
  EXPECT_TRUE(Target::Parse("3")->Matches(sled));
  EXPECT_TRUE(Target::Parse("1, 3 ,7")->Matches(sled));
  EXPECT_FALSE(Target::Parse("1,7")->Matches(sled));
  EXPECT_TRUE(Target::Parse("BRM23230010")->Matches(sled));
  EXPECT_TRUE(Target::Parse("0,913-0000019:BRM23230010")->Matches(sled));
  EXPECT_FALSE(Target::Parse("913-0000019")->Matches(sled));
  EXPECT_FALSE(Target::Parse("3")->Matches(SledIdentity{"x:y", std::nullopt}));
  EXPECT_EQ(Target::Parse("32").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Target::Parse("").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Target::Parse("1,,2").error().code, ErrorCode::kInvalidArgument);
  std::string many;
  for (size_t i = 0; i <= kTargetItemsMax; ++i) many += (i ? ",1" : "1");
  EXPECT_EQ(Target::Parse(many).error().As<LimitDetail>()->limit, "target_items_max");
  EXPECT_EQ(Target::Parse(std::string(kTargetBytesMax + 1, 'a')).error().As<LimitDetail>()->limit,
            "target_bytes_max");
}

}  // namespace
}  // namespace once::rack
