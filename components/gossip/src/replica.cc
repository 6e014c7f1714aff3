#include "once/gossip/replica.h"

#include <sodium.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "digest_tree.h"
#include "once/gossip/limits.h"

namespace once::gossip {

using internal::Leaf;
using internal::View;

NetworkId NetworkId::Random(Rng& rng) {
  NetworkId id;
  do {
    rng.Fill(id.bytes.data(), id.bytes.size());
  } while (id.bootstrapping());
  return id;
}

Path PathOfEncoded(std::span<const uint8_t> encoded) {
  static const int init = sodium_init();
  (void)init;
  Path path{};
  crypto_generichash(path.data(), path.size(), encoded.data(), encoded.size(), nullptr, 0);
  return path;
}

namespace {

// Sorts `leaves` (distinct paths) by path, reading each leaf once: the keys
// are copied out first, since comparing through the leaves would miss the
// cache at nearly every comparison.
void InPathOrder(ReceivedLeaves& leaves) {
  struct Keyed {
    Path path;
    size_t index;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) keyed.push_back(Keyed{leaves[i]->path, i});
  std::sort(keyed.begin(), keyed.end(),
            [](const Keyed& a, const Keyed& b) { return internal::PathLess(a.path, b.path); });
  ReceivedLeaves sorted;
  sorted.reserve(leaves.size());
  for (const Keyed& k : keyed) sorted.push_back(std::move(leaves[k.index]));
  leaves = std::move(sorted);
}

Message ToMessage(const Leaf& leaf) {
  return Message{leaf.path, leaf.version, Bytes(leaf.payload().begin(), leaf.payload().end())};
}

std::vector<Message> ToMessages(const std::vector<const Leaf*>& leaves) {
  std::vector<Message> out;
  out.reserve(leaves.size());
  for (const Leaf* leaf : leaves) out.push_back(ToMessage(*leaf));
  return out;
}

// Sorted by itc::TotalOrder (a causal delivery order), each rank computed
// once rather than per comparison.
std::vector<Message> InCausalOrder(std::vector<Message> messages) {
  if (messages.size() < 2) return messages;
  struct Keyed {
    itc::Rank rank;
    size_t index;
  };
  std::vector<Keyed> keys;
  keys.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    keys.push_back(Keyed{itc::RankOf(messages[i].version), i});
  }
  std::sort(keys.begin(), keys.end(), [&](const Keyed& a, const Keyed& b) {
    if (auto c = a.rank <=> b.rank; c != 0) return c < 0;
    return itc::TotalOrder(messages[a.index].version, messages[b.index].version) < 0;
  });
  std::vector<Message> out;
  out.reserve(messages.size());
  for (const Keyed& k : keys) out.push_back(std::move(messages[k.index]));
  return out;
}

void RestrictAt(std::span<const itc::EventNode> v, size_t& iv, std::span<const itc::IdNode> p,
                size_t& ip, uint64_t inherited, bool inherit, std::vector<itc::EventNode>& out) {
  const itc::IdNode id = p[ip++];
  if (id == itc::IdNode::kZero || id == itc::IdNode::kOne) {
    const bool owned = id == itc::IdNode::kOne;
    if (inherit) {
      out.push_back(itc::EventNode{owned ? inherited : 0, true});
      return;
    }
    const size_t start = iv;
    size_t pending = 1;
    while (pending > 0) pending += v[iv++].leaf ? -1 : 1;
    if (!owned) {
      out.push_back(itc::EventNode{0, true});
      return;
    }
    out.insert(out.end(), v.begin() + start, v.begin() + iv);
    return;
  }
  out.push_back(itc::EventNode{0, false});
  if (!inherit && v[iv].leaf) {
    inherit = true;
    inherited = v[iv++].height;
  } else if (!inherit) {
    ++iv;
  }
  RestrictAt(v, iv, p, ip, inherited, inherit, out);
  RestrictAt(v, iv, p, ip, inherited, inherit, out);
}

}  // namespace

Path PathOf(const itc::Version& version) { return PathOfEncoded(version.Encode()); }

itc::Version Restrict(const itc::Version& version, const itc::Party& party) {
  std::vector<itc::EventNode> out;
  size_t iv = 0, ip = 0;
  RestrictAt(version.nodes(), iv, party.nodes(), ip, 0, false, out);
  auto restricted = itc::Version::FromNodes(out);
  ONCE_CHECK(restricted.has_value());
  return std::move(*restricted);
}

// ---- Snapshot ----

Snapshot::Snapshot() : root_(internal::NewRoot()) {}

uint64_t Snapshot::size() const { return root_->summary.count; }
Summary Snapshot::summary() const { return root_->summary; }

std::optional<Message> Snapshot::Find(const Path& path) const {
  const Leaf* leaf = internal::Find(root_.get(), path);
  if (!leaf) return std::nullopt;
  return ToMessage(*leaf);
}

std::vector<Message> Snapshot::Messages() const {
  std::vector<const Leaf*> leaves;
  internal::CollectAll(View::Of(root_), leaves);
  std::vector<Message> out = ToMessages(leaves);
  std::sort(out.begin(), out.end(),
            [](const Message& a, const Message& b) { return a.path < b.path; });
  return out;
}

bool SameState(const Snapshot& a, const Snapshot& b) {
  return a.network_ == b.network_ && a.ceiling_ == b.ceiling_ && a.summary() == b.summary() &&
         a.Messages() == b.Messages();
}

Snapshot Merge(const Snapshot& a, const Snapshot& b) {
  auto root = a.root_;
  std::vector<const Leaf*> a_all, b_all;
  internal::CollectAll(View::Of(a.root_), a_all);
  internal::CollectAll(View::Of(b.root_), b_all);
  for (const Leaf* leaf : a_all) {
    if (!internal::Find(b.root_.get(), leaf->path) && itc::Leq(leaf->version, b.ceiling_)) {
      internal::Remove(root, leaf->path);
    }
  }
  for (const Leaf* leaf : b_all) {
    if (!internal::Find(a.root_.get(), leaf->path) && !itc::Leq(leaf->version, a.ceiling_)) {
      internal::Insert(root, internal::MakeLeaf(leaf->path, leaf->version, leaf->payload()));
    }
  }
  return Snapshot(a.network_, itc::Join(a.ceiling_, b.ceiling_), std::move(root));
}

// ---- Replica ----

Replica::Replica(NetworkId network, std::optional<itc::Party> party)
    : network_(network), party_(std::move(party)), root_(internal::NewRoot()) {}

Replica Replica::Seed(Rng& rng) { return Replica(NetworkId::Random(rng), itc::Party::Seed()); }

Replica Replica::Fresh(NetworkId network, itc::Party party) {
  return Replica(network, std::move(party));
}

Replica Replica::Reclaim(Bookmark bookmark) {
  Replica replica(bookmark.network, std::move(bookmark.party));
  if (replica.party_) replica.tick_floor_ = Restrict(bookmark.version, *replica.party_);
  return replica;
}

uint64_t Replica::size() const { return root_->summary.count; }

Result<itc::Version> Replica::Send(Bytes payload) {
  std::vector<Op> ops;
  ops.push_back(Op::Send(std::move(payload)));
  ONCE_ASSIGN_OR_RETURN(auto versions, Apply(ops));
  return std::move(versions.front());
}

Status Replica::Redact(const itc::Version& target) {
  const Op op = Op::Redact(target);
  ONCE_RETURN_IF_ERROR(Apply(std::span<const Op>(&op, 1)));
  return Ok();
}

Result<std::vector<itc::Version>> Replica::Apply(std::span<const Op> ops) {
  RemovedLeaves removed;
  return Apply(ops, removed);
}

Result<std::vector<itc::Version>> Replica::Apply(std::span<const Op> ops,
                                                 RemovedLeaves& removed_leaves) {
  if (ops.size() > kBatchOpsMax) {
    return LimitError("batch_ops_max", static_cast<int64_t>(ops.size()), kBatchOpsMax);
  }
  if (!party_) return MakeError(ErrorCode::kUnsupported, "replica has no party (retired)");
  // Validate and tick on the side; touch the tree only when all succeeded.
  // A redaction looks its path up among the batch's sends and its earlier
  // redactions in hash tables: a scan of each per redaction was quadratic in
  // the batch, under the host's lock.
  itc::Version ceiling = tick_floor_ ? itc::Join(ceiling_, *tick_floor_) : ceiling_;
  std::vector<internal::LeafRef> added;  // null: redacted again by the batch
  // added[0, indexed) by path: indexed when a redaction needs it, so that a
  // batch of sends alone builds no table.
  std::unordered_map<Path, size_t, internal::PathHash> added_at;
  size_t indexed = 0;
  std::unordered_set<Path, internal::PathHash> removed;
  std::vector<itc::Version> sent;
  for (const Op& op : ops) {
    if (op.kind == Op::Kind::kRedact) {
      const Path path = PathOf(op.target);
      for (; indexed < added.size(); ++indexed) added_at.emplace(added[indexed]->path, indexed);
      const auto in_batch = added_at.find(path);
      const bool held = in_batch != added_at.end() ||
                        (!removed.contains(path) && internal::Find(root_.get(), path));
      if (!held) continue;
      ONCE_ASSIGN_OR_RETURN(ceiling, itc::Tick(ceiling, *party_));
      if (in_batch != added_at.end()) {
        added[in_batch->second].reset();
        added_at.erase(in_batch);
      } else {
        removed.insert(path);
      }
      continue;
    }
    if (op.payload.size() > kPayloadBytesMax) {
      return LimitError("payload_bytes_max", static_cast<int64_t>(op.payload.size()),
                        kPayloadBytesMax);
    }
    ONCE_ASSIGN_OR_RETURN(ceiling, itc::Tick(ceiling, *party_));
    const Bytes encoded = ceiling.Encode();
    if (encoded.size() > kVersionBytesMax) {
      return LimitError("version_bytes_max", static_cast<int64_t>(encoded.size()),
                        kVersionBytesMax);
    }
    added.push_back(internal::MakeLeaf(PathOfEncoded(encoded), ceiling, op.payload));
    sent.push_back(ceiling);
  }
  if (sent.empty() && removed.empty()) return sent;  // only no-op redactions: no tick
  const std::vector<Path> paths(removed.begin(), removed.end());
  removed_leaves = internal::RemoveBatch(root_, paths);  // sorts them: one walk
  for (auto& leaf : added) {
    if (leaf) ONCE_CHECK(internal::Insert(root_, std::move(leaf)));
  }
  tick_floor_.reset();
  ceiling_ = std::move(ceiling);
  return sent;
}

std::optional<Message> Replica::Find(const Path& path) const {
  const Leaf* leaf = internal::Find(root_.get(), path);
  if (!leaf) return std::nullopt;
  return ToMessage(*leaf);
}

Observation Replica::Observe(const itc::Version& checkpoint) const {
  Observation out;
  // Every message is at or below the ceiling: none is past such a checkpoint.
  if (itc::Leq(ceiling_, checkpoint)) {
    out.checkpoint = checkpoint;
    return out;
  }
  std::vector<const Leaf*> unseen;
  internal::Sieve(View::Of(root_), checkpoint, &unseen, nullptr);
  out.messages = InCausalOrder(ToMessages(unseen));
  out.checkpoint = itc::Join(checkpoint, ceiling_);
  return out;
}

Snapshot Replica::Snap() const { return Snapshot(network_, ceiling_, root_); }

Bookmark Replica::MakeBookmark() const {
  Bookmark bookmark;
  bookmark.network = network_;
  if (party_) {
    bookmark.party =
        itc::Party::FromNodes({party_->nodes().begin(), party_->nodes().end()}).value();
  }
  bookmark.version = tick_floor_ ? itc::Join(ceiling_, *tick_floor_) : ceiling_;
  return bookmark;
}

void Replica::RaiseTickFloor(const itc::Version& floor) {
  if (!party_) return;
  itc::Version own = Restrict(floor, *party_);
  tick_floor_ = tick_floor_ ? itc::Join(*tick_floor_, own) : std::move(own);
}

RemovedLeaves Replica::CommitJoin(ReceivedLeaves&& received, std::span<const Path> deleted,
                                  const itc::Version& peer_ceiling) {
  RemovedLeaves removed = internal::RemoveBatch(root_, deleted);
  std::erase_if(received, [&](const internal::LeafRef& leaf) {
    return itc::Leq(leaf->version, ceiling_);  // seen here already (and so deleted)
  });
  InPathOrder(received);
  internal::InsertBatch(root_, received);
  ceiling_ = itc::Join(ceiling_, peer_ceiling);
  return removed;
}

Result<itc::Party> Replica::ForkParty() {
  if (!party_) return MakeError(ErrorCode::kUnsupported, "replica has no party to fork");
  return party_->Fork();
}

std::optional<itc::Party> Replica::TakeParty() {
  std::optional<itc::Party> out = std::move(party_);
  party_.reset();
  return out;
}

Status Replica::JoinParty(itc::Party&& donated) {
  if (!party_) {
    party_ = std::move(donated);
    return Ok();
  }
  auto joined = party_->Join(std::move(donated));
  if (!joined) return std::unexpected(joined.error().error);
  return Ok();
}

}  // namespace once::gossip
