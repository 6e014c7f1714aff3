// File: version.h
//
// A Version is an event tree of interval tree clocks: a step function
// h:[0,1) -> uint64 (a "skyline") held as a canonical tree whose leaves carry
// absolute heights, with no internal node whose two children are leaves of
// equal height. Equal versions have equal bytes. Versions are plain values.
//
//   Version v;                                        // zero everywhere
//   ONCE_ASSIGN_OR_RETURN(v, Tick(v, party));         // one event of party
//   Version w = Join(v, other);                       // pointwise max
//   if (Leq(v, w)) ...                                // v happened before or is w
//   ONCE_ASSIGN_OR_RETURN(uint64_t n, MinTicks(w));
//   Bytes wire = w.Encode();
//
// Heights are 64-bit; an event that would pass 2^64-1 fails with
// kLimitExceeded. Every operation is linear in the sizes of its inputs and
// never recurses deeper than kTreeDepthMax.

#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "once/base/hex.h"
#include "once/base/result.h"
#include "once/itc/limits.h"
#include "once/itc/party.h"

namespace once::itc {

// One node of an event tree in preorder: a leaf with its absolute height, or
// an internal node (height unused, 0).
struct EventNode {
  uint64_t height = 0;
  bool leaf = true;
  friend bool operator==(const EventNode&, const EventNode&) = default;
};

class Version {
 public:
  // Zero everywhere: the version of a new universe.
  Version() = default;
  Version(const Version& other);
  Version(Version&& other) noexcept;
  Version& operator=(const Version& other);
  Version& operator=(Version&& other) noexcept;
  ~Version() { Release(); }

  // Decodes exactly one version (marker-padded). Errors as Party::Decode;
  // a height outside [0, 2^64) is kInvalidArgument.
  static Result<Version> Decode(std::span<const uint8_t> bytes);
  static Result<std::pair<Version, size_t>> DecodePrefix(std::span<const uint8_t> bytes);

  // The canonical marker-padded encoding (prefix-free).
  Bytes Encode() const;

  friend bool operator==(const Version& a, const Version& b);

  // The canonical tree in preorder (for the library's codecs and tests).
  std::span<const EventNode> nodes() const { return {data(), size_}; }
  // Builds a version from a well-formed preorder tree, normalising it.
  // kInvalidArgument if malformed; kLimitExceeded if too deep.
  static Result<Version> FromNodes(std::span<const EventNode> nodes);

  // A version of up to this many nodes lives inside the object, with no heap
  // block of its own (a leaf, or a node over two leaves: every version of a
  // universe whose seed forked once), so a copy of one allocates nothing.
  // Larger ones live on the heap, exactly sized (a Version never grows in
  // place). A moved-from version is zero.
  static constexpr uint32_t kInlineNodes = 3;

 private:
  struct Trusted {};
  Version(Trusted, std::span<const EventNode> nodes);
  friend struct VersionAccess;
  bool on_heap() const { return size_ > kInlineNodes; }
  const EventNode* data() const { return on_heap() ? heap_ : inline_; }
  void Assign(std::span<const EventNode> nodes);
  void Release();

  uint32_t size_ = 1;
  union {
    EventNode inline_[kInlineNodes] = {EventNode{}};
    EventNode* heap_;
  };
};

// Pointwise order: a <= b everywhere.
bool Leq(const Version& a, const Version& b);
// Neither Leq(a, b) nor Leq(b, a).
bool Concurrent(const Version& a, const Version& b);
// Pointwise max (least upper bound).
Version Join(const Version& a, const Version& b);
// Pointwise min (greatest lower bound).
Version Meet(const Version& a, const Version& b);

// One event of `party` on `version` (the paper's event): fill the party's
// region if that raises anything; otherwise grow the cheapest leaf by
// (expansions, depth), ties to the right, then normalise. The result is
// strictly greater and differs from `version` only inside the party.
// kLimitExceeded if a height would pass 2^64-1.
Result<Version> Tick(const Version& version, const Party& party);
// `count` events: byte for byte the same as `count` calls of Tick.
Result<Version> Ticks(const Version& version, const Party& party, uint64_t count);

// A lower bound on the events of any history that produced `version`: the sum
// of the bases of its normalised paper tree. kLimitExceeded past 2^64-1.
Result<uint64_t> MinTicks(const Version& version);

// The exact integral of h over [0,1): whole + sum(fraction bit k * 2^-(k+1)).
// Strictly monotone (a < b implies Rank a < Rank b) and a valuation.
struct Rank {
  unsigned __int128 whole = 0;
  // Binary fraction, most significant first: word w bit 63-j is the bit of
  // 2^-(64w+j+1). No trailing zero words.
  std::vector<uint64_t> fraction;

  friend bool operator==(const Rank&, const Rank&) = default;
  friend std::strong_ordering operator<=>(const Rank& a, const Rank& b);
  friend Rank operator+(const Rank& a, const Rank& b);
  // "12 + 0x8000000000000000/2^64" style, for messages and tests.
  std::string ToString() const;
};
Rank RankOf(const Version& version);

// A total order on versions that extends Leq (a valid causal delivery
// order): by Rank, then by encoded bytes.
std::strong_ordering TotalOrder(const Version& a, const Version& b);

}  // namespace once::itc
