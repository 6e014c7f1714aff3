// The digest tree's own laws: buckets grow, split into branches when full
// and come back when a branch is small, batch and single removals leave
// canonical trees of the same set, and a held root never changes.

#include "digest_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>

#include "once/itc/text.h"

namespace once::gossip::internal {
namespace {

Path PathFrom(uint64_t high, uint64_t low) {
  Path p{};
  for (int b = 0; b < 8; ++b) {
    p[b] = static_cast<uint8_t>(high >> (56 - 8 * b));
    p[8 + b] = static_cast<uint8_t>(low >> (56 - 8 * b));
  }
  return p;
}

void Add(NodeRef& root, const Path& path) {
  const uint8_t payload[] = {1};
  ASSERT_TRUE(Insert(root, MakeLeaf(path, itc::Version(), payload)));
}

// A bucket holds at most kBucketMax entries, in strictly increasing path
// order, each beside its leaf, and (below the root) at least one; a branch
// holds more than kBucketMerge leaves and no empty slot; every leaf lies
// under its node's prefix; and every summary adds up.
bool Canonical(const Inner& node, int depth, const Path& prefix, bool is_root, Summary& out) {
  out = Summary{};
  if (node.size() > node.capacity) return false;
  auto under_prefix = [&](const Path& path) {
    for (int d = 0; d < depth; ++d) {
      if (Nibble(path, d) != Nibble(prefix, d)) return false;
    }
    return true;
  };
  if (node.bucket) {
    if (node.capacity > kBucketMax || (!is_root && node.size() == 0)) return false;
    const std::span<const Entry> entries = node.entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      if (!entries[i].leaf || entries[i].leaf->path != entries[i].path) return false;
      if (i > 0 && !(entries[i - 1].path < entries[i].path)) return false;
      if (!under_prefix(entries[i].path)) return false;
      XorInto(out.digest, entries[i].path);
      ++out.count;
    }
    return out == node.summary;
  }
  if (node.summary.count <= static_cast<uint64_t>(kBucketMerge)) return false;
  for (int c = 0; c < kFanout; ++c) {
    const NodeRef* child = node.Find(c);
    if (!child) continue;
    if (!*child) return false;
    Path child_prefix = prefix;
    const int shift = depth % 2 == 0 ? 4 : 0;
    child_prefix[depth / 2] =
        static_cast<uint8_t>((child_prefix[depth / 2] & ~(0x0f << shift)) | (c << shift));
    Summary part;
    if (!Canonical(**child, depth + 1, child_prefix, false, part)) return false;
    XorInto(out.digest, part.digest);
    out.count += part.count;
  }
  return out == node.summary;
}

bool Canonical(const NodeRef& root) {
  Summary total;
  return Canonical(*root, 0, Path{}, true, total);
}

std::set<Path> Paths(const NodeRef& root) {
  std::vector<const Leaf*> leaves;
  CollectAll(View::Of(root), leaves);
  std::set<Path> out;
  for (const Leaf* leaf : leaves) out.insert(leaf->path);
  return out;
}

// Leaves under nibbles 0 and 1 at the top: more than a bucket holds.
std::vector<Path> TwoPrefixes(int per_prefix) {
  std::vector<Path> paths;
  for (uint64_t top = 0; top < 2; ++top) {
    for (uint64_t i = 0; i < static_cast<uint64_t>(per_prefix); ++i) {
      paths.push_back(PathFrom(top << 60 | i << 20, i));
    }
  }
  return paths;
}

TEST(DigestTreeTest, ABatchThatEmptiesANodeRemovesItFromItsParent) {
  NodeRef root = NewRoot();
  const std::vector<Path> paths = TwoPrefixes(40);
  for (const Path& p : paths) Add(root, p);
  ASSERT_TRUE(Canonical(root));
  ASSERT_FALSE(root->bucket);
  ASSERT_EQ(root->size(), 2);
  const std::vector<Path> gone(paths.begin(), paths.begin() + 40);  // all of nibble 0
  RemoveBatch(root, gone);
  EXPECT_TRUE(Canonical(root));
  EXPECT_EQ(Paths(root), std::set<Path>(paths.begin() + 40, paths.end()));
  EXPECT_FALSE(root->bucket);
  EXPECT_EQ(root->size(), 1);
  EXPECT_TRUE(root->Has(1));
}

TEST(DigestTreeTest, ABucketGrowsToSixteenAndBack) {
  NodeRef root = NewRoot();
  std::vector<Path> paths;
  for (uint64_t nibble = 0; nibble < 16; ++nibble) paths.push_back(PathFrom(nibble << 60, nibble));
  for (const Path& p : paths) Add(root, p);
  EXPECT_TRUE(root->bucket);
  EXPECT_EQ(root->size(), 16);
  EXPECT_EQ(root->capacity, 16);
  EXPECT_TRUE(Canonical(root));
  for (const Path& p : paths) EXPECT_NE(Find(root.get(), p), nullptr);
  for (size_t i = 0; i < paths.size(); i += 2) EXPECT_NE(Remove(root, paths[i]), nullptr);
  EXPECT_TRUE(Canonical(root));
  EXPECT_EQ(root->size(), 8);
  for (size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(Find(root.get(), paths[i]) != nullptr, i % 2 == 1);
  }
}

// The 65th leaf splits a full bucket into a branch of buckets (one per
// nibble), and removals merge the branch back into one bucket once it holds
// kBucketMerge leaves: by single removals and by a batch alike.
TEST(DigestTreeTest, AFullBucketSplitsAndASmallBranchMergesBack) {
  for (const bool batch : {false, true}) {
    NodeRef root = NewRoot();
    std::vector<Path> paths;
    for (uint64_t i = 0; i <= static_cast<uint64_t>(kBucketMax); ++i) {
      paths.push_back(PathFrom(i << 56, i));  // nibble 0 is i / 16: five children
    }
    for (size_t i = 0; i + 1 < paths.size(); ++i) Add(root, paths[i]);
    ASSERT_TRUE(root->bucket);
    ASSERT_EQ(root->size(), kBucketMax);
    Add(root, paths.back());
    ASSERT_TRUE(Canonical(root));
    EXPECT_FALSE(root->bucket);
    EXPECT_EQ(root->size(), 5);
    EXPECT_EQ(root->summary.count, paths.size());
    for (const Path& p : paths) EXPECT_NE(Find(root.get(), p), nullptr);

    const size_t keep = kBucketMerge;
    const std::vector<Path> gone(paths.begin() + keep, paths.end());
    if (batch) {
      RemoveBatch(root, gone);
    } else {
      for (const Path& p : gone) ASSERT_NE(Remove(root, p), nullptr);
    }
    EXPECT_TRUE(Canonical(root));
    EXPECT_TRUE(root->bucket);
    EXPECT_EQ(Paths(root), std::set<Path>(paths.begin(), paths.begin() + keep));
  }
}

// Leaves that share their first 16 nibbles split a full bucket into a chain
// of one-child branches down to where they part; removing them all leaves an
// empty root bucket.
TEST(DigestTreeTest, LeavesSharingALongPrefixSplitIntoAChainAndCollapse) {
  NodeRef root = NewRoot();
  std::vector<Path> paths;
  for (uint64_t i = 0; i <= static_cast<uint64_t>(kBucketMax); ++i) {
    paths.push_back(PathFrom(0, i % 16 | (i / 16) << 60));
  }
  for (const Path& p : paths) Add(root, p);
  ASSERT_TRUE(Canonical(root));
  for (const Path& p : paths) EXPECT_NE(Find(root.get(), p), nullptr);
  RemoveBatch(root, paths);
  EXPECT_TRUE(Canonical(root));
  EXPECT_EQ(root->summary.count, 0u);
  EXPECT_TRUE(root->bucket);
}

// Random trees, dense in a few prefixes so that buckets fill, split, empty
// and merge back: a batch removal leaves the same set, canonically, as removing
// one path at a time, and the root held before either is unchanged.
TEST(DigestTreeTest, BatchRemovalAgreesWithSingleRemovalsAndLeavesHeldRootsAlone) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 40; ++round) {
    NodeRef root = NewRoot();
    std::vector<Path> paths;
    const int n = 1 + static_cast<int>(rng() % 400);
    for (int i = 0; i < n; ++i) {
      const uint64_t high = (rng() % 4) << 60 | (rng() % 3) << 56 | (rng() & 0xff);
      const Path p = PathFrom(high, rng() % 8);
      if (Find(root.get(), p)) continue;
      Add(root, p);
      paths.push_back(p);
    }
    ASSERT_TRUE(Canonical(root));
    const NodeRef held = root;
    const std::set<Path> before = Paths(held);
    const Summary held_summary = held->summary;
    std::vector<Path> gone;  // half of them to all but a tenth: branches merge back
    const uint64_t keep_one_in = 2 + rng() % 9;
    for (const Path& p : paths) {
      if (rng() % keep_one_in != 0) gone.push_back(p);
    }
    gone.push_back(PathFrom(0xffffffffffffffffULL, 0));  // absent: skipped
    if (!gone.empty()) gone.push_back(gone.front());     // repeated: once

    NodeRef batch = root;
    RemoveBatch(batch, gone);
    NodeRef single = root;
    for (const Path& p : gone) (void)Remove(single, p);

    ASSERT_TRUE(Canonical(batch));
    ASSERT_TRUE(Canonical(single));
    EXPECT_EQ(Paths(batch), Paths(single));
    EXPECT_EQ(batch->summary, single->summary);
    EXPECT_EQ(Paths(held), before);
    EXPECT_EQ(held->summary, held_summary);
  }
}

// Two trees of the same leaves built alike: the same nodes, summaries and
// bounds, all the way down.
void ExpectSameNodes(const Inner& a, const Inner& b) {
  ASSERT_EQ(a.bucket, b.bucket);
  ASSERT_EQ(a.occupied, b.occupied);
  ASSERT_EQ(a.summary, b.summary);
  EXPECT_TRUE(a.floor() == b.floor())
      << itc::FormatVersion(a.floor()) << " against " << itc::FormatVersion(b.floor());
  EXPECT_TRUE(a.ceiling() == b.ceiling())
      << itc::FormatVersion(a.ceiling()) << " against " << itc::FormatVersion(b.ceiling());
  if (a.bucket) return;
  for (int i = 0; i < a.size(); ++i) ExpectSameNodes(*a.child_block()[i], *b.child_block()[i]);
}

// Every node's floor and ceiling are the meet and the join of the versions
// under it, computed again from its leaves.
void ExpectExactBounds(const NodeRef& node) {
  std::vector<const Leaf*> leaves;
  CollectAll(View::Of(node), leaves);
  if (leaves.empty()) return;
  itc::Version meet = leaves[0]->version, join = leaves[0]->version;
  for (const Leaf* leaf : leaves) {
    meet = itc::Meet(meet, leaf->version);
    join = itc::Join(join, leaf->version);
  }
  EXPECT_TRUE(node->floor() == meet)
      << itc::FormatVersion(node->floor()) << " against " << itc::FormatVersion(meet);
  EXPECT_TRUE(node->ceiling() == join)
      << itc::FormatVersion(node->ceiling()) << " against " << itc::FormatVersion(join);
  if (!node->bucket) {
    for (const NodeRef& child : node->children()) ExpectExactBounds(child);
  }
}

// A batch insert against one Insert a leaf, over random trees, batches that
// split buckets (or land in new ones) and batches that repeat held paths:
// the same canonical tree, with the same exact bounds at every node; the
// repeated paths left out (and left in the batch); a held root unchanged.
TEST(DigestTreeTest, BatchInsertAgreesWithSingleInsertsAndLeavesHeldRootsAlone) {
  std::mt19937_64 rng(5);
  auto random_version = [&] {
    const std::string text =
        "(" + std::to_string(rng() % 4) + ",0," + std::to_string(1 + rng() % 5) + ")";
    return rng() % 3 == 0 ? *itc::ParseVersion(std::to_string(rng() % 9))
                          : *itc::ParseVersion(text);
  };
  for (int round = 0; round < 60; ++round) {
    // Dense prefixes, so that buckets fill, split and chain.
    auto random_path = [&] {
      return PathFrom((rng() % 3) << 60 | (rng() % 2) << 52 | (rng() % 256), rng() % 4);
    };
    const uint8_t payload[] = {3};
    NodeRef root = NewRoot();
    std::set<Path> model;
    const int held_count = static_cast<int>(rng() % 300);
    for (int i = 0; i < held_count; ++i) {
      const Path p = random_path();
      if (model.insert(p).second) {
        ASSERT_TRUE(Insert(root, MakeLeaf(p, random_version(), payload)));
      }
    }
    const NodeRef held = root;
    const Summary held_summary = held->summary;

    std::map<Path, itc::Version> batch;  // in path order, distinct
    const int batch_count = static_cast<int>(rng() % 500);
    for (int i = 0; i < batch_count; ++i) {
      const bool repeat = !model.empty() && rng() % 5 == 0;
      const Path p = repeat
                         ? *std::next(model.begin(), static_cast<ptrdiff_t>(rng() % model.size()))
                         : random_path();
      batch.emplace(p, random_version());
    }
    std::vector<LeafRef> leaves;
    size_t fresh = 0;
    NodeRef single = root;
    for (const auto& [p, v] : batch) {
      leaves.push_back(MakeLeaf(p, v, payload));
      if (Insert(single, MakeLeaf(p, v, payload))) ++fresh;
    }
    NodeRef batched = root;
    ASSERT_EQ(InsertBatch(batched, leaves), fresh) << "round " << round;
    for (const LeafRef& leaf : leaves) {  // only the repeated ones are left
      if (leaf) {
        EXPECT_TRUE(model.count(leaf->path)) << "round " << round;
      }
    }
    ASSERT_TRUE(Canonical(batched)) << "round " << round;
    ASSERT_EQ(Paths(batched), Paths(single));
    ExpectSameNodes(*batched, *single);
    ExpectExactBounds(batched);
    EXPECT_EQ(held->summary, held_summary);
    EXPECT_EQ(Paths(held), model);
  }
}

// The tree against a plain set, over random inserts, single and batch
// removals (growing, then shrinking), with roots held along the way (as a session's snapshot holds
// one): after every step the tree holds exactly the model's paths,
// canonically, a listing of the whole tree comes out in path order, and every
// held root still holds what it held.
TEST(DigestTreeTest, RandomOperationsMatchASetAndSpareHeldRoots) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 20; ++round) {
    NodeRef root = NewRoot();
    std::set<Path> model;
    std::vector<std::pair<NodeRef, std::set<Path>>> held;
    // Dense prefixes, so that buckets split, chain and merge back.
    auto random_path = [&] {
      return PathFrom((rng() % 3) << 60 | (rng() % 2) << 52 | (rng() % 64), rng() % 4);
    };
    // Three times in four one that is held (when any is), else any.
    auto some_path = [&] {
      if (model.empty() || rng() % 4 == 0) return random_path();
      return *std::next(model.begin(), static_cast<ptrdiff_t>(rng() % model.size()));
    };
    for (int step = 0; step < 600; ++step) {
      // Mostly inserts for the first half, mostly removals after: the tree
      // grows past a bucket, then shrinks until branches merge back.
      const bool growing = step < 300;
      const uint64_t op = rng() % 10;
      if (op < (growing ? 8u : 1u)) {
        const Path p = random_path();
        const uint8_t payload[] = {2};
        const bool fresh = model.insert(p).second;
        ASSERT_EQ(Insert(root, MakeLeaf(p, itc::Version(), payload)), fresh);
      } else if (op < (growing ? 9u : 5u)) {
        const Path p = some_path();
        ASSERT_EQ(Remove(root, p) != nullptr, model.erase(p) == 1);
      } else if (op < 9) {
        std::vector<Path> gone;
        for (int i = 0; i < static_cast<int>(rng() % 12); ++i) gone.push_back(some_path());
        for (const Path& p : gone) model.erase(p);
        RemoveBatch(root, gone);
      } else {
        held.emplace_back(root, model);
      }
      ASSERT_TRUE(Canonical(root)) << "round " << round << " step " << step;
      ASSERT_EQ(Paths(root), model);
      ASSERT_EQ(root->summary.count, model.size());
    }
    std::vector<EntryRun> listed;
    ListRuns(View::Of(root), listed);
    std::vector<Path> listed_paths;
    for (const EntryRun& run : listed) {
      ASSERT_GT(run.count, 0u);
      for (const Entry& e : run.entries()) listed_paths.push_back(e.path);
    }
    ASSERT_EQ(listed_paths, std::vector<Path>(model.begin(), model.end()));
    for (const auto& [snapshot, paths] : held) {
      EXPECT_TRUE(Canonical(snapshot));
      EXPECT_EQ(Paths(snapshot), paths);
    }
  }
}

// A listing key, against the nibbles it is made of: under a node at any
// depth, the 16 nibbles after the node's prefix (the last 16 past depth 16);
// so, among paths that share the prefix, keys never descend in path order.
TEST(DigestTreeTest, ListingKeysAreTheBitsAfterThePrefixAndAscendInPathOrder) {
  std::mt19937_64 rng(29);
  for (int depth = 0; depth < kDepthMax; ++depth) {
    const Path base = PathFrom(rng(), rng());
    std::vector<Path> paths;
    for (int i = 0; i < 200; ++i) {
      Path p = PathFrom(rng(), rng());
      for (int d = 0; d < depth; ++d) {  // the node's prefix: base's first nibbles
        const int shift = d % 2 == 0 ? 4 : 0;
        p[d / 2] = static_cast<uint8_t>((p[d / 2] & ~(0x0f << shift)) | Nibble(base, d) << shift);
      }
      if (i % 10 == 1) {  // a neighbour: one key apart, or (depth < 16) the same key
        p = paths.back();
        p[15] ^= 1;
      }
      paths.push_back(p);
    }
    std::sort(paths.begin(), paths.end());
    const int from = std::min(depth, 16);
    for (size_t i = 0; i < paths.size(); ++i) {
      uint64_t expected = 0;
      for (int d = from; d < from + 16; ++d) expected = expected << 4 | Nibble(paths[i], d);
      ASSERT_EQ(ListingKey(paths[i], depth), expected) << "depth " << depth;
      if (i > 0) {
        ASSERT_LE(ListingKey(paths[i - 1], depth), ListingKey(paths[i], depth));
      }
    }
  }
}

}  // namespace
}  // namespace once::gossip::internal
