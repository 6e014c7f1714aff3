#include "once/gossip/replica.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "digest_tree.h"
#include "harness.h"
#include "leaf_blocks.h"
#include "once/itc/text.h"

namespace once::gossip {
namespace {

using testing::Payload;

TEST(ReplicaTest, SeedStartsEmptyWithARandomNetwork) {
  SeededRng rng(1);
  Replica a = Replica::Seed(rng);
  Replica b = Replica::Seed(rng);
  EXPECT_NE(a.network(), b.network());
  EXPECT_FALSE(a.network().bootstrapping());
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.ceiling(), itc::Version{});
  EXPECT_TRUE(a.party().has_value());
}

TEST(ReplicaTest, SendTicksAndStoresUnderTheHashOfTheVersion) {
  SeededRng rng(2);
  Replica a = Replica::Seed(rng);
  auto v1 = a.Send(Payload("one"));
  ASSERT_TRUE(v1);
  EXPECT_EQ(a.ceiling(), *v1);
  auto v2 = a.Send(Payload("two"));
  ASSERT_TRUE(v2);
  EXPECT_TRUE(itc::Leq(*v1, *v2));
  EXPECT_NE(*v1, *v2);
  ASSERT_EQ(a.size(), 2u);
  auto m = a.Find(PathOf(*v1));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->payload, Payload("one"));
  EXPECT_EQ(m->version, *v1);
}

TEST(ReplicaTest, RedactTicksAndRemovesButIgnoresWhatIsNotHeld) {
  SeededRng rng(3);
  Replica a = Replica::Seed(rng);
  auto v = a.Send(Payload("x"));
  ASSERT_TRUE(v);
  const itc::Version before = a.ceiling();
  ASSERT_TRUE(a.Redact(*v));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_TRUE(itc::Leq(before, a.ceiling()));
  EXPECT_NE(before, a.ceiling());
  const itc::Version after = a.ceiling();
  ASSERT_TRUE(a.Redact(*v));  // no longer held: a no-op, no tick
  EXPECT_EQ(a.ceiling(), after);
}

TEST(ReplicaTest, BatchIsAllOrNothing) {
  SeededRng rng(4);
  Replica a = Replica::Seed(rng);
  auto v = a.Send(Payload("keep"));
  ASSERT_TRUE(v);
  const itc::Version before = a.ceiling();
  std::vector<Op> ops;
  ops.push_back(Op::Redact(*v));
  ops.push_back(Op::Send(Payload("new")));
  ops.push_back(Op::Send(Bytes(kPayloadBytesMax + 1, 'x')));
  auto r = a.Apply(ops);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kLimitExceeded);
  ASSERT_NE(r.error().As<LimitDetail>(), nullptr);
  EXPECT_EQ(r.error().As<LimitDetail>()->limit, "payload_bytes_max");
  EXPECT_EQ(a.ceiling(), before);
  EXPECT_EQ(a.size(), 1u);
  ops.pop_back();
  auto ok = a.Apply(ops);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->size(), 1u);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_FALSE(a.Holds(*v));
  EXPECT_TRUE(a.Holds(ok->front()));
}

TEST(ReplicaTest, ObserveDeliversInCausalOrderAndResumes) {
  SeededRng rng(5);
  auto hosts = testing::MakeUniverse(rng, 2);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(hosts[0]->Send(Payload("a" + std::to_string(i))));
    ASSERT_TRUE(hosts[1]->Send(Payload("b" + std::to_string(i))));
  }
  ASSERT_TRUE(testing::RunPair(*hosts[0], *hosts[1]).initiator);
  Observation first = hosts[0]->Observe(itc::Version{});
  ASSERT_EQ(first.messages.size(), 10u);
  for (size_t i = 1; i < first.messages.size(); ++i) {
    EXPECT_TRUE(itc::TotalOrder(first.messages[i - 1].version, first.messages[i].version) < 0);
    // Nothing delivered later happened before something delivered earlier.
    EXPECT_FALSE(itc::Leq(first.messages[i].version, first.messages[i - 1].version));
  }
  auto v = hosts[0]->Send(Payload("late"));
  ASSERT_TRUE(v);
  Observation second = hosts[0]->Observe(first.checkpoint);
  ASSERT_EQ(second.messages.size(), 1u);
  EXPECT_EQ(second.messages[0].version, *v);
  ASSERT_TRUE(hosts[0]->Redact(*v));
  EXPECT_TRUE(hosts[0]->Observe(first.checkpoint).messages.empty());
  // From a checkpoint at or past the ceiling: nothing, and the same checkpoint.
  const Observation all = hosts[0]->Observe(itc::Version{});
  const Observation none = hosts[0]->Observe(all.checkpoint);
  EXPECT_TRUE(none.messages.empty());
  EXPECT_EQ(none.checkpoint, all.checkpoint);
}

TEST(ReplicaTest, RestrictKeepsOnlyThePartysRegion) {
  auto v = itc::ParseVersion("(1,2,(0,3,1))");
  auto p = itc::ParseParty("(0,(1,0))");
  ASSERT_TRUE(v && p);
  EXPECT_EQ(itc::FormatVersion(Restrict(*v, *p)), "(0,0,(0,4,0))");
  EXPECT_EQ(Restrict(*v, itc::Party::Seed()), *v);
}

TEST(ReplicaTest, ReclaimTicksAboveEverythingTheIdentityShipped) {
  SeededRng rng(6);
  Replica a = Replica::Seed(rng);
  std::vector<itc::Version> shipped;
  for (int i = 0; i < 4; ++i) shipped.push_back(*a.Send(Payload("m")));
  Bookmark bookmark = a.MakeBookmark();
  Replica back = Replica::Reclaim(std::move(bookmark));
  EXPECT_EQ(back.network(), a.network());
  EXPECT_EQ(back.size(), 0u);
  auto v = back.Send(Payload("after restart"));
  ASSERT_TRUE(v);
  for (const auto& old : shipped) {
    EXPECT_FALSE(itc::Leq(*v, old));
    EXPECT_NE(PathOf(*v), PathOf(old));
  }
}

// A bookmark saved before the last sends: those heights come back after a
// reclaim unless something else remembered them (a sled's boundary record
// does) and raises the tick floor to them.
TEST(ReplicaTest, ARaisedTickFloorKeepsHeightsTheBookmarkLostFromBeingIssuedAgain) {
  SeededRng rng(8);
  Replica a = Replica::Seed(rng);
  (void)*a.Send(Payload("covered"));
  Bookmark stale = a.MakeBookmark();
  const itc::Version lost = *a.Send(Payload("sent after the save, lost at a crash"));

  Bookmark twin;
  twin.network = stale.network;
  twin.version = stale.version;
  twin.party = *itc::Party::FromNodes({stale.party->nodes().begin(), stale.party->nodes().end()});
  Replica plain = Replica::Reclaim(std::move(twin));
  EXPECT_TRUE(itc::Leq(*plain.Send(Payload("again")), lost)) << "the control: the height recurs";

  Replica raised = Replica::Reclaim(std::move(stale));
  raised.RaiseTickFloor(lost);
  EXPECT_EQ(raised.size(), 0u);
  EXPECT_EQ(raised.ceiling(), itc::Version{}) << "the floor is not a claim to have seen anything";
  const itc::Version next = *raised.Send(Payload("after restart"));
  EXPECT_FALSE(itc::Leq(next, lost));
  EXPECT_TRUE(itc::Leq(raised.MakeBookmark().version, next)) << "the bookmark covers the send";
}

TEST(ReplicaTest, RetiredReplicaRefusesToSend) {
  SeededRng rng(7);
  Replica a = Replica::Seed(rng);
  ASSERT_TRUE(a.TakeParty());
  auto r = a.Send(Payload("x"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
}

TEST(ReplicaTest, SnapshotIsUnchangedByLaterWrites) {
  SeededRng rng(8);
  Replica a = Replica::Seed(rng);
  std::vector<itc::Version> vs;
  for (int i = 0; i < 200; ++i) vs.push_back(*a.Send(Payload(std::to_string(i))));
  Snapshot snap = a.Snap();
  const auto before = snap.Messages();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(a.Redact(vs[i]));
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(a.Send(Payload("n")));
  EXPECT_EQ(snap.Messages(), before);
  EXPECT_EQ(snap.size(), 200u);
  EXPECT_EQ(a.size(), 150u);
  EXPECT_EQ(a.Snap().Messages().size(), 150u);
}

// Payload bytes live in their leaf's own block: a snapshot keeps them (of
// every size, empty and the largest included) after the replica dropped them.
TEST(ReplicaTest, SnapshotKeepsPayloadsOfEverySizeAfterRedaction) {
  SeededRng rng(9);
  Replica a = Replica::Seed(rng);
  const std::vector<Bytes> payloads = {Bytes{}, Payload("x"), Bytes(kPayloadBytesMax, 'y'),
                                       Payload("a payload of a few dozen bytes, say forty")};
  std::vector<itc::Version> vs;
  for (const Bytes& p : payloads) vs.push_back(*a.Send(p));
  Snapshot snap = a.Snap();
  for (const itc::Version& v : vs) ASSERT_TRUE(a.Redact(v));
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(a.Send(Payload("churn")));
  EXPECT_EQ(a.size(), 20u);
  for (size_t i = 0; i < vs.size(); ++i) {
    const auto found = snap.Find(PathOf(vs[i]));
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->payload, payloads[i]);
    EXPECT_EQ(found->version, vs[i]);
  }
}

// A removal's leaves (a commit's, a batch's redactions) are the caller's to
// free (a host frees them after it lets go of its lock). This sends 100
// messages and one more, takes the 100 out with `remove`, and checks that
// none is freed while its result lives and all are when it goes. On a thread
// of its own, whose kept blocks start at none, so that the blocks the frees
// keep count them exactly.
void ExpectTheCallerFreesTheRemovedLeaves(
    uint64_t seed,
    const std::function<RemovedLeaves(Replica&, std::span<const itc::Version>)>& remove) {
  std::thread([&] {
    SeededRng rng(seed);
    Replica a = Replica::Seed(rng);
    std::vector<itc::Version> gone;
    for (int i = 0; i < 100; ++i) gone.push_back(*a.Send(Payload("m" + std::to_string(i))));
    const Bytes other = Payload("kept");
    const itc::Version kept = *a.Send(other);
    ASSERT_EQ(internal::LeafBlocksCachedBytes(), 0u);

    RemovedLeaves removed = remove(a, gone);
    EXPECT_EQ(a.size(), 1u);
    EXPECT_EQ(removed.size(), gone.size());
    EXPECT_EQ(internal::LeafBlocksCachedBytes(), 0u);  // none freed yet

    removed = RemovedLeaves();
    const size_t block = (sizeof(internal::Leaf) + 3 + internal::kLeafBlockGrain - 1) /
                         internal::kLeafBlockGrain * internal::kLeafBlockGrain;  // "m99"
    EXPECT_EQ(internal::LeafBlocksCachedBytes(), gone.size() * block);
    EXPECT_EQ(a.Find(PathOf(kept))->payload, other);
  }).join();
}

TEST(ReplicaTest, CommitJoinLeavesTheRemovedLeavesToTheCallerToFree) {
  ExpectTheCallerFreesTheRemovedLeaves(10, [](Replica& a, std::span<const itc::Version> gone) {
    std::vector<Path> paths;
    for (const itc::Version& v : gone) paths.push_back(PathOf(v));
    return a.CommitJoin({}, paths, a.ceiling());
  });
}

TEST(ReplicaTest, ApplyLeavesTheRedactedLeavesToTheCallerToFree) {
  ExpectTheCallerFreesTheRemovedLeaves(11, [](Replica& a, std::span<const itc::Version> gone) {
    std::vector<Op> ops;
    for (const itc::Version& v : gone) ops.push_back(Op::Redact(v));
    RemovedLeaves removed;
    EXPECT_TRUE(a.Apply(ops, removed));
    return removed;
  });
}

// The version the replica's next send will get (a replica that was not
// reclaimed: no tick floor).
itc::Version NextSendVersion(const Replica& r) { return *itc::Tick(r.ceiling(), *r.party()); }

TEST(ReplicaTest, ASendRedactedByItsOwnBatchStillSpendsItsVersion) {
  SeededRng rng(12);
  Replica a = Replica::Seed(rng);
  ASSERT_TRUE(a.Send(Payload("before")));
  const itc::Version next = NextSendVersion(a);
  const std::vector<Op> ops = {Op::Send(Payload("gone")), Op::Redact(next)};
  auto sent = a.Apply(ops);
  ASSERT_TRUE(sent);
  ASSERT_EQ(sent->size(), 1u);
  EXPECT_EQ(sent->front(), next);
  EXPECT_FALSE(a.Holds(next));
  EXPECT_EQ(a.size(), 1u);
  // The send and its redaction both ticked: the version is never issued
  // again, so a later redaction of it cannot reach another message.
  EXPECT_TRUE(itc::Leq(next, a.ceiling()));
  auto later = a.Send(Payload("later"));
  ASSERT_TRUE(later);
  EXPECT_NE(*later, next);
  ASSERT_TRUE(a.Redact(next));  // not held: a no-op
  EXPECT_TRUE(a.Holds(*later));
}

// A batch leaves the state that its operations applied one at a time leave:
// the same versions, messages and ceiling. Batches up to kBatchOpsMax mix
// sends, redactions of held messages (some twice), of the batch's own sends
// (some twice) and of what was never sent.
TEST(ReplicaTest, ABatchEqualsItsOperationsOneAtATime) {
  for (uint64_t seed = 20; seed < 26; ++seed) {
    SeededRng rng_a(seed), rng_b(seed), pick(seed * 7919);
    Replica batched = Replica::Seed(rng_a);
    Replica single = Replica::Seed(rng_b);
    std::vector<itc::Version> held;
    for (int i = 0; i < 3000; ++i) {
      held.push_back(*batched.Send(Payload("h" + std::to_string(i))));
      ASSERT_EQ(*single.Send(Payload("h" + std::to_string(i))), held.back());
    }
    const size_t n = seed % 2 == 0 ? kBatchOpsMax : 257;
    std::vector<Op> ops;
    std::vector<itc::Version> own;  // the batch's sends so far, as `single` issued them
    while (ops.size() < n) {
      Op op;
      switch (pick.Next() % 4) {
        case 0:
          op = Op::Send(Payload("n" + std::to_string(ops.size())));
          break;
        case 1:
          op = Op::Redact(held[pick.Next() % held.size()]);
          break;
        case 2:
          if (own.empty()) continue;
          op = Op::Redact(own[pick.Next() % own.size()]);
          break;
        default:
          op = Op::Redact(itc::Version{});
          break;
      }
      auto applied = single.Apply(std::span<const Op>(&op, 1));
      ASSERT_TRUE(applied);
      if (op.kind == Op::Kind::kSend) own.push_back(applied->front());
      ops.push_back(std::move(op));
    }
    auto sent = batched.Apply(ops);
    ASSERT_TRUE(sent) << sent.error().ToString();
    EXPECT_EQ(*sent, own);
    EXPECT_EQ(batched.ceiling(), single.ceiling());
    EXPECT_EQ(batched.size(), single.size());
    EXPECT_TRUE(SameState(batched.Snap(), single.Snap())) << "seed " << seed;
  }
}

}  // namespace
}  // namespace once::gossip
