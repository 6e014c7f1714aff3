#include "once/itc/version.h"

#include <algorithm>
#include <limits>
#include <string>

#include "bits.h"
#include "tree.h"

namespace once::itc {

namespace {

using Nodes = std::span<const EventNode>;
using Builder = internal::TreeBuilder<EventNode>;
constexpr EventNode kInternal{0, false};

struct Span2 {
  uint64_t min;
  uint64_t max;
};

// Min and max leaf height of the subtree at `pos`; advances past it.
Span2 Scan(Nodes n, size_t& pos) {
  const size_t end = internal::SubtreeEnd(n, pos);
  Span2 s{std::numeric_limits<uint64_t>::max(), 0};
  for (; pos < end; ++pos) {
    if (!n[pos].leaf) continue;
    s.min = std::min(s.min, n[pos].height);
    s.max = std::max(s.max, n[pos].height);
  }
  return s;
}

template <class Op>
void Broadcast(uint64_t h, Nodes t, size_t& it, Builder& out, Op op) {
  if (t[it].leaf) {
    out.Leaf(EventNode{op(h, t[it++].height), true});
    return;
  }
  ++it;
  const size_t pos = out.Open(kInternal);
  Broadcast(h, t, it, out, op);
  Broadcast(h, t, it, out, op);
  out.Close(pos);
}

template <class Op>
void Zip(Nodes a, size_t& ia, Nodes b, size_t& ib, Builder& out, Op op) {
  if (a[ia].leaf) {
    Broadcast(a[ia++].height, b, ib, out, op);
  } else if (b[ib].leaf) {
    Broadcast(b[ib++].height, a, ia, out, op);
  } else {
    ++ia, ++ib;
    const size_t pos = out.Open(kInternal);
    Zip(a, ia, b, ib, out, op);
    Zip(a, ia, b, ib, out, op);
    out.Close(pos);
  }
}

template <class Op>
Version ZipVersions(const Version& a, const Version& b, Op op) {
  Builder out;
  out.nodes().reserve(a.nodes().size() + b.nodes().size());  // the most a zip can make
  size_t ia = 0, ib = 0;
  Zip(a.nodes(), ia, b.nodes(), ib, out, op);
  return VersionAccess::Make(std::move(out.nodes()));
}

bool LeqAt(Nodes a, size_t& ia, Nodes b, size_t& ib) {
  if (a[ia].leaf && b[ib].leaf) return a[ia++].height <= b[ib++].height;
  if (a[ia].leaf) {
    const uint64_t h = a[ia++].height;
    return h <= Scan(b, ib).min;
  }
  if (b[ib].leaf) {
    const uint64_t h = b[ib++].height;
    return Scan(a, ia).max <= h;
  }
  ++ia, ++ib;
  return LeqAt(a, ia, b, ib) && LeqAt(a, ia, b, ib);
}

// Returns the subtree's minimum; adds the children's relative bases to `sum`.
uint64_t MinTicksAt(Nodes n, size_t& pos, unsigned __int128& sum) {
  if (n[pos].leaf) return n[pos++].height;
  ++pos;
  const uint64_t l = MinTicksAt(n, pos, sum);
  const uint64_t r = MinTicksAt(n, pos, sum);
  const uint64_t m = std::min(l, r);
  sum += (l - m) + (r - m);
  return m;
}

void EncodeTree(Nodes n, internal::BitWriter& w) {
  bool first = true;
  uint64_t previous = 0;
  for (const EventNode& node : n) {
    w.Put(node.leaf);
    if (!node.leaf) continue;
    const uint64_t h = node.height;
    if (first) {
      w.PutGamma(h);
      first = false;
    } else if (h >= previous) {
      w.PutGamma(static_cast<unsigned __int128>(h - previous) * 2);
    } else {
      w.PutGamma(static_cast<unsigned __int128>(previous - h) * 2 - 1);
    }
    previous = h;
  }
}

Result<std::vector<EventNode>> DecodeTree(internal::BitReader& r) {
  constexpr unsigned __int128 kHeightMax = std::numeric_limits<uint64_t>::max();
  std::vector<EventNode> nodes;
  nodes.reserve(16);
  internal::PendingDepths depths;
  bool first = true;
  uint64_t previous = 0;
  while (!depths.empty()) {
    const uint32_t depth = depths.Pop();
    if (depth > kTreeDepthMax) return LimitError("itc_tree_depth_max", depth, kTreeDepthMax);
    ONCE_ASSIGN_OR_RETURN(bool leaf, r.Get());
    if (!leaf) {
      nodes.push_back(kInternal);
      depths.PushChildren(depth);
      continue;
    }
    ONCE_ASSIGN_OR_RETURN(unsigned __int128 code, r.GetGamma());
    unsigned __int128 h;
    if (first) {
      h = code;
    } else if (code % 2 == 0) {
      h = previous + code / 2;
    } else {
      const unsigned __int128 down = code / 2 + 1;
      if (down > previous) return r.Fail(ErrorCode::kInvalidArgument, "height below zero");
      h = previous - down;
    }
    if (h > kHeightMax) return r.Fail(ErrorCode::kInvalidArgument, "height past 2^64-1");
    first = false;
    previous = static_cast<uint64_t>(h);
    nodes.push_back(EventNode{previous, true});
  }
  return nodes;
}

// Writes an unsigned 128-bit number in decimal.
std::string Decimal(unsigned __int128 v) {
  std::string s;
  do {
    s.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  std::reverse(s.begin(), s.end());
  return s;
}

void Trim(std::vector<uint64_t>& words) {
  while (!words.empty() && words.back() == 0) words.pop_back();
}

}  // namespace

Result<Version> Version::FromNodes(std::span<const EventNode> nodes) {
  if (nodes.empty()) return MakeError(ErrorCode::kInvalidArgument, "version: no nodes");
  // Checks shape and depth on a copy whose leaves are made distinct, then
  // rebuilds through the normalising builder.
  std::vector<EventNode> shape(nodes.begin(), nodes.end());
  for (size_t i = 0; i < shape.size(); ++i) shape[i].height = shape[i].leaf ? i : 0;
  ONCE_RETURN_IF_ERROR(internal::CheckTree<EventNode>(shape, "version"));
  Builder out;
  std::vector<size_t> open;
  std::vector<int> remaining;  // children still to come, per open node
  for (const EventNode& n : nodes) {
    if (n.leaf) {
      out.Leaf(EventNode{n.height, true});
    } else {
      open.push_back(out.Open(kInternal));
      remaining.push_back(2);
      continue;
    }
    while (!remaining.empty() && --remaining.back() == 0) {
      out.Close(open.back());
      open.pop_back();
      remaining.pop_back();
    }
  }
  return VersionAccess::Make(std::move(out.nodes()));
}

Version::Version(Trusted, std::span<const EventNode> nodes) { Assign(nodes); }

Version::Version(const Version& other) { Assign(other.nodes()); }

Version::Version(Version&& other) noexcept : size_(other.size_) {
  if (other.on_heap()) {
    heap_ = other.heap_;
  } else {
    std::copy_n(other.inline_, size_, inline_);
  }
  other.size_ = 1;  // zero, as a new Version
  other.inline_[0] = EventNode{};
}

Version& Version::operator=(const Version& other) {
  if (this != &other) {
    Release();
    Assign(other.nodes());
  }
  return *this;
}

Version& Version::operator=(Version&& other) noexcept {
  if (this != &other) {
    Release();
    new (this) Version(std::move(other));
  }
  return *this;
}

// Into a released (or new) object.
void Version::Assign(std::span<const EventNode> nodes) {
  ONCE_CHECK(!nodes.empty());
  size_ = static_cast<uint32_t>(nodes.size());
  EventNode* into = inline_;
  if (on_heap()) into = heap_ = new EventNode[nodes.size()];
  std::copy(nodes.begin(), nodes.end(), into);
}

void Version::Release() {
  if (on_heap()) delete[] heap_;
  size_ = 1;
  inline_[0] = EventNode{};
}

bool operator==(const Version& a, const Version& b) {
  return std::ranges::equal(a.nodes(), b.nodes());
}

Bytes Version::Encode() const {
  internal::BitWriter w;
  w.Reserve(2 * nodes().size() + 8);  // a leaf's bit and a short gamma code each, as a rule
  EncodeTree(nodes(), w);
  return std::move(w).Finish();
}

Result<std::pair<Version, size_t>> Version::DecodePrefix(std::span<const uint8_t> bytes) {
  if (bytes.size() > kEncodedBytesMax) {
    return LimitError("itc_encoded_bytes_max", static_cast<int64_t>(bytes.size()),
                      kEncodedBytesMax);
  }
  internal::BitReader r(bytes, "version");
  ONCE_ASSIGN_OR_RETURN(std::vector<EventNode> nodes, DecodeTree(r));
  ONCE_ASSIGN_OR_RETURN(size_t used, r.FinishPrefix());
  ONCE_RETURN_IF_ERROR(internal::CheckTree<EventNode>(nodes, "version"));
  return std::pair<Version, size_t>(VersionAccess::Make(std::move(nodes)), used);
}

Result<Version> Version::Decode(std::span<const uint8_t> bytes) {
  ONCE_ASSIGN_OR_RETURN(auto decoded, DecodePrefix(bytes));
  if (decoded.second != bytes.size()) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "version encoding: trailing bytes: " + std::to_string(bytes.size() - decoded.second));
  }
  return std::move(decoded.first);
}

bool Leq(const Version& a, const Version& b) {
  size_t ia = 0, ib = 0;
  return LeqAt(a.nodes(), ia, b.nodes(), ib);
}

bool Concurrent(const Version& a, const Version& b) { return !Leq(a, b) && !Leq(b, a); }

Version Join(const Version& a, const Version& b) {
  return ZipVersions(a, b, [](uint64_t x, uint64_t y) { return std::max(x, y); });
}

Version Meet(const Version& a, const Version& b) {
  return ZipVersions(a, b, [](uint64_t x, uint64_t y) { return std::min(x, y); });
}

Result<uint64_t> MinTicks(const Version& version) {
  unsigned __int128 sum = 0;
  size_t pos = 0;
  const uint64_t root = MinTicksAt(version.nodes(), pos, sum);
  sum += root;
  if (sum > std::numeric_limits<uint64_t>::max()) {
    return MakeError(ErrorCode::kLimitExceeded, "min_ticks past 2^64-1");
  }
  return static_cast<uint64_t>(sum);
}

Rank RankOf(const Version& version) {
  // Per-depth sums of leaf heights, then carries from the deepest level up.
  std::vector<unsigned __int128> sums;
  internal::PendingDepths depths;  // a Version is at most kTreeDepthMax deep
  for (const EventNode& n : version.nodes()) {
    const uint32_t d = depths.Pop();
    if (!n.leaf) {
      depths.PushChildren(d);
      continue;
    }
    if (sums.size() <= d) sums.resize(d + 1, 0);
    sums[d] += n.height;
  }
  Rank rank;
  const size_t depth_max = sums.size() - 1;
  rank.fraction.assign((depth_max + 63) / 64, 0);
  unsigned __int128 carry = 0;
  for (size_t d = depth_max; d >= 1; --d) {
    carry += sums[d];
    const size_t k = d - 1;  // the bit of 2^-d
    if (carry & 1) rank.fraction[k / 64] |= uint64_t{1} << (63 - k % 64);
    carry >>= 1;
  }
  rank.whole = carry + sums[0];
  Trim(rank.fraction);
  return rank;
}

std::strong_ordering operator<=>(const Rank& a, const Rank& b) {
  if (a.whole != b.whole) return a.whole <=> b.whole;
  const size_t n = std::max(a.fraction.size(), b.fraction.size());
  for (size_t i = 0; i < n; ++i) {
    const uint64_t x = i < a.fraction.size() ? a.fraction[i] : 0;
    const uint64_t y = i < b.fraction.size() ? b.fraction[i] : 0;
    if (x != y) return x <=> y;
  }
  return std::strong_ordering::equal;
}

Rank operator+(const Rank& a, const Rank& b) {
  Rank sum;
  sum.fraction.assign(std::max(a.fraction.size(), b.fraction.size()), 0);
  uint64_t carry = 0;
  for (size_t i = sum.fraction.size(); i-- > 0;) {
    const uint64_t x = i < a.fraction.size() ? a.fraction[i] : 0;
    const uint64_t y = i < b.fraction.size() ? b.fraction[i] : 0;
    const unsigned __int128 t = static_cast<unsigned __int128>(x) + y + carry;
    sum.fraction[i] = static_cast<uint64_t>(t);
    carry = static_cast<uint64_t>(t >> 64);
  }
  sum.whole = a.whole + b.whole + carry;
  Trim(sum.fraction);
  return sum;
}

std::string Rank::ToString() const {
  std::string s = Decimal(whole);
  if (fraction.empty()) return s;
  s += " + 0x";
  static const char* kHex = "0123456789abcdef";
  for (uint64_t w : fraction) {
    for (int shift = 60; shift >= 0; shift -= 4) s.push_back(kHex[(w >> shift) & 15]);
  }
  return s + "/2^" + std::to_string(64 * fraction.size());
}

std::strong_ordering TotalOrder(const Version& a, const Version& b) {
  if (auto c = RankOf(a) <=> RankOf(b); c != 0) return c;
  const Bytes x = a.Encode();
  const Bytes y = b.Encode();
  return x <=> y;
}

}  // namespace once::itc
