// The digest tree's own laws: compact nodes grow and shrink with their
// children, batch and single removals leave the same canonical tree (no
// empty or lone inner node below the root), and a held root never changes.

#include "digest_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

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

// Every inner node below the root holds at least two leaves, none holds an
// empty slot or more slots than its block, and every summary adds up.
bool Canonical(View view, bool is_root, Summary& out) {
  out = Summary{};
  if (view.leaf) {
    out = Summary{view.leaf->path, 1};
    return true;
  }
  const Inner& node = *view.inner;
  if (node.size() > node.capacity) return false;
  if (!is_root && node.summary.count < 2) return false;
  for (const Slot& slot : node.slots()) {
    if (slot.empty()) return false;
    if (slot.leaf && slot.fingerprint != Fingerprint(slot.leaf->path)) return false;
    Summary part;
    if (!Canonical(View{slot.inner.get(), slot.leaf.get()}, false, part)) return false;
    XorInto(out.digest, part.digest);
    out.count += part.count;
  }
  return out == node.summary;
}

bool Canonical(const NodeRef& root) {
  Summary total;
  return Canonical(View{root.get(), nullptr}, true, total);
}

std::set<Path> Paths(const NodeRef& root) {
  std::vector<const Leaf*> leaves;
  CollectAll(View{root.get(), nullptr}, leaves);
  std::set<Path> out;
  for (const Leaf* leaf : leaves) out.insert(leaf->path);
  return out;
}

TEST(DigestTreeTest, ABatchThatEmptiesANodeRemovesItFromItsParent) {
  NodeRef root = NewRoot();
  const Path a = PathFrom(0, 1), b = PathFrom(0, 2), c = PathFrom(uint64_t{1} << 60, 0);
  Add(root, a);
  Add(root, b);  // a and b part at the last nibble: a chain of 31 nodes
  Add(root, c);
  ASSERT_TRUE(Canonical(root));
  const Path gone[] = {b, a};
  RemoveBatch(root, gone);
  EXPECT_TRUE(Canonical(root));
  EXPECT_EQ(Paths(root), std::set<Path>{c});
  EXPECT_EQ(root->size(), 1);
}

TEST(DigestTreeTest, ANodeGrowsToSixteenChildrenAndBack) {
  NodeRef root = NewRoot();
  std::vector<Path> paths;
  for (uint64_t nibble = 0; nibble < 16; ++nibble) paths.push_back(PathFrom(nibble << 60, nibble));
  for (const Path& p : paths) Add(root, p);
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

// Random trees, dense in a few prefixes so that nodes fill, empty and
// collapse: a batch removal leaves the same set, canonically, as removing
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
    std::vector<Path> gone;
    for (const Path& p : paths) {
      if (rng() % 3 != 0) gone.push_back(p);
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

}  // namespace
}  // namespace once::gossip::internal
