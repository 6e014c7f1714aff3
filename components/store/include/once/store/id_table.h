// File: id_table.h
//
// IdTable<V>: the memory store's map from execution ids to V, one per shard
// and kind of row. Open addressing with linear probing over one flat array
// of slots, each the id's full 64-bit hash beside a pointer to its entry;
// the entries (the id and its V) live in blocks of their own, so they never
// move: a reference to an entry, or a view of its id, stays valid until that
// entry is erased, whatever is inserted meanwhile.
//
// Why not std::unordered_map: on a store that holds a million executions,
// looking up an id that is not there (every new execution's first append and
// first acquire, and every run-row check) walked the bucket's chain of nodes
// spread over gigabytes, several cache and TLB misses each; here it reads
// one slot, and compares an entry's id only when the whole hash matches.
// Growing moves the slots by their stored hashes without reading an entry.
// (BENCHMARKS.md, "Issue 20: the memory store's growth curve".)
//
// At most half the slots are full. Erase shifts the following run of slots
// back, so there are no tombstones. `Hash` is std::hash of the id's bytes;
// tests pass one that crowds ids together. Iterators (slot positions) are
// invalidated by any insert or erase; references to entries are not, but by
// erasing their own entry. Not thread-safe: the shard's lock guards it.
//
//   IdTable<int64_t> fences;
//   auto [it, added] = fences.try_emplace("order-7", 0);
//   ++it->second;
//   if (auto found = fences.find("order-7"); found != fences.end()) fences.erase(found);

#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace once::store::internal {

template <class V, class Hash = std::hash<std::string_view>>
class IdTable {
  struct Slot {
    uint64_t hash = 0;
    std::pair<const std::string, V>* entry = nullptr;  // null: empty
  };

 public:
  using value_type = std::pair<const std::string, V>;

  template <bool kConst>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = IdTable::value_type;
    using difference_type = std::ptrdiff_t;
    using reference = std::conditional_t<kConst, const value_type&, value_type&>;
    using pointer = std::conditional_t<kConst, const value_type*, value_type*>;

    Iter() = default;
    reference operator*() const { return *at_->entry; }
    pointer operator->() const { return at_->entry; }
    Iter& operator++() {
      ++at_;
      SkipEmpty();
      return *this;
    }
    bool operator==(const Iter& other) const { return at_ == other.at_; }
    operator Iter<true>() const { return Iter<true>(at_, end_); }  // NOLINT: as std's

   private:
    friend class IdTable;
    template <bool>
    friend class Iter;
    Iter(const Slot* at, const Slot* end) : at_(at), end_(end) { SkipEmpty(); }
    void SkipEmpty() {
      while (at_ != end_ && at_->entry == nullptr) ++at_;
    }
    const Slot* at_ = nullptr;
    const Slot* end_ = nullptr;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  IdTable() = default;
  IdTable(const IdTable&) = delete;
  IdTable& operator=(const IdTable&) = delete;
  ~IdTable() { clear(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  iterator begin() { return iterator(Data(), Data() + slots_.size()); }
  iterator end() { return iterator(Data() + slots_.size(), Data() + slots_.size()); }
  const_iterator begin() const { return const_iterator(Data(), Data() + slots_.size()); }
  const_iterator end() const {
    return const_iterator(Data() + slots_.size(), Data() + slots_.size());
  }

  // The hash this table places `id` by. The calls below that take a `hash`
  // take it from a caller that hashes an id once for several tables; it must
  // be HashOf(id).
  static uint64_t HashOf(std::string_view id) { return Hash{}(id); }
  // Asks for the slot `hash` starts at, so that its cache miss overlaps the
  // caller's work until its lookup.
  void Prefetch(uint64_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash & Mask()]);
  }

  iterator find(std::string_view id) { return find_hashed(HashOf(id), id); }
  const_iterator find(std::string_view id) const { return find_hashed(HashOf(id), id); }
  iterator find_hashed(uint64_t hash, std::string_view id) {
    return size_ == 0 ? end() : At(Probe(id, hash));
  }
  const_iterator find_hashed(uint64_t hash, std::string_view id) const {
    return size_ == 0 ? end() : At(Probe(id, hash));
  }

  // Inserts {id, V(args...)} unless the id is there; `id` is moved from only
  // when it is inserted.
  template <class K, class... Args>
  std::pair<iterator, bool> try_emplace(K&& id, Args&&... args) {
    const uint64_t hash = HashOf(id);
    return try_emplace_hashed(hash, std::forward<K>(id), std::forward<Args>(args)...);
  }
  template <class K, class... Args>
  std::pair<iterator, bool> try_emplace_hashed(uint64_t hash, K&& id, Args&&... args) {
    if (slots_.empty()) Grow();
    size_t i = Probe(id, hash);
    if (slots_[i].entry != nullptr) return {At(i), false};
    if ((size_ + 1) * 2 > slots_.size()) {
      Grow();
      i = Probe(id, hash);
    }
    slots_[i] = Slot{
        hash, new value_type(std::piecewise_construct, std::forward_as_tuple(std::forward<K>(id)),
                             std::forward_as_tuple(std::forward<Args>(args)...))};
    ++size_;
    return {At(i), true};
  }
  // Inserts {id, value}, or gives the id's entry `value`.
  template <class K>
  std::pair<iterator, bool> insert_or_assign(K&& id, V value) {
    const uint64_t hash = HashOf(id);
    return insert_or_assign_hashed(hash, std::forward<K>(id), std::move(value));
  }
  template <class K>
  std::pair<iterator, bool> insert_or_assign_hashed(uint64_t hash, K&& id, V value) {
    auto [it, added] = try_emplace_hashed(hash, std::forward<K>(id), std::move(value));
    if (!added) it->second = std::move(value);  // not moved from: nothing was inserted
    return {it, added};
  }

  // `it` must be a valid iterator of this table (not end()).
  void erase(const_iterator it) {
    size_t hole = static_cast<size_t>(it.at_ - Data());
    value_type* gone = slots_[hole].entry;
    slots_[hole] = Slot{};
    // The slots after the hole, up to the next empty one, stay reachable
    // from their home slots: move back each whose home is not between the
    // hole and itself (cyclically).
    for (size_t j = (hole + 1) & Mask(); slots_[j].entry != nullptr; j = (j + 1) & Mask()) {
      const size_t home = slots_[j].hash & Mask();
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays) continue;
      slots_[hole] = slots_[j];
      slots_[j] = Slot{};
      hole = j;
    }
    --size_;
    delete gone;
  }

  void clear() {
    for (Slot& s : slots_) delete s.entry;
    slots_.clear();
    size_ = 0;
  }

 private:
  size_t Mask() const { return slots_.size() - 1; }
  const Slot* Data() const { return slots_.data(); }
  iterator At(size_t i) const {
    const Slot* end = Data() + slots_.size();
    if (i == kAbsent || slots_[i].entry == nullptr) return iterator(end, end);
    return iterator(Data() + i, end);
  }

  static constexpr size_t kAbsent = ~size_t{0};
  static constexpr size_t kSlotsMin = 16;

  // The slot that holds `id`, or the empty slot where it would go (kAbsent
  // for a table with no slots).
  size_t Probe(std::string_view id, uint64_t hash) const {
    if (slots_.empty()) return kAbsent;
    for (size_t i = hash & Mask();; i = (i + 1) & Mask()) {
      const Slot& s = slots_[i];
      if (s.entry == nullptr || (s.hash == hash && s.entry->first == id)) return i;
    }
  }

  // Twice the slots (kSlotsMin at first), every entry placed again by its
  // stored hash.
  void Grow() {
    std::vector<Slot> old =
        std::exchange(slots_, std::vector<Slot>(slots_.empty() ? kSlotsMin : 2 * slots_.size()));
    for (const Slot& s : old) {
      if (s.entry == nullptr) continue;
      size_t i = s.hash & Mask();
      while (slots_[i].entry != nullptr) i = (i + 1) & Mask();
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;  // a power of two of them, or none
  size_t size_ = 0;
};

}  // namespace once::store::internal
