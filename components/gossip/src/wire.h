// Frame codec of the gossip protocol (docs/gossip-protocol.md). Decoding
// takes untrusted bytes and returns typed errors, never crashes, and never
// allocates more than the bytes it was given justify.

#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <vector>

#include "digest_tree.h"
#include "once/gossip/session.h"

namespace once::gossip::wire {

// 2: listing records (a disputed node with few leaves lists their fingerprints).
inline constexpr uint8_t kProtocolVersion = 2;
// Leaves in one listing record: a disputed node is listed instead of split
// into children iff neither side holds more leaves than this under it.
inline constexpr size_t kListingLeavesMax = 64;
inline constexpr size_t kFrameHeaderBytes = 4;

enum class Kind : uint8_t { kHello = 1, kData = 2, kDonate = 3, kAck = 4, kRefuse = 5 };

// A digest tree node: `depth` nibbles of `prefix` (the rest zero).
struct NodeKey {
  uint8_t depth = 0;
  Path prefix{};
  friend bool operator==(const NodeKey&, const NodeKey&) = default;
  NodeKey Child(int nibble) const;
};
struct NodeKeyHash {
  size_t operator()(const NodeKey& k) const;
};

// One side's listing of a node: the summary of each present child. A bounded
// record also lists, per child, the summary of the child's messages that are
// not <= the receiver's ceiling (the part the receiver has never seen; count 0
// if none), which lets both sides settle a child without descending into it.
struct Record {
  NodeKey key;
  uint16_t present = 0;  // bit c: child c is present
  std::array<Summary, internal::kFanout> children{};
  bool bounded = false;
  std::array<Summary, internal::kFanout> unseen{};  // bounded only
  // A listing names every leaf under the node by its fingerprint, in
  // non-decreasing order, instead of summarising children (present, children,
  // bounded and unseen are unused). A lacking listing answers the peer's
  // listing: only the fingerprints of the peer's listing that this side does
  // not hold (possibly none).
  bool listing = false;
  bool lacking = false;  // listing only
  // Decoded into its frame's pool (Data::pool); any other holds its own.
  std::pmr::vector<uint64_t> fingerprints;
  bool Has(int c) const { return (present >> c) & 1; }
  Summary Total() const;
  // The summary of child c's messages that the receiver has seen (bounded).
  Summary Seen(int c) const;
};

// A leaf's fingerprint in a listing (internal::Fingerprint): path bytes 8..15,
// big-endian. Two leaves under one node that collide there are taken one for
// the other (a 2^-64 chance per pair of leaves).
using internal::Fingerprint;

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

// Builds one frame body within a byte budget.
class FrameBuilder {
 public:
  FrameBuilder(Kind kind, size_t budget);
  void PutHello(const Hello& hello);
  void PutParty(const Bytes& party);
  void PutReason(const std::string& reason);
  size_t RecordBytes(const Record& record) const;
  size_t MessageBytes(const internal::Leaf& leaf) const;
  size_t room() const;
  // Adds if it fits (false otherwise).
  bool AddRecord(const Record& record);
  bool AddMessage(const internal::Leaf& leaf);
  // The length-prefixed frame, data section last.
  Bytes Finish(bool idle);

 private:
  size_t budget_;
  Bytes head_;
  Bytes records_;
  Bytes messages_;
  uint64_t record_count_ = 0;
  uint64_t message_count_ = 0;
  bool has_data_;
};

// Decodes one frame body (without its length prefix).
Result<Frame> Decode(std::span<const uint8_t> body);

}  // namespace once::gossip::wire
