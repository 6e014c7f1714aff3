// Frame codec of the gossip protocol (docs/gossip-protocol.md). Decoding
// takes untrusted bytes and returns typed errors, never crashes, and never
// allocates more than the bytes it was given justify.

#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <vector>

#include "digest_tree.h"
#include "once/gossip/session.h"

namespace once::gossip::wire {

// 2: listing records (a disputed node with few leaves lists their fingerprints).
// 3: a fingerprint is the 64 bits of a path after the listed node's prefix
//    (was: path bytes 8..15), so that a listing is in path order.
// 4: a disputed node of up to 512 leaves is listed (was 64).
inline constexpr uint8_t kProtocolVersion = 4;
// Leaves in one listing record: a disputed node is listed instead of split
// into children iff neither side holds more leaves than this under it. Both
// sides must agree on it (hence version 4). At 512 a node one level above
// the buckets (16 of them, each at most 64 leaves) is usually listed whole:
// where deletions are spread over every bucket, one listing of the branch
// replaces a bounded record and 16 listings, and their 16 answers, and the
// session takes a level, so a hop, fewer (28% fewer instructions in the
// (100000,0,10000) session: BENCHMARKS.md). A listing is at most 4 KiB.
inline constexpr size_t kListingLeavesMax = 512;
static_assert(internal::kBucketMax <= kListingLeavesMax);
inline constexpr size_t kFrameHeaderBytes = 4;

enum class Kind : uint8_t { kHello = 1, kData = 2, kDonate = 3, kAck = 4, kRefuse = 5 };

// A digest tree node: `depth` nibbles of `prefix` (the rest zero).
struct NodeKey {
  uint8_t depth = 0;
  Path prefix{};
  // The prefix as two words (its bytes 0..7 and 8..15, in memory order).
  uint64_t Word(int i) const {
    uint64_t w;
    std::memcpy(&w, prefix.data() + 8 * i, sizeof(w));
    return w;
  }
  // Word by word (a 16-byte std::array compare was a call to memcmp).
  friend bool operator==(const NodeKey& a, const NodeKey& b) {
    return a.depth == b.depth && a.Word(0) == b.Word(0) && a.Word(1) == b.Word(1);
  }
  NodeKey Child(int nibble) const;
};
// Mixes the words and the depth by multiplication: the high bits are the
// well-mixed ones (a table takes its slot from them).
struct NodeKeyHash {
  size_t operator()(const NodeKey& k) const {
    const uint64_t h = (k.Word(0) + k.depth * 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
    return static_cast<size_t>((h ^ k.Word(1) * 0x94d049bb133111ebULL) * 0x9e3779b97f4a7c15ULL);
  }
};

// A summary per child slot, all zero until one is set. Most records in a
// frame are listings, which have none: the 16 slots (384 bytes) are made on
// the heap at the first write, so that a listing's record stays small (a
// frame of thousands of listings was mostly the zeroing and the memory of
// slots it never used).
class ChildSummaries {
 public:
  ChildSummaries() = default;
  ChildSummaries(const ChildSummaries& other) : slots_(Copy(other)) {}
  ChildSummaries& operator=(const ChildSummaries& other) {
    if (this != &other) slots_ = Copy(other);
    return *this;
  }
  ChildSummaries(ChildSummaries&&) noexcept = default;
  ChildSummaries& operator=(ChildSummaries&&) noexcept = default;

  const Summary& operator[](int c) const { return slots_ ? (*slots_)[c] : kNone; }
  Summary& operator[](int c) {
    if (!slots_) slots_ = std::make_unique<Slots>();
    return (*slots_)[c];
  }

 private:
  using Slots = std::array<Summary, internal::kFanout>;
  static std::unique_ptr<Slots> Copy(const ChildSummaries& other) {
    return other.slots_ ? std::make_unique<Slots>(*other.slots_) : nullptr;
  }
  static inline const Summary kNone{};
  std::unique_ptr<Slots> slots_;
};

// One side's listing of a node: the summary of each present child. A bounded
// record also lists, per child, the summary of the child's messages that are
// not <= the receiver's ceiling (the part the receiver has never seen; count 0
// if none), which lets both sides settle a child without descending into it.
struct Record {
  NodeKey key;
  uint16_t present = 0;  // bit c: child c is present
  bool bounded = false;
  // A listing names every leaf under the node by its fingerprint, in
  // non-decreasing order, instead of summarising children (present, children,
  // bounded and unseen are unused). A lacking listing answers the peer's
  // listing: only the fingerprints of the peer's listing that this side does
  // not hold (possibly none).
  bool listing = false;
  bool lacking = false;  // listing only
  // Decoded into its frame's pool (Data::pool); any other holds its own.
  std::pmr::vector<uint64_t> fingerprints;
  ChildSummaries children;
  ChildSummaries unseen;  // bounded only
  bool Has(int c) const { return (present >> c) & 1; }
  Summary Total() const;
  // The summary of child c's messages that the receiver has seen (bounded).
  Summary Seen(int c) const;
};

// A leaf's fingerprint in a listing of the node at a depth
// (internal::ListingKey): the 64 bits of its path after the node's prefix,
// big-endian. Two leaves under one node that collide there are taken one for
// the other (a 2^-64 chance per pair of leaves).
using internal::ListingKey;

struct Data {
  bool idle = false;
  // The decoded listings' fingerprints, all in one block (made at the first
  // listing, as large as the bytes left in the frame): thousands of listings
  // in a frame are not thousands of heap blocks. Before `records`, so that
  // it outlives them.
  std::unique_ptr<std::pmr::monotonic_buffer_resource> pool;
  std::vector<Record> records;
  // Decoded straight into leaves (payload in the leaf's block): a received
  // message costs no more heap blocks than one sent here.
  ReceivedLeaves messages;
  // For each message, whether its path is its version's hash, hashed from
  // the bytes it came in (canonical, as the version decoded): the session
  // refuses one whose path is not, after its limits' checks.
  std::vector<bool> path_is_hash;
};

struct Hello {
  Mode mode = Mode::kSync;
  bool converged = false;
  NetworkId network;
  itc::Version ceiling;
  Summary root;
  std::optional<Bytes> party;  // granted (responder, kBootstrap)
};

struct Frame {
  Kind kind = Kind::kData;
  Hello hello;         // kHello
  Data data;           // kHello, kData
  Bytes party;         // kDonate
  std::string reason;  // kRefuse
};

// Builds one frame within a byte budget, in place: the header, the head and
// the records are written where they go in the frame, so that Finish hands
// the frame over without copying it (a listing frame is up to a megabyte:
// copying it was about 3% of a redaction-heavy session's instructions,
// BENCHMARKS.md). Only the messages, which the wire puts after the records,
// are kept apart and copied in at the end. The head (PutHello, PutParty,
// PutReason) comes before any record or message.
class FrameBuilder {
 public:
  FrameBuilder(Kind kind, size_t budget);
  void PutHello(const Hello& hello);
  void PutParty(const Bytes& party);
  void PutReason(const std::string& reason);
  size_t RecordBytes(const Record& record) const;
  size_t room() const;
  // Adds if it fits (false otherwise).
  bool AddRecord(const Record& record);
  // Adds a listing record of `key` (a lacking one if `lacking`) of `count`
  // fingerprints if it fits (false otherwise, and `next` is not called):
  // `next()` returns each fingerprint in order, `count` times. Written
  // straight into the frame, so that a listing read from the tree needs no
  // Record in between.
  template <typename Next>
  bool AddListing(const NodeKey& key, bool lacking, size_t count, Next&& next) {
    uint8_t* out = BeginListing(key, lacking, count);
    if (!out) return false;
    for (size_t i = 0; i < count; ++i, out += 8) internal::StoreBig64(out, next());
    return true;
  }
  // AddListing of fingerprints already in hand.
  bool AddListing(const NodeKey& key, bool lacking, std::span<const uint64_t> fingerprints) {
    const uint64_t* fp = fingerprints.data();
    return AddListing(key, lacking, fingerprints.size(), [&] { return *fp++; });
  }
  bool AddMessage(const internal::Leaf& leaf);
  // The length-prefixed frame, data section last; its capacity may be the
  // whole budget (a big frame takes it at once). The builder is spent.
  Bytes Finish(bool idle);

 private:
  // The head's bytes, its version and kind included.
  size_t HeadBytes() const;
  // The room for the record count's varint, between the idle flag and the
  // records (the data section open).
  size_t CountBytes() const;
  // The records' bytes so far.
  size_t RecordsBytes() const;
  // Reserves room in the frame for `adding` more bytes.
  void MakeRoom(size_t adding);
  // Opens the data section (its idle flag and record count, both written
  // by Finish) after the head, once.
  void OpenRecords();
  // Counts one more record, widening the record count's room first if its
  // varint grows a byte (the records so far move up one: at the 128th record
  // and the 16,384th).
  void CountRecord();
  // A record's first byte (its depth and `flag`) and its prefix.
  void PutRecordHead(const NodeKey& key, uint8_t flag);
  // AddListing's all but the fingerprints: where the first of `count` goes
  // (room for all of them made), or null if the record does not fit.
  uint8_t* BeginListing(const NodeKey& key, bool lacking, size_t count);

  size_t budget_;
  Bytes frame_;               // the header, the head, then (once opened) the data section
  Bytes messages_;            // the data section's messages, copied in at Finish
  size_t head_end_ = 0;       // where the head ends in frame_ (0: records not opened)
  size_t records_begin_ = 0;  // where the records start in frame_
  uint64_t record_count_ = 0;
  uint64_t message_count_ = 0;
  bool has_data_;
};

// Decodes one frame body (without its length prefix).
Result<Frame> Decode(std::span<const uint8_t> body);

}  // namespace once::gossip::wire
