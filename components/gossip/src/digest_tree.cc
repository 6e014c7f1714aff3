#include "digest_tree.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>

#include "once/base/result.h"

namespace once::gossip::internal {

Summary View::summary() const {
  if (inner) return inner->summary;
  if (leaf) return Summary{leaf->path, 1};
  return Summary{};
}

View View::Child(int depth, int nibble) const {
  if (inner) {
    const Slot* slot = inner->Find(nibble);
    return slot ? View{slot->inner.get(), slot->leaf.get()} : View{};
  }
  if (leaf && depth < kDepthMax && Nibble(leaf->path, depth) == nibble) return View{nullptr, leaf};
  return View{};
}

NodeRef::NodeRef(const NodeRef& other) : node_(other.node_) {
  if (node_) node_->refs.Add();
}

NodeRef& NodeRef::operator=(const NodeRef& other) {
  NodeRef copy(other);
  std::swap(node_, copy.node_);
  return *this;
}

NodeRef& NodeRef::operator=(NodeRef&& other) noexcept {
  NodeRef taken(std::move(other));
  std::swap(node_, taken.node_);
  return *this;
}

NodeRef::~NodeRef() {
  if (node_ && node_->refs.Drop()) DestroyInner(node_);
}

void NodeRef::reset() { NodeRef dropped(std::move(*this)); }

bool NodeRef::Unique() const { return node_->refs.One(); }

namespace {

// Room for two children: a node is made when a second leaf joins a first.
constexpr int kCapacityMin = 2;

Inner* AllocateInner(int capacity) {
  ONCE_CHECK(capacity >= 1 && capacity <= kFanout);
  void* block = ::operator new(sizeof(Inner) + static_cast<size_t>(capacity) * sizeof(Slot) +
                               2 * sizeof(itc::Version));
  return static_cast<Inner*>(block);
}

void ConstructSlots(Inner& node, int from) {
  for (int i = from; i < node.capacity; ++i) new (&node.slot_block()[i]) Slot();
}

}  // namespace

Inner* NewInner(int capacity) {
  Inner* node = new (AllocateInner(capacity)) Inner();
  node->capacity = static_cast<uint8_t>(capacity);
  ConstructSlots(*node, 0);
  new (&node->floor()) itc::Version();
  new (&node->ceiling()) itc::Version();
  return node;
}

Inner* CopyInner(const Inner& from, int capacity) {
  ONCE_CHECK(capacity >= from.size());
  Inner* node = new (AllocateInner(capacity)) Inner(from);  // RefCount's copy starts at 1
  node->capacity = static_cast<uint8_t>(capacity);
  const std::span<const Slot> slots = from.slots();
  for (size_t i = 0; i < slots.size(); ++i) new (&node->slot_block()[i]) Slot(slots[i]);
  ConstructSlots(*node, static_cast<int>(slots.size()));
  new (&node->floor()) itc::Version(from.floor());
  new (&node->ceiling()) itc::Version(from.ceiling());
  return node;
}

void DestroyInner(Inner* node) {
  node->floor().~Version();
  node->ceiling().~Version();
  for (int i = 0; i < node->capacity; ++i) node->slot_block()[i].~Slot();
  const size_t bytes = node->bytes();
  node->~Inner();
#if defined(__cpp_sized_deallocation)
  ::operator delete(static_cast<void*>(node), bytes);  // the size spares the allocator a lookup
#else
  (void)bytes;  // clang without -fsized-deallocation (the fuzz build)
  ::operator delete(static_cast<void*>(node));
#endif
}

NodeRef NewRoot() { return NodeRef(NewInner(kCapacityMin)); }

namespace {

// The bytes to add after a leaf, and where they landed.
struct Tail {
  size_t bytes = 0;
  uint8_t* at = nullptr;
};

// Allocates a block with a Tail's bytes after the object and says where they
// start. allocate_shared allocates one block (control block and object) and
// keeps a copy of this allocator in it (never used to allocate again), so it
// holds one pointer only.
template <typename T>
struct TailAllocator {
  using value_type = T;
  Tail* tail = nullptr;
  explicit TailAllocator(Tail* t) : tail(t) {}
  template <typename U>
  TailAllocator(const TailAllocator<U>& other) : tail(other.tail) {}
  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    auto* block = static_cast<uint8_t*>(::operator new(n * sizeof(T) + tail->bytes));
    tail->at = block + n * sizeof(T);
    return reinterpret_cast<T*>(block);
  }
  void deallocate(T* block, size_t) { ::operator delete(block); }
  template <typename U>
  bool operator==(const TailAllocator<U>& other) const {
    return tail == other.tail;
  }
};

}  // namespace

std::shared_ptr<const Leaf> MakeLeaf(const Path& path, itc::Version version,
                                     std::span<const uint8_t> payload) {
  Tail tail{payload.size()};
  std::shared_ptr<Leaf> leaf =
      std::allocate_shared<Leaf>(TailAllocator<Leaf>(&tail), path, std::move(version));
  ONCE_CHECK(tail.at != nullptr);
  if (!payload.empty()) std::memcpy(tail.at, payload.data(), payload.size());
  leaf->payload = std::span<const uint8_t>(tail.at, payload.size());
  return leaf;
}

namespace {

// Makes `node` exclusively ours, copying it if anything else holds it (a
// snapshot, or a parent shared with one). Called on every node of a path,
// from the root down, before the node is changed (see "Sharing").
Inner* Own(NodeRef& node) {
  if (!node.Unique()) node = NodeRef(CopyInner(*node, node->capacity));
  return node.get();
}

// A copy of an owned, full node with twice the room, its children moved (a
// copy would touch every child's count, each a cache miss).
Inner* Grown(Inner& from) {
  const int capacity = std::min(kFanout, 2 * from.capacity);
  Inner* node = new (AllocateInner(capacity)) Inner(from);
  node->capacity = static_cast<uint8_t>(capacity);
  const std::span<Slot> slots = from.slots();
  for (size_t i = 0; i < slots.size(); ++i) new (&node->slot_block()[i]) Slot(std::move(slots[i]));
  ConstructSlots(*node, static_cast<int>(slots.size()));
  new (&node->floor()) itc::Version(std::move(from.floor()));
  new (&node->ceiling()) itc::Version(std::move(from.ceiling()));
  return node;
}

// Adds an empty slot at `nibble` (absent) to an owned node, growing it into
// a larger block if it is full; returns the slot.
Slot& AddSlot(NodeRef& node_ptr, int nibble) {
  if (node_ptr->size() == node_ptr->capacity) node_ptr = NodeRef(Grown(*node_ptr));
  Inner& node = *node_ptr;
  const int index = node.IndexOf(nibble);
  Slot* slots = node.slot_block();
  std::move_backward(slots + index, slots + node.size(), slots + node.size() + 1);
  slots[index] = Slot();
  node.occupied |= static_cast<uint16_t>(1u << nibble);
  return slots[index];
}

// Removes the slot at `nibble` (present) of an owned node.
void EraseSlot(Inner& node, int nibble) {
  const int index = node.IndexOf(nibble);
  Slot* slots = node.slot_block();
  const int size = node.size();
  std::move(slots + index + 1, slots + size, slots + index);
  slots[size - 1] = Slot();
  node.occupied &= static_cast<uint16_t>(~(1u << nibble));
}

void AddLeafSummary(Inner& node, const Leaf& leaf) {
  XorInto(node.summary.digest, leaf.path);
  if (node.summary.count++ == 0) {
    node.floor() = leaf.version;
    node.ceiling() = leaf.version;
  } else {
    // Leq does not allocate; most inserts move only one of the two bounds.
    if (!itc::Leq(node.floor(), leaf.version)) node.floor() = itc::Meet(node.floor(), leaf.version);
    if (!itc::Leq(leaf.version, node.ceiling()))
      node.ceiling() = itc::Join(node.ceiling(), leaf.version);
  }
}

void RecomputeBounds(Inner& node) {
  bool first = true;
  for (const Slot& slot : node.slots()) {
    const itc::Version& lo = slot.leaf ? slot.leaf->version : slot.inner->floor();
    const itc::Version& hi = slot.leaf ? slot.leaf->version : slot.inner->ceiling();
    if (first) {
      node.floor() = lo;
      node.ceiling() = hi;
      first = false;
      continue;
    }
    if (!itc::Leq(node.floor(), lo)) node.floor() = itc::Meet(node.floor(), lo);
    if (!itc::Leq(hi, node.ceiling())) node.ceiling() = itc::Join(node.ceiling(), hi);
  }
  if (first) node.floor() = node.ceiling() = itc::Version{};
}

void InsertAt(NodeRef& node_ptr, int depth, std::shared_ptr<const Leaf> leaf) {
  Inner* node = Own(node_ptr);
  AddLeafSummary(*node, *leaf);
  const int nibble = Nibble(leaf->path, depth);
  Slot* slot = node->Find(nibble);
  if (!slot) return AddSlot(node_ptr, nibble).SetLeaf(std::move(leaf));
  if (slot->inner) return InsertAt(slot->inner, depth + 1, std::move(leaf));
  ONCE_CHECK(depth + 1 < kDepthMax);  // two distinct paths part before the end
  NodeRef child = NewRoot();
  InsertAt(child, depth + 1, std::move(slot->leaf));
  InsertAt(child, depth + 1, std::move(leaf));
  slot->inner = std::move(child);
}

// Replaces a slot's inner node that holds a single leaf by that leaf.
// The leaf and its fingerprint move up without a read of the leaf (a cache
// miss) when the node is ours alone; a shared node is left as it is.
void CollapseLone(Slot& slot) {
  ONCE_CHECK(slot.inner->size() == 1);
  if (slot.inner.Unique()) {
    Slot& lone = slot.inner->slots()[0];
    ONCE_CHECK(lone.leaf != nullptr);
    slot.leaf = std::move(lone.leaf);
    slot.fingerprint = lone.fingerprint;
  } else {
    const Slot& lone = std::as_const(*slot.inner).slots()[0];
    ONCE_CHECK(lone.leaf != nullptr);
    slot.leaf = lone.leaf;
    slot.fingerprint = lone.fingerprint;
  }
  slot.inner.reset();
}

// The caller has checked that `path` is present under `node_ptr`.
std::shared_ptr<const Leaf> RemoveAt(NodeRef& node_ptr, int depth, const Path& path,
                                     bool keep_bounds) {
  Inner* node = Own(node_ptr);
  Slot& slot = *node->Find(Nibble(path, depth));
  std::shared_ptr<const Leaf> removed;
  if (slot.leaf) {
    removed = std::move(slot.leaf);
    EraseSlot(*node, Nibble(path, depth));
  } else {
    removed = RemoveAt(slot.inner, depth + 1, path, keep_bounds);
    if (slot.inner->summary.count == 1) CollapseLone(slot);
  }
  XorInto(node->summary.digest, path);
  --node->summary.count;
  if (!keep_bounds) RecomputeBounds(*node);
  return removed;
}

// The first 8 bytes of a path as a big-endian integer (path order).
uint64_t Prefix64(const Path& path) {
  uint64_t v = 0;
  for (size_t b = 0; b < 8; ++b) v = v << 8 | path[b];
  return v;
}

// The leaf in a slot is `path` (compared without a call to memcmp).
bool SamePath(const Leaf& leaf, const Path& path) {
  uint64_t a[2], b[2];
  std::memcpy(a, leaf.path.data(), sizeof(a));
  std::memcpy(b, path.data(), sizeof(b));
  return ((a[0] ^ b[0]) | (a[1] ^ b[1])) == 0;
}

// The end of the run of `paths` (sorted) from `begin` that share its nibble
// at `depth`.
size_t RunEnd(std::span<const Path> paths, size_t begin, int depth) {
  const int nibble = Nibble(paths[begin], depth);
  size_t end = begin + 1;
  while (end < paths.size() && Nibble(paths[end], depth) == nibble) ++end;
  return end;
}

// Asks for every child that `paths` lead to, so that their loads overlap
// instead of following one another (the walk is mostly cache misses).
void PrefetchTargets(const Inner& node, std::span<const Path> paths, int depth) {
  for (size_t i = 0; i < paths.size(); i = RunEnd(paths, i, depth)) {
    const Slot* slot = node.Find(Nibble(paths[i], depth));
    if (!slot) continue;
    const void* target =
        slot->inner ? static_cast<const void*>(slot->inner.get()) : slot->leaf.get();
    __builtin_prefetch(target);
  }
}

// Removes those of `paths` (sorted, all under this node's prefix) that are
// present under `node_ptr`, in one walk that visits each node once; leaves
// the bounds. Returns the summary of what it removed. A node is owned (and
// so copied if shared) only on the way to a child that may hold one.
Summary RemoveSorted(NodeRef& node_ptr, int depth, std::span<const Path> paths) {
  PrefetchTargets(*node_ptr, paths, depth);
  Summary removed;
  for (size_t begin = 0, end = 0; begin < paths.size(); begin = end) {
    end = RunEnd(paths, begin, depth);
    const int nibble = Nibble(paths[begin], depth);
    const Slot* peek = std::as_const(*node_ptr).Find(nibble);
    if (!peek) continue;
    Summary part;
    if (peek->leaf) {
      // At most one of the run is this leaf (the run may repeat it).
      const auto run = paths.subspan(begin, end - begin);
      const auto it = std::find_if(run.begin(), run.end(),
                                   [&](const Path& p) { return SamePath(*peek->leaf, p); });
      if (it == run.end()) continue;
      part = Summary{*it, 1};
      EraseSlot(*Own(node_ptr), nibble);
    } else {
      Slot& slot = *Own(node_ptr)->Find(nibble);
      part = RemoveSorted(slot.inner, depth + 1, paths.subspan(begin, end - begin));
      if (part.count == 0) continue;
      // A batch may empty a node (one removal at a time collapses it first).
      if (slot.inner->summary.count == 0) {
        EraseSlot(*node_ptr, nibble);
      } else if (slot.inner->summary.count == 1) {
        CollapseLone(slot);
      }
    }
    XorInto(node_ptr->summary.digest, part.digest);
    node_ptr->summary.count -= part.count;
    XorInto(removed.digest, part.digest);
    removed.count += part.count;
  }
  return removed;
}

}  // namespace

const Leaf* Find(const Inner* root, const Path& path) {
  View view{root, nullptr};
  for (int depth = 0; view.inner; ++depth) view = view.Child(depth, Nibble(path, depth));
  return view.leaf && view.leaf->path == path ? view.leaf : nullptr;
}

bool Insert(NodeRef& root, std::shared_ptr<const Leaf> leaf) {
  if (Find(root.get(), leaf->path)) return false;
  InsertAt(root, 0, std::move(leaf));
  return true;
}

std::shared_ptr<const Leaf> Remove(NodeRef& root, const Path& path) {
  if (!Find(root.get(), path)) return nullptr;
  return RemoveAt(root, 0, path, false);
}

void RemoveBatch(NodeRef& root, std::span<const Path> paths) {
  // Sorted, the paths under one node are a run: one walk visits each node
  // once. A path is sorted as its two big-endian halves (path order,
  // compared as words).
  std::vector<std::pair<uint64_t, uint64_t>> keys;
  keys.reserve(paths.size());
  for (const Path& path : paths) keys.emplace_back(Prefix64(path), Fingerprint(path));
  std::sort(keys.begin(), keys.end());
  std::vector<Path> sorted(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t b = 0; b < 8; ++b) {
      sorted[i][b] = static_cast<uint8_t>(keys[i].first >> (56 - 8 * b));
      sorted[i][8 + b] = static_cast<uint8_t>(keys[i].second >> (56 - 8 * b));
    }
  }
  if (!sorted.empty()) (void)RemoveSorted(root, 0, sorted);
}

void PrefetchChildren(View view) {
  if (!view.inner) return;
  for (const Slot& slot : view.inner->slots()) {
    __builtin_prefetch(slot.inner ? static_cast<const void*>(slot.inner.get()) : slot.leaf.get());
  }
}

void CollectAll(View view, std::vector<const Leaf*>& out) {
  if (view.leaf) {
    out.push_back(view.leaf);
    return;
  }
  if (!view.inner) return;
  for (const Slot& slot : view.inner->slots()) {
    CollectAll(View{slot.inner.get(), slot.leaf.get()}, out);
  }
}

namespace {
constexpr size_t kPrefetchBytes = sizeof(Inner) + 4 * sizeof(Slot);
}  // namespace

void CollectTagged(View view, std::vector<Tagged>& out) {
  if (view.leaf) {
    out.push_back(Tagged{Fingerprint(view.leaf->path), view.leaf});
    return;
  }
  if (!view.inner) return;
  // A deep subtree is mostly cache misses: ask for every inner child at once
  // so that their loads overlap instead of following one another.
  const std::span<const Slot> slots = view.inner->slots();
  for (const Slot& slot : slots) {
    if (!slot.inner) continue;
    // The header and the first slots, without reading the node (that would
    // wait for the miss): most nodes this deep hold two or three children.
    const char* bytes = reinterpret_cast<const char*>(slot.inner.get());
    for (size_t at = 0; at < kPrefetchBytes; at += 64) __builtin_prefetch(bytes + at);
  }
  for (const Slot& slot : slots) {
    if (slot.leaf) {
      out.push_back(Tagged{slot.fingerprint, slot.leaf.get()});
    } else {
      CollectTagged(View{slot.inner.get(), nullptr}, out);
    }
  }
}

void Sieve(View view, const itc::Version& seen, std::vector<const Leaf*>* unseen,
           std::vector<const Leaf*>* seen_out) {
  if (view.leaf) {
    auto* out = itc::Leq(view.leaf->version, seen) ? seen_out : unseen;
    if (out) out->push_back(view.leaf);
    return;
  }
  if (!view.inner || view.inner->summary.count == 0) return;
  if (itc::Leq(view.inner->ceiling(), seen)) {
    if (seen_out) CollectAll(view, *seen_out);
    return;
  }
  if (!itc::Leq(view.inner->floor(), seen)) {
    if (unseen) CollectAll(view, *unseen);
    return;
  }
  for (const Slot& slot : view.inner->slots()) {
    Sieve(View{slot.inner.get(), slot.leaf.get()}, seen, unseen, seen_out);
  }
}

}  // namespace once::gossip::internal
