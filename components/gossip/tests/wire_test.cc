// Malformed and hostile frames: typed errors, never a crash, and the honest
// replica unchanged.

#include "wire.h"

#include <gtest/gtest.h>

#include <functional>
#include <utility>

#include "harness.h"
#include "once/base/varint.h"

namespace once::gossip {
namespace {

using testing::MakeUniverse;
using testing::Payload;

Result<wire::Frame> ReadFrame(Stream& s) {
  uint8_t header[4];
  ONCE_RETURN_IF_ERROR(s.Read(header, DeadlineIn(std::chrono::seconds(5))));
  const uint32_t size =
      uint32_t{header[0]} << 24 | uint32_t{header[1]} << 16 | uint32_t{header[2]} << 8 | header[3];
  Bytes body(size);
  ONCE_RETURN_IF_ERROR(s.Read(body, DeadlineIn(std::chrono::seconds(5))));
  return wire::Decode(body);
}

// Runs an honest initiator against a responder that answers its greeting
// with `craft(greeting)` raw bytes.
Error AgainstHostile(Host& honest, const std::function<Bytes(const wire::Frame&)>& craft) {
  auto [sa, sb] = MakePipe();
  std::thread hostile([&, &sb = sb] {
    auto hello = ReadFrame(*sb);
    ASSERT_TRUE(hello);
    const Bytes bytes = craft(*hello);
    (void)sb->Write(bytes, DeadlineIn(std::chrono::seconds(5)));
  });
  const Snapshot before = honest.Snap();
  auto r = Initiate(*sa, honest, Mode::kSync, {}, DeadlineIn(std::chrono::seconds(3)));
  hostile.join();
  EXPECT_TRUE(SameState(before, honest.Snap()));
  EXPECT_FALSE(r);
  return r ? Error{} : r.error();
}

wire::Hello HelloLike(const wire::Frame& theirs, itc::Version ceiling, Summary root) {
  wire::Hello h;
  h.mode = theirs.hello.mode;
  h.network = theirs.hello.network;
  h.ceiling = std::move(ceiling);
  h.root = root;
  return h;
}

internal::LeafRef LeafOf(const itc::Version& v, Path path) {
  return internal::MakeLeaf(path, v, Payload("evil"));
}

class HostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hosts_ = MakeUniverse(rng_, 2);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(hosts_[0]->Send(Payload(std::to_string(i))));
    // The hostile side's own legitimate event, to ship.
    evil_version_ = *hosts_[1]->Send(Payload("evil"));
  }
  SeededRng rng_{31};
  std::vector<std::unique_ptr<Host>> hosts_;
  itc::Version evil_version_;
};

TEST_F(HostileTest, OversizedFrameIsALimitError) {
  Error e = AgainstHostile(*hosts_[0],
                           [](const wire::Frame&) { return Bytes{0x7f, 0xff, 0xff, 0xff, 1, 1}; });
  EXPECT_EQ(e.code, ErrorCode::kLimitExceeded);
  ASSERT_NE(e.As<LimitDetail>(), nullptr);
  EXPECT_EQ(e.As<LimitDetail>()->limit, "frame_bytes_max");
}

TEST_F(HostileTest, OtherProtocolVersionIsUnsupported) {
  Error e = AgainstHostile(*hosts_[0], [](const wire::Frame&) { return Bytes{0, 0, 0, 2, 9, 1}; });
  EXPECT_EQ(e.code, ErrorCode::kUnsupported);
}

TEST_F(HostileTest, TruncatedGreetingIsMalformed) {
  Error e = AgainstHostile(*hosts_[0], [](const wire::Frame&) {
    return Bytes{0, 0, 0, 5, wire::kProtocolVersion, 1, 1, 0, 7};
  });
  EXPECT_EQ(e.code, ErrorCode::kInvalidArgument);
}

TEST_F(HostileTest, PathThatIsNotTheHashOfItsVersion) {
  Error e = AgainstHostile(*hosts_[0], [&](const wire::Frame& f) {
    Path wrong{};
    wrong[0] = 1;
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(HelloLike(f, evil_version_, Summary{wrong, 1}));
    fb.AddMessage(*LeafOf(evil_version_, wrong));
    return fb.Finish(false);
  });
  EXPECT_EQ(e.code, ErrorCode::kCorruption);
  EXPECT_NE(e.message.find("hash"), std::string::npos) << e.message;
}

TEST_F(HostileTest, VersionAboveTheSendersCeiling) {
  Error e = AgainstHostile(*hosts_[0], [&](const wire::Frame& f) {
    const Path path = PathOf(evil_version_);
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(HelloLike(f, itc::Version{}, Summary{path, 1}));
    fb.AddMessage(*LeafOf(evil_version_, path));
    return fb.Finish(false);
  });
  EXPECT_EQ(e.code, ErrorCode::kCorruption);
  EXPECT_NE(e.message.find("ceiling"), std::string::npos) << e.message;
}

TEST_F(HostileTest, MoreMessagesThanTheDeclaredSetSize) {
  Error e = AgainstHostile(*hosts_[0], [&](const wire::Frame& f) {
    const Path path = PathOf(evil_version_);
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(HelloLike(f, evil_version_, Summary{}));
    fb.AddMessage(*LeafOf(evil_version_, path));
    return fb.Finish(false);
  });
  EXPECT_EQ(e.code, ErrorCode::kCorruption);
  EXPECT_NE(e.message.find("declared"), std::string::npos) << e.message;
}

TEST_F(HostileTest, RecordForANodeNotInDispute) {
  Error e = AgainstHostile(*hosts_[0], [&](const wire::Frame& f) {
    wire::Record rec;
    rec.key.depth = 3;
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(HelloLike(f, evil_version_, Summary{PathOf(evil_version_), 1}));
    fb.AddRecord(rec);
    return fb.Finish(false);
  });
  EXPECT_EQ(e.code, ErrorCode::kCorruption);
}

TEST_F(HostileTest, RecordThatDoesNotAddUp) {
  Error e = AgainstHostile(*hosts_[0], [&](const wire::Frame& f) {
    wire::Record rec;  // the root, claiming two children
    rec.present = 0b11;
    rec.children[0] = Summary{Path{}, 5};
    rec.children[1] = Summary{Path{}, 5};
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(HelloLike(f, evil_version_, Summary{PathOf(evil_version_), 1}));
    fb.AddRecord(rec);
    return fb.Finish(false);
  });
  EXPECT_EQ(e.code, ErrorCode::kCorruption);
  EXPECT_NE(e.message.find("add up"), std::string::npos) << e.message;
}

TEST_F(HostileTest, ListingWhereChildrenAreDue) {
  Error e = AgainstHostile(*hosts_[0], [&](const wire::Frame& f) {
    wire::Record rec;  // the root is never listed
    rec.listing = true;
    rec.fingerprints = {wire::ListingKey(PathOf(evil_version_), 0)};
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(HelloLike(f, evil_version_, Summary{PathOf(evil_version_), 1}));
    fb.AddRecord(rec);
    return fb.Finish(false);
  });
  EXPECT_EQ(e.code, ErrorCode::kCorruption);
  EXPECT_NE(e.message.find("wrong form"), std::string::npos) << e.message;
}

TEST_F(HostileTest, LackingListingForANodeNotInDispute) {
  Error e = AgainstHostile(*hosts_[0], [&](const wire::Frame& f) {
    wire::Record rec;
    rec.key = wire::NodeKey{}.Child(1);
    rec.listing = rec.lacking = true;
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(HelloLike(f, evil_version_, Summary{PathOf(evil_version_), 1}));
    fb.AddRecord(rec);
    return fb.Finish(false);
  });
  EXPECT_EQ(e.code, ErrorCode::kCorruption);
}

TEST_F(HostileTest, EndingWithNodesInDispute) {
  Error e = AgainstHostile(*hosts_[0], [&](const wire::Frame& f) {
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(HelloLike(f, evil_version_, Summary{PathOf(evil_version_), 1}));
    Bytes hello = fb.Finish(true);  // claims idle without replying to the root
    Bytes idle = wire::FrameBuilder(wire::Kind::kData, kFrameBytesMax).Finish(true);
    hello.insert(hello.end(), idle.begin(), idle.end());
    return hello;
  });
  EXPECT_EQ(e.code, ErrorCode::kCorruption);
}

TEST(WireTest, ChildSummariesReadZeroUntilSetAndCopyByValue) {
  wire::Record rec;
  EXPECT_EQ(std::as_const(rec).children[5], Summary{});  // nothing made to read it
  rec.children[5] = Summary{Path{7}, 3};
  wire::Record copy = rec;
  copy.children[5].count = 4;
  copy.unseen[1] = Summary{Path{1}, 1};
  EXPECT_EQ(rec.children[5], (Summary{Path{7}, 3}));
  EXPECT_EQ(std::as_const(rec).unseen[1], Summary{});
  rec = copy;
  EXPECT_EQ(rec.children[5].count, 4u);
  EXPECT_EQ(rec.unseen[1], (Summary{Path{1}, 1}));
  wire::Record moved = std::move(copy);
  EXPECT_EQ(moved.children[5].count, 4u);
}

TEST(WireTest, DecodeRejectsLiesAboutCounts) {
  // kData, not idle, 200 records declared, nothing follows.
  const Bytes body{wire::kProtocolVersion, 2, 0, 200, 1, 0};
  auto f = wire::Decode(body);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument);
  const Bytes trailing{wire::kProtocolVersion, 4, 0};
  EXPECT_EQ(wire::Decode(trailing).error().code, ErrorCode::kInvalidArgument);
  const Bytes overlong{wire::kProtocolVersion, 2, 0, 0x80, 0x00, 0};
  EXPECT_EQ(wire::Decode(overlong).error().code, ErrorCode::kInvalidArgument);
}

TEST(WireTest, RoundTripsAFrame) {
  SeededRng rng(41);
  Replica r = Replica::Seed(rng);
  auto v = *r.Send(Payload("p"));
  wire::Hello h;
  h.mode = Mode::kBootstrap;
  h.network = r.network();
  h.ceiling = r.ceiling();
  h.root = r.Snap().summary();
  h.party = itc::Party::Seed().Encode();
  wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
  fb.PutHello(h);
  wire::Record rec;
  rec.key = wire::NodeKey{}.Child(5).Child(9);
  rec.present = 1 << 7;
  rec.children[7] = Summary{PathOf(v), 1};
  ASSERT_TRUE(fb.AddRecord(rec));
  ASSERT_TRUE(fb.AddMessage(*internal::MakeLeaf(PathOf(v), v, Payload("p"))));
  const Bytes bytes = fb.Finish(false);
  auto f = wire::Decode(std::span(bytes).subspan(4));
  ASSERT_TRUE(f) << f.error().ToString();
  EXPECT_EQ(f->hello.network, r.network());
  EXPECT_EQ(f->hello.ceiling, r.ceiling());
  EXPECT_EQ(f->hello.root, h.root);
  EXPECT_EQ(f->hello.party, h.party);
  ASSERT_EQ(f->data.records.size(), 1u);
  EXPECT_EQ(f->data.records[0].key, rec.key);
  EXPECT_EQ(f->data.records[0].children[7], rec.children[7]);
  ASSERT_EQ(f->data.messages.size(), 1u);
  EXPECT_EQ(f->data.messages[0]->version, v);
  const std::span<const uint8_t> payload = f->data.messages[0]->payload();
  EXPECT_EQ(Bytes(payload.begin(), payload.end()), Payload("p"));
}

TEST(WireTest, BoundedRecordsRoundTripAndRejectUnseenOutsideTheChild) {
  wire::Record rec;
  rec.key = wire::NodeKey{}.Child(3);
  rec.bounded = true;
  rec.present = (1 << 2) | (1 << 11);
  rec.children[2] = Summary{Path{1}, 5};
  rec.children[11] = Summary{Path{2}, 1};
  rec.unseen[2] = Summary{Path{3}, 2};
  wire::FrameBuilder fb(wire::Kind::kData, kFrameBytesMax);
  ASSERT_TRUE(fb.AddRecord(rec));
  const Bytes bytes = fb.Finish(false);
  auto f = wire::Decode(std::span(bytes).subspan(4));
  ASSERT_TRUE(f) << f.error().ToString();
  ASSERT_EQ(f->data.records.size(), 1u);
  const wire::Record& got = f->data.records[0];
  EXPECT_TRUE(got.bounded);
  EXPECT_EQ(got.key, rec.key);
  EXPECT_EQ(got.unseen[2], rec.unseen[2]);
  EXPECT_EQ(got.unseen[11].count, 0u);
  EXPECT_EQ(got.Seen(2).count, 3u);
  EXPECT_EQ(got.Seen(11), rec.children[11]);

  // An unseen part larger than its child, or of an absent child, is refused.
  for (auto mutate : {+[](wire::Record& r) {
                        r.unseen[11] = Summary{Path{4}, 2};
                      },
                      +[](wire::Record& r) {
                        r.unseen[11] = Summary{Path{4}, 1}, r.present &= ~(1 << 11);
                      }}) {
    wire::Record bad = rec;
    mutate(bad);
    // Encode by hand what the builder would refuse to describe honestly.
    wire::FrameBuilder b(wire::Kind::kData, kFrameBytesMax);
    ASSERT_TRUE(b.AddRecord(bad));
    const Bytes raw = b.Finish(false);
    auto d = wire::Decode(std::span(raw).subspan(4));
    if (bad.Has(11)) {
      ASSERT_FALSE(d);
      EXPECT_EQ(d.error().code, ErrorCode::kInvalidArgument);
    } else {
      ASSERT_TRUE(d);  // the builder drops unseen parts of absent children
      EXPECT_EQ(d->data.records[0].unseen[11].count, 0u);
    }
  }
}

TEST(WireTest, ListingRecordsRoundTripAndRejectWhatIsNotCanonical) {
  wire::Record rec;
  rec.key = wire::NodeKey{}.Child(3).Child(12).Child(1);
  rec.listing = true;
  rec.fingerprints = {7, 7, 0x0102030405060708ULL, UINT64_MAX};
  wire::FrameBuilder fb(wire::Kind::kData, kFrameBytesMax);
  ASSERT_TRUE(fb.AddRecord(rec));
  const Bytes bytes = fb.Finish(false);
  auto f = wire::Decode(std::span(bytes).subspan(4));
  ASSERT_TRUE(f) << f.error().ToString();
  ASSERT_EQ(f->data.records.size(), 1u);
  EXPECT_TRUE(f->data.records[0].listing);
  EXPECT_FALSE(f->data.records[0].bounded);
  EXPECT_EQ(f->data.records[0].key, rec.key);
  EXPECT_EQ(f->data.records[0].fingerprints, rec.fingerprints);

  // At the limit it decodes; past it, out of order or empty, it is malformed
  // (a lacking listing may be empty).
  std::vector<uint64_t> full(wire::kListingLeavesMax);
  for (size_t i = 0; i < full.size(); ++i) full[i] = i;
  std::vector<uint64_t> over = full;
  over.push_back(full.size());
  const std::vector<std::pair<std::vector<uint64_t>, bool>> cases = {
      {full, true}, {over, false}, {{9, 8}, false}, {{}, false}};
  for (const auto& [fps, ok] : cases) {
    wire::Record r = rec;
    r.fingerprints.assign(fps.begin(), fps.end());
    wire::FrameBuilder b(wire::Kind::kData, kFrameBytesMax);
    ASSERT_TRUE(b.AddRecord(r));
    const Bytes raw = b.Finish(false);
    auto d = wire::Decode(std::span(raw).subspan(4));
    EXPECT_EQ(d.has_value(), ok) << fps.size();
    if (!ok && !d) {
      EXPECT_EQ(d.error().code, ErrorCode::kInvalidArgument);
    }
  }
  for (const auto& [fps, ok] : std::vector<std::pair<std::vector<uint64_t>, bool>>{
           {{}, true}, {full, true}, {over, false}, {{3, 1}, false}}) {
    wire::Record r = rec;
    r.lacking = true;
    r.fingerprints.assign(fps.begin(), fps.end());
    wire::FrameBuilder b(wire::Kind::kData, kFrameBytesMax);
    ASSERT_TRUE(b.AddRecord(r));
    const Bytes raw = b.Finish(false);
    auto d = wire::Decode(std::span(raw).subspan(4));
    ASSERT_EQ(d.has_value(), ok) << fps.size();
    if (ok) {
      EXPECT_TRUE(d->data.records[0].lacking);
      const auto& got = d->data.records[0].fingerprints;
      EXPECT_EQ(std::vector<uint64_t>(got.begin(), got.end()), fps);
    }
  }
}

// The builder writes records in place, after a record count whose varint
// widens at 128 and 16,384 records (the records so far move up a byte):
// frames on both sides of each width decode to the records and message put
// in, and take exactly the bytes the format says.
TEST(WireTest, FramesRoundTripOnBothSidesOfEachRecordCountWidth) {
  SeededRng rng(43);
  Replica r = Replica::Seed(rng);
  const itc::Version v = *r.Send(Payload("m"));
  const internal::LeafRef message = internal::MakeLeaf(PathOf(v), v, Payload("m"));
  // A lacking listing of nothing at depth 4: its head byte, two prefix bytes
  // and a count of 0.
  constexpr size_t kRecordBytes = 1 + 2 + 1;
  auto key_of = [](size_t i) {
    wire::NodeKey key;
    for (int d = 0; d < 4; ++d) key = key.Child(static_cast<int>((i >> (4 * (3 - d))) & 0xf));
    return key;
  };
  for (size_t n : {0, 1, 127, 128, 129, 16383, 16384, 16385}) {
    for (bool message_first : {false, true}) {
      wire::FrameBuilder fb(wire::Kind::kData, kFrameBytesMax);
      if (message_first) {
        ASSERT_TRUE(fb.AddMessage(*message));
      }
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(fb.AddListing(key_of(i), /*lacking=*/true, std::span<const uint64_t>{}));
        if (i == 0 && !message_first) {
          ASSERT_TRUE(fb.AddMessage(*message));
        }
      }
      const bool with_message = message_first || n > 0;
      const Bytes bytes = fb.Finish(false);
      const size_t message_bytes = with_message ? sizeof(Path) + 1 + v.Encode().size() + 1 + 1 : 0;
      EXPECT_EQ(bytes.size(), wire::kFrameHeaderBytes + 2 + 1 + VarintBytes(n) + n * kRecordBytes +
                                  1 + message_bytes)
          << n;
      auto f = wire::Decode(std::span(bytes).subspan(wire::kFrameHeaderBytes));
      ASSERT_TRUE(f) << n << ": " << f.error().ToString();
      EXPECT_FALSE(f->data.idle);
      ASSERT_EQ(f->data.records.size(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(f->data.records[i].key, key_of(i)) << n << " " << i;
        ASSERT_TRUE(f->data.records[i].lacking);
      }
      ASSERT_EQ(f->data.messages.size(), with_message ? 1u : 0u);
      if (with_message) {
        EXPECT_EQ(f->data.messages[0]->version, v);
      }
    }
  }
}

TEST(WireTest, RandomAndBitFlippedBytesNeverCrash) {
  SeededRng rng(42);
  Replica r = Replica::Seed(rng);
  wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
  wire::Hello h;
  h.network = r.network();
  fb.PutHello(h);
  for (int i = 0; i < 5; ++i) {
    auto v = *r.Send(Payload("m"));
    fb.AddMessage(*internal::MakeLeaf(PathOf(v), v, Payload("m")));
  }
  const Bytes valid = fb.Finish(false);
  const std::span<const uint8_t> body = std::span(valid).subspan(4);
  ASSERT_TRUE(wire::Decode(body));
  int rejected = 0;
  for (size_t bit = 0; bit < body.size() * 8; ++bit) {
    Bytes flipped(body.begin(), body.end());
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    rejected += wire::Decode(flipped) ? 0 : 1;
  }
  EXPECT_GT(rejected, 0);
  for (int i = 0; i < 20000; ++i) {
    Bytes junk(rng.Below(64));
    rng.Fill(junk.data(), junk.size());
    if (!junk.empty()) junk[0] = wire::kProtocolVersion;
    (void)wire::Decode(junk);
  }
  for (size_t cut = 0; cut < body.size(); ++cut) {
    EXPECT_FALSE(wire::Decode(body.subspan(0, cut))) << cut;
  }
}

}  // namespace
}  // namespace once::gossip
