#include "digest_tree.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include "leaf_blocks.h"
#include "once/base/result.h"
#include "once/gossip/limits.h"

namespace once::gossip::internal {

namespace {
void Destroy(Inner* node) { DestroyInner(node); }
void Destroy(const Leaf* leaf);

}  // namespace

template <typename T>
CountedRef<T>::CountedRef(const CountedRef& other) : ptr_(other.ptr_) {
  if (ptr_) ptr_->refs.Add();
}

template <typename T>
CountedRef<T>& CountedRef<T>::operator=(const CountedRef& other) {
  CountedRef copy(other);
  std::swap(ptr_, copy.ptr_);
  return *this;
}

template <typename T>
CountedRef<T>& CountedRef<T>::operator=(CountedRef&& other) noexcept {
  CountedRef taken(std::move(other));
  std::swap(ptr_, taken.ptr_);
  return *this;
}

template <typename T>
CountedRef<T>::~CountedRef() {
  if (ptr_ && ptr_->refs.Drop()) Destroy(ptr_);
}

template <typename T>
void CountedRef<T>::reset() {
  CountedRef dropped(std::move(*this));
}

template <typename T>
bool CountedRef<T>::Unique() const {
  return ptr_->refs.One();
}

template class CountedRef<Inner>;
template class CountedRef<const Leaf>;

}  // namespace once::gossip::internal

namespace once::gossip {

RemovedLeaves& RemovedLeaves::operator=(RemovedLeaves&& other) noexcept {
  if (this != &other) {
    Drop();
    leaves_ = std::move(other.leaves_);
  }
  return *this;
}

// Each leaf is asked for 24 drops ahead: a drop reads the leaf's count (a
// cache miss), and this way the misses overlap instead of following one
// another (8 ahead left most of a drop's time waiting for its leaf).
void RemovedLeaves::Drop() {
  constexpr size_t kAhead = 24;
  for (size_t i = 0; i < leaves_.size(); ++i) {
    if (i + kAhead < leaves_.size()) __builtin_prefetch(leaves_[i + kAhead].get());
    leaves_[i].reset();
  }
  leaves_.clear();
}

}  // namespace once::gossip

namespace once::gossip::internal {

namespace {

// Room for two elements: a bucket is made for a first leaf, a branch by a
// split (with room for the nibbles it found).
constexpr int kCapacityMin = 2;

// The smallest power of two >= `n` (and kCapacityMin), at most `max`.
int CapacityFor(int n, int max) {
  int capacity = kCapacityMin;
  while (capacity < n) capacity *= 2;
  return std::min(capacity, max);
}

Inner* AllocateInner(bool bucket, int capacity) {
  ONCE_CHECK(capacity >= 1 && capacity <= (bucket ? kBucketMax : kFanout));
  return static_cast<Inner*>(::operator new(Inner::BlockBytes(bucket, capacity)));
}

void ConstructElements(Inner& node, int from) {
  for (int i = from; i < node.capacity; ++i) {
    if (node.bucket) {
      new (&node.entry_block()[i]) Entry();
    } else {
      new (&node.child_block()[i]) NodeRef();
    }
  }
}

// A node made from `from`'s header (count 1) with room for `capacity`, its
// elements and bounds not yet constructed.
Inner* NewLike(const Inner& from, int capacity) {
  Inner* node = new (AllocateInner(from.bucket, capacity)) Inner(from);  // RefCount's copy is 1
  node->capacity = static_cast<uint8_t>(capacity);
  return node;
}

// A new node (count 1) with room for `capacity` >= from.size() that holds
// `from`'s elements and bounds: copied from a const node (its children and
// leaves then shared), moved from an owned one (a copy would touch every
// child's count, each a cache miss).
template <typename From>
Inner* Rehoused(From& from, int capacity) {
  constexpr bool kMove = !std::is_const_v<From>;
  auto take = [](auto& x) -> auto&& {
    if constexpr (kMove) {
      return std::move(x);
    } else {
      return std::as_const(x);
    }
  };
  Inner* node = NewLike(from, capacity);
  const int size = from.size();
  for (int i = 0; i < size; ++i) {
    if (from.bucket) {
      new (&node->entry_block()[i]) Entry(take(from.entry_block()[i]));
    } else {
      new (&node->child_block()[i]) NodeRef(take(from.child_block()[i]));
    }
  }
  ConstructElements(*node, size);
  new (&node->floor()) itc::Version(take(from.floor()));
  new (&node->ceiling()) itc::Version(take(from.ceiling()));
  return node;
}

// Compared without a call to memcmp.
bool SamePath(const Path& a, const Path& b) {
  uint64_t x[2], y[2];
  std::memcpy(x, a.data(), sizeof(x));
  std::memcpy(y, b.data(), sizeof(y));
  return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
}

// The index of the first entry of a bucket whose path is not below `path`.
int LowerBound(const Inner& bucket, const Path& path) {
  const std::span<const Entry> entries = bucket.entries();
  const auto it = std::partition_point(entries.begin(), entries.end(),
                                       [&](const Entry& e) { return PathLess(e.path, path); });
  return static_cast<int>(it - entries.begin());
}

// The index of `path` in a bucket, or -1.
int IndexIn(const Inner& bucket, const Path& path) {
  const int i = LowerBound(bucket, path);
  return i < bucket.size() && SamePath(bucket.entry_block()[i].path, path) ? i : -1;
}

}  // namespace

Summary View::summary() const {
  if (!node) return Summary{};
  if (whole()) return node->summary;
  Summary s;
  for (const Entry& e : entries()) XorInto(s.digest, e.path);
  s.count = static_cast<uint64_t>(end - begin);
  return s;
}

View View::Child(int depth, int nibble) const {
  if (!node) return View{};
  if (!node->bucket) {
    const NodeRef* child = node->Find(nibble);
    return child ? Of(*child) : View{};
  }
  // The entries in view share their first `depth` nibbles and are in path
  // order, so those with `nibble` next are one run.
  const Entry* e = node->entry_block();
  int from = begin;
  while (from < end && Nibble(e[from].path, depth) < nibble) ++from;
  int to = from;
  while (to < end && Nibble(e[to].path, depth) == nibble) ++to;
  return View{node, static_cast<uint8_t>(from), static_cast<uint8_t>(to)};
}

Inner* NewInner(bool bucket, int capacity) {
  Inner* node = new (AllocateInner(bucket, capacity)) Inner();
  node->bucket = bucket;
  node->capacity = static_cast<uint8_t>(capacity);
  ConstructElements(*node, 0);
  new (&node->floor()) itc::Version();
  new (&node->ceiling()) itc::Version();
  return node;
}

Inner* CopyInner(const Inner& from, int capacity) {
  ONCE_CHECK(capacity >= from.size());
  return Rehoused(from, capacity);
}

void DestroyInner(Inner* node) {
  node->floor().~Version();
  node->ceiling().~Version();
  for (int i = 0; i < node->capacity; ++i) {
    if (node->bucket) {
      node->entry_block()[i].~Entry();
    } else {
      node->child_block()[i].~NodeRef();
    }
  }
  const size_t bytes = node->bytes();
  node->~Inner();
  FreeSized(node, bytes);
}

NodeRef NewRoot() { return NodeRef(NewInner(true, kCapacityMin)); }

LeafRef MakeLeaf(const Path& path, itc::Version version, std::span<const uint8_t> payload) {
  static_assert(alignof(Leaf) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  ONCE_CHECK(payload.size() <= kPayloadBytesMax);
  void* block = AllocateLeafBlock(sizeof(Leaf) + payload.size());
  // Count 1: the LeafRef below.
  Leaf* leaf = new (block) Leaf(path, std::move(version), static_cast<uint32_t>(payload.size()));
  if (!payload.empty()) {
    std::memcpy(static_cast<uint8_t*>(block) + sizeof(Leaf), payload.data(), payload.size());
  }
  return LeafRef(leaf);
}

namespace {

void Destroy(const Leaf* leaf) {
  const size_t bytes = sizeof(Leaf) + leaf->payload_size;
  leaf->~Leaf();
  FreeLeafBlock(const_cast<Leaf*>(leaf), bytes);
}

}  // namespace

namespace {

// Makes `node` exclusively ours, copying it if anything else holds it (a
// snapshot, or a parent shared with one). Called on every node of a path,
// from the root down, before the node is changed (see "Sharing").
Inner* Own(NodeRef& node) {
  if (!node.Unique()) node = NodeRef(CopyInner(*node, node->capacity));
  return node.get();
}

// A copy of an owned, full node with twice the room, its elements moved.
Inner* Grown(Inner& from) {
  return Rehoused(from, std::min(from.bucket ? kBucketMax : kFanout, 2 * from.capacity));
}

// Adds an empty child slot at `nibble` (absent) to an owned branch, growing
// it into a larger block if it is full; returns the slot.
NodeRef& AddSlot(NodeRef& node_ptr, int nibble) {
  if (node_ptr->full()) node_ptr = NodeRef(Grown(*node_ptr));
  Inner& node = *node_ptr;
  const int index = node.IndexOf(nibble);
  NodeRef* slots = node.child_block();
  std::move_backward(slots + index, slots + node.size(), slots + node.size() + 1);
  slots[index] = NodeRef();
  node.occupied |= static_cast<uint16_t>(1u << nibble);
  return slots[index];
}

// Removes the child at `nibble` (present) of an owned branch.
void EraseSlot(Inner& node, int nibble) {
  const int index = node.IndexOf(nibble);
  NodeRef* slots = node.child_block();
  const int size = node.size();
  std::move(slots + index + 1, slots + size, slots + index);
  slots[size - 1] = NodeRef();
  node.occupied &= static_cast<uint16_t>(~(1u << nibble));
}

// Removes the entry at `index` of an owned bucket and returns its leaf.
LeafRef EraseEntry(Inner& node, int index) {
  Entry* entries = node.entry_block();
  LeafRef removed = std::move(entries[index].leaf);
  std::move(entries + index + 1, entries + node.size(), entries + index);
  entries[node.size() - 1] = Entry();
  --node.occupied;
  return removed;
}

// Widens the node's bounds to take in versions between `low` and `high` (a
// leaf's version twice, or a child's bounds); the first sets them.
void AddBounds(Inner& node, const itc::Version& low, const itc::Version& high, bool first) {
  if (first) {
    node.floor() = low;
    node.ceiling() = high;
    return;
  }
  // Leq does not allocate; most inserts move only one of the two bounds.
  if (!itc::Leq(node.floor(), low)) node.floor() = itc::Meet(node.floor(), low);
  if (!itc::Leq(high, node.ceiling())) node.ceiling() = itc::Join(node.ceiling(), high);
}

void AddLeafSummary(Inner& node, const Leaf& leaf) {
  XorInto(node.summary.digest, leaf.path);
  AddBounds(node, leaf.version, leaf.version, node.summary.count++ == 0);
}

void RecomputeBounds(Inner& node) {
  bool first = true;
  if (node.bucket) {
    for (const Entry& e : node.entries()) {
      AddBounds(node, e.leaf->version, e.leaf->version, first);
      first = false;
    }
  } else {
    for (const NodeRef& child : node.children()) {
      AddBounds(node, child->floor(), child->ceiling(), first);
      first = false;
    }
  }
  if (first) node.floor() = node.ceiling() = itc::Version{};
}

// Replaces an owned, full bucket at `depth` by a branch of buckets, one per
// nibble at `depth` among its entries (moved), each with exact bounds.
Inner* Split(NodeRef& node_ptr, int depth) {
  ONCE_CHECK(depth < kDepthMax);  // entries at full depth share their path: one at most
  Inner& from = *node_ptr;
  const std::span<Entry> entries = from.entries();
  uint16_t nibbles = 0;
  for (const Entry& e : entries) nibbles |= static_cast<uint16_t>(1u << Nibble(e.path, depth));
  NodeRef branch(NewInner(false, CapacityFor(Popcount16(nibbles), kFanout)));
  branch->summary = from.summary;
  branch->floor() = std::move(from.floor());
  branch->ceiling() = std::move(from.ceiling());
  for (size_t begin = 0, end = 0; begin < entries.size(); begin = end) {
    const int nibble = Nibble(entries[begin].path, depth);
    end = begin + 1;
    while (end < entries.size() && Nibble(entries[end].path, depth) == nibble) ++end;
    NodeRef child(NewInner(true, CapacityFor(static_cast<int>(end - begin), kBucketMax)));
    for (size_t i = begin; i < end; ++i) {
      AddLeafSummary(*child, *entries[i].leaf);
      child->entry_block()[i - begin] = std::move(entries[i]);
    }
    child->occupied = static_cast<uint16_t>(end - begin);
    AddSlot(branch, nibble) = std::move(child);
  }
  node_ptr = std::move(branch);
  return node_ptr.get();
}

// Moves (or, from a node shared with another holder, copies) every entry
// under `node` to `out`, in path order.
void TakeEntries(NodeRef& node, bool ours, Entry*& out) {
  ours = ours && node.Unique();
  if (node->bucket) {
    for (Entry& e : node->entries()) {
      if (ours) {
        *out++ = std::move(e);
      } else {
        *out++ = e;
      }
    }
    return;
  }
  for (NodeRef& child : node->children()) TakeEntries(child, ours, out);
}

// Replaces an owned branch of at most kBucketMax leaves by one bucket of
// them, with the branch's summary and bounds.
Inner* Merged(NodeRef& node_ptr) {
  Inner& from = *node_ptr;
  const int count = static_cast<int>(from.summary.count);
  ONCE_CHECK(!from.bucket && count <= kBucketMax);
  NodeRef bucket(NewInner(true, CapacityFor(count, kBucketMax)));
  bucket->summary = from.summary;
  bucket->floor() = std::move(from.floor());
  bucket->ceiling() = std::move(from.ceiling());
  Entry* out = bucket->entry_block();
  for (NodeRef& child : from.children()) TakeEntries(child, true, out);
  ONCE_CHECK(out == bucket->entry_block() + count);
  bucket->occupied = static_cast<uint16_t>(count);
  node_ptr = std::move(bucket);
  return node_ptr.get();
}

// A branch that a removal left with kBucketMerge leaves or fewer becomes a
// bucket.
Inner* MergeIfSmall(NodeRef& node_ptr) {
  if (!node_ptr->bucket && node_ptr->summary.count <= kBucketMerge) return Merged(node_ptr);
  return node_ptr.get();
}

// Moves the leaves of `leaves` (in path order) whose path `bucket` does not
// hold to the front, in order (the others behind them), and returns how many
// they are.
size_t DropPresent(const Inner& bucket, std::span<LeafRef> leaves) {
  const std::span<const Entry> entries = bucket.entries();
  size_t kept = 0;
  size_t e = 0;
  for (LeafRef& leaf : leaves) {
    while (e < entries.size() && PathLess(entries[e].path, leaf->path)) ++e;
    if (e < entries.size() && SamePath(entries[e].path, leaf->path)) continue;
    if (&leaves[kept] != &leaf) std::swap(leaves[kept], leaf);
    ++kept;
  }
  return kept;
}

// Merges `leaves` (in path order, none present) into an owned bucket with
// room for them all, growing its block if needed, and adds each to its
// summary and bounds. Returns the summary of what it added.
Summary MergeIntoBucket(NodeRef& node_ptr, std::span<LeafRef> leaves) {
  const int size = node_ptr->size();
  const int total = size + static_cast<int>(leaves.size());
  if (total > node_ptr->capacity) {
    node_ptr = NodeRef(Rehoused(*node_ptr, CapacityFor(total, kBucketMax)));
  }
  Inner& node = *node_ptr;
  Summary added;
  for (const LeafRef& leaf : leaves) {
    AddLeafSummary(node, *leaf);
    XorInto(added.digest, leaf->path);
  }
  added.count = leaves.size();
  // From the back, so that each entry moves once.
  Entry* entries = node.entry_block();
  int from = size - 1;
  for (int to = total - 1, next = static_cast<int>(leaves.size()) - 1; next >= 0; --to) {
    if (from >= 0 && PathLess(leaves[next]->path, entries[from].path)) {
      entries[to] = std::move(entries[from--]);
    } else {
      entries[to].path = leaves[next]->path;
      entries[to].leaf = std::move(leaves[next--]);
    }
  }
  node.occupied = static_cast<uint16_t>(total);
  return added;
}

// InsertBatch under the node at `depth`. Returns the summary of what it
// inserted (as RemoveSorted returns what it removed).
Summary InsertRun(NodeRef& node_ptr, int depth, std::span<LeafRef> leaves) {
  if (Own(node_ptr)->bucket) {
    leaves = leaves.first(DropPresent(*node_ptr, leaves));
    if (leaves.empty()) return Summary{};
    if (node_ptr->size() + leaves.size() <= static_cast<size_t>(kBucketMax)) {
      return MergeIntoBucket(node_ptr, leaves);
    }
    Split(node_ptr, depth);
  }
  Summary added;
  for (size_t begin = 0, end = 0; begin < leaves.size(); begin = end) {
    const int nibble = Nibble(leaves[begin]->path, depth);
    end = begin + 1;
    while (end < leaves.size() && Nibble(leaves[end]->path, depth) == nibble) ++end;
    NodeRef* child = node_ptr->Find(nibble);
    if (!child) {
      const int count = static_cast<int>(std::min<size_t>(end - begin, kBucketMax));
      child = &AddSlot(node_ptr, nibble);
      *child = NodeRef(NewInner(true, CapacityFor(count, kBucketMax)));
    }
    const Summary part = InsertRun(*child, depth + 1, leaves.subspan(begin, end - begin));
    if (part.count == 0) continue;
    Inner& node = *node_ptr;
    AddBounds(node, (*child)->floor(), (*child)->ceiling(), node.summary.count == 0);
    XorInto(node.summary.digest, part.digest);
    node.summary.count += part.count;
    XorInto(added.digest, part.digest);
    added.count += part.count;
  }
  return added;
}

// The caller has checked that `path` is present under `node_ptr`.
LeafRef RemoveAt(NodeRef& node_ptr, int depth, const Path& path) {
  Inner* node = Own(node_ptr);
  LeafRef removed;
  if (node->bucket) {
    removed = EraseEntry(*node, IndexIn(*node, path));
  } else {
    const int nibble = Nibble(path, depth);
    NodeRef& child = *node->Find(nibble);
    removed = RemoveAt(child, depth + 1, path);
    if (child->summary.count == 0) EraseSlot(*node, nibble);
  }
  XorInto(node->summary.digest, path);
  --node->summary.count;
  node = MergeIfSmall(node_ptr);
  RecomputeBounds(*node);
  return removed;
}

// What a walk reads first of a node: its header and first elements.
constexpr size_t kPrefetchBytes = sizeof(Inner) + 4 * sizeof(Entry);
// What the batch removal asks for of its next target while it walks this
// one: a bucket's merge pass reads its entries from the first on, so the
// header and the first 20 entries (of a typical 25 or so).
constexpr size_t kRemovalAheadBytes = 512;

// Asks for the cache lines of [start, start + bytes), reading none of them.
void PrefetchBytes(const void* start, size_t bytes) {
  const char* at = static_cast<const char*>(start);
  for (const char* end = at + bytes; at < end; at += 64) __builtin_prefetch(at);
}

// The end of the run of `paths` (sorted) from `begin` that share its nibble
// at `depth`.
size_t RunEnd(std::span<const Path> paths, size_t begin, int depth) {
  const int nibble = Nibble(paths[begin], depth);
  size_t end = begin + 1;
  while (end < paths.size() && Nibble(paths[end], depth) == nibble) ++end;
  return end;
}

// Asks for the start of every child that `paths` lead to, so that their
// loads overlap instead of following one another (the walk is mostly cache
// misses).
void PrefetchTargets(const Inner& node, std::span<const Path> paths, int depth) {
  for (size_t i = 0; i < paths.size(); i = RunEnd(paths, i, depth)) {
    const NodeRef* child = node.Find(Nibble(paths[i], depth));
    if (child) PrefetchStart(child->get());
  }
}

// Moves `count` entries from `from` down to `to` (the ranges may overlap)
// bitwise: an entry is a path and a counted pointer, and moving the pointer
// this way leaves its count as a move would. The slots the entries leave are
// raw bytes afterwards, to be constructed again, never destroyed.
void RelocateEntries(Entry* from, int count, Entry* to) {
  static_assert(std::is_standard_layout_v<Entry> && sizeof(Entry) == sizeof(Path) + sizeof(void*));
  if (count > 0 && from != to) {
    std::memmove(static_cast<void*>(to), static_cast<const void*>(from), count * sizeof(Entry));
  }
}

// Removes those of `paths` (sorted) that a bucket holds, their leaves to
// `dropped`; leaves the bounds. Returns the summary of what it removed. The
// bucket is owned (and so copied if shared) only if it holds one.
Summary RemoveFromBucket(NodeRef& node_ptr, std::span<const Path> paths,
                         std::vector<LeafRef>& dropped) {
  static_assert(kBucketMax <= 64);
  const std::span<const Entry> held = std::as_const(*node_ptr).entries();
  uint64_t gone = 0;  // bit i: entry i is removed
  size_t i = 0;
  for (const Path& path : paths) {  // both in path order: one merge pass
    while (i < held.size() && PathLess(held[i].path, path)) ++i;
    if (i == held.size()) break;
    if (SamePath(held[i].path, path)) gone |= uint64_t{1} << i;
  }
  if (gone == 0) return Summary{};
  Inner& node = *Own(node_ptr);
  Entry* entries = node.entry_block();
  const int size = node.size();
  Summary removed;
  // The removed leaves go to `dropped`, and the kept entries after each
  // close up, a run at a time (RelocateEntries).
  int kept = __builtin_ctzll(gone);
  for (uint64_t rest = gone; rest != 0;) {
    const int r = __builtin_ctzll(rest);
    rest &= rest - 1;
    XorInto(removed.digest, entries[r].path);
    ++removed.count;
    dropped.push_back(std::move(entries[r].leaf));
    entries[r].~Entry();  // its leaf moved out: ending it frees nothing
    const int next = rest != 0 ? __builtin_ctzll(rest) : size;
    RelocateEntries(entries + r + 1, next - r - 1, entries + kept);
    kept += next - r - 1;
  }
  for (int r = kept; r < size; ++r) new (&entries[r]) Entry();
  node.occupied = static_cast<uint16_t>(kept);
  XorInto(node.summary.digest, removed.digest);
  node.summary.count -= removed.count;
  return removed;
}

// Removes those of `paths` (sorted, all under this node's prefix) that are
// present under `node_ptr`, their leaves to `dropped`, in one walk that
// visits each node once; leaves the bounds. Returns the summary of what it
// removed.
Summary RemoveSorted(NodeRef& node_ptr, int depth, std::span<const Path> paths,
                     std::vector<LeafRef>& dropped) {
  if (node_ptr->bucket) return RemoveFromBucket(node_ptr, paths, dropped);
  PrefetchTargets(*node_ptr, paths, depth);
  Summary removed;
  for (size_t begin = 0, end = 0; begin < paths.size(); begin = end) {
    end = RunEnd(paths, begin, depth);
    const int nibble = Nibble(paths[begin], depth);
    if (end < paths.size()) {
      // The next target's start was asked for above; ask for more of it
      // now, so that it arrives while this one is walked.
      if (const NodeRef* next = std::as_const(*node_ptr).Find(Nibble(paths[end], depth))) {
        // Blind: a request sized from the node's header would wait for it.
        PrefetchBytes(next->get(), kRemovalAheadBytes);
      }
    }
    if (!std::as_const(*node_ptr).Find(nibble)) continue;
    NodeRef& child = *Own(node_ptr)->Find(nibble);
    const Summary part = RemoveSorted(child, depth + 1, paths.subspan(begin, end - begin), dropped);
    if (part.count == 0) continue;
    if (child->summary.count == 0) EraseSlot(*node_ptr, nibble);
    XorInto(node_ptr->summary.digest, part.digest);
    node_ptr->summary.count -= part.count;
    XorInto(removed.digest, part.digest);
    removed.count += part.count;
  }
  if (removed.count > 0) MergeIfSmall(node_ptr);
  return removed;
}

}  // namespace

const Leaf* Find(const Inner* root, const Path& path) {
  const Inner* node = root;
  for (int depth = 0; node && !node->bucket; ++depth) {
    const NodeRef* child = node->Find(Nibble(path, depth));
    node = child ? child->get() : nullptr;
  }
  if (!node) return nullptr;
  const int i = IndexIn(*node, path);
  return i < 0 ? nullptr : node->entry_block()[i].leaf.get();
}

bool Insert(NodeRef& root, LeafRef leaf) {
  if (Find(root.get(), leaf->path)) return false;  // no node copied
  return InsertBatch(root, std::span<LeafRef>(&leaf, 1)) == 1;
}

size_t InsertBatch(NodeRef& root, std::span<LeafRef> leaves) {
  return leaves.empty() ? 0 : InsertRun(root, 0, leaves).count;
}

LeafRef Remove(NodeRef& root, const Path& path) {
  if (!Find(root.get(), path)) return LeafRef();
  return RemoveAt(root, 0, path);
}

RemovedLeaves RemoveBatch(NodeRef& root, std::span<const Path> paths) {
  // Sorted, the paths under one node are a run: one walk visits each node
  // once.
  if (paths.empty()) return RemovedLeaves();
  // A session's deletions come sorted (it sieves each listed node in path
  // order, the nodes in path order); any others are sorted here. (A lambda,
  // so that the comparison is inlined: a function pointer was called for
  // each of ~14 comparisons a path.)
  const auto less = [](const Path& a, const Path& b) { return PathLess(a, b); };
  std::vector<Path> copy;
  std::span<const Path> sorted = paths;
  if (!std::is_sorted(paths.begin(), paths.end(), less)) {
    copy.assign(paths.begin(), paths.end());
    std::sort(copy.begin(), copy.end(), less);
    sorted = copy;
  }
  std::vector<LeafRef> dropped;
  dropped.reserve(sorted.size());
  (void)RemoveSorted(root, 0, sorted, dropped);
  return RemovedLeaves(std::move(dropped));
}

void PrefetchChildren(View view) {
  if (!view.node || view.node->bucket) return;
  for (const NodeRef& child : view.node->children()) PrefetchStart(child.get());
}

void PrefetchStart(const Inner* node) { PrefetchBytes(node, kPrefetchBytes); }

void PrefetchLeaves(View view) {
  if (!view.bucket()) return;
  PrefetchRun(view.run());
}

void PrefetchRun(const EntryRun& run) { PrefetchBytes(run.begin, run.count * sizeof(Entry)); }

void PrefetchLeaf(const Leaf* leaf) { PrefetchBytes(leaf, 128); }

void PrefetchNextChild(View view, int nibble) {
  if (!view.node || view.node->bucket) return;
  const unsigned after = view.node->occupied & ~((2u << nibble) - 1);
  if (after == 0) return;
  const View next = View::Of(*view.node->Find(__builtin_ctz(after)));
  if (next.bucket()) {
    PrefetchLeaves(next);
  } else {
    PrefetchChildren(next);
  }
}

void CollectAll(View view, std::vector<const Leaf*>& out) {
  if (!view.node) return;
  if (view.node->bucket) {
    for (const Entry& e : view.entries()) out.push_back(e.leaf.get());
    return;
  }
  for (const NodeRef& child : view.node->children()) CollectAll(View::Of(child), out);
}

void ListRuns(View view, std::vector<EntryRun>& out) {
  if (!view.node) return;
  if (view.node->bucket) {
    if (!view.empty()) out.push_back(view.run());
    return;
  }
  // A deep subtree is mostly cache misses: ask for every child at once so
  // that their loads overlap instead of following one another.
  PrefetchChildren(view);
  for (unsigned rest = view.node->occupied; rest != 0; rest &= rest - 1) {
    const int nibble = __builtin_ctz(rest);
    ListRuns(View::Of(*view.node->Find(nibble)), out);
  }
}

void Sieve(View view, const itc::Version& seen, std::vector<const Leaf*>* unseen,
           std::vector<const Leaf*>* seen_out) {
  if (view.empty()) return;
  if (itc::Leq(view.ceiling(), seen)) {
    if (seen_out) CollectAll(view, *seen_out);
    return;
  }
  if (!itc::Leq(view.floor(), seen)) {
    if (unseen) CollectAll(view, *unseen);
    return;
  }
  if (view.node->bucket) {
    for (const Entry& e : view.entries()) {
      auto* out = itc::Leq(e.leaf->version, seen) ? seen_out : unseen;
      if (out) out->push_back(e.leaf.get());
    }
    return;
  }
  for (const NodeRef& child : view.node->children()) {
    Sieve(View::Of(child), seen, unseen, seen_out);
  }
}

}  // namespace once::gossip::internal
