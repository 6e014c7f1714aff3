// Helpers shared by the id and event trees, both held in preorder. Every
// helper is iterative or recursion-free, so it is safe on any input.

#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "once/base/result.h"
#include "once/itc/limits.h"
#include "once/itc/party.h"
#include "once/itc/version.h"

namespace once::itc {

// Builds a Version from nodes the library knows to be canonical.
struct VersionAccess {
  static Version Make(std::span<const EventNode> nodes) {
    return Version(Version::Trusted{}, nodes);
  }
};

}  // namespace once::itc

namespace once::itc::internal {

inline bool IsLeaf(IdNode n) { return n != IdNode::kSplit; }
inline bool IsLeaf(const EventNode& n) { return n.leaf; }
inline bool SameLeaf(IdNode a, IdNode b) { return a == b; }
inline bool SameLeaf(const EventNode& a, const EventNode& b) { return a.height == b.height; }

// The index one past the subtree that starts at `pos`. The tree must be
// well formed.
template <class Node>
size_t SubtreeEnd(std::span<const Node> nodes, size_t pos) {
  size_t pending = 1;
  while (pending > 0) {
    pending += IsLeaf(nodes[pos]) ? 0 : 2;
    --pending;
    ++pos;
  }
  return pos;
}

// For every node, the index one past its subtree, in one linear pass.
template <class Node>
std::vector<size_t> SubtreeEnds(std::span<const Node> nodes) {
  std::vector<size_t> ends(nodes.size());
  std::vector<size_t> roots;  // subtrees already seen, right to left
  for (size_t i = nodes.size(); i-- > 0;) {
    if (IsLeaf(nodes[i])) {
      ends[i] = i + 1;
    } else {
      roots.pop_back();  // the left child
      ends[i] = ends[roots.back()];
      roots.pop_back();  // the right child
    }
    roots.push_back(i);
  }
  return ends;
}

// The depths of the nodes a preorder walk still expects, deepest on top. A
// walk that refuses a node deeper than kTreeDepthMax before opening it holds
// at most kTreeDepthMax + 3 of them, so they live inline: no allocation per
// walk (versions are decoded and checked on every gossip frame).
class PendingDepths {
 public:
  PendingDepths() { depths_[size_++] = 0; }
  bool empty() const { return size_ == 0; }
  uint32_t Pop() { return depths_[--size_]; }
  // Both children of an internal node at `depth` (at most kTreeDepthMax).
  void PushChildren(uint32_t depth) {
    depths_[size_++] = depth + 1;
    depths_[size_++] = depth + 1;
  }

 private:
  std::array<uint32_t, kTreeDepthMax + 3> depths_;
  size_t size_ = 0;
};

// Checks that `nodes` is exactly one tree, at most kTreeDepthMax deep, and
// canonical (no internal node with two equal leaf children).
template <class Node>
Status CheckTree(std::span<const Node> nodes, const char* what) {
  PendingDepths depths;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (depths.empty()) {
      return MakeError(ErrorCode::kInvalidArgument, std::string(what) + ": nodes after the tree");
    }
    const uint32_t depth = depths.Pop();
    if (depth > kTreeDepthMax) {
      return LimitError("itc_tree_depth_max", depth, kTreeDepthMax);
    }
    if (IsLeaf(nodes[i])) continue;
    depths.PushChildren(depth);
    if (i + 2 < nodes.size() && IsLeaf(nodes[i + 1]) && IsLeaf(nodes[i + 2]) &&
        SameLeaf(nodes[i + 1], nodes[i + 2])) {
      return MakeError(ErrorCode::kCorruption,
                       std::string(what) + ": non-canonical node at " + std::to_string(i));
    }
  }
  if (!depths.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, std::string(what) + ": truncated tree");
  }
  return Ok();
}

// Appends preorder nodes and normalises bottom-up: closing an internal node
// whose children are two equal leaves replaces the three by one leaf.
template <class Node>
class TreeBuilder {
 public:
  void Leaf(Node n) { out_.push_back(n); }
  // Returns the position to pass to Close.
  size_t Open(Node internal) {
    out_.push_back(internal);
    return out_.size() - 1;
  }
  void Close(size_t pos) {
    if (out_.size() == pos + 3 && IsLeaf(out_[pos + 1]) && IsLeaf(out_[pos + 2]) &&
        SameLeaf(out_[pos + 1], out_[pos + 2])) {
      const Node leaf = out_[pos + 1];
      out_.resize(pos);
      out_.push_back(leaf);
    }
  }
  // Appends the subtree of `src` at `pos`; advances `pos` past it.
  void CopySubtree(std::span<const Node> src, size_t& pos) {
    const size_t end = SubtreeEnd(src, pos);
    out_.insert(out_.end(), src.begin() + pos, src.begin() + end);
    pos = end;
  }
  std::vector<Node>& nodes() { return out_; }

 private:
  std::vector<Node> out_;
};

}  // namespace once::itc::internal
