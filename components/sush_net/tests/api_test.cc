#include "once/sush_net/api.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace once::sush_net {
namespace {

std::filesystem::path TempDir() {
  char pattern[] = "/tmp/sush-net-XXXXXX";
  EXPECT_NE(::mkdtemp(pattern), nullptr);
  return pattern;
}

TEST(AddressTest, ParsesHostPortAndUrls) {
  EXPECT_EQ(*ParseAddress("127.0.0.1:7100"), (Address{"127.0.0.1", 7100}));
  EXPECT_EQ(*ParseAddress("http://127.0.0.1:7100/"), (Address{"127.0.0.1", 7100}));
  EXPECT_FALSE(ParseAddress("127.0.0.1"));
  EXPECT_FALSE(ParseAddress("127.0.0.1:0"));
  EXPECT_FALSE(ParseAddress("127.0.0.1:70000"));
  EXPECT_FALSE(ParseAddress("127.0.0.1:7x"));
  EXPECT_EQ(*ParseAddress("sled-3.rack_a:7100"), (Address{"sled-3.rack_a", 7100}));
  EXPECT_EQ(*ParseAddress("[::1]:7100"), (Address{"[::1]", 7100}));
  EXPECT_EQ(*ParseAddress(std::string(kHostBytesMax, 'h') + ":1"),
            (Address{std::string(kHostBytesMax, 'h'), 1}));
  EXPECT_FALSE(ParseAddress(std::string(kHostBytesMax + 1, 'h') + ":1"));
}

// Found by sush_net_request_fuzz: a host is a name or an address, so that
// every address parses back from its ToString(). "http://http://x:1" was the
// host "http://x", which printed as "http://x:1" and parsed back as "x".
TEST(AddressTest, EveryAddressParsesBackFromItsText) {
  for (const char* bad : {"http://http://x:1", "a/b:1", "a b:1", "a\n:1", ":1", "\"x\":1"}) {
    EXPECT_FALSE(ParseAddress(bad)) << bad;
  }
  for (const char* good : {"127.0.0.1:7100", "http://sled-0:1/", "[::1]:65535"}) {
    auto address = ParseAddress(good);
    ASSERT_TRUE(address) << good;
    EXPECT_EQ(*ParseAddress(address->ToString()), *address) << good;
  }
}

TEST(KeyFileTest, AKeyPairRoundTripsInAPrivateFileThatIsNeverOverwritten) {
  const auto dir = TempDir();
  const rack::KeyPair keys = rack::KeyPair::GenerateFromOs();
  ASSERT_TRUE(SaveKeyPair(dir / "keys" / "op.key", "op", keys));
  struct stat st {};
  ASSERT_EQ(::stat((dir / "keys" / "op.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto back = LoadKeyPair(dir / "keys" / "op.key");
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(back->public_key, keys.public_key);
  EXPECT_EQ(back->secret_key, keys.secret_key);
  EXPECT_EQ(*LoadPublicKey(dir / "keys" / "op.key"), keys.public_key);

  auto again = SaveKeyPair(dir / "keys" / "op.key", "op", rack::KeyPair::GenerateFromOs());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(LoadKeyPair(dir / "keys" / "op.key")->public_key, keys.public_key);

  ASSERT_TRUE(SavePublicKey(dir / "op.pub", "op", keys.public_key));
  EXPECT_EQ(*LoadPublicKey(dir / "op.pub"), keys.public_key);
  EXPECT_EQ(LoadKeyPair(dir / "op.pub").error().code, ErrorCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(KeyFileTest, ASecretKeyReadableByOthersIsRefused) {
  const auto dir = TempDir();
  ASSERT_TRUE(SaveKeyPair(dir / "op.key", "op", rack::KeyPair::GenerateFromOs()));
  ASSERT_EQ(::chmod((dir / "op.key").c_str(), 0644), 0);
  auto loaded = LoadKeyPair(dir / "op.key");
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(LoadKeyPair(dir / "missing.key").error().code, ErrorCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(KeyFileTest, AnOversizedKeyFileIsALimitError) {
  const auto dir = TempDir();
  {
    std::FILE* f = std::fopen((dir / "big.key").c_str(), "w");
    std::string junk(kKeyFileBytesMax + 1, ' ');
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  auto loaded = LoadPublicKey(dir / "big.key");
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::kLimitExceeded);
  std::filesystem::remove_all(dir);
}

TEST(JsonTest, ErrorsRoundTripThroughTheirJsonAnswer) {
  Error error{ErrorCode::kPermissionDenied, "unknown key", "", {}};
  Error back = ErrorFromJson(ErrorToJson(error), 403);
  EXPECT_EQ(back.code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(back.message, "unknown key");
  EXPECT_EQ(HttpStatusOf(ErrorCode::kPermissionDenied), 403);
  EXPECT_EQ(ErrorFromJson(nlohmann::json::object(), 500).code, ErrorCode::kInternal);
  EXPECT_EQ(ErrorFromJson(nlohmann::json(), 413).code, ErrorCode::kLimitExceeded);
}

// A signed request's `at` is the client's: any int64. The window check
// compares it with the window's edges (now - at overflowed at INT64_MIN,
// undefined behaviour that UBSan reports), and a signature made inside the
// window still verifies.
TEST(SignedHttpTest, TimesAtTheInt64ExtremesAreOutsideTheWindow) {
  const rack::KeyPair keys = rack::KeyPair::GenerateFromOs();
  rack::TrustedKeys trusted;
  ASSERT_TRUE(trusted.Add(keys.public_key));
  const TimePoint now = std::chrono::system_clock::now();
  for (const char* at : {"-9223372036854775808", "9223372036854775807", "-1", "0"}) {
    const std::string header = "Sush key=" + keys.id().ToString() + ", at=" + at +
                               ", sig=" + std::string(2 * rack::Signature{}.size(), '0');
    Result<rack::KeyId> r = VerifyHttpRequest(header, trusted, "b", "POST", "/v1/x", "{}", now);
    ASSERT_FALSE(r) << at;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << at;
    EXPECT_NE(r.error().message.find("from this sled's clock"), std::string::npos)
        << r.error().message;
  }
  const std::string good = SignHttpRequest(keys, "b", "POST", "/v1/x", "{}", now);
  Result<rack::KeyId> ok = VerifyHttpRequest(good, trusted, "b", "POST", "/v1/x", "{}", now);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(*ok, keys.id());
}

// A server's error body whose members have other types than the API's is
// read as far as it goes: a typed error, never an exception.
TEST(JsonTest, AnErrorBodyOfAnotherShapeIsReadWithoutThrowing) {
  const nlohmann::json odd = {
      {"error",
       {{"message", 5}, {"code", {"PermissionDenied"}}, {"limit", {{"name", 1}, {"value", "x"}}}}}};
  Error back = ErrorFromJson(odd, 400);
  EXPECT_EQ(back.code, ErrorCode::kInternal);
  EXPECT_EQ(back.message, "");
  const nlohmann::json huge = {
      {"error",
       {{"code", "LimitExceeded"},
        {"limit", {{"name", "x"}, {"value", 18446744073709551615u}, {"max", 3}}}}}};
  back = ErrorFromJson(huge, 413);
  EXPECT_EQ(back.code, ErrorCode::kLimitExceeded);
  const auto* limit = std::get_if<LimitDetail>(&back.detail);
  ASSERT_NE(limit, nullptr);
  EXPECT_EQ(limit->value, 0);
  EXPECT_EQ(limit->max, 3);
}

TEST(JsonTest, AStoppedStatusShowsItsExitAndOutputLengths) {
  rack::JobStatus status;
  status.state = rack::JobState::kStopped;
  status.outcome = rack::ExitOutcome{rack::ExitOutcome::Kind::kSignaled, 9, ""};
  status.stdout_summary.bytes = 3;
  auto j = StatusToJson(status);
  EXPECT_EQ(j["state"], "Stopped");
  EXPECT_EQ(j["terminal"], true);
  EXPECT_EQ(j["exit"]["kind"], "signaled");
  EXPECT_EQ(j["exit"]["code"], 9);
  EXPECT_EQ(j["exit"]["signal"], "SIGKILL");
  EXPECT_EQ(j["stdout_bytes"], 3);
}

TEST(JsonTest, SignalsAreNamed) {
  EXPECT_EQ(SignalName(24), "SIGXCPU");
  EXPECT_EQ(SignalName(9), "SIGKILL");
  EXPECT_EQ(SignalName(1000), "SIG?");
}

}  // namespace
}  // namespace once::sush_net
