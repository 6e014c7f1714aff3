// A naive recursive implementation of the interval tree clocks paper, on
// immutable pointer trees with relative bases, used as a test oracle. It is
// deliberately simple: structural recursion, no limits, no performance.

#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "once/itc/party.h"
#include "once/itc/version.h"

namespace once::itc::oracle {

struct IdTree;
using Id = std::shared_ptr<const IdTree>;
struct IdTree {
  int value = 0;   // for leaves: 0 or 1
  Id left, right;  // both null for a leaf
  bool leaf() const { return left == nullptr; }
};

struct EvTree;
using Ev = std::shared_ptr<const EvTree>;
struct EvTree {
  uint64_t base = 0;
  Ev left, right;  // both null for a leaf
  bool leaf() const { return left == nullptr; }
};

Id IdLeaf(int v);
Id IdNorm(Id l, Id r);  // the normalising node constructor
std::pair<Id, Id> Split(const Id& i);
Id Sum(const Id& a, const Id& b);  // requires disjoint
std::string IdText(const Id& i);
Id IdFrom(const Party& p);

Ev EvLeaf(uint64_t n);
Ev EvNorm(uint64_t n, Ev l, Ev r);  // the normalising node constructor
uint64_t Min(const Ev& e);
uint64_t Max(const Ev& e);
Ev Join(const Ev& a, const Ev& b);
bool Leq(const Ev& a, const Ev& b);
Ev Fill(const Id& i, const Ev& e);
Ev Event(const Id& i, const Ev& e);
uint64_t MinTicks(const Ev& e);
std::string EvText(const Ev& e);
bool Same(const Ev& a, const Ev& b);
Ev EvFrom(const Version& v);

}  // namespace once::itc::oracle
