// The digest tree: a copy-on-write 16-ary radix trie over message paths
// (inner nodes hold only their occupied slots: see Inner).
// Every inner node caches the XOR of its leaves' paths, their count, and
// bounds on their versions: a floor <= their meet and a ceiling >= their join,
// so that two replicas compare level by level and the causal sieve can settle
// a whole subtree at once. Inserts and single removals keep the bounds exact
// (given exact children); a batch of removals leaves them as they were, which
// are still bounds (the sieve only needs bounds to be correct, and exact
// bounds to be quick).
//
// Sharing. The tree is persistent: a Snapshot is a counted reference to a
// root (NodeRef), and every node reachable from a root that a Snapshot holds
// stays exactly as it was for as long as that Snapshot lives, whatever the
// replica does meanwhile. The replica changes a node in place only when no
// one else can reach it, along the whole path: the writing functions below
// walk down from the root and, at every node of the path, check that its
// count is 1 (NodeRef::Unique) before they change it; a node that is shared
// is copied first (path copying), and the copy's children are then shared
// by two parents, so the walk copies the rest of the path too. A node whose
// count is 1 under an unshared parent is reachable from that parent only.
// The count is read with acquire ordering and dropped with release, so
// whatever the last other holder did with a node (a session reading it
// through its snapshot, then dropping the snapshot on its own thread)
// happens before the replica changes it. (std::shared_ptr::use_count is a
// relaxed read and gave no such order: issue 17.)
//
// Threads. The writing functions (Insert, Remove, RemoveBatch) run on one
// thread at a time per tree, the owner of the replica's root (the Host's
// lock). Reading functions, and copying or dropping NodeRefs and Snapshots,
// may run on any thread at any time. A node is freed by whichever thread
// drops its last reference.

#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "once/gossip/replica.h"

namespace once::gossip::internal {

inline constexpr int kFanout = 16;
inline constexpr int kDepthMax = 32;  // nibbles in a Path

// A message as the tree holds it. Made only by MakeLeaf, which puts the
// payload bytes in the leaf's own heap block (after its shared count); its
// version lives in the leaf too (itc::Version::kInlineNodes), so a leaf of a
// two-party universe is one block, not three: fewer blocks for a removal to
// free and for the allocator to sort later.
struct Leaf {
  Leaf(const Path& p, itc::Version v) : path(p), version(std::move(v)) {}
  Leaf(const Leaf&) = delete;  // the payload lives in this leaf's block
  Leaf& operator=(const Leaf&) = delete;

  Path path{};
  itc::Version version;
  std::span<const uint8_t> payload;  // in the leaf's block; valid as long as it
};

std::shared_ptr<const Leaf> MakeLeaf(const Path& path, itc::Version version,
                                     std::span<const uint8_t> payload);

// A leaf's fingerprint: path bytes 8..15, big-endian. Leaves under one node
// differ there unless their paths collide in 64 bits.
inline uint64_t Fingerprint(const Path& path) {
  uint64_t fp = 0;
  for (size_t b = 8; b < 16; ++b) fp = fp << 8 | path[b];
  return fp;
}

struct Slot {
  NodeRef inner;
  std::shared_ptr<const Leaf> leaf;
  // The leaf's Fingerprint, kept beside the pointer so that listing a
  // subtree does not touch every leaf (leaf slots only).
  uint64_t fingerprint = 0;
  bool empty() const { return !inner && !leaf; }
  void SetLeaf(std::shared_ptr<const Leaf> l) {
    fingerprint = Fingerprint(l->path);
    leaf = std::move(l);
  }
};

// The number of NodeRefs to a node. A copy of a node is a new node, with a
// count of its own (1: the NodeRef that adopts it).
class RefCount {
 public:
  RefCount() = default;
  RefCount(const RefCount&) {}
  RefCount& operator=(const RefCount&) = delete;
  void Add() { n_.fetch_add(1, std::memory_order_relaxed); }  // the caller holds one already
  // True if that was the last reference.
  bool Drop() { return n_.fetch_sub(1, std::memory_order_acq_rel) == 1; }
  bool One() const { return n_.load(std::memory_order_acquire) == 1; }

 private:
  std::atomic<uint32_t> n_{1};
};

// std::popcount without -mpopcnt is a call into libgcc (2% of a session).
inline int Popcount16(uint16_t v) {
  unsigned x = v;
  x = x - ((x >> 1) & 0x5555u);
  x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
  x = (x + (x >> 4)) & 0x0f0fu;
  return static_cast<int>((x + (x >> 8)) & 0x1fu);
}

// An inner node and, in the same heap block after it, its occupied slots in
// nibble order (`capacity` of them constructed, the first size() in use),
// then its floor and ceiling. Deep in a large tree most nodes hold two or
// three children: a node with all 16 slots was 600 bytes (and the walks
// read all of it), a node of two is 208, and what a walk reads (the mask,
// the summary, the slots) is in its first 96. A node that must take a child
// while full is replaced by a copy with twice the room (AddSlot in
// digest_tree.cc): under the sharing rule above that is one more path copy.
// Made and freed only by the functions below (NodeRef frees through
// DestroyInner).
struct Inner {
  // Bit c: the child at nibble c is present; it is slots()[IndexOf(c)].
  uint16_t occupied = 0;
  uint8_t capacity = 0;
  RefCount refs;  // (in the padding before the summary)
  Summary summary;

  int size() const { return Popcount16(occupied); }
  bool Has(int nibble) const { return (occupied >> nibble) & 1; }
  int IndexOf(int nibble) const {
    return Popcount16(static_cast<uint16_t>(occupied & ((1u << nibble) - 1)));
  }
  Slot* slot_block() { return reinterpret_cast<Slot*>(this + 1); }
  const Slot* slot_block() const { return reinterpret_cast<const Slot*>(this + 1); }
  std::span<Slot> slots() { return {slot_block(), static_cast<size_t>(size())}; }
  std::span<const Slot> slots() const { return {slot_block(), static_cast<size_t>(size())}; }
  // The child at `nibble`, or null.
  const Slot* Find(int nibble) const {
    return Has(nibble) ? &slot_block()[IndexOf(nibble)] : nullptr;
  }
  Slot* Find(int nibble) { return Has(nibble) ? &slot_block()[IndexOf(nibble)] : nullptr; }
  // <= the meet of the leaves' versions (count > 0).
  itc::Version& floor() { return bounds()[0]; }
  const itc::Version& floor() const { return bounds()[0]; }
  // >= the join of the leaves' versions (count > 0).
  itc::Version& ceiling() { return bounds()[1]; }
  const itc::Version& ceiling() const { return bounds()[1]; }
  // The bytes of the block: the node, its slots and its bounds.
  size_t bytes() const {
    return sizeof(Inner) + capacity * sizeof(Slot) + 2 * sizeof(itc::Version);
  }

 private:
  itc::Version* bounds() { return reinterpret_cast<itc::Version*>(slot_block() + capacity); }
  const itc::Version* bounds() const {
    return reinterpret_cast<const itc::Version*>(slot_block() + capacity);
  }
};
static_assert(sizeof(Inner) % alignof(Slot) == 0 && sizeof(Slot) % alignof(itc::Version) == 0);

// A new empty node with room for `capacity` (1..kFanout) children, count 1.
Inner* NewInner(int capacity);
// A copy of `node` (its children shared) with room for `capacity` >=
// node.size() children, count 1.
Inner* CopyInner(const Inner& node, int capacity);
void DestroyInner(Inner* node);

inline int Nibble(const Path& path, int depth) {
  const uint8_t byte = path[depth / 2];
  return depth % 2 == 0 ? byte >> 4 : byte & 0x0f;
}

inline void XorInto(Path& into, const Path& path) {
  for (size_t i = 0; i < into.size(); ++i) into[i] ^= path[i];
}

// A read-only position in a tree: an inner node, a single leaf, or nothing.
struct View {
  const Inner* inner = nullptr;
  const Leaf* leaf = nullptr;
  bool empty() const { return !inner && !leaf; }
  Summary summary() const;
  // The child at `nibble` of a view at `depth`.
  View Child(int depth, int nibble) const;
};

NodeRef NewRoot();
// False (and no change) if the path is already present.
bool Insert(NodeRef& root, std::shared_ptr<const Leaf> leaf);
// Null (and no change) if absent.
std::shared_ptr<const Leaf> Remove(NodeRef& root, const Path& path);
// Removes every path present (absent or repeated ones are skipped), in one
// walk of the paths in order that visits each node once, and leaves the floors
// and ceilings as they were: removing a version keeps them bounds, and
// recomputing them would read every sibling's version (most of a session
// commit's cost when thousands of messages were deleted).
void RemoveBatch(NodeRef& root, std::span<const Path> paths);
const Leaf* Find(const Inner* root, const Path& path);

// Asks for every child of `view` (inner node or leaf) at once, so that the
// loads of a loop over the children overlap instead of following one another.
void PrefetchChildren(View view);

// Every leaf under `view`.
void CollectAll(View view, std::vector<const Leaf*>& out);
struct Tagged {
  uint64_t fingerprint;
  const Leaf* leaf;
};
// Every leaf under `view` with its fingerprint, reading no leaf that sits in a
// slot (only a lone leaf `view` is read).
void CollectTagged(View view, std::vector<Tagged>& out);
// The causal sieve of `view` against `seen`: leaves whose version is not <=
// `seen` go to `unseen`, the others to `seen_out` (either may be null).
void Sieve(View view, const itc::Version& seen, std::vector<const Leaf*>* unseen,
           std::vector<const Leaf*>* seen_out);

}  // namespace once::gossip::internal
