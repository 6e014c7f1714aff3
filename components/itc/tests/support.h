// Test helpers: values built from byte programs (so rapidcheck can generate
// and shrink them), dense models of parties and versions, and clones.

#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "once/itc/clock.h"
#include "once/itc/party.h"
#include "once/itc/text.h"
#include "once/itc/version.h"

namespace once::itc::testing {

// A version read from `program` in preorder: each byte makes an internal node
// (if b % 5 < 3 and the depth allows) or a leaf of height (b / 5) % heights.
inline Version VersionFromProgram(const std::vector<uint8_t>& program, int depth_max = 6,
                                  int heights = 6) {
  std::vector<EventNode> nodes;
  size_t pos = 0;
  auto build = [&](auto&& self, int depth) -> void {
    const uint8_t b = pos < program.size() ? program[pos++] : 1;
    if (depth < depth_max && b % 5 < 3) {
      nodes.push_back(EventNode{0, false});
      self(self, depth + 1);
      self(self, depth + 1);
    } else {
      nodes.push_back(EventNode{static_cast<uint64_t>((b / 5) % heights), true});
    }
  };
  build(build, 0);
  return *Version::FromNodes(nodes);
}

// A party read like VersionFromProgram (leaf (b / 5) % 2); the empty party becomes
// the seed.
inline Party PartyFromProgram(const std::vector<uint8_t>& program, int depth_max = 6) {
  std::vector<IdNode> nodes;
  size_t pos = 0;
  auto build = [&](auto&& self, int depth) -> size_t {
    const uint8_t b = pos < program.size() ? program[pos++] : 1;
    if (depth < depth_max && b % 5 < 3) {
      const size_t at = nodes.size();
      nodes.push_back(IdNode::kSplit);
      self(self, depth + 1);
      self(self, depth + 1);
      if (nodes.size() == at + 3 && nodes[at + 1] != IdNode::kSplit &&
          nodes[at + 1] == nodes[at + 2]) {
        const IdNode leaf = nodes[at + 1];
        nodes.resize(at);
        nodes.push_back(leaf);
      }
      return at;
    }
    nodes.push_back((b / 5) % 2 ? IdNode::kOne : IdNode::kZero);
    return nodes.size() - 1;
  };
  build(build, 0);
  if (nodes[0] == IdNode::kZero) return Party::Seed();
  return *Party::FromNodes(std::move(nodes));
}

// The heights of `v` at 2^depth equal cells.
inline std::vector<uint64_t> Dense(const Version& v, int depth) {
  std::vector<uint64_t> cells(size_t{1} << depth);
  size_t pos = 0;
  auto fill = [&](auto&& self, size_t lo, size_t hi) -> void {
    const EventNode n = v.nodes()[pos++];
    if (n.leaf) {
      for (size_t c = lo; c < hi; ++c) cells[c] = n.height;
      return;
    }
    EXPECT_GT(hi - lo, 1u) << "tree deeper than the dense model";
    self(self, lo, (lo + hi) / 2);
    self(self, (lo + hi) / 2, hi);
  };
  fill(fill, 0, cells.size());
  return cells;
}

inline std::vector<bool> Dense(const Party& p, int depth) {
  std::vector<bool> cells(size_t{1} << depth);
  size_t pos = 0;
  auto fill = [&](auto&& self, size_t lo, size_t hi) -> void {
    const IdNode n = p.nodes()[pos++];
    if (n != IdNode::kSplit) {
      for (size_t c = lo; c < hi; ++c) cells[c] = n == IdNode::kOne;
      return;
    }
    EXPECT_GT(hi - lo, 1u) << "tree deeper than the dense model";
    self(self, lo, (lo + hi) / 2);
    self(self, (lo + hi) / 2, hi);
  };
  fill(fill, 0, cells.size());
  return cells;
}

// Copies for tests only: identities are linear, so the library has no Clone.
inline Party CloneForTest(const Party& p) { return *Party::Decode(p.Encode()); }
inline Clock CloneForTest(const Clock& c) { return *Clock::Decode(c.Encode()); }

inline Version V(const char* text) { return *ParseVersion(text); }
inline Party P(const char* text) { return *ParseParty(text); }

}  // namespace once::itc::testing
