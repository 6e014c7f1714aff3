// The paper's event: fill, else grow the cheapest leaf, on preorder trees.

#include <algorithm>
#include <limits>
#include <optional>

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
  uint64_t amount = 1;            // how far the grown leaf rises
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
      if (h > std::numeric_limits<uint64_t>::max() - amount) overflow = true;
      out.Leaf(EventNode{h + amount, true});
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

// Grows the cheapest leaf of `e` (a fixpoint of fill under `i`) by `amount`.
Result<Version> Grow(Ids i, Events e, uint64_t amount) {
  Grower g{i, e, std::vector<uint8_t>(i.size(), 0), amount};
  size_t ii = 0, ie = 0;
  g.Price(ii, ie, false);
  Builder grown;
  ii = 0, ie = 0;
  g.Apply(ii, ie, false, 0, grown);
  if (g.overflow) return MakeError(ErrorCode::kLimitExceeded, "version tick: height past 2^64-1");
  return VersionAccess::Make(std::move(grown.nodes()));
}

// fill(i, e), or nullopt when it changes nothing.
std::optional<Version> FillChanged(Ids i, Events e) {
  Builder filled;
  size_t ii = 0, ie = 0;
  Fill(i, ii, e, ie, filled);
  if (std::equal(filled.nodes().begin(), filled.nodes().end(), e.begin(), e.end())) {
    return std::nullopt;
  }
  return VersionAccess::Make(std::move(filled.nodes()));
}

}  // namespace

Result<Version> Tick(const Version& version, const Party& party) {
  ONCE_CHECK_MSG(!party.nodes().empty(), "use of a moved-from Party");
  if (auto filled = FillChanged(party.nodes(), version.nodes())) return *std::move(filled);
  return Grow(party.nodes(), version.nodes(), 1);
}

// k ticks in O(n): fill is idempotent, so at most the first tick fills; every
// later tick grows. Grow's choice depends only on the shapes of the two trees,
// and it only ever descends to the owned side of a node whose other side is
// not owned, so the leaf it raises stays a fixpoint of fill, never merges with
// a sibling (fill already lifted it to at least its unowned sibling) and needs
// no second expansion: the next grow picks the same leaf. So k - j grows raise
// one leaf by k - j, which is one grow by k - j.
Result<Version> Ticks(const Version& version, const Party& party, uint64_t count) {
  ONCE_CHECK_MSG(!party.nodes().empty(), "use of a moved-from Party");
  if (count == 0) return version;
  std::optional<Version> filled = FillChanged(party.nodes(), version.nodes());
  if (filled && count == 1) return *std::move(filled);
  const Version& base = filled ? *filled : version;
  return Grow(party.nodes(), base.nodes(), filled ? count - 1 : count);
}

}  // namespace once::itc
