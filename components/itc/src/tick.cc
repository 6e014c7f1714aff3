// The paper's event: fill, else grow the cheapest leaf, on preorder trees.

#include <algorithm>
#include <limits>

#include "once/itc/version.h"
#include "tree.h"

namespace once::itc {

namespace {

using Ids = std::span<const IdNode>;
using Events = std::span<const EventNode>;
using Builder = internal::TreeBuilder<EventNode>;
constexpr EventNode kInternal{0, false};

struct Span2 {
  uint64_t min;
  uint64_t max;
};

Span2 CopyScan(Events e, size_t& ie, Builder* out) {
  const size_t end = internal::SubtreeEnd(e, ie);
  Span2 s{std::numeric_limits<uint64_t>::max(), 0};
  for (size_t p = ie; p < end; ++p) {
    if (!e[p].leaf) continue;
    s.min = std::min(s.min, e[p].height);
    s.max = std::max(s.max, e[p].height);
  }
  if (out != nullptr) {
    out->CopySubtree(e, ie);
  } else {
    ie = end;
  }
  return s;
}

Span2 LeafOut(uint64_t h, Builder& out) {
  out.Leaf(EventNode{h, true});
  return {h, h};
}

// fill(i, e); returns the min and max of what it wrote.
Span2 Fill(Ids i, size_t& ii, Events e, size_t& ie, Builder& out) {
  if (i[ii] == IdNode::kZero) {
    ++ii;
    return CopyScan(e, ie, &out);
  }
  if (i[ii] == IdNode::kOne) {
    ++ii;
    return LeafOut(CopyScan(e, ie, nullptr).max, out);
  }
  if (e[ie].leaf) {
    ii = internal::SubtreeEnd(i, ii);
    return LeafOut(e[ie++].height, out);
  }
  ++ii, ++ie;
  const size_t pos = out.Open(kInternal);
  Span2 l, r;
  if (i[ii] == IdNode::kOne) {  // (1, ir): the left leaf rises to min of the filled right
    ++ii;
    const uint64_t left_max = CopyScan(e, ie, nullptr).max;
    const size_t slot = out.nodes().size();
    out.Leaf(EventNode{0, true});
    r = Fill(i, ii, e, ie, out);
    const uint64_t h = std::max(left_max, r.min);
    out.nodes()[slot].height = h;
    l = {h, h};
  } else {
    l = Fill(i, ii, e, ie, out);
    if (i[ii] == IdNode::kOne) {  // (il, 1)
      ++ii;
      r = LeafOut(std::max(CopyScan(e, ie, nullptr).max, l.min), out);
    } else {
      r = Fill(i, ii, e, ie, out);
    }
  }
  out.Close(pos);
  return {std::min(l.min, r.min), std::max(l.max, r.max)};
}

// Cost of growing: (expansions, depth), compared lexicographically.
struct Cost {
  uint32_t expansions;
  uint32_t depth;
  auto operator<=>(const Cost&) const = default;
};
constexpr Cost kNever{std::numeric_limits<uint32_t>::max(), 0};

struct Grower {
  Ids i;
  Events e;
  std::vector<uint8_t> go_right;  // per id node: the side grow takes
  bool overflow = false;

  // Pass 1: the cheapest cost under id node `ii` over event node `ie` (or a
  // virtual leaf when `expanded`, which does not move `ie`).
  Cost Price(size_t& ii, size_t& ie, bool expanded) {
    if (i[ii] == IdNode::kOne) {
      ++ii;
      if (!expanded) {
        ONCE_CHECK(e[ie].leaf);  // fill would have flattened an owned subtree
        ++ie;
      }
      return {0, 0};
    }
    ONCE_CHECK(i[ii] == IdNode::kSplit);
    const size_t node = ii++;
    const bool child_expanded = expanded || e[ie].leaf;
    if (!expanded) ++ie;
    const Cost l = Child(ii, ie, child_expanded);
    const Cost r = Child(ii, ie, child_expanded);
    const bool right = l == kNever || (r != kNever && !(l < r));
    go_right[node] = right ? 1 : 0;
    const Cost c = right ? r : l;
    return {c.expansions + (child_expanded ? 1u : 0u), c.depth + 1};
  }

  Cost Child(size_t& ii, size_t& ie, bool expanded) {
    if (i[ii] != IdNode::kZero) return Price(ii, ie, expanded);
    ++ii;
    if (!expanded) ie = internal::SubtreeEnd(e, ie);
    return kNever;
  }

  // Pass 2: writes the grown tree along the chosen path.
  void Apply(size_t& ii, size_t& ie, bool expanded, uint64_t virtual_height, Builder& out) {
    const uint64_t h = expanded ? virtual_height : e[ie].height;
    if (i[ii] == IdNode::kOne) {
      ++ii;
      if (!expanded) ++ie;
      if (h == std::numeric_limits<uint64_t>::max()) overflow = true;
      out.Leaf(EventNode{h + 1, true});
      return;
    }
    const size_t node = ii++;
    const bool child_expanded = expanded || e[ie].leaf;
    if (!expanded) ++ie;
    const size_t pos = out.Open(kInternal);
    for (int side = 0; side < 2; ++side) {
      if ((side == 1) == (go_right[node] != 0)) {
        Apply(ii, ie, child_expanded, h, out);
      } else {
        ii = internal::SubtreeEnd(i, ii);
        if (child_expanded) {
          out.Leaf(EventNode{h, true});
        } else {
          out.CopySubtree(e, ie);
        }
      }
    }
    out.Close(pos);
  }
};

}  // namespace

Result<Version> Tick(const Version& version, const Party& party) {
  const Ids i = party.nodes();
  const Events e = version.nodes();
  ONCE_CHECK_MSG(!i.empty(), "use of a moved-from Party");
  {
    Builder filled;
    size_t ii = 0, ie = 0;
    Fill(i, ii, e, ie, filled);
    if (!std::equal(filled.nodes().begin(), filled.nodes().end(), e.begin(), e.end())) {
      return VersionAccess::Make(std::move(filled.nodes()));
    }
  }
  Grower g{i, e, std::vector<uint8_t>(i.size(), 0)};
  size_t ii = 0, ie = 0;
  g.Price(ii, ie, false);
  Builder grown;
  ii = 0, ie = 0;
  g.Apply(ii, ie, false, 0, grown);
  if (g.overflow) return MakeError(ErrorCode::kLimitExceeded, "version tick: height past 2^64-1");
  return VersionAccess::Make(std::move(grown.nodes()));
}

Result<Version> Ticks(const Version& version, const Party& party, uint64_t count) {
  const std::span<const IdNode> i = party.nodes();
  if (i.size() == 1 && version.nodes().size() == 1 && count > 0) {
    // The seed over a flat version: every tick raises the one leaf.
    const uint64_t h = version.nodes()[0].height;
    if (h > std::numeric_limits<uint64_t>::max() - count) {
      return MakeError(ErrorCode::kLimitExceeded, "version ticks: height past 2^64-1");
    }
    return VersionAccess::Make({EventNode{h + count, true}});
  }
  Version v = version;
  for (uint64_t k = 0; k < count; ++k) {
    ONCE_ASSIGN_OR_RETURN(v, Tick(v, party));
  }
  return v;
}

}  // namespace once::itc
