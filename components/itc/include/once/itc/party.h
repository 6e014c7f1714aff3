// File: party.h
//
// A Party is an identity of interval tree clocks: a non-empty set of dyadic
// sub-intervals of [0,1), held as a canonical id tree (leaves 0/1; no node
// has two equal leaf children), so equal parties have equal bytes.
//
// Identities are linear: a Party is move-only and has no copy. New parties
// come only from Seed(), from splitting one (Fork/Forks) and from decoding a
// persisted one. Two parties of one universe never overlap unless a stale copy
// was restored; Join refuses overlapping operands and hands the operand back.
//
//   Party a = Party::Seed();
//   ONCE_ASSIGN_OR_RETURN(Party b, a.Fork());   // a keeps the left half
//   auto joined = a.Join(std::move(b));          // a is the seed again
//   if (!joined) Party back = std::move(joined.error().operand);
//   Bytes wire = a.Encode();                     // {0x20}
//
// All operations are linear in the sizes of their inputs and never recurse
// deeper than kTreeDepthMax. A moved-from Party may only be assigned to or
// destroyed.

#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "once/base/hex.h"
#include "once/base/result.h"
#include "once/itc/limits.h"

namespace once::itc {

// A refused linear operation: the operand that was passed by rvalue, handed
// back unchanged, and why it was refused.
template <class T>
struct Refused {
  T operand;
  Error error;
};

// One node of an id tree in preorder (the library's representation).
enum class IdNode : uint8_t { kZero = 0, kOne = 1, kSplit = 2 };

class Party {
 public:
  // The whole interval [0,1): the identity of a new universe.
  static Party Seed();

  // Decodes exactly one party (marker-padded; see docs/itc-wire-format.md).
  // kLimitExceeded: more than kEncodedBytesMax bytes or deeper than
  // kTreeDepthMax. kInvalidArgument: truncated, missing marker, trailing bits
  // or bytes. kCorruption: a well-framed but non-canonical tree.
  static Result<Party> Decode(std::span<const uint8_t> bytes);
  // As Decode, but reads one party from the front of `bytes` and returns it
  // with the number of bytes it used; the rest is left to the caller.
  static Result<std::pair<Party, size_t>> DecodePrefix(std::span<const uint8_t> bytes);

  Party(Party&&) noexcept = default;
  Party& operator=(Party&&) noexcept = default;
  Party(const Party&) = delete;
  Party& operator=(const Party&) = delete;

  // The canonical marker-padded encoding (prefix-free).
  Bytes Encode() const;

  // Splits this party: it keeps the left half and the right half is
  // returned (the paper's split). Both halves are non-empty and disjoint and
  // join back to the original. kLimitExceeded if a half would be deeper than
  // kTreeDepthMax (this party is then unchanged).
  Result<Party> Fork();

  // Splits `party` into `count` >= 1 disjoint parties, balanced: the left
  // half is split into ceil(count/2), the right half into floor(count/2).
  // kInvalidArgument for count == 0, kLimitExceeded on depth; on error the
  // party is handed back.
  static std::expected<std::vector<Party>, Refused<Party>> Forks(Party&& party, size_t count);

  // Takes `other` into this party (set union). Refused, with `other` handed
  // back and this party unchanged, if the two overlap (kInvalidArgument).
  std::expected<void, Refused<Party>> Join(Party&& other);

  // This party minus `other`, consuming this party. nullopt if nothing is
  // left (this party is a subset of `other`).
  static std::optional<Party> Without(Party&& party, const Party& other);

  // True iff the two share no part of [0,1).
  friend bool Disjoint(const Party& a, const Party& b);
  // True iff `a` contains all of `b`.
  friend bool Covers(const Party& a, const Party& b);

  friend bool operator==(const Party& a, const Party& b) { return a.nodes_ == b.nodes_; }

  // The canonical tree in preorder (for the library's codecs and tests).
  std::span<const IdNode> nodes() const { return nodes_; }
  // Builds a party from a canonical preorder tree. kInvalidArgument if it is
  // malformed, empty (0) or not canonical; kLimitExceeded if too deep.
  static Result<Party> FromNodes(std::vector<IdNode> nodes);

 private:
  explicit Party(std::vector<IdNode> nodes) : nodes_(std::move(nodes)) {}
  std::vector<IdNode> nodes_;
};

// Namespace-scope declarations of the friends above, so that qualified calls
// (itc::Disjoint(a, b)) find them too, not only argument-dependent lookup.
bool Disjoint(const Party& a, const Party& b);
bool Covers(const Party& a, const Party& b);

}  // namespace once::itc
