#include "once/gossip/session.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <memory_resource>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "digest_tree.h"
#include "wire.h"

namespace once::gossip {

using internal::Leaf;
using internal::View;
using wire::Data;
using wire::Frame;
using wire::FrameBuilder;
using wire::Hello;
using wire::Kind;
using wire::NodeKey;
using wire::Record;

bool LocalWins(uint64_t local_min_ticks, const NetworkId& local, uint64_t peer_min_ticks,
               const NetworkId& peer) {
  return std::tie(local_min_ticks, local) > std::tie(peer_min_ticks, peer);
}

namespace {

std::unexpected<Error> Hostile(const std::string& what) {
  return MakeError(ErrorCode::kCorruption, "gossip peer: " + what);
}

// The nodes in dispute, by key. Thousands open and close in one session (a
// node per heap allocation was a tenth of its time), so the nodes live in one
// vector, their slots reused, and the table that finds them is an
// open-addressing array (linear probing, tombstones) of 8-byte slots: a hash
// tag and an index. A session's table stays in the core's cache even when the
// nodes do not.
template <typename Value>
class NodeTable {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Valid until the next Insert.
  Value* Find(const NodeKey& key) {
    const Slot* slot = FindSlot(key, Hash(key));
    return slot ? &items_[slot->index].value : nullptr;
  }

  // Adds `key`, which is absent: the caller's rule, not checked (the probe
  // for it was a seventh of an insert's instructions). A session opens each
  // node at most once, when its parent is resolved, and resolves it once.
  void Insert(const NodeKey& key, Value value) {
    const uint64_t hash = Hash(key);
    if ((size_ + tombstones_ + 1) * 2 > slots_.size()) Grow();
    uint32_t index;
    if (free_.empty()) {
      index = static_cast<uint32_t>(items_.size());
      items_.push_back(Item{key, std::move(value)});
    } else {
      index = free_.back();
      free_.pop_back();
      items_[index] = Item{key, std::move(value)};
    }
    Place(Slot{Tag(hash), index});
    ++size_;
  }

  void Erase(const NodeKey& key) {
    Slot* slot = FindSlot(key, Hash(key));
    if (!slot) return;
    free_.push_back(slot->index);
    slot->index = kTombstone;
    --size_;
    ++tombstones_;
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  static constexpr uint32_t kTombstone = UINT32_MAX - 1;
  struct Slot {
    uint32_t tag = 0;  // the hash's high half
    uint32_t index = kEmpty;
  };
  struct Item {
    NodeKey key;
    Value value;
  };
  static uint64_t Hash(const NodeKey& key) { return wire::NodeKeyHash{}(key); }
  // The hash's high half, its best-mixed bits: a node's home slot is the
  // tag's top bits, so that growing the table reads no node's key.
  static uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash >> 32); }
  size_t Home(uint32_t tag) const { return tag >> (32 - bits_); }
  size_t Mask() const { return slots_.size() - 1; }

  Slot* FindSlot(const NodeKey& key, uint64_t hash) {
    if (slots_.empty()) return nullptr;
    const uint32_t tag = Tag(hash);
    for (size_t i = Home(tag);; i = (i + 1) & Mask()) {
      Slot& slot = slots_[i];
      if (slot.index == kEmpty) return nullptr;
      if (slot.index != kTombstone && slot.tag == tag && items_[slot.index].key == key) {
        return &slot;
      }
    }
  }
  // Into the first free slot of the probe sequence (the key is absent).
  void Place(Slot slot) {
    for (size_t i = Home(slot.tag);; i = (i + 1) & Mask()) {
      Slot& at = slots_[i];
      if (at.index == kEmpty || at.index == kTombstone) {
        if (at.index == kTombstone) --tombstones_;
        at = slot;
        return;
      }
    }
  }
  void Grow() {
    bits_ = 6;
    while ((size_t{1} << bits_) < 4 * (size_ + 1)) ++bits_;
    ONCE_CHECK(bits_ <= 32);
    const std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(size_t{1} << bits_));
    tombstones_ = 0;
    for (const Slot& slot : old) {
      if (slot.index != kEmpty && slot.index != kTombstone) Place(slot);
    }
  }

  std::vector<Slot> slots_;  // 2^bits_ of them, at most half full or dead
  int bits_ = 0;
  std::vector<Item> items_;  // the nodes, and the free slots of erased ones
  std::vector<uint32_t> free_;
  size_t size_ = 0;
  size_t tombstones_ = 0;
};

// One side's half of the digest tree comparison: which nodes are in dispute,
// what to list and ship next, and what was learned (received, deleted).
class Reconciler {
 public:
  Reconciler(const Snapshot& mine, itc::Version peer_ceiling, Summary peer_root,
             const SessionOptions& options)
      : mine_(mine),
        peer_ceiling_(std::move(peer_ceiling)),
        peer_root_(peer_root),
        options_(options),
        all_seen_(mine.root() && mine.root()->summary.count > 0 &&
                  itc::Leq(mine.root()->ceiling(), peer_ceiling_)) {}

  // The root is in dispute iff the summaries differ; the initiator proposed it.
  bool OpenRoot(bool proposed) {
    const View root = View::Of(mine_.root());
    root_bounded_ = !proposed;  // the initiator's speculative root record is not
    if (root.summary() == peer_root_) return false;
    open_.Insert(NodeKey{}, OpenNode{peer_root_, root, proposed});
    return true;
  }

  Status OnData(Data&& data) {
    // A record's node is looked up at each distance ahead, because the
    // records before it may open it (a reply, then its children's listings).
    const std::span<const Record> records = data.records;
    for (size_t i = 0; i < records.size(); ++i) {
      PrefetchAhead(i, records.size(), [&](size_t j) {
        const OpenNode* open = open_.Find(records[j].key);
        return open ? open->mine : View{};
      });
      ONCE_RETURN_IF_ERROR(OnRecord(records[i]));
    }
    for (size_t i = 0; i < data.messages.size(); ++i) {
      const bool hashed = i < data.path_is_hash.size() && data.path_is_hash[i];
      ONCE_RETURN_IF_ERROR(OnMessage(std::move(data.messages[i]), hashed));
    }
    return Ok();
  }

  // Fills a frame from the queues; returns true iff the frame is idle.
  bool Fill(FrameBuilder& fb) {
    bool any_record = false;
    // Records are built as they go out, so a queued one costs a few words.
    while (records_head_ < records_.size()) {
      PrefetchAhead(records_head_, records_.size(), [&](size_t j) { return records_[j].view; });
      if (!AddPending(records_[records_head_], fb)) break;
      if (++records_head_ == records_.size()) {  // drained: reuse the storage
        records_.clear();
        records_head_ = 0;
      }
      any_record = true;
    }
    // The leaves to ship are scattered in the heap, mostly out of cache:
    // each is asked for a few messages before it is written.
    constexpr size_t kShipAhead = 8;
    while (!ship_.empty()) {
      if (ship_.size() > kShipAhead) internal::PrefetchLeaf(ship_[kShipAhead]);
      if (!fb.AddMessage(*ship_.front())) break;
      ship_.pop_front();
      ++sent_;
    }
    return !any_record && records_.empty() && ship_.empty();
  }

  bool Settled() const { return open_.empty() && records_.empty() && ship_.empty(); }
  const ReceivedLeaves& received() const { return received_; }
  ReceivedLeaves TakeReceived() { return std::move(received_); }
  const std::vector<Path>& deleted() const { return deleted_; }
  uint64_t sent() const { return sent_; }

 private:
  // Records (received, or queued to go out) name nodes all over the tree,
  // most of them buckets whose leaves handling the record reads, each a
  // cache miss away. While item `i` of `n` is handled, PrefetchAhead asks for
  // the start of item i + kStartAhead's node, and for the leaves of item i +
  // kLeavesAhead's (which reading its start locates). `view_of(j)` is item
  // j's node (View{} if none).
  static constexpr size_t kStartAhead = 8;
  static constexpr size_t kLeavesAhead = 2;
  template <typename ViewOf>
  static void PrefetchAhead(size_t i, size_t n, const ViewOf& view_of) {
    if (i + kStartAhead < n) {
      const View ahead = view_of(i + kStartAhead);
      if (ahead.node) internal::PrefetchStart(ahead.node);
    }
    if (i + kLeavesAhead < n) internal::PrefetchLeaves(view_of(i + kLeavesAhead));
  }

  // A listed branch's buckets' runs (GatherLeaves) and the leaves they hold;
  // empty otherwise.
  struct Gathered {
    std::span<const internal::EntryRun> runs;
    size_t count = 0;
  };

  // This side's leaves under a listed node, in path order (a listing's
  // order, internal::ListingKey), read in place each time they are needed:
  // a bucket's (or a part of one) as it is, a branch's through the runs of
  // its buckets, gathered once when it opened (each leaf is in at most one
  // listed node) into a chunk of `listed_`.
  struct Listed {
    View view;
    Gathered gathered;  // a branch's only
    size_t size() const { return view.bucket() ? view.end - view.begin : gathered.count; }
  };

  // A Listed's leaves, one at a time, with their keys in a listing of the
  // node at `depth`.
  class ListedCursor {
   public:
    ListedCursor(const Listed& listed, int depth) : depth_(depth) {
      if (listed.view.bucket()) {
        single_ = listed.view.run();
        run_ = &single_;
        runs_end_ = run_ + 1;
      } else {
        run_ = listed.gathered.runs.data();
        runs_end_ = run_ + listed.gathered.runs.size();
        const ptrdiff_t ahead = std::min(kRunsAhead, runs_end_ - run_);
        for (ptrdiff_t i = 0; i < ahead; ++i) internal::PrefetchRun(run_[i]);
      }
      Enter();
    }
    ListedCursor(const ListedCursor&) = delete;  // run_ may point at single_
    ListedCursor& operator=(const ListedCursor&) = delete;
    bool done() const { return at_ == nullptr; }
    const internal::Entry& entry() const { return *at_; }
    uint64_t key() const { return key_; }
    void Next() {
      if (++at_ == run_end_) {
        ++run_;
        Enter();
      } else {
        key_ = internal::ListingKey(at_->path, depth_);
      }
    }

   private:
    // Into the run at run_ (or the next that is not empty), or done. A
    // branch's buckets were found when it opened, a frame or more ago, and
    // their entries are not in the cache: the cursor asks for the first
    // kRunsAhead runs' entries when it starts, and for the one kRunsAhead
    // on each time it enters a run.
    void Enter() {
      while (run_ != runs_end_ && run_->count == 0) ++run_;  // a bucket's empty part
      if (run_ == runs_end_) {
        at_ = nullptr;
        return;
      }
      if (runs_end_ - run_ > kRunsAhead) internal::PrefetchRun(run_[kRunsAhead]);
      at_ = run_->begin;
      run_end_ = at_ + run_->count;
      key_ = internal::ListingKey(at_->path, depth_);
    }
    static constexpr ptrdiff_t kRunsAhead = 3;
    internal::EntryRun single_;  // a bucket's
    const internal::EntryRun* run_ = nullptr;
    const internal::EntryRun* runs_end_ = nullptr;
    const internal::Entry* at_ = nullptr;  // null: done
    const internal::Entry* run_end_ = nullptr;
    int depth_;
    uint64_t key_ = 0;  // entry()'s
  };

  // A part of `lacking_`.
  struct Slice {
    uint32_t begin = 0;
    uint32_t size = 0;
  };

  struct OpenNode {
    Summary expected;  // the peer's summary of this node
    View mine;
    bool mine_sent = false;
    bool listed = false;  // settled by a listing and the answer to it
    Gathered gathered;
    Listed leaves() const { return Listed{mine, gathered}; }  // listed only
  };

  // A record of this side's listing of a node, built when a frame has room.
  struct Pending {
    NodeKey key;
    View view;
    bool listed;
    Gathered gathered;
    // A lacking listing: a slice of `lacking_` instead of this side's leaves.
    bool lacking = false;
    Slice lacked;
    Listed leaves() const { return Listed{view, gathered}; }  // listed only
  };

  // Adds `p`'s record to the frame if it fits. A listing goes from the tree
  // (or from lacking_) straight into the frame; a bounded record is built in
  // scratch_ first.
  bool AddPending(const Pending& p, FrameBuilder& fb) {
    if (!p.listed) {
      scratch_.key = p.key;
      scratch_.listing = scratch_.lacking = false;
      scratch_.bounded = true;
      scratch_.present = 0;
      MakeRecord(p.view, scratch_);
      return fb.AddRecord(scratch_);
    }
    if (p.lacking) {
      return fb.AddListing(p.key, true, std::span(lacking_).subspan(p.lacked.begin, p.lacked.size));
    }
    ListedCursor it(p.leaves(), p.key.depth);
    return fb.AddListing(p.key, false, p.leaves().size(), [&] {
      const uint64_t key = it.key();
      it.Next();
      return key;
    });
  }

  // A chunk's room in runs: a listing's runs never straddle two, and a
  // chunk never moves (a grown vector would move every run gathered so far).
  // A listed node's runs are at most its leaves, so they fit in one.
  static constexpr size_t kListedChunk = 1024;
  static_assert(wire::kListingLeavesMax <= kListedChunk);

  Gathered GatherLeaves(View view) {
    if (view.bucket()) return {};
    const size_t count = view.summary().count;
    ONCE_CHECK(count <= wire::kListingLeavesMax);
    gathering_.clear();
    internal::ListRuns(view, gathering_);
    size_t listed = 0;
    for (const internal::EntryRun& run : gathering_) listed += run.count;
    ONCE_CHECK(listed == count);
    if (listed_.empty() || listed_.back().size() + gathering_.size() > kListedChunk) {
      listed_.emplace_back().reserve(kListedChunk);
    }
    std::vector<internal::EntryRun>& chunk = listed_.back();
    const size_t begin = chunk.size();
    chunk.insert(chunk.end(), gathering_.begin(), gathering_.end());
    return Gathered{std::span(chunk).subspan(begin), count};
  }

  // A bounded record of `view`: each child's summary and its unseen part.
  void MakeRecord(View view, Record& rec) {
    internal::PrefetchChildren(view);
    const NodeKey& key = rec.key;
    for (int c = 0; c < internal::kFanout; ++c) {
      const View child = view.Child(key.depth, c);
      if (child.empty()) continue;
      rec.present |= static_cast<uint16_t>(1u << c);
      rec.children[c] = child.summary();
      rec.unseen[c] = Unseen(child);
    }
  }

  // The summary of the messages under `view` that are not <= the peer's
  // ceiling. The floor and ceiling of each node settle most subtrees at once;
  // the rest is memoised, so a session visits each node at most once.
  Summary Unseen(View view) {
    if (all_seen_) return Summary{};
    if (view.empty()) return Summary{};
    if (itc::Leq(view.ceiling(), peer_ceiling_)) return Summary{};
    if (!itc::Leq(view.floor(), peer_ceiling_)) return view.summary();
    // A node is memoised whole; a part of a bucket (at most kBucketMax
    // leaves, read once more) is not.
    const bool whole = view.whole();
    if (whole) {
      if (auto it = unseen_.find(view.node); it != unseen_.end()) return it->second;
    }
    Summary total;
    if (view.bucket()) {
      for (const internal::Entry& e : view.entries()) {
        if (itc::Leq(e.leaf->version, peer_ceiling_)) continue;
        internal::XorInto(total.digest, e.path);
        ++total.count;
      }
    } else {
      for (const internal::NodeRef& child : view.node->children()) {
        const Summary part = Unseen(View::Of(child));
        internal::XorInto(total.digest, part.digest);
        total.count += part.count;
      }
    }
    if (whole) unseen_.emplace(view.node, total);
    return total;
  }

  // This side's record of `key` was bounded (all but the initiator's root).
  bool MineBounded(const NodeKey& key) const { return key.depth > 0 || root_bounded_; }

  Status Open(const NodeKey& key, Summary expected, View mine, bool propose) {
    if (key.depth >= internal::kDepthMax) return Hostile("a full path in dispute");
    if (open_.size() >= options_.session_nodes_max) {
      return LimitError("session_nodes_max", static_cast<int64_t>(open_.size() + 1),
                        static_cast<int64_t>(options_.session_nodes_max));
    }
    // Both sides know both counts, so they agree on which nodes are listed.
    const bool listed = std::max(expected.count, mine.summary().count) <= wire::kListingLeavesMax;
    const Gathered gathered = listed ? GatherLeaves(mine) : Gathered{};
    if (propose) records_.push_back(Pending{key, mine, listed, gathered});
    open_.Insert(key, OpenNode{expected, mine, propose, listed, gathered});
    return Ok();
  }

  Status OnRecord(const Record& rec) {
    OpenNode* open = open_.Find(rec.key);
    if (!open) return Hostile("a record for a node not in dispute");
    // A listed node: the proposer sends its listing, the replier answers with
    // what it lacks of it.
    const bool replier = !open->mine_sent;
    if (rec.listing != open->listed || (rec.listing && rec.lacking == replier)) {
      return Hostile("a record of the wrong form");
    }
    if (rec.lacking   ? rec.fingerprints.size() > open->leaves().size()
        : rec.listing ? rec.fingerprints.size() != open->expected.count
                      : rec.Total() != open->expected) {
      return Hostile("a record whose children do not add up to its declared summary");
    }
    const OpenNode node = *open;  // Resolve may open more and move the table
    open_.Erase(rec.key);
    if (rec.lacking) return SieveLacked(node.leaves(), rec.key.depth, rec.fingerprints);
    if (node.listed) {
      ResolveListing(rec.key, node.leaves(), rec.fingerprints);
      return Ok();
    }
    if (replier) records_.push_back(Pending{rec.key, node.mine, false, {}});
    return Resolve(rec.key, node.mine, rec, replier);
  }

  // The peer's listing of a node is known: every leaf here that it does not
  // list goes through the sieve, and the fingerprints of its listing that are
  // not here go back to it. Nothing below is in dispute any more.
  void ResolveListing(const NodeKey& key, Listed mine, std::span<const uint64_t> peer) {
    const size_t begin = lacking_.size();
    // Unless the peer has seen everything here, the sieve reads the version
    // of each leaf the peer did not list (a cache miss each): find them all
    // first and ask for them together, then sieve in order.
    ONCE_CHECK(mine.size() <= wire::kListingLeavesMax);
    std::array<const internal::Entry*, wire::kListingLeavesMax> unlisted;
    size_t count = 0;
    auto unlist = [&](const internal::Entry& e) {
      if (!all_seen_) __builtin_prefetch(e.leaf.get());
      unlisted[count++] = &e;
    };
    ListedCursor it(mine, key.depth);  // both sorted: one merge pass
    for (const uint64_t fp : peer) {
      for (; !it.done() && it.key() < fp; it.Next()) unlist(it.entry());
      if (!it.done() && it.key() == fp) {
        it.Next();
      } else {
        lacking_.push_back(fp);
      }
    }
    for (; !it.done(); it.Next()) unlist(it.entry());
    // In path order, so that the commit's removals arrive sorted.
    for (size_t i = 0; i < count; ++i) SieveLeaf(*unlisted[i]);
    const Slice lacked{static_cast<uint32_t>(begin),
                       static_cast<uint32_t>(lacking_.size() - begin)};
    records_.push_back(Pending{key, View{}, true, {}, true, lacked});
  }

  // The peer lacks these fingerprints of this side's listing of the node at
  // `depth`: sieve those, in path order (so that the commit's removals
  // arrive sorted). Each fingerprint takes the next leaf that has it, as the
  // merge of two sorted lists would.
  Status SieveLacked(Listed mine, int depth, std::span<const uint64_t> lacked) {
    ListedCursor it(mine, depth);  // both sorted
    for (const uint64_t fp : lacked) {
      while (!it.done() && it.key() < fp) it.Next();
      if (it.done() || it.key() != fp) {
        return Hostile("a lacking listing names a leaf this side did not list");
      }
      SieveLeaf(it.entry());
      it.Next();
    }
    return Ok();
  }

  // One listed leaf the peer lacks (the leaf is read only if it may be unseen).
  void SieveLeaf(const internal::Entry& e) {
    if (all_seen_ || itc::Leq(e.leaf->version, peer_ceiling_)) {
      deleted_.push_back(e.path);
    } else {
      ship_.push_back(e.leaf.get());
    }
  }

  // Both listings of `key` are known: settle, sieve or open each child. The
  // side that replied to `key` proposes its disputed children.
  Status Resolve(const NodeKey& key, View mine, const Record& peer, bool replier) {
    internal::PrefetchChildren(mine);
    struct Opening {
      int nibble;
      Summary theirs;
      View child;
    };
    std::array<Opening, internal::kFanout> opening;
    int openings = 0;
    for (int c = 0; c < internal::kFanout; ++c) {
      const View child = mine.Child(key.depth, c);
      if (child.empty()) continue;
      internal::PrefetchNextChild(mine, c);
      if (!peer.Has(c)) {
        SieveOwn(child);
        continue;
      }
      const Summary ours = child.summary();
      const Summary theirs = peer.children[c];
      if (ours == theirs) continue;
      if (ours.count == 1 && theirs.count == 1) {
        SieveOwn(child);
        continue;
      }
      if (peer.bounded && MineBounded(key)) {
        // If what each side holds of the other's past is the same set, no
        // message here was deleted on one side only: each side ships the part
        // the other has never seen, and the child is settled.
        Summary seen = ours;
        const Summary unseen = Unseen(child);
        internal::XorInto(seen.digest, unseen.digest);
        seen.count -= unseen.count;
        if (seen == peer.Seen(c)) {
          ShipUnseen(child);
          continue;
        }
      }
      // Opened after the loop: a listed branch's leaves are gathered when
      // it opens, and by then the starts of its children, asked for here,
      // have arrived for all of the openings at once.
      internal::PrefetchChildren(child);
      opening[openings++] = Opening{c, theirs, child};
    }
    for (int i = 0; i < openings; ++i) {
      const Opening& o = opening[i];
      ONCE_RETURN_IF_ERROR(Open(key.Child(o.nibble), o.theirs, o.child, replier));
    }
    return Ok();
  }

  // A subtree the peer lacks: ship what it has not seen, delete what it has.
  void SieveOwn(View view) {
    if (all_seen_) {  // the peer has seen everything here: it deleted what it lacks
      std::vector<const Leaf*> seen;
      internal::CollectAll(view, seen);
      for (const Leaf* leaf : seen) deleted_.push_back(leaf->path);
      return;
    }
    std::vector<const Leaf*> unseen, seen;
    internal::Sieve(view, peer_ceiling_, &unseen, &seen);
    for (const Leaf* leaf : unseen) ship_.push_back(leaf);
    for (const Leaf* leaf : seen) deleted_.push_back(leaf->path);
  }

  // Ships what the peer has never seen under `view`; deletes nothing.
  void ShipUnseen(View view) {
    std::vector<const Leaf*> unseen;
    internal::Sieve(view, peer_ceiling_, &unseen, nullptr);
    for (const Leaf* leaf : unseen) ship_.push_back(leaf);
  }

  // `path_is_hash`: whether the leaf's path is its version's hash (wire::Data).
  Status OnMessage(internal::LeafRef&& leaf, bool path_is_hash) {
    const Leaf& m = *leaf;
    if (received_.size() >= options_.session_messages_max) {
      return LimitError("session_messages_max", static_cast<int64_t>(received_.size() + 1),
                        static_cast<int64_t>(options_.session_messages_max));
    }
    if (received_.size() >= peer_root_.count) {
      return Hostile("more messages than the declared set size");
    }
    payload_bytes_ += m.payload_size;
    if (payload_bytes_ > options_.session_payload_bytes_max) {
      return LimitError("session_payload_bytes_max", static_cast<int64_t>(payload_bytes_),
                        static_cast<int64_t>(options_.session_payload_bytes_max));
    }
    if (!path_is_hash) return Hostile("a path that is not its version's hash");
    if (!itc::Leq(m.version, peer_ceiling_)) return Hostile("a version above its ceiling");
    if (itc::Leq(m.version, mine_.ceiling())) return Hostile("a message this side has seen");
    if (!received_paths_.insert(m.path).second) return Hostile("a message shipped twice");
    received_.push_back(std::move(leaf));
    return Ok();
  }

  const Snapshot& mine_;
  const itc::Version peer_ceiling_;
  const Summary peer_root_;
  const SessionOptions& options_;
  // Every message held here is <= the peer's ceiling: nothing to ship, and
  // the sieve needs no comparisons.
  const bool all_seen_;
  // Memoised unseen parts: their map entries come from a pool, not the heap.
  std::pmr::unsynchronized_pool_resource pool_;
  NodeTable<OpenNode> open_;
  std::pmr::unordered_map<const internal::Inner*, Summary> unseen_{&pool_};
  bool root_bounded_ = true;
  std::vector<Pending> records_;  // a queue: records_[records_head_] is next
  size_t records_head_ = 0;
  Record scratch_;
  std::deque<const Leaf*> ship_;
  std::vector<std::vector<internal::EntryRun>> listed_;  // chunks of kListedChunk
  std::vector<internal::EntryRun> gathering_;            // GatherLeaves' runs, before their chunk
  std::vector<uint64_t> lacking_;  // the fingerprints of lacking listings sent
  ReceivedLeaves received_;
  std::unordered_set<Path, internal::PathHash> received_paths_;
  std::vector<Path> deleted_;
  uint64_t payload_bytes_ = 0;
  uint64_t sent_ = 0;
};

Status CheckOptions(const SessionOptions& options) {
  if (options.frame_bytes_max < kFrameBytesMin || options.frame_bytes_max > kFrameBytesMax) {
    return MakeError(ErrorCode::kInvalidArgument, "frame_bytes_max outside its bounds");
  }
  return Ok();
}

Hello MakeHello(Mode mode, const Snapshot& mine) {
  Hello hello;
  hello.mode = mode;
  hello.network = mine.network();
  hello.ceiling = mine.ceiling();
  hello.root = mine.summary();
  return hello;
}

uint64_t MinTicksOr0(const itc::Version& v) {
  auto n = itc::MinTicks(v);
  return n ? *n : UINT64_MAX;
}

SessionReport::Outcome Mismatch(const Snapshot& mine, const Hello& peer) {
  return LocalWins(MinTicksOr0(mine.ceiling()), mine.network(), MinTicksOr0(peer.ceiling),
                   peer.network)
             ? SessionReport::Outcome::kLocalWins
             : SessionReport::Outcome::kPeerWins;
}

void Tally(SessionReport& report, const Reconciler& rec) {
  report.sent = rec.sent();
  report.received = rec.received().size();
  report.deleted = rec.deleted().size();
}

uint32_t HeaderBodyBytes(std::span<const uint8_t, wire::kFrameHeaderBytes> header) {
  return uint32_t{header[0]} << 24 | uint32_t{header[1]} << 16 | uint32_t{header[2]} << 8 |
         header[3];
}

}  // namespace

static_assert(SessionMachine::kHeaderBytes == wire::kFrameHeaderBytes);

// The whole session of one side. Phases: the greeting, the alternating data
// frames (Converse), then the identity step of kRetire, then done. A step
// that must follow the write of this side's frame (the end of the
// conversation when this side sent the last idle frame, or the end of the
// session) waits in `after_write` for OnWritten.
struct SessionMachine::State {
  enum class Phase : uint8_t { kAwaitHello, kConverse, kAwaitAck, kAwaitDonate, kDone, kFailed };
  enum class AfterWrite : uint8_t { kNothing, kEndConverse, kDone };

  State(Host& h, const SessionOptions& o, bool init, Mode m)
      : host(h), options(o), initiator(init), mode(m) {}

  Host& host;
  const SessionOptions options;
  const bool initiator;
  Mode mode;  // the responder learns it from the greeting
  Phase phase = Phase::kAwaitHello;
  AfterWrite after_write = AfterWrite::kNothing;
  bool unconfirmed = false;  // frames taken, OnWritten not called yet
  std::vector<Bytes> outgoing;
  SessionReport report;
  Error error;  // kFailed

  Host::Begun begun;  // empty for a newcomer
  std::optional<itc::Party> granted;
  Hello peer;  // the peer's greeting
  std::optional<Reconciler> rec;
  bool sent_idle = false;
  bool recv_idle = false;

  size_t budget() const { return options.frame_bytes_max; }
  const Snapshot& mine() const { return begun.snapshot; }

  // ---- frames ----

  Status CountFrame(size_t bytes) {
    if (++report.frames > options.session_frames_max) {
      return LimitError("session_frames_max", static_cast<int64_t>(report.frames),
                        static_cast<int64_t>(options.session_frames_max));
    }
    report.bytes += bytes;
    return Ok();
  }

  Status Queue(Bytes frame) {
    ONCE_RETURN_IF_ERROR(CountFrame(frame.size()));
    outgoing.push_back(std::move(frame));
    return Ok();
  }

  // Queues a refusal (best effort: over session_frames_max it is dropped).
  void Refuse(const std::string& reason) {
    FrameBuilder fb(Kind::kRefuse, budget());
    fb.PutReason(reason);
    (void)Queue(fb.Finish(false));
  }

  Result<size_t> BodyBytes(std::span<const uint8_t, wire::kFrameHeaderBytes> header) const {
    const uint32_t size = HeaderBodyBytes(header);
    if (size > options.frame_bytes_max) {
      return LimitError("frame_bytes_max", size, static_cast<int64_t>(options.frame_bytes_max));
    }
    if (report.frames + 1 > options.session_frames_max) {
      return LimitError("session_frames_max", static_cast<int64_t>(report.frames + 1),
                        static_cast<int64_t>(options.session_frames_max));
    }
    return size;
  }

  // Checks and decodes one received frame (a refusal is kUnsupported).
  Result<Frame> Receive(std::span<const uint8_t> bytes) {
    if (bytes.size() < wire::kFrameHeaderBytes) {
      return MakeError(ErrorCode::kInvalidArgument, "gossip frame: shorter than its header");
    }
    const auto header = bytes.first<wire::kFrameHeaderBytes>();
    const uint32_t size = HeaderBodyBytes(header);
    if (size > options.frame_bytes_max) {
      return LimitError("frame_bytes_max", size, static_cast<int64_t>(options.frame_bytes_max));
    }
    if (bytes.size() - wire::kFrameHeaderBytes != size) {
      return MakeError(ErrorCode::kInvalidArgument, "gossip frame: length header disagrees");
    }
    ONCE_RETURN_IF_ERROR(CountFrame(bytes.size()));
    ONCE_ASSIGN_OR_RETURN(Frame frame, wire::Decode(bytes.subspan(wire::kFrameHeaderBytes)));
    if (frame.kind == Kind::kRefuse) {
      return MakeError(ErrorCode::kUnsupported, "gossip peer refused: " + frame.reason);
    }
    return frame;
  }

  // ---- dispatch ----

  Status OnFrame(std::span<const uint8_t> bytes) {
    ONCE_ASSIGN_OR_RETURN(Frame frame, Receive(bytes));
    switch (phase) {
      case Phase::kAwaitHello:
        if (frame.kind != Kind::kHello) return Hostile("an unexpected frame kind");
        return initiator ? OnReply(std::move(frame)) : OnGreeting(std::move(frame));
      case Phase::kConverse:
        if (frame.kind != Kind::kData) return Hostile("an unexpected frame kind");
        return OnData(std::move(frame.data));
      case Phase::kAwaitAck:
        if (frame.kind != Kind::kAck) return Hostile("an unexpected frame kind");
        report.outcome = SessionReport::Outcome::kRetired;
        phase = Phase::kDone;
        return Ok();
      case Phase::kAwaitDonate:
        if (frame.kind != Kind::kDonate) return Hostile("an unexpected frame kind");
        return OnDonation(frame.party);
      case Phase::kDone:
      case Phase::kFailed:
        break;
    }
    ONCE_CHECK(false);  // OnFrame's caller checked the phase
    return Ok();
  }

  Status OnWritten() {
    unconfirmed = false;
    const AfterWrite next = std::exchange(after_write, AfterWrite::kNothing);
    if (next == AfterWrite::kEndConverse) return EndConverse();
    if (next == AfterWrite::kDone) phase = Phase::kDone;
    return Ok();
  }

  // ---- greeting ----

  // The initiator's greeting: its Hello and the root record, proposed
  // speculatively.
  Status SendGreeting() {
    FrameBuilder fb(Kind::kHello, budget());
    fb.PutHello(MakeHello(mode, mine()));
    Record root;
    for (int c = 0; c < internal::kFanout; ++c) {
      const View child = View::Of(mine().root()).Child(0, c);
      if (child.empty()) continue;
      root.present |= static_cast<uint16_t>(1u << c);
      root.children[c] = child.summary();
    }
    fb.AddRecord(root);
    return Queue(fb.Finish(false));
  }

  // The initiator receives the responder's Hello.
  Status OnReply(Frame&& reply) {
    peer = std::move(reply.hello);
    report.peer_network = peer.network;
    if (peer.mode != mode) return Hostile("a greeting in another mode");
    if (mode == Mode::kBootstrap) {
      if (!peer.party) return Hostile("a bootstrap greeting without a party");
      ONCE_ASSIGN_OR_RETURN(itc::Party party, itc::Party::Decode(*peer.party));
      granted = std::move(party);
    } else if (peer.network != mine().network()) {
      report.outcome = Mismatch(mine(), peer);
      phase = Phase::kDone;
      return Ok();
    }
    rec.emplace(mine(), peer.ceiling, peer.root, options);
    if (peer.converged) {
      if (peer.ceiling != mine().ceiling())
        return Hostile("a converged greeting with another ceiling");
      return FinishInitiator();
    }
    rec->OpenRoot(/*proposed=*/true);
    recv_idle = reply.data.idle;
    ONCE_RETURN_IF_ERROR(rec->OnData(std::move(reply.data)));
    phase = Phase::kConverse;
    return SendData();
  }

  // The responder receives the initiator's Hello: takes its snapshot (or
  // grants a newcomer a party) and answers.
  Status OnGreeting(Frame&& first) {
    peer = std::move(first.hello);
    mode = peer.mode;
    report.peer_network = peer.network;
    if (peer.party) return Hostile("an initiator's greeting with a party");
    if (!first.data.messages.empty()) return Hostile("an initiator's greeting with messages");
    ONCE_RETURN_IF_ERROR(TakeSnapshot());
    Hello hello = MakeHello(peer.mode, mine());
    if (granted) hello.party = granted->Encode();
    FrameBuilder fb(Kind::kHello, budget());
    if (!granted && peer.network != mine().network()) {
      fb.PutHello(hello);
      ONCE_RETURN_IF_ERROR(Queue(fb.Finish(true)));
      report.outcome = Mismatch(mine(), peer);
      after_write = AfterWrite::kDone;
      return Ok();
    }
    hello.converged = peer.ceiling == mine().ceiling();
    rec.emplace(mine(), peer.ceiling, peer.root, options);
    fb.PutHello(hello);
    if (hello.converged) {
      ONCE_RETURN_IF_ERROR(Queue(fb.Finish(true)));
      report.outcome = SessionReport::Outcome::kConverged;
      return AfterSync(/*written=*/false);
    }
    if (!rec->OpenRoot(/*proposed=*/false)) first.data.records.clear();
    ONCE_RETURN_IF_ERROR(rec->OnData(std::move(first.data)));
    sent_idle = rec->Fill(fb);
    ONCE_RETURN_IF_ERROR(Queue(fb.Finish(sent_idle)));
    phase = Phase::kConverse;
    return Ok();
  }

  // The responder's snapshot: a grant for a newcomer, else Host::Begin.
  Status TakeSnapshot() {
    if (peer.mode == Mode::kBootstrap) {
      if (!peer.network.bootstrapping() || peer.root.count != 0 || peer.ceiling != itc::Version{}) {
        return Hostile("a newcomer's greeting that is not empty");
      }
      auto grant = host.Grant();
      if (!grant) {
        Refuse(grant.error().message);
        return std::unexpected(grant.error());
      }
      granted = std::move(grant->party);
      begun = std::move(grant->begun);
      return Ok();
    }
    if (peer.network.bootstrapping()) {
      return Hostile("a sync greeting from the bootstrapping network");
    }
    ONCE_ASSIGN_OR_RETURN(begun, host.Begin());
    return Ok();
  }

  // ---- conversation: alternating data frames until two in a row are idle ----

  Status SendData() {
    FrameBuilder fb(Kind::kData, budget());
    sent_idle = rec->Fill(fb);
    ONCE_RETURN_IF_ERROR(Queue(fb.Finish(sent_idle)));
    if (sent_idle && recv_idle) after_write = AfterWrite::kEndConverse;
    return Ok();
  }

  Status OnData(Data&& data) {
    recv_idle = data.idle;
    ONCE_RETURN_IF_ERROR(rec->OnData(std::move(data)));
    if (sent_idle && recv_idle) return EndConverse();
    return SendData();
  }

  Status EndConverse() {
    if (!rec->Settled()) return Hostile("the session ended with nodes in dispute");
    return initiator ? FinishInitiator() : FinishResponder();
  }

  // ---- the end: commit, then the identity step ----

  Status FinishInitiator() {
    Tally(report, *rec);
    if (mode == Mode::kBootstrap) {
      ONCE_RETURN_IF_ERROR(
          host.Bootstrapped(peer.network, std::move(*granted), rec->TakeReceived(), peer.ceiling));
      report.outcome = SessionReport::Outcome::kBootstrapped;
      phase = Phase::kDone;
      return Ok();
    }
    if (!peer.converged) {
      ONCE_RETURN_IF_ERROR(
          host.Commit(std::move(begun), rec->TakeReceived(), rec->deleted(), peer.ceiling));
    }
    report.outcome =
        peer.converged ? SessionReport::Outcome::kConverged : SessionReport::Outcome::kSynced;
    if (mode != Mode::kRetire) {
      phase = Phase::kDone;
      return Ok();
    }
    ONCE_ASSIGN_OR_RETURN(itc::Party party, host.Donate());
    FrameBuilder fb(Kind::kDonate, budget());
    fb.PutParty(party.Encode());
    ONCE_RETURN_IF_ERROR(Queue(fb.Finish(false)));
    phase = Phase::kAwaitAck;
    return Ok();
  }

  Status FinishResponder() {
    Tally(report, *rec);
    ONCE_RETURN_IF_ERROR(
        host.Commit(std::move(begun), rec->TakeReceived(), rec->deleted(), peer.ceiling));
    report.outcome = SessionReport::Outcome::kSynced;
    return AfterSync(/*written=*/true);
  }

  // The responder after its sync (or its converged greeting, still to be
  // written): the outcome, then the donation of kRetire or the end.
  Status AfterSync(bool written) {
    if (granted) report.outcome = SessionReport::Outcome::kGranted;
    if (peer.mode == Mode::kRetire) {
      phase = Phase::kAwaitDonate;
    } else if (written) {
      phase = Phase::kDone;
    } else {
      after_write = AfterWrite::kDone;
    }
    return Ok();
  }

  Status OnDonation(const Bytes& encoded) {
    ONCE_ASSIGN_OR_RETURN(itc::Party party, itc::Party::Decode(encoded));
    if (auto taken = host.TakeDonation(std::move(party)); !taken) {
      Refuse(taken.error().message);
      return taken;
    }
    ONCE_RETURN_IF_ERROR(Queue(FrameBuilder(Kind::kAck, budget()).Finish(false)));
    report.outcome = SessionReport::Outcome::kTookDonation;
    after_write = AfterWrite::kDone;
    return Ok();
  }

  // ---- errors ----

  Status Fail(Status status) {
    if (!status) {
      error = status.error();
      phase = Phase::kFailed;
      after_write = AfterWrite::kNothing;
    }
    return status;
  }
  Status Failed() const { return std::unexpected(error); }
};

SessionMachine::SessionMachine(std::unique_ptr<State> state) : state_(std::move(state)) {}
SessionMachine::SessionMachine(SessionMachine&&) noexcept = default;
SessionMachine& SessionMachine::operator=(SessionMachine&&) noexcept = default;
SessionMachine::~SessionMachine() = default;

Result<SessionMachine> SessionMachine::Initiate(Host& host, Mode mode,
                                                const SessionOptions& options) {
  ONCE_RETURN_IF_ERROR(CheckOptions(options));
  auto state = std::make_unique<State>(host, options, /*initiator=*/true, mode);
  if (mode != Mode::kBootstrap) {
    ONCE_ASSIGN_OR_RETURN(state->begun, host.Begin());
  }
  ONCE_RETURN_IF_ERROR(state->SendGreeting());
  return SessionMachine(std::move(state));
}

Result<SessionMachine> SessionMachine::Respond(Host& host, const SessionOptions& options) {
  ONCE_RETURN_IF_ERROR(CheckOptions(options));
  return SessionMachine(std::make_unique<State>(host, options, /*initiator=*/false, Mode::kSync));
}

std::vector<Bytes> SessionMachine::TakeOutgoing() {
  std::vector<Bytes> out = std::move(state_->outgoing);
  state_->outgoing.clear();
  if (!out.empty() && state_->phase != State::Phase::kFailed) state_->unconfirmed = true;
  return out;
}

Status SessionMachine::OnWritten() {
  State& s = *state_;
  if (s.phase == State::Phase::kFailed) return s.Failed();
  if (!s.unconfirmed) return Ok();
  return s.Fail(s.OnWritten());
}

Status SessionMachine::OnFrame(std::span<const uint8_t> frame) {
  State& s = *state_;
  if (s.phase == State::Phase::kFailed) return s.Failed();
  if (!s.outgoing.empty()) return s.Fail(Hostile("a frame out of turn"));
  if (s.unconfirmed) ONCE_RETURN_IF_ERROR(s.Fail(s.OnWritten()));
  if (s.phase == State::Phase::kDone) return Hostile("a frame after the end of the session");
  return s.Fail(s.OnFrame(frame));
}

Result<size_t> SessionMachine::BodyBytes(std::span<const uint8_t, kHeaderBytes> header) const {
  return state_->BodyBytes(header);
}

bool SessionMachine::done() const { return state_->phase == State::Phase::kDone; }

bool SessionMachine::finished() const {
  return state_->phase == State::Phase::kDone || state_->phase == State::Phase::kFailed;
}

const SessionReport& SessionMachine::report() const {
  ONCE_CHECK(done());
  return state_->report;
}

namespace {

// Runs a machine over a stream: writes what it queues, reads what it waits
// for (the header first, so frame_bytes_max is checked before the body is
// read), until it is done or fails.
Result<SessionReport> Drive(SessionMachine& machine, Stream& stream, Deadline deadline) {
  for (;;) {
    // A write may queue the next frame (a retiring initiator's donation).
    for (auto frames = machine.TakeOutgoing(); !frames.empty(); frames = machine.TakeOutgoing()) {
      for (const Bytes& frame : frames) ONCE_RETURN_IF_ERROR(stream.Write(frame, deadline));
      ONCE_RETURN_IF_ERROR(machine.OnWritten());
    }
    if (machine.done()) return machine.report();
    std::array<uint8_t, SessionMachine::kHeaderBytes> header{};
    ONCE_RETURN_IF_ERROR(stream.Read(header, deadline));
    ONCE_ASSIGN_OR_RETURN(const size_t body_bytes, machine.BodyBytes(header));
    Bytes frame(header.size() + body_bytes);
    std::copy(header.begin(), header.end(), frame.begin());
    ONCE_RETURN_IF_ERROR(stream.Read(std::span(frame).subspan(header.size()), deadline));
    if (Status status = machine.OnFrame(frame); !status) {
      for (const Bytes& refusal : machine.TakeOutgoing()) (void)stream.Write(refusal, deadline);
      return std::unexpected(status.error());
    }
  }
}

}  // namespace

Result<SessionReport> Initiate(Stream& stream, Host& host, Mode mode, const SessionOptions& options,
                               Deadline deadline) {
  ONCE_ASSIGN_OR_RETURN(SessionMachine machine, SessionMachine::Initiate(host, mode, options));
  return Drive(machine, stream, deadline);
}

Result<SessionReport> Respond(Stream& stream, Host& host, const SessionOptions& options,
                              Deadline deadline) {
  ONCE_ASSIGN_OR_RETURN(SessionMachine machine, SessionMachine::Respond(host, options));
  return Drive(machine, stream, deadline);
}

}  // namespace once::gossip
