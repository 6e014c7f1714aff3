// The envelope: the exact bytes of docs/locker-format.md, round trips at every
// size, and strict refusal (typed errors, never a crash) of every single-bit
// flip, every truncation, trailing bytes, another version and oversize input.

#include "once/locker/envelope.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

namespace once::locker {
namespace {

Bytes B(std::string_view text) { return Bytes(text.begin(), text.end()); }

Nonce CountingNonce() {
  Nonce n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(i);
  return n;
}

Bytes Encode(const Envelope& e) {
  auto bytes = EncodeEnvelope(e);
  EXPECT_TRUE(bytes) << bytes.error().ToString();
  return bytes ? *bytes : Bytes{};
}

// Replaces the trailing digest with the right one for the bytes before it, so
// that a test reaches the checks behind the digest.
void Redigest(Bytes& bytes) {
  ASSERT_EQ(sodium_init() >= 0, true);
  const size_t body = bytes.size() - kDigestBytes;
  crypto_generichash(bytes.data() + body, kDigestBytes, bytes.data(), body, nullptr, 0);
}

TEST(EnvelopeTest, GoldenBytesOfTheFormatDoc) {
  const Envelope e{.nonce = CountingNonce(), .sequence = 1, .record = B("boundary")};
  EXPECT_EQ(HexEncode(Encode(e)),
            "4f4c4b52"                                                            // "OLKR"
            "0001"                                                                // version 1
            "000102030405060708090a0b0c0d0e0f"                                    // nonce
            "0000000000000001"                                                    // sequence 1
            "00000008"                                                            // 8 bytes
            "626f756e64617279"                                                    // "boundary"
            "0bf81a38f9e004bc3ed43d3e3d94b8d1266b44c30d32a479f65aec001fed515a");  // BLAKE2b-256
}

TEST(EnvelopeTest, RoundTripsAtEverySize) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{255}, size_t{4096}, kRecordBytesMax}) {
    Envelope e{.nonce = CountingNonce(), .sequence = 0xfedcba9876543210ULL, .record = Bytes(size)};
    for (size_t i = 0; i < size; ++i) e.record[i] = static_cast<uint8_t>(i * 7);
    const Bytes bytes = Encode(e);
    ASSERT_EQ(bytes.size(), kEnvelopeOverheadBytes + size);
    auto back = DecodeEnvelope(bytes);
    ASSERT_TRUE(back) << back.error().ToString();
    EXPECT_EQ(*back, e);
  }
}

TEST(EnvelopeTest, EncodeRefusesARecordOverTheLimit) {
  auto bytes = EncodeEnvelope({.record = Bytes(kRecordBytesMax + 1)});
  ASSERT_FALSE(bytes);
  EXPECT_EQ(bytes.error().code, ErrorCode::kLimitExceeded);
  ASSERT_NE(bytes.error().As<LimitDetail>(), nullptr);
  EXPECT_EQ(bytes.error().As<LimitDetail>()->limit, "record_bytes_max");
}

TEST(EnvelopeTest, EverySingleBitFlipIsRefused) {
  const Bytes good = Encode({.nonce = CountingNonce(), .sequence = 9, .record = B("a record")});
  for (size_t bit = 0; bit < good.size() * 8; ++bit) {
    Bytes bad = good;
    bad[bit / 8] ^= static_cast<uint8_t>(0x80u >> (bit % 8));
    auto decoded = DecodeEnvelope(bad);
    ASSERT_FALSE(decoded) << "bit " << bit;
    EXPECT_EQ(decoded.error().code, ErrorCode::kCorruption) << "bit " << bit;
    const std::string expected = bit < 32 ? "wrong magic" : "digest mismatch";
    EXPECT_EQ(decoded.error().message, expected) << "bit " << bit;
  }
}

TEST(EnvelopeTest, EveryTruncationAndAnyTrailingByteIsRefused) {
  const Bytes good = Encode({.nonce = CountingNonce(), .sequence = 9, .record = B("a record")});
  for (size_t size = 0; size < good.size(); ++size) {
    auto decoded = DecodeEnvelope(std::span(good).first(size));
    ASSERT_FALSE(decoded) << "size " << size;
    EXPECT_EQ(decoded.error().code, ErrorCode::kCorruption) << "size " << size;
  }
  Bytes longer = good;
  longer.push_back(0);
  auto decoded = DecodeEnvelope(longer);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().code, ErrorCode::kCorruption);
}

TEST(EnvelopeTest, AnIntactDigestOverAnotherVersionIsInvalidArgument) {
  Bytes bytes = Encode({.nonce = CountingNonce(), .sequence = 1, .record = B("x")});
  bytes[5] = 2;  // version 2
  Redigest(bytes);
  auto decoded = DecodeEnvelope(bytes);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(decoded.error().message, "unknown format version 2");
}

TEST(EnvelopeTest, AnIntactDigestOverAWrongLengthIsCorruption) {
  for (uint8_t length : {uint8_t{0}, uint8_t{2}, uint8_t{255}}) {
    Bytes bytes = Encode({.nonce = CountingNonce(), .sequence = 1, .record = B("x")});
    bytes[33] = length;  // the low byte of the record length (1)
    Redigest(bytes);
    auto decoded = DecodeEnvelope(bytes);
    ASSERT_FALSE(decoded);
    EXPECT_EQ(decoded.error().code, ErrorCode::kCorruption);
    EXPECT_EQ(decoded.error().message, length == 0 ? "trailing bytes" : "truncated");
  }
}

TEST(EnvelopeTest, InputOverTheEnvelopeLimitIsRefusedBeforeHashing) {
  auto decoded = DecodeEnvelope(Bytes(kEnvelopeBytesMax + 1));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(decoded.error().As<LimitDetail>()->limit, "envelope_bytes_max");
}

// The fuzzer's seed corpus holds real encodings (and, named "refused-...", a
// few that must stay refused), so that a format change cannot leave it stale.
TEST(EnvelopeTest, TheFuzzCorpusSeedsAreCurrentEncodings) {
  size_t seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ONCE_LOCKER_CORPUS_DIR)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto decoded = DecodeEnvelope(bytes);
    const std::string name = entry.path().filename().string();
    ++seeds;
    if (name.starts_with("refused-")) {
      EXPECT_FALSE(decoded) << name;
      continue;
    }
    ASSERT_TRUE(decoded) << name << ": " << decoded.error().ToString();
    EXPECT_EQ(Encode(*decoded), bytes) << name;
  }
  EXPECT_GE(seeds, 5u);
}

}  // namespace
}  // namespace once::locker
