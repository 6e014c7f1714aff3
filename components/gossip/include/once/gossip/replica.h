// File: replica.h
//
// A Replica is what one gossip peer holds: the id of its causal universe (a
// network id), its identity (an itc Party), its ceiling (the join of every
// event it has seen, its own included) and the set of live messages, each an
// opaque payload stored under the path (BLAKE2b-128) of its version.
//
// Pure state: no I/O, no clocks, no threads; randomness only through the Rng
// given to Seed. Not thread-safe (a Host wraps one for concurrent use).
//
//   SeededRng rng(7);
//   Replica a = Replica::Seed(rng);                        // a new universe
//   ONCE_ASSIGN_OR_RETURN(itc::Version v, a.Send(Bytes{'h', 'i'}));
//   ONCE_RETURN_IF_ERROR(a.Redact(v));                     // ticks too
//   Observation seen = a.Observe(itc::Version{});          // causal order
//   // ... later, resume where the application left off:
//   Observation more = a.Observe(seen.checkpoint);
//
// Rules (the causal set without tombstones):
// - Send and Redact each tick the ceiling with the own party; a redaction of
//   a message that is not held is a no-op (no tick).
// - A message whose version is <= the ceiling but which is not held was seen
//   and deleted: it is never accepted or delivered again.
// - Apply commits a batch atomically: all operations or none.
// Errors: kUnsupported without a party (retired, or not yet bootstrapped);
// kLimitExceeded for kPayloadBytesMax, kVersionBytesMax, kBatchOpsMax and the
// itc height limit. On any error the replica is unchanged.

#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "once/base/hex.h"
#include "once/base/result.h"
#include "once/base/rng.h"
#include "once/itc/party.h"
#include "once/itc/version.h"

namespace once::gossip {

// 16 bytes naming a causal universe. All zero is reserved for "bootstrapping".
struct NetworkId {
  std::array<uint8_t, 16> bytes{};
  static NetworkId Random(Rng& rng);
  bool bootstrapping() const { return *this == NetworkId{}; }
  std::string ToHex() const { return HexEncode(bytes); }
  friend auto operator<=>(const NetworkId&, const NetworkId&) = default;
};

// Where a message lives: BLAKE2b-128 of its version's canonical bytes.
using Path = std::array<uint8_t, 16>;
Path PathOf(const itc::Version& version);
// The same from the version's encoding, which must be canonical (every
// encoding itc::Version::Decode accepts is): PathOf without encoding again.
Path PathOfEncoded(std::span<const uint8_t> encoded);

// One message as the application sees it.
struct Message {
  Path path{};
  itc::Version version;
  Bytes payload;
  friend bool operator==(const Message&, const Message&) = default;
};

// Messages not yet delivered, in causal delivery order ((rank, version bytes)
// ascending), and the checkpoint to resume from next time.
struct Observation {
  std::vector<Message> messages;
  itc::Version checkpoint;
};

// One operation of an atomic batch.
struct Op {
  enum class Kind : uint8_t { kSend, kRedact };
  Kind kind = Kind::kSend;
  Bytes payload;        // kSend
  itc::Version target;  // kRedact
  static Op Send(Bytes payload) { return Op{Kind::kSend, std::move(payload), {}}; }
  static Op Redact(itc::Version target) { return Op{Kind::kRedact, {}, std::move(target)}; }
};

// The persisted identity of a peer: written before any event of its party
// crosses the wire, so a restart reclaims the identity at a version at least
// as high as anything it ever shipped.
struct Bookmark {
  NetworkId network;
  std::optional<itc::Party> party;  // none once retired
  itc::Version version;             // covers every own event that may have left
};

namespace internal {
struct Inner;
struct Leaf;  // a message as the digest tree holds it (one heap block with its payload)

// A counted reference to a digest tree node (NodeRef) or leaf (LeafRef).
// The count lives in the object's own block; copying and dropping a
// reference are thread-safe (the count is atomic), and the last one destroys
// the object on whichever thread drops it. For a node the count is also what
// tells the replica that no snapshot can reach it any more (digest_tree.h,
// "Sharing"), so it is read with acquire ordering and dropped with release:
// unlike std::shared_ptr::use_count. Defined (for these two types only) in
// digest_tree.cc.
template <typename T>
class CountedRef {
 public:
  CountedRef() = default;
  // Takes over an object whose count is 1 (new, or a copy of a node).
  explicit CountedRef(T* adopted) : ptr_(adopted) {}
  CountedRef(const CountedRef& other);
  CountedRef(CountedRef&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
  CountedRef& operator=(const CountedRef& other);
  CountedRef& operator=(CountedRef&& other) noexcept;
  ~CountedRef();

  T* get() const { return ptr_; }
  T* operator->() const { return ptr_; }
  T& operator*() const { return *ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  friend bool operator==(const CountedRef& ref, std::nullptr_t) { return ref.ptr_ == nullptr; }
  void reset();
  // This is the only reference, and whatever other holders did with the
  // object happened before this call returned true.
  bool Unique() const;

 private:
  T* ptr_ = nullptr;
};
using NodeRef = CountedRef<Inner>;
using LeafRef = CountedRef<const Leaf>;
}  // namespace internal
// Messages a session received, decoded straight into the tree's leaves.
using ReceivedLeaves = std::vector<internal::LeafRef>;

// The leaves a removal took out of the tree, freed when this is destroyed
// (or assigned over), each asked for ahead of its drop so that their cache
// misses overlap. A redaction-heavy commit removes thousands, and freeing
// them was about a third of the time it held its host's lock: a host
// destroys this after it lets go of the lock, so that Send and Observe do
// not wait for the frees.
class RemovedLeaves {
 public:
  RemovedLeaves() = default;
  explicit RemovedLeaves(std::vector<internal::LeafRef> leaves) : leaves_(std::move(leaves)) {}
  RemovedLeaves(RemovedLeaves&& other) noexcept = default;
  RemovedLeaves& operator=(RemovedLeaves&& other) noexcept;
  ~RemovedLeaves() { Drop(); }

  size_t size() const { return leaves_.size(); }

 private:
  void Drop();
  std::vector<internal::LeafRef> leaves_;
};

// The digest tree summary of a set: XOR of its paths and its size.
struct Summary {
  Path digest{};
  uint64_t count = 0;
  friend bool operator==(const Summary&, const Summary&) = default;
};

// An immutable view of a replica's state (network, ceiling, messages). Taking
// one is O(1) (the digest tree is persistent and copy-on-write); it stays
// valid and unchanged however the replica changes afterwards, on any thread
// (the sharing rule is in src/digest_tree.h). Any number of threads may read
// it at once without a lock, and copy or drop it on any thread.
class Snapshot {
 public:
  Snapshot();
  const NetworkId& network() const { return network_; }
  const itc::Version& ceiling() const { return ceiling_; }
  uint64_t size() const;
  Summary summary() const;
  // The message under `path`, or nullopt.
  std::optional<Message> Find(const Path& path) const;
  // Every message, by path.
  std::vector<Message> Messages() const;
  // The same network, ceiling and messages.
  friend bool SameState(const Snapshot& a, const Snapshot& b);
  // The in-memory join of two states of one universe: ceilings joined; a
  // message survives if both hold it or if the side lacking it has not seen
  // it. A session's commit equals this.
  friend Snapshot Merge(const Snapshot& a, const Snapshot& b);

  // For the session layer.
  const internal::NodeRef& root() const { return root_; }
  Snapshot(NetworkId network, itc::Version ceiling, internal::NodeRef root)
      : network_(network), ceiling_(std::move(ceiling)), root_(std::move(root)) {}

 private:
  NetworkId network_;
  itc::Version ceiling_;
  internal::NodeRef root_;
};

class Replica {
 public:
  // A new universe: a random network id, the seed party, the zero ceiling.
  static Replica Seed(Rng& rng);
  // A replica of `network` with `party` and nothing seen (what a bootstrap
  // starts from before the first session fills it).
  static Replica Fresh(NetworkId network, itc::Party party);
  // Restarts from a bookmark: same network and party, nothing seen, but the
  // next own event is ticked above the bookmark's own region, so it can never
  // repeat a version this identity already shipped.
  static Replica Reclaim(Bookmark bookmark);

  Replica(Replica&&) noexcept = default;
  Replica& operator=(Replica&&) noexcept = default;

  const NetworkId& network() const { return network_; }
  const std::optional<itc::Party>& party() const { return party_; }
  const itc::Version& ceiling() const { return ceiling_; }
  uint64_t size() const;

  // One new message; returns its version. Errors as in the file comment.
  Result<itc::Version> Send(Bytes payload);
  // Deletes the message with this version (ticks), or does nothing if it is
  // not held.
  Status Redact(const itc::Version& target);
  // All operations or none; returns the version of each kSend, in order.
  // Every operation ticks the ceiling (a redaction of what is not held does
  // nothing), so a send's version is spent even if the same batch redacts
  // it. O(n log n) in the batch (at most kBatchOpsMax operations).
  Result<std::vector<itc::Version>> Apply(std::span<const Op> ops);
  // The same, the leaves its redactions remove handed to `removed` for the
  // caller to free (a host frees them after its lock).
  Result<std::vector<itc::Version>> Apply(std::span<const Op> ops, RemovedLeaves& removed);

  std::optional<Message> Find(const Path& path) const;
  bool Holds(const itc::Version& version) const { return Find(PathOf(version)).has_value(); }
  // Messages whose versions are not <= `checkpoint`, in delivery order.
  Observation Observe(const itc::Version& checkpoint) const;

  Snapshot Snap() const;
  // The bookmark to persist before this replica's events may leave.
  Bookmark MakeBookmark() const;
  // Own events issued from now on are above `floor` restricted to the party
  // (nothing else changes: the ceiling still says what was seen).
  void RaiseTickFloor(const itc::Version& floor);

  // For the session layer: the join with a peer's state learned in a session.
  // Inserts `received` (unless held or already seen), removes `deleted` (the
  // peer saw them and deleted them), then joins `peer_ceiling` in. Returns
  // the removed leaves, for the caller to free when it chooses.
  RemovedLeaves CommitJoin(ReceivedLeaves&& received, std::span<const Path> deleted,
                           const itc::Version& peer_ceiling);
  // Identity moves (for bootstrap and retire; the caller persists first).
  Result<itc::Party> ForkParty();
  std::optional<itc::Party> TakeParty();
  Status JoinParty(itc::Party&& donated);

 private:
  Replica(NetworkId network, std::optional<itc::Party> party);
  NetworkId network_;
  std::optional<itc::Party> party_;
  itc::Version ceiling_;
  // Set after Reclaim until the first own event: the bookmark's own region.
  std::optional<itc::Version> tick_floor_;
  internal::NodeRef root_;
};

// `version` restricted to `party`'s region (zero elsewhere).
itc::Version Restrict(const itc::Version& version, const itc::Party& party);

}  // namespace once::gossip
