// The seed corpora of the gossip fuzzers (fuzz/corpus), made by the real
// encoders: bookmarks of real replicas, and frame bodies of every kind
// (data frames with real messages and every kind of record).

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "digest_tree.h"
#include "harness.h"
#include "once/base/rng.h"
#include "once/fuzz_corpus/seeds.h"
#include "once/gossip/bookmark.h"
#include "wire.h"

namespace once::gossip {
namespace {

using fuzz_corpus::AsString;
using testing::Payload;

TEST(FuzzSeeds, BookmarksOfRealReplicas) {
  SeededRng rng(61);
  Replica seed = Replica::Seed(rng);
  std::map<std::string, std::string> seeds;
  seeds["fresh-seed"] = AsString(EncodeBookmark(seed.MakeBookmark()));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(seed.Send(Payload("m" + std::to_string(i))));
  seeds["seed-after-sends"] = AsString(EncodeBookmark(seed.MakeBookmark()));
  auto half = seed.ForkParty();
  ASSERT_TRUE(half);
  Replica forked = Replica::Fresh(seed.network(), std::move(*half));
  ASSERT_TRUE(forked.Send(Payload("f")));
  seeds["forked"] = AsString(EncodeBookmark(forked.MakeBookmark()));
  Bookmark retired = forked.MakeBookmark();
  retired.party.reset();
  seeds["retired"] = AsString(EncodeBookmark(retired));
  for (const auto& [name, bytes] : seeds) {
    ASSERT_TRUE(DecodeBookmark(Bytes(bytes.begin(), bytes.end()))) << name;
  }
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/gossip_bookmark_fuzz", seeds);
}

// The body of a frame from the production encoder (without its length prefix).
std::string Body(wire::FrameBuilder& fb, bool idle = false) {
  const Bytes frame = fb.Finish(idle);
  return AsString(std::span(frame).subspan(wire::kFrameHeaderBytes));
}

TEST(FuzzSeeds, FrameBodies) {
  std::map<std::string, std::string> seeds;
  SeededRng rng(62);
  Replica replica = Replica::Seed(rng);
  {
    wire::FrameBuilder fb(wire::Kind::kAck, kFrameBytesMax);
    seeds["ack"] = Body(fb);
  }
  {
    wire::FrameBuilder fb(wire::Kind::kRefuse, kFrameBytesMax);
    fb.PutReason("another network");
    seeds["refuse"] = Body(fb);
  }
  {
    wire::FrameBuilder fb(wire::Kind::kDonate, kFrameBytesMax);
    fb.PutParty(itc::Party::Seed().Encode());
    seeds["donate"] = Body(fb);
  }
  {
    wire::FrameBuilder fb(wire::Kind::kData, kFrameBytesMax);
    seeds["data-idle"] = Body(fb, true);
  }
  std::vector<internal::LeafRef> leaves;
  for (const char* text : {"job one", "job two", "job three"}) {
    auto v = replica.Send(Payload(text));
    ASSERT_TRUE(v);
    Path path{};
    for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<uint8_t>(text[i % 7] * (i + 1));
    leaves.push_back(internal::MakeLeaf(path, *v, Payload(text)));
  }
  {
    wire::FrameBuilder fb(wire::Kind::kData, kFrameBytesMax);
    for (const auto& leaf : leaves) ASSERT_TRUE(fb.AddMessage(*leaf));
    seeds["data-messages"] = Body(fb);
  }
  {
    wire::Record root;  // the root, two children present
    for (int c : {3, 9}) {
      root.present |= static_cast<uint16_t>(1u << c);
      root.children[c] = Summary{leaves[c % 3]->path, 2};
    }
    wire::Record bounded = root;
    bounded.key = wire::NodeKey{}.Child(3);
    bounded.bounded = true;
    bounded.unseen[9] = Summary{leaves[1]->path, 1};
    wire::Record listing;
    listing.key = wire::NodeKey{}.Child(9);
    listing.listing = true;
    for (const auto& leaf : leaves)
      listing.fingerprints.push_back(internal::ListingKey(leaf->path, listing.key.depth));
    std::sort(listing.fingerprints.begin(), listing.fingerprints.end());
    wire::Record lacking = listing;
    lacking.lacking = true;
    lacking.fingerprints.resize(1);
    wire::FrameBuilder fb(wire::Kind::kData, kFrameBytesMax);
    for (const wire::Record* r : {&root, &bounded, &listing, &lacking})
      ASSERT_TRUE(fb.AddRecord(*r));
    ASSERT_TRUE(fb.AddMessage(*leaves[0]));
    seeds["data-records"] = Body(fb);
  }
  {
    wire::Hello hello;
    hello.network = replica.network();
    hello.ceiling = replica.ceiling();
    hello.root = Summary{leaves[2]->path, 3};
    wire::FrameBuilder fb(wire::Kind::kHello, kFrameBytesMax);
    fb.PutHello(hello);
    seeds["hello-sync"] = Body(fb);
    hello.mode = Mode::kBootstrap;
    hello.party = itc::Party::Seed().Encode();
    wire::FrameBuilder grant(wire::Kind::kHello, kFrameBytesMax);
    grant.PutHello(hello);
    seeds["hello-bootstrap-grant"] = Body(grant);
  }
  for (const auto& [name, body] : seeds) {
    auto decoded = wire::Decode(Bytes(body.begin(), body.end()));
    ASSERT_TRUE(decoded) << name << ": " << decoded.error().ToString();
  }
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/gossip_frame_fuzz", seeds);
}

}  // namespace
}  // namespace once::gossip
