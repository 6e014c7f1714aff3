#include "oracle.h"

#include <algorithm>
#include <span>
#include <tuple>

namespace once::itc::oracle {
namespace {

Id IdRaw(Id l, Id r) {
  return std::make_shared<const IdTree>(IdTree{0, std::move(l), std::move(r)});
}
Ev EvRaw(uint64_t n, Ev l, Ev r) {
  return std::make_shared<const EvTree>(EvTree{n, std::move(l), std::move(r)});
}
Ev Lift(const Ev& e, uint64_t m) { return EvRaw(e->base + m, e->left, e->right); }
Ev Sink(const Ev& e, uint64_t m) { return EvRaw(e->base - m, e->left, e->right); }

Ev Norm(const Ev& e) {
  if (e->leaf()) return e;
  return EvNorm(e->base, Norm(e->left), Norm(e->right));
}

// The paper's grow: the grown tree and its cost (expansions, depth).
using Cost = std::pair<uint64_t, uint64_t>;
std::pair<Ev, Cost> Grow(const Id& i, const Ev& e) {
  if (i->leaf() && i->value == 1 && e->leaf()) return {EvLeaf(e->base + 1), {0, 0}};
  if (e->leaf()) {
    auto [g, c] = Grow(i, EvRaw(e->base, EvLeaf(0), EvLeaf(0)));
    return {g, {c.first + 1, c.second}};
  }
  const Id& il = i->left;
  const Id& ir = i->right;
  auto zero = [](const Id& x) { return x->leaf() && x->value == 0; };
  if (zero(il)) {
    auto [g, c] = Grow(ir, e->right);
    return {EvRaw(e->base, e->left, g), {c.first, c.second + 1}};
  }
  if (zero(ir)) {
    auto [g, c] = Grow(il, e->left);
    return {EvRaw(e->base, g, e->right), {c.first, c.second + 1}};
  }
  auto [gl, cl] = Grow(il, e->left);
  auto [gr, cr] = Grow(ir, e->right);
  if (cl < cr) return {EvRaw(e->base, gl, e->right), {cl.first, cl.second + 1}};
  return {EvRaw(e->base, e->left, gr), {cr.first, cr.second + 1}};
}

Id IdFromAt(std::span<const IdNode> n, size_t& pos) {
  const IdNode x = n[pos++];
  if (x == IdNode::kZero) return IdLeaf(0);
  if (x == IdNode::kOne) return IdLeaf(1);
  Id l = IdFromAt(n, pos);
  Id r = IdFromAt(n, pos);
  return IdRaw(l, r);
}

Ev EvFromAt(std::span<const EventNode> n, size_t& pos) {
  const EventNode x = n[pos++];
  if (x.leaf) return EvLeaf(x.height);
  Ev l = EvFromAt(n, pos);
  Ev r = EvFromAt(n, pos);
  return EvNorm(0, l, r);
}

}  // namespace

Id IdLeaf(int v) { return std::make_shared<const IdTree>(IdTree{v, nullptr, nullptr}); }

Id IdNorm(Id l, Id r) {
  if (l->leaf() && r->leaf() && l->value == r->value) return IdLeaf(l->value);
  return IdRaw(std::move(l), std::move(r));
}

std::pair<Id, Id> Split(const Id& i) {
  if (i->leaf() && i->value == 0) return {IdLeaf(0), IdLeaf(0)};
  if (i->leaf()) return {IdRaw(IdLeaf(1), IdLeaf(0)), IdRaw(IdLeaf(0), IdLeaf(1))};
  const Id& l = i->left;
  const Id& r = i->right;
  if (l->leaf() && l->value == 0) {
    auto [a, b] = Split(r);
    return {IdNorm(IdLeaf(0), a), IdNorm(IdLeaf(0), b)};
  }
  if (r->leaf() && r->value == 0) {
    auto [a, b] = Split(l);
    return {IdNorm(a, IdLeaf(0)), IdNorm(b, IdLeaf(0))};
  }
  return {IdNorm(l, IdLeaf(0)), IdNorm(IdLeaf(0), r)};
}

Id Sum(const Id& a, const Id& b) {
  if (a->leaf() && a->value == 0) return b;
  if (b->leaf() && b->value == 0) return a;
  return IdNorm(Sum(a->left, b->left), Sum(a->right, b->right));
}

std::string IdText(const Id& i) {
  if (i->leaf()) return std::to_string(i->value);
  return "(" + IdText(i->left) + "," + IdText(i->right) + ")";
}

Id IdFrom(const Party& p) {
  size_t pos = 0;
  return IdFromAt(p.nodes(), pos);
}

Ev EvLeaf(uint64_t n) { return EvRaw(n, nullptr, nullptr); }

Ev EvNorm(uint64_t n, Ev l, Ev r) {
  if (l->leaf() && r->leaf() && l->base == r->base) return EvLeaf(n + l->base);
  const uint64_t m = std::min(Min(l), Min(r));
  return EvRaw(n + m, Sink(l, m), Sink(r, m));
}

uint64_t Min(const Ev& e) {
  return e->base + (e->leaf() ? 0 : std::min(Min(e->left), Min(e->right)));
}
uint64_t Max(const Ev& e) {
  return e->base + (e->leaf() ? 0 : std::max(Max(e->left), Max(e->right)));
}

Ev Join(const Ev& a, const Ev& b) {
  if (a->leaf() && b->leaf()) return EvLeaf(std::max(a->base, b->base));
  if (a->leaf()) return Join(EvRaw(a->base, EvLeaf(0), EvLeaf(0)), b);
  if (b->leaf()) return Join(a, EvRaw(b->base, EvLeaf(0), EvLeaf(0)));
  if (a->base > b->base) return Join(b, a);
  const uint64_t d = b->base - a->base;
  return EvNorm(a->base, Join(a->left, Lift(b->left, d)), Join(a->right, Lift(b->right, d)));
}

bool Leq(const Ev& a, const Ev& b) {
  if (a->leaf()) return a->base <= b->base;
  if (b->leaf()) {
    return a->base <= b->base && Leq(Lift(a->left, a->base), b) && Leq(Lift(a->right, a->base), b);
  }
  return a->base <= b->base && Leq(Lift(a->left, a->base), Lift(b->left, b->base)) &&
         Leq(Lift(a->right, a->base), Lift(b->right, b->base));
}

Ev Fill(const Id& i, const Ev& e) {
  if (i->leaf() && i->value == 0) return e;
  if (i->leaf()) return EvLeaf(Max(e));
  if (e->leaf()) return e;
  const Id& il = i->left;
  const Id& ir = i->right;
  if (il->leaf() && il->value == 1) {
    Ev er = Fill(ir, e->right);
    return EvNorm(e->base, EvLeaf(std::max(Max(e->left), Min(er))), er);
  }
  if (ir->leaf() && ir->value == 1) {
    Ev el = Fill(il, e->left);
    return EvNorm(e->base, el, EvLeaf(std::max(Max(e->right), Min(el))));
  }
  return EvNorm(e->base, Fill(il, e->left), Fill(ir, e->right));
}

Ev Event(const Id& i, const Ev& e) {
  Ev filled = Fill(i, e);
  if (!Same(filled, e)) return filled;
  return Norm(Grow(i, e).first);
}

uint64_t MinTicks(const Ev& e) {
  if (e->leaf()) return e->base;
  return e->base + MinTicks(e->left) + MinTicks(e->right);
}

std::string EvText(const Ev& e) {
  if (e->leaf()) return std::to_string(e->base);
  return "(" + std::to_string(e->base) + "," + EvText(e->left) + "," + EvText(e->right) + ")";
}

bool Same(const Ev& a, const Ev& b) {
  if (a->base != b->base || a->leaf() != b->leaf()) return false;
  return a->leaf() || (Same(a->left, b->left) && Same(a->right, b->right));
}

Ev EvFrom(const Version& v) {
  size_t pos = 0;
  return EvFromAt(v.nodes(), pos);
}

}  // namespace once::itc::oracle
