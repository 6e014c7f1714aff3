#include "once/itc/party.h"

#include <string>
#include <utility>

#include "bits.h"
#include "tree.h"

namespace once::itc {
namespace {

using internal::SubtreeEnd;
using Nodes = std::span<const IdNode>;
using Builder = internal::TreeBuilder<IdNode>;

void Skip(Nodes n, size_t& pos) { pos = SubtreeEnd(n, pos); }

// The union of two disjoint subtrees.
void Sum(Nodes a, size_t& ia, Nodes b, size_t& ib, Builder& out) {
  if (a[ia] == IdNode::kZero) {
    ++ia;
    out.CopySubtree(b, ib);
  } else if (b[ib] == IdNode::kZero) {
    ++ib;
    out.CopySubtree(a, ia);
  } else {
    ONCE_CHECK(a[ia] == IdNode::kSplit && b[ib] == IdNode::kSplit);  // disjoint
    ++ia, ++ib;
    const size_t pos = out.Open(IdNode::kSplit);
    Sum(a, ia, b, ib, out);
    Sum(a, ia, b, ib, out);
    out.Close(pos);
  }
}

bool DisjointAt(Nodes a, size_t& ia, Nodes b, size_t& ib) {
  if (a[ia] == IdNode::kZero || b[ib] == IdNode::kZero) {
    Skip(a, ia);
    Skip(b, ib);
    return true;
  }
  if (a[ia] == IdNode::kOne || b[ib] == IdNode::kOne) return false;
  ++ia, ++ib;
  return DisjointAt(a, ia, b, ib) && DisjointAt(a, ia, b, ib);
}

bool CoversAt(Nodes a, size_t& ia, Nodes b, size_t& ib) {
  if (b[ib] == IdNode::kZero || a[ia] == IdNode::kOne) {
    Skip(a, ia);
    Skip(b, ib);
    return true;
  }
  if (a[ia] == IdNode::kZero || b[ib] == IdNode::kOne) return false;
  ++ia, ++ib;
  return CoversAt(a, ia, b, ib) && CoversAt(a, ia, b, ib);
}

// The complement of the subtree at `ib` (canonical in, canonical out).
void Complement(Nodes b, size_t& ib, Builder& out) {
  const size_t end = SubtreeEnd(b, ib);
  for (; ib < end; ++ib) {
    const IdNode n = b[ib];
    out.Leaf(n == IdNode::kZero ? IdNode::kOne : n == IdNode::kOne ? IdNode::kZero : n);
  }
}

void WithoutAt(Nodes a, size_t& ia, Nodes b, size_t& ib, Builder& out) {
  if (b[ib] == IdNode::kZero) {
    ++ib;
    out.CopySubtree(a, ia);
  } else if (b[ib] == IdNode::kOne || a[ia] == IdNode::kZero) {
    Skip(a, ia);
    Skip(b, ib);
    out.Leaf(IdNode::kZero);
  } else if (a[ia] == IdNode::kOne) {
    ++ia;
    Complement(b, ib, out);
  } else {
    ++ia, ++ib;
    const size_t pos = out.Open(IdNode::kSplit);
    WithoutAt(a, ia, b, ib, out);
    WithoutAt(a, ia, b, ib, out);
    out.Close(pos);
  }
}

void EncodeTree(Nodes n, internal::BitWriter& w) {
  const std::vector<size_t> ends = internal::SubtreeEnds(n);
  std::vector<size_t> todo{0};
  while (!todo.empty()) {
    const size_t p = todo.back();
    todo.pop_back();
    if (n[p] == IdNode::kOne) {
      w.PutBits(0, 2);
      continue;
    }
    const size_t l = p + 1;
    const size_t r = ends[l];
    w.Put(n[l] != IdNode::kZero);
    w.Put(n[r] != IdNode::kZero);
    if (n[r] != IdNode::kZero) todo.push_back(r);
    if (n[l] != IdNode::kZero) todo.push_back(l);
  }
}

// Reads one id tree; checks depth but not canonicity.
Result<std::vector<IdNode>> DecodeTree(internal::BitReader& r) {
  struct Task {
    uint32_t depth;
    bool zero;  // an absent child: emit 0 without reading
  };
  std::vector<IdNode> nodes;
  std::vector<Task> todo{{0, false}};
  while (!todo.empty()) {
    const Task t = todo.back();
    todo.pop_back();
    if (t.zero) {
      nodes.push_back(IdNode::kZero);
      continue;
    }
    if (t.depth > kTreeDepthMax) return LimitError("itc_tree_depth_max", t.depth, kTreeDepthMax);
    ONCE_ASSIGN_OR_RETURN(bool left, r.Get());
    ONCE_ASSIGN_OR_RETURN(bool right, r.Get());
    if (!left && !right) {
      nodes.push_back(IdNode::kOne);
      continue;
    }
    nodes.push_back(IdNode::kSplit);
    todo.push_back({t.depth + 1, !right});
    todo.push_back({t.depth + 1, !left});
  }
  return nodes;
}

Status CheckSize(size_t size) {
  if (size > kEncodedBytesMax) {
    return LimitError("itc_encoded_bytes_max", static_cast<int64_t>(size), kEncodedBytesMax);
  }
  return Ok();
}

}  // namespace

Party Party::Seed() { return Party({IdNode::kOne}); }

Result<Party> Party::FromNodes(std::vector<IdNode> nodes) {
  if (nodes.empty()) return MakeError(ErrorCode::kInvalidArgument, "party: no nodes");
  for (IdNode n : nodes) {
    if (static_cast<uint8_t>(n) > 2)
      return MakeError(ErrorCode::kInvalidArgument, "party: bad node");
  }
  ONCE_RETURN_IF_ERROR(internal::CheckTree<IdNode>(nodes, "party"));
  if (nodes[0] == IdNode::kZero) return MakeError(ErrorCode::kInvalidArgument, "party: empty");
  return Party(std::move(nodes));
}

Bytes Party::Encode() const {
  internal::BitWriter w;
  EncodeTree(nodes_, w);
  return std::move(w).Finish();
}

Result<std::pair<Party, size_t>> Party::DecodePrefix(std::span<const uint8_t> bytes) {
  ONCE_RETURN_IF_ERROR(CheckSize(bytes.size()));
  internal::BitReader r(bytes, "party");
  ONCE_ASSIGN_OR_RETURN(std::vector<IdNode> nodes, DecodeTree(r));
  ONCE_ASSIGN_OR_RETURN(size_t used, r.FinishPrefix());
  ONCE_RETURN_IF_ERROR(internal::CheckTree<IdNode>(nodes, "party"));
  return std::pair<Party, size_t>(Party(std::move(nodes)), used);
}

Result<Party> Party::Decode(std::span<const uint8_t> bytes) {
  ONCE_ASSIGN_OR_RETURN(auto decoded, DecodePrefix(bytes));
  if (decoded.second != bytes.size()) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "party encoding: trailing bytes: " + std::to_string(bytes.size() - decoded.second));
  }
  return std::move(decoded.first);
}

Result<Party> Party::Fork() {
  ONCE_CHECK_MSG(!nodes_.empty(), "use of a moved-from Party");
  const Nodes n = nodes_;
  const std::vector<size_t> ends = internal::SubtreeEnds(n);
  // Walk down one-sided nodes to the node that splits.
  size_t p = 0;
  uint32_t depth = 0;
  while (n[p] == IdNode::kSplit) {
    const size_t l = p + 1;
    const size_t r = ends[l];
    if (n[l] != IdNode::kZero && n[r] != IdNode::kZero) break;
    p = n[l] == IdNode::kZero ? r : l;
    ++depth;
  }
  const size_t end = ends[p];
  std::vector<IdNode> left(n.begin(), n.begin() + p);
  std::vector<IdNode> right = left;
  if (n[p] == IdNode::kOne) {
    if (depth + 1 > kTreeDepthMax)
      return LimitError("itc_tree_depth_max", depth + 1, kTreeDepthMax);
    left.insert(left.end(), {IdNode::kSplit, IdNode::kOne, IdNode::kZero});
    right.insert(right.end(), {IdNode::kSplit, IdNode::kZero, IdNode::kOne});
  } else {
    const size_t mid = ends[p + 1];
    left.insert(left.end(), n.begin() + p, n.begin() + mid);  // the node and its left child
    left.push_back(IdNode::kZero);
    right.insert(right.end(), {IdNode::kSplit, IdNode::kZero});
    right.insert(right.end(), n.begin() + mid, n.begin() + end);
  }
  left.insert(left.end(), n.begin() + end, n.end());
  right.insert(right.end(), n.begin() + end, n.end());
  nodes_ = std::move(left);
  return Party(std::move(right));
}

namespace {

Status ForksInto(Party party, size_t count, std::vector<Party>& out) {
  if (count == 1) {
    out.push_back(std::move(party));
    return Ok();
  }
  auto right = party.Fork();
  if (!right) {
    out.push_back(std::move(party));
    return std::unexpected(right.error());
  }
  Status left_status = ForksInto(std::move(party), count - count / 2, out);
  if (!left_status) {
    out.push_back(std::move(*right));
    return left_status;
  }
  return ForksInto(std::move(*right), count / 2, out);
}

}  // namespace

std::expected<std::vector<Party>, Refused<Party>> Party::Forks(Party&& party, size_t count) {
  if (count == 0) {
    return std::unexpected(Refused<Party>{
        std::move(party),
        MakeError(ErrorCode::kInvalidArgument, "forks: count must be >= 1").error()});
  }
  std::vector<Party> out;
  out.reserve(count);
  Status status = ForksInto(std::move(party), count, out);
  if (status) return out;
  // Give the identity back whole: the pieces are disjoint, so joining cannot fail.
  Party whole = std::move(out.back());
  out.pop_back();
  for (Party& piece : out) ONCE_CHECK(whole.Join(std::move(piece)).has_value());
  return std::unexpected(Refused<Party>{std::move(whole), status.error()});
}

std::expected<void, Refused<Party>> Party::Join(Party&& other) {
  ONCE_CHECK_MSG(!nodes_.empty() && !other.nodes_.empty(), "use of a moved-from Party");
  if (!Disjoint(*this, other)) {
    return std::unexpected(Refused<Party>{
        std::move(other),
        MakeError(ErrorCode::kInvalidArgument, "party join: parties overlap").error()});
  }
  Builder out;
  size_t ia = 0, ib = 0;
  Sum(nodes_, ia, other.nodes_, ib, out);
  nodes_ = std::move(out.nodes());
  other.nodes_.clear();
  return {};
}

std::optional<Party> Party::Without(Party&& party, const Party& other) {
  Builder out;
  size_t ia = 0, ib = 0;
  WithoutAt(party.nodes_, ia, other.nodes_, ib, out);
  party.nodes_.clear();
  if (out.nodes().front() == IdNode::kZero) return std::nullopt;
  return Party(std::move(out.nodes()));
}

bool Disjoint(const Party& a, const Party& b) {
  size_t ia = 0, ib = 0;
  return DisjointAt(a.nodes_, ia, b.nodes_, ib);
}

bool Covers(const Party& a, const Party& b) {
  size_t ia = 0, ib = 0;
  return CoversAt(a.nodes_, ia, b.nodes_, ib);
}

}  // namespace once::itc
