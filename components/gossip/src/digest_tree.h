// The digest tree: a copy-on-write 16-ary radix trie over message paths whose
// lower levels are buckets: a node is either a branch (its occupied child
// slots, one per nibble) or a bucket (up to kBucketMax leaves in one sorted
// array, each with its path beside its pointer). A bucket that must take one
// more leaf splits into a branch of buckets by the next nibble; a branch left
// with kBucketMerge leaves or fewer becomes one bucket again. Listing, sieving
// and removing under a bucket read one array instead of a chain of small
// nodes and every leaf they hold (each a cache miss).
//
// Every node caches the XOR of its leaves' paths, their count, and bounds on
// their versions: a floor <= their meet and a ceiling >= their join, so that
// two replicas compare level by level and the causal sieve can settle a whole
// subtree at once. Inserts, splits and single removals keep the bounds exact
// (given exact children); a batch of removals, and the bucket it may merge a
// branch into, leave them as they were, which are still bounds (the sieve
// only needs bounds to be correct, and exact bounds to be quick). A part of a
// bucket (View) is bounded by its bucket's bounds.
//
// The summaries and the comparison do not depend on where a branch ends and
// its buckets start: the summary of the leaves under a path prefix is the
// same whatever holds them, so two replicas of one set compare equal however
// their trees grew (the wire never sees the difference).
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
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "once/gossip/replica.h"

namespace once::gossip::internal {

inline constexpr int kFanout = 16;
inline constexpr int kDepthMax = 32;  // nibbles in a Path
// The most leaves a bucket holds; one more splits it. No more than a
// listing holds (wire::kListingLeavesMax), so a bucket is listed whole, in
// place; a listed branch has the runs of its buckets gathered (ListRuns).
inline constexpr int kBucketMax = 64;
// A branch left with this many leaves or fewer becomes a bucket (well below
// kBucketMax, so that a node does not split and merge back and forth).
inline constexpr int kBucketMerge = 16;

// The number of references to a node (NodeRefs) or a leaf (LeafRefs). A
// copy of a node is a new node, with a count of its own (1: the NodeRef that
// adopts it).
class RefCount {
 public:
  RefCount() = default;
  RefCount(const RefCount&) {}
  RefCount& operator=(const RefCount&) = delete;
  // The caller holds one already. (Const: a reference to a const leaf counts
  // too; the count is not the leaf's value.)
  void Add() const { n_.fetch_add(1, std::memory_order_relaxed); }
  // True if that was the last reference. The last one is read, not
  // written: with a count of 1 no other thread holds a reference, and only a
  // holder can make one, so no one else can read or change the count again.
  // The acquire load orders every earlier holder's use (each let go with a
  // release decrement) before the caller frees the object, as the
  // subtraction's would, without the locked instruction, which on x86 holds
  // back the loads after it: a commit drops thousands of leaves, each a cache
  // miss, and their misses overlap better without it (RemovedLeaves::Drop,
  // BENCHMARKS.md).
  bool Drop() const {
    if (n_.load(std::memory_order_acquire) == 1) return true;
    return n_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
  bool One() const { return n_.load(std::memory_order_acquire) == 1; }

 private:
  mutable std::atomic<uint32_t> n_{1};
};

// A message as the tree holds it. Made only by MakeLeaf, which puts the
// payload bytes in the leaf's own heap block, right after the leaf (a leaf
// block: leaf_blocks.h, kept on the thread that frees it for its next leaf);
// its count is in the leaf (LeafRef), and its version too
// (itc::Version::kInlineNodes), so a leaf of a two-party universe is one
// block, not three: fewer blocks for a removal to free and for the allocator
// to sort later.
//
// What dropping a leaf reads (its count, its payload's size, its version's
// size) is in its first 28 bytes, and the payload needs no pointer (it
// starts where the leaf ends). A drop misses the cache for each leaf a
// redaction removes; this way most miss once, not twice: a leaf of a payload
// up to 16 bytes is a 96-byte block, which tcmalloc places 0 or 32 bytes
// into a line (BENCHMARKS.md, "the leaf's first 28 bytes").
struct Leaf {
  Leaf(const Path& p, itc::Version v, uint32_t payload_bytes)
      : payload_size(payload_bytes), path(p), version(std::move(v)) {}
  Leaf(const Leaf&) = delete;  // the payload lives in this leaf's block
  Leaf& operator=(const Leaf&) = delete;

  // The payload, in the leaf's block; valid as long as the leaf.
  std::span<const uint8_t> payload() const {
    return {reinterpret_cast<const uint8_t*>(this + 1), payload_size};
  }

  RefCount refs;
  uint32_t payload_size;  // bytes (at most kPayloadBytesMax)
  Path path{};
  itc::Version version;
};
static_assert(offsetof(Leaf, version) + sizeof(uint32_t) <= 28 && sizeof(Leaf) == 80);

LeafRef MakeLeaf(const Path& path, itc::Version version, std::span<const uint8_t> payload);

// A path's hash for hash tables: its first eight bytes (a path is itself a
// hash of a version, so they are already well mixed).
struct PathHash {
  size_t operator()(const Path& path) const {
    size_t h;
    std::memcpy(&h, path.data(), sizeof(h));
    return h;
  }
};

// Eight bytes as a big-endian word, and back (paths, and listings on the
// wire, are big-endian).
inline uint64_t LoadBig64(const uint8_t* bytes) {
  uint64_t v;
  std::memcpy(&v, bytes, sizeof(v));
  return __builtin_bswap64(v);
}
inline void StoreBig64(uint8_t* bytes, uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(bytes, &v, sizeof(v));
}

// A path's bytes 0..7 and 8..15 as big-endian words: comparing the pairs
// compares paths (path order).
inline uint64_t High64(const Path& path) { return LoadBig64(path.data()); }
inline uint64_t Low64(const Path& path) { return LoadBig64(path.data() + 8); }
// Path order (the bytes', as two words: no call to memcmp).
inline bool PathLess(const Path& a, const Path& b) {
  const uint64_t ha = High64(a), hb = High64(b);
  return ha != hb ? ha < hb : Low64(a) < Low64(b);
}

// A leaf's key in a listing of the node at `depth` (nibbles): the 64 bits of
// its path that follow the node's prefix (at a depth past 16, the last 64,
// which the prefix partly covers). Every path under the node shares the
// prefix, so their keys ascend in path order, and two of them share a key
// only if they collide in those 64 bits.
inline uint64_t ListingKey(const Path& path, int depth) {
  if (depth >= 16) return Low64(path);
  const int byte = depth / 2;  // the first byte with a nibble of the key
  const uint64_t key = LoadBig64(path.data() + byte);
  return depth % 2 == 0 ? key : key << 4 | path[byte + 8] >> 4;
}

// One leaf of a bucket: its path beside it, so that finding, listing and
// deleting under a bucket do not read the leaf.
struct Entry {
  Path path{};
  LeafRef leaf;
};

// Consecutive entries of one bucket.
struct EntryRun {
  const Entry* begin = nullptr;
  uint32_t count = 0;
  std::span<const Entry> entries() const { return {begin, count}; }
};

// std::popcount without -mpopcnt is a call into libgcc (2% of a session).
inline int Popcount16(uint16_t v) {
  unsigned x = v;
  x = x - ((x >> 1) & 0x5555u);
  x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
  x = (x + (x >> 4)) & 0x0f0fu;
  return static_cast<int>((x + (x >> 8)) & 0x1fu);
}

// A node and, in the same heap block after it, its elements (`capacity` of
// them constructed, the first size() in use), then its floor and ceiling.
// A branch's elements are its children (NodeRefs) in nibble order; a
// bucket's are its entries in path order, which is the order of a listing
// (ListingKey), so a listing of any part of it reads the entries in place.
// A node that must take an element while full is replaced by a copy with
// twice the room (digest_tree.cc): under the sharing rule above that is one
// more path copy. Made and freed only by the functions below (NodeRef frees
// through DestroyInner).
struct Inner {
  // A branch: bit c says the child at nibble c is present; it is
  // children()[IndexOf(c)]. A bucket: the number of entries.
  uint16_t occupied = 0;
  uint8_t capacity = 0;
  bool bucket = false;
  RefCount refs;  // (in the padding before the summary)
  Summary summary;

  int size() const { return bucket ? occupied : Popcount16(occupied); }
  bool full() const { return size() == capacity; }

  // A branch's children.
  bool Has(int nibble) const { return (occupied >> nibble) & 1; }
  int IndexOf(int nibble) const {
    return Popcount16(static_cast<uint16_t>(occupied & ((1u << nibble) - 1)));
  }
  NodeRef* child_block() { return reinterpret_cast<NodeRef*>(this + 1); }
  const NodeRef* child_block() const { return reinterpret_cast<const NodeRef*>(this + 1); }
  std::span<NodeRef> children() { return {child_block(), static_cast<size_t>(size())}; }
  std::span<const NodeRef> children() const { return {child_block(), static_cast<size_t>(size())}; }
  // The child at `nibble`, or null.
  const NodeRef* Find(int nibble) const {
    return Has(nibble) ? &child_block()[IndexOf(nibble)] : nullptr;
  }
  NodeRef* Find(int nibble) { return Has(nibble) ? &child_block()[IndexOf(nibble)] : nullptr; }

  // A bucket's entries.
  Entry* entry_block() { return reinterpret_cast<Entry*>(this + 1); }
  const Entry* entry_block() const { return reinterpret_cast<const Entry*>(this + 1); }
  std::span<Entry> entries() { return {entry_block(), static_cast<size_t>(size())}; }
  std::span<const Entry> entries() const { return {entry_block(), static_cast<size_t>(size())}; }
  // <= the meet of the leaves' versions (count > 0).
  itc::Version& floor() { return bounds()[0]; }
  const itc::Version& floor() const { return bounds()[0]; }
  // >= the join of the leaves' versions (count > 0).
  itc::Version& ceiling() { return bounds()[1]; }
  const itc::Version& ceiling() const { return bounds()[1]; }
  size_t element_bytes() const { return bucket ? sizeof(Entry) : sizeof(NodeRef); }
  // The bytes of the block: the node, its elements and its bounds.
  size_t bytes() const { return BlockBytes(bucket, capacity); }
  static size_t BlockBytes(bool bucket, int capacity) {
    return sizeof(Inner) + capacity * (bucket ? sizeof(Entry) : sizeof(NodeRef)) +
           2 * sizeof(itc::Version);
  }

 private:
  itc::Version* bounds() {
    return reinterpret_cast<itc::Version*>(reinterpret_cast<char*>(this + 1) +
                                           capacity * element_bytes());
  }
  const itc::Version* bounds() const {
    return reinterpret_cast<const itc::Version*>(reinterpret_cast<const char*>(this + 1) +
                                                 capacity * element_bytes());
  }
};
static_assert(sizeof(Inner) % alignof(Entry) == 0 && sizeof(Inner) % alignof(NodeRef) == 0);
static_assert(sizeof(Entry) % alignof(itc::Version) == 0 &&
              sizeof(NodeRef) % alignof(itc::Version) == 0);

// A new empty node (bucket or branch) with room for `capacity` elements
// (1..kBucketMax for a bucket, 1..kFanout for a branch), count 1.
Inner* NewInner(bool bucket, int capacity);
// A copy of `node` (its children and leaves shared) with room for
// `capacity` >= node.size() elements, count 1.
Inner* CopyInner(const Inner& node, int capacity);
void DestroyInner(Inner* node);

inline int Nibble(const Path& path, int depth) {
  const uint8_t byte = path[depth / 2];
  return depth % 2 == 0 ? byte >> 4 : byte & 0x0f;
}

// Two words at a time (a loop over the bytes was not vectorized: 48
// instructions where this is six).
inline void XorInto(Path& into, const Path& path) {
  static_assert(sizeof(Path) == 2 * sizeof(uint64_t));
  uint64_t a[2], b[2];
  std::memcpy(a, into.data(), sizeof(a));
  std::memcpy(b, path.data(), sizeof(b));
  a[0] ^= b[0];
  a[1] ^= b[1];
  std::memcpy(into.data(), a, sizeof(a));
}

// A read-only position in a tree: a branch, or the entries [begin, end) of a
// bucket (all of it, or the part under a longer prefix), or nothing.
struct View {
  const Inner* node = nullptr;
  uint8_t begin = 0;
  uint8_t end = 0;

  // All of `node` (which may be null).
  static View Of(const Inner* node) {
    if (!node) return View{};
    return View{node, 0, static_cast<uint8_t>(node->bucket ? node->size() : 0)};
  }
  static View Of(const NodeRef& node) { return Of(node.get()); }
  bool bucket() const { return node && node->bucket; }
  // All of a node (not a part of a bucket).
  bool whole() const { return node && (!node->bucket || (begin == 0 && end == node->size())); }
  bool empty() const { return !node || (node->bucket ? begin == end : node->summary.count == 0); }
  // The bucket's entries in view (bucket only).
  std::span<const Entry> entries() const {
    return std::span(node->entry_block() + begin, end - begin);
  }
  // The same entries as a run (bucket only).
  EntryRun run() const {
    return EntryRun{node->entry_block() + begin, static_cast<uint32_t>(end - begin)};
  }
  Summary summary() const;
  // Bounds on the versions in view (not empty): the node's own.
  const itc::Version& floor() const { return node->floor(); }
  const itc::Version& ceiling() const { return node->ceiling(); }
  // The child at `nibble` of a view at `depth`.
  View Child(int depth, int nibble) const;
};

NodeRef NewRoot();
// False (and no change) if the path is already present.
bool Insert(NodeRef& root, LeafRef leaf);
// Inserts every leaf of `leaves` (in strictly increasing path order) whose
// path is not present (the others are left in `leaves`, the inserted ones
// moved out), in one walk in path order that visits each node once: a node's
// summary and bounds take each child's change once, not each leaf's, and
// only a bucket compares versions leaf by leaf. The bounds stay exact, as
// with Insert. Returns how many were inserted.
size_t InsertBatch(NodeRef& root, std::span<LeafRef> leaves);
// Null (and no change) if absent.
LeafRef Remove(NodeRef& root, const Path& path);
// Removes every path present (absent or repeated ones are skipped), in one
// walk of the paths in order that visits each node once, and leaves the floors
// and ceilings as they were: removing a version keeps them bounds, and
// recomputing them would read every sibling's version (most of a session
// commit's cost when thousands of messages were deleted). Returns the
// removed leaves, freed when the result is destroyed.
RemovedLeaves RemoveBatch(NodeRef& root, std::span<const Path> paths);
const Leaf* Find(const Inner* root, const Path& path);

// Asks for every child of `view` at once, so that the loads of a loop over
// the children overlap instead of following one another.
void PrefetchChildren(View view);

// Asks for the entries in `view` (a bucket view only). Reads the bucket's
// start: ask for that first (PrefetchStart) when it may be far.
void PrefetchLeaves(View view);
void PrefetchStart(const Inner* node);
// Asks for the entries of `run`.
void PrefetchRun(const EntryRun& run);

// Asks for what a loop over a branch's children reads next in the first
// child after `nibble`: its entries (a bucket), or its children's starts (a
// branch, whose leaves a listing gathers), so that the loop finds them
// arrived. The child's start must have been asked for already
// (PrefetchChildren): this reads it.
void PrefetchNextChild(View view, int nibble);

// Asks for a leaf's first two cache lines: its path, its version (when
// inline) and the start of its payload, which a message sent reads.
void PrefetchLeaf(const Leaf* leaf);

// Every leaf under `view`, in path order.
void CollectAll(View view, std::vector<const Leaf*>& out);
// Every entry under `view`, in path order (a listing's order), as one run
// per bucket under it (empty ones left out), reading no entry and no leaf:
// a listed branch (up to 512 leaves, typically 16 buckets) is a few runs,
// not a pointer per leaf for its listing to write and read back. Asks for
// a branch's children's starts at once (PrefetchChildren).
void ListRuns(View view, std::vector<EntryRun>& out);
// The causal sieve of `view` against `seen`: leaves whose version is not <=
// `seen` go to `unseen`, the others to `seen_out` (either may be null).
void Sieve(View view, const itc::Version& seen, std::vector<const Leaf*>* unseen,
           std::vector<const Leaf*>* seen_out);

}  // namespace once::gossip::internal
