#include <optional>

#include "once/gossip/session.h"

namespace once::gossip {

namespace {

// The part of a bookmark that must be durable before events leave: the
// network, the party and the party's own region of the version.
bool Covers(const std::optional<Bookmark>& persisted, const Bookmark& now) {
  if (!persisted || persisted->network != now.network || persisted->party != now.party) {
    return false;
  }
  if (!now.party) return true;
  return itc::Leq(Restrict(now.version, *now.party), persisted->version);
}

}  // namespace

Host::Host(Replica replica, BookmarkStore* store, ResetCallback on_reset)
    : replica_(std::move(replica)), store_(store), on_reset_(std::move(on_reset)) {}

Status Host::PersistLocked() {
  if (!store_ || checked_revision_ == revision_) return Ok();
  Bookmark now = replica_.MakeBookmark();
  if (!Covers(persisted_, now)) {
    ONCE_RETURN_IF_ERROR(store_->Save(now));
    persisted_ = std::move(now);
  }
  checked_revision_ = revision_;
  return Ok();
}

Result<itc::Version> Host::Send(Bytes payload) {
  std::lock_guard lock(mu_);
  ++revision_;
  return replica_.Send(std::move(payload));
}

Status Host::Redact(const itc::Version& target) {
  const Op op = Op::Redact(target);
  ONCE_RETURN_IF_ERROR(Apply(std::span<const Op>(&op, 1)));
  return Ok();
}

Result<std::vector<itc::Version>> Host::Apply(std::span<const Op> ops) {
  RemovedLeaves removed;  // declared before the lock: freed after it is let go
  std::lock_guard lock(mu_);
  ++revision_;
  return replica_.Apply(ops, removed);
}

Observation Host::Observe(const itc::Version& checkpoint) const {
  std::lock_guard lock(mu_);
  return replica_.Observe(checkpoint);
}

Snapshot Host::Snap() const {
  std::lock_guard lock(mu_);
  return replica_.Snap();
}

NetworkId Host::network() const {
  std::lock_guard lock(mu_);
  return replica_.network();
}

Status Host::Persist() {
  std::lock_guard save(save_mu_);
  std::lock_guard lock(mu_);
  return PersistLocked();
}

Status Host::PersistAbove(const itc::Version& floor) {
  std::lock_guard save(save_mu_);
  std::lock_guard lock(mu_);
  ++revision_;
  replica_.RaiseTickFloor(floor);
  return PersistLocked();
}

// The snapshot and the bookmark are taken at one instant, so every own event
// the session ships is covered by the bookmark, which is durable before this
// returns; the bookmark is saved without the replica's lock (the fsync does
// not hold up Send), under save_mu_, which every saver holds: network, party
// and generation cannot change meanwhile (only savers change them), only own
// events can grow, and those are not in this snapshot.
Result<Host::Begun> Host::Begin() {
  std::lock_guard save(save_mu_);
  std::optional<Begun> begun;
  std::optional<Bookmark> bookmark;
  uint64_t revision = 0;
  {
    std::lock_guard lock(mu_);
    begun.emplace(Begun{replica_.Snap(), generation_});
    // Nothing that can move the own events happened since the last check.
    if (!store_ || checked_revision_ == revision_) return std::move(*begun);
    revision = revision_;
    bookmark = replica_.MakeBookmark();
    if (Covers(persisted_, *bookmark)) {
      checked_revision_ = revision;
      return std::move(*begun);
    }
  }
  ONCE_RETURN_IF_ERROR(store_->Save(*bookmark));
  std::lock_guard lock(mu_);
  persisted_ = std::move(bookmark);
  checked_revision_ = revision;  // a change since then moved revision_ past it
  return std::move(*begun);
}

Status Host::Commit(Begun&& begun, ReceivedLeaves&& received, std::span<const Path> deleted,
                    const itc::Version& peer_ceiling) {
  begun.snapshot = Snapshot();
  RemovedLeaves removed;  // declared before the lock: freed after it is let go
  std::lock_guard lock(mu_);
  if (begun.generation != generation_) {
    return MakeError(ErrorCode::kCancelled, "the replica changed universe during the session");
  }
  ++revision_;
  removed = replica_.CommitJoin(std::move(received), deleted, peer_ceiling);
  return Ok();
}

Result<Host::Granted> Host::Grant() {
  std::lock_guard save(save_mu_);
  std::lock_guard lock(mu_);
  ++revision_;
  ONCE_ASSIGN_OR_RETURN(itc::Party granted, replica_.ForkParty());
  if (auto saved = PersistLocked(); !saved) {
    ++revision_;
    (void)replica_.JoinParty(std::move(granted));  // undo: the halves are disjoint
    return std::unexpected(saved.error());
  }
  return Granted{std::move(granted), Begun{replica_.Snap(), generation_}};
}

Status Host::Adopt(Replica replica) {
  NetworkId old_network, new_network;
  std::optional<Replica> dropped;  // the old universe's tree, freed after the lock is let go
  {
    std::lock_guard save(save_mu_);
    std::lock_guard lock(mu_);
    if (store_) {
      Bookmark next = replica.MakeBookmark();
      ONCE_RETURN_IF_ERROR(store_->Save(next));
      persisted_ = std::move(next);
    }
    old_network = replica_.network();
    new_network = replica.network();
    dropped.emplace(std::move(replica_));
    replica_ = std::move(replica);
    ++generation_;
    ++revision_;
  }
  if (on_reset_) on_reset_(old_network, new_network);
  return Ok();
}

Result<bool> Host::Bootstrapped(const NetworkId& network, itc::Party granted,
                                ReceivedLeaves&& received, const itc::Version& ceiling) {
  {
    std::lock_guard save(save_mu_);
    std::lock_guard lock(mu_);
    if (replica_.network() == network && replica_.party()) {
      ++revision_;
      replica_.CommitJoin(std::move(received), {}, ceiling);
      // The halves are disjoint (the granted one was forked from the winner's).
      (void)replica_.JoinParty(std::move(granted));
      ONCE_RETURN_IF_ERROR(PersistLocked());
      return false;
    }
  }
  Replica adopted = Replica::Fresh(network, std::move(granted));
  adopted.CommitJoin(std::move(received), {}, ceiling);
  ONCE_RETURN_IF_ERROR(Adopt(std::move(adopted)));
  return true;
}

Result<itc::Party> Host::Donate() {
  std::lock_guard save(save_mu_);
  std::lock_guard lock(mu_);
  if (!replica_.party()) return MakeError(ErrorCode::kUnsupported, "no party to donate");
  if (store_) {
    Bookmark retired = replica_.MakeBookmark();
    retired.party.reset();
    ONCE_RETURN_IF_ERROR(store_->Save(retired));
    persisted_ = std::move(retired);
  }
  ++revision_;
  return std::move(*replica_.TakeParty());
}

Status Host::TakeDonation(itc::Party party) {
  std::lock_guard save(save_mu_);
  std::lock_guard lock(mu_);
  ++revision_;
  ONCE_RETURN_IF_ERROR(replica_.JoinParty(std::move(party)));
  return PersistLocked();
}

}  // namespace once::gossip
