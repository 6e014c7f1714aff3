#include "once/itc/text.h"

#include <limits>
#include <string>
#include <vector>

#include "tree.h"

namespace once::itc {
namespace {

template <class Node>
Node Internal();
template <>
IdNode Internal<IdNode>() {
  return IdNode::kSplit;
}
template <>
EventNode Internal<EventNode>() {
  return EventNode{0, false};
}
template <class Node>
Node LeafOf(uint64_t n);
template <>
IdNode LeafOf<IdNode>(uint64_t n) {
  return n == 1 ? IdNode::kOne : IdNode::kZero;
}
template <>
EventNode LeafOf<EventNode>(uint64_t n) {
  return EventNode{n, true};
}

// A reader over the text.
class Reader {
 public:
  explicit Reader(std::string_view text, const char* what) : text_(text), what_(what) {}

  std::unexpected<Error> Fail(const std::string& why) const {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(what_) + " text: " + why + " at offset " + std::to_string(pos_));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  Status Expect(char c) {
    if (!Peek(c)) return Fail(std::string("expected '") + c + "'");
    ++pos_;
    return Ok();
  }
  Result<uint64_t> Number() {
    SkipSpace();
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
      return Fail("expected a number");
    }
    uint64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
        return Fail("number past 2^64-1");
      }
      v = v * 10 + digit;
      ++pos_;
    }
    return v;
  }
  Status End() {
    SkipSpace();
    if (pos_ != text_.size()) return Fail("unexpected text after the tree");
    return Ok();
  }

 private:
  std::string_view text_;
  const char* what_;
  size_t pos_ = 0;
};

// Parses one tree without recursion. For versions an internal node is
// `(base,left,right)` and heights accumulate bases; for parties it is
// `(left,right)` and leaves are 0 or 1.
template <class Node>
Status ParseTree(Reader& r, bool version, internal::TreeBuilder<Node>& out) {
  struct Frame {
    size_t pos;     // of the open node in `out`
    uint64_t base;  // absolute base of its children (versions)
    bool left_done;
  };
  std::vector<Frame> frames;
  while (true) {
    if (frames.size() > kTreeDepthMax) {
      return LimitError("itc_tree_depth_max", static_cast<int64_t>(frames.size()), kTreeDepthMax);
    }
    const uint64_t base = frames.empty() ? 0 : frames.back().base;
    if (r.Peek('(')) {
      ONCE_RETURN_IF_ERROR(r.Expect('('));
      uint64_t child_base = 0;
      if (version) {
        ONCE_ASSIGN_OR_RETURN(uint64_t n, r.Number());
        if (n > std::numeric_limits<uint64_t>::max() - base) return r.Fail("height past 2^64-1");
        child_base = base + n;
        ONCE_RETURN_IF_ERROR(r.Expect(','));
      }
      frames.push_back({out.Open(Internal<Node>()), child_base, false});
      continue;
    }
    ONCE_ASSIGN_OR_RETURN(uint64_t n, r.Number());
    if (version) {
      if (n > std::numeric_limits<uint64_t>::max() - base) return r.Fail("height past 2^64-1");
      out.Leaf(LeafOf<Node>(base + n));
    } else {
      if (n > 1) return r.Fail("a party leaf is 0 or 1");
      out.Leaf(LeafOf<Node>(n));
    }
    // A value is complete: close every node whose right child it completes.
    while (!frames.empty() && frames.back().left_done) {
      ONCE_RETURN_IF_ERROR(r.Expect(')'));
      out.Close(frames.back().pos);
      frames.pop_back();
    }
    if (frames.empty()) return Ok();
    frames.back().left_done = true;
    ONCE_RETURN_IF_ERROR(r.Expect(','));
  }
}

Status CheckLength(std::string_view text) {
  if (text.size() > kTextBytesMax) {
    return LimitError("itc_text_bytes_max", static_cast<int64_t>(text.size()), kTextBytesMax);
  }
  return Ok();
}

void FormatPartyAt(std::span<const IdNode> n, size_t& pos, std::string& out) {
  const IdNode node = n[pos++];
  if (node != IdNode::kSplit) {
    out += node == IdNode::kOne ? '1' : '0';
    return;
  }
  out += '(';
  FormatPartyAt(n, pos, out);
  out += ',';
  FormatPartyAt(n, pos, out);
  out += ')';
}

// Writes the subtree at `pos` relative to `base`; `mins` holds every
// subtree's minimum.
void FormatVersionAt(std::span<const EventNode> n, const std::vector<uint64_t>& mins, size_t& pos,
                     uint64_t base, std::string& out) {
  const size_t p = pos++;
  if (n[p].leaf) {
    out += std::to_string(n[p].height - base);
    return;
  }
  out += '(' + std::to_string(mins[p] - base) + ',';
  FormatVersionAt(n, mins, pos, mins[p], out);
  out += ',';
  FormatVersionAt(n, mins, pos, mins[p], out);
  out += ')';
}

}  // namespace

Result<Party> ParseParty(std::string_view text) {
  ONCE_RETURN_IF_ERROR(CheckLength(text));
  Reader r(text, "party");
  internal::TreeBuilder<IdNode> out;
  ONCE_RETURN_IF_ERROR(ParseTree(r, false, out));
  ONCE_RETURN_IF_ERROR(r.End());
  if (out.nodes().front() == IdNode::kZero) {
    return MakeError(ErrorCode::kInvalidArgument, "party text: the empty party 0 is no party");
  }
  return Party::FromNodes(std::move(out.nodes()));
}

Result<Version> ParseVersion(std::string_view text) {
  ONCE_RETURN_IF_ERROR(CheckLength(text));
  Reader r(text, "version");
  internal::TreeBuilder<EventNode> out;
  ONCE_RETURN_IF_ERROR(ParseTree(r, true, out));
  ONCE_RETURN_IF_ERROR(r.End());
  return VersionAccess::Make(std::move(out.nodes()));
}

std::string FormatParty(const Party& party) {
  std::string out;
  size_t pos = 0;
  FormatPartyAt(party.nodes(), pos, out);
  return out;
}

std::string FormatVersion(const Version& version) {
  const std::span<const EventNode> n = version.nodes();
  // Subtree minima in one reverse pass.
  std::vector<uint64_t> mins(n.size());
  std::vector<uint64_t> stack;
  for (size_t i = n.size(); i-- > 0;) {
    if (n[i].leaf) {
      mins[i] = n[i].height;
    } else {
      const uint64_t l = stack.back();
      stack.pop_back();
      mins[i] = std::min(l, stack.back());
      stack.pop_back();
    }
    stack.push_back(mins[i]);
  }
  std::string out;
  size_t pos = 0;
  FormatVersionAt(n, mins, pos, 0, out);
  return out;
}

}  // namespace once::itc
