// File: session.h
//
// Reconciliation sessions: two replicas of one universe, one full-duplex
// Stream, and afterwards both hold every message that either held and that
// neither had deleted, and both ceilings are the join. The wire protocol is
// in docs/gossip-protocol.md.
//
//   Host a(Replica::Seed(rng_a)), b(...);
//   auto [sa, sb] = MakePipe();
//   std::thread peer([&] { (void)Respond(*sb, b, {}, DeadlineIn(5s)); });
//   Result<SessionReport> r = Initiate(*sa, a, Mode::kSync, {}, DeadlineIn(5s));
//   peer.join();
//
// A Host guards one Replica for the threads of a node: the application's
// Send/Redact/Observe and any number of sessions. A session works on a
// snapshot and commits by join only after the last frame, so an error of any
// kind (I/O, timeout, limit, hostile bytes) leaves the replica unchanged, and
// local sends made during a session survive it. Before the first byte of a
// session leaves, the host persists the bookmark if the replica's own events
// could have moved past the last one persisted.
//
// Errors of a session: kTimeout/kUnavailable from the stream (retryable);
// kLimitExceeded for a frame or count over its limit; kInvalidArgument or
// kCorruption for malformed or inconsistent frames (typed per check, see the
// message); kUnsupported for a peer speaking another protocol version or a
// replica without the party a mode needs; kCancelled when the replica left
// its universe during the session. The stream is unusable after an error.

#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>

#include "once/base/result.h"
#include "once/gossip/limits.h"
#include "once/gossip/replica.h"
#include "once/gossip/stream.h"

namespace once::gossip {

// Where a host persists its bookmark. Save must be durable when it returns.
class BookmarkStore {
 public:
  virtual ~BookmarkStore() = default;
  virtual Status Save(const Bookmark& bookmark) = 0;
};

// Called (under no lock) after the host dropped its universe for another's;
// the application resets what it derived from the old messages.
using ResetCallback = std::function<void(const NetworkId& old_network, const NetworkId& now)>;

class Host {
 public:
  explicit Host(Replica replica, BookmarkStore* store = nullptr, ResetCallback on_reset = {});

  Result<itc::Version> Send(Bytes payload);
  Status Redact(const itc::Version& target);
  Result<std::vector<itc::Version>> Apply(std::span<const Op> ops);
  Observation Observe(const itc::Version& checkpoint) const;
  Snapshot Snap() const;
  NetworkId network() const;
  // Runs `f(const Replica&)` under the host's lock.
  template <class F>
  auto Read(F&& f) const {
    std::lock_guard lock(mu_);
    return f(replica_);
  }

  // ---- for the session layer ----
  struct Begun {
    Snapshot snapshot;
    uint64_t generation = 0;
  };
  // A snapshot to reconcile; persists the bookmark first if needed.
  Result<Begun> Begin();
  // The join with what a session learned. kCancelled (and no change) if the
  // replica changed universe since Begin.
  // The snapshot is released first, so the tree is changed in place.
  Status Commit(Begun&& begun, ReceivedLeaves&& received, std::span<const Path> deleted,
                const itc::Version& peer_ceiling);
  // Forks the party for a newcomer (the kept half is persisted first) and
  // takes the snapshot to reconcile with it, atomically, so the grant and the
  // greeting are of one universe.
  struct Granted {
    itc::Party party;
    Begun begun;
  };
  Result<Granted> Grant();
  // Drops this universe for `replica` (persisted first), then calls on_reset.
  Status Adopt(Replica replica);
  // Gives the party away (persisted as retired first).
  Result<itc::Party> Donate();
  // Takes a donated party in (persisted after the join, before any ack).
  Status TakeDonation(itc::Party party);

 private:
  Status PersistLocked();
  mutable std::mutex mu_;
  Replica replica_;
  uint64_t generation_ = 0;
  BookmarkStore* store_;
  ResetCallback on_reset_;
  std::optional<Bookmark> persisted_;
};

enum class Mode : uint8_t { kSync = 1, kBootstrap = 2, kRetire = 3 };

struct SessionOptions {
  // Largest frame body this side writes and reads (kFrameBytesMin..kFrameBytesMax).
  size_t frame_bytes_max = kFrameBytesMax;
  // Messages one session may receive.
  size_t session_messages_max = size_t{1} << 21;
  // Received payload bytes one session may hold before commit.
  size_t session_payload_bytes_max = size_t{1} << 30;
  // Digest tree nodes one session may hold open.
  size_t session_nodes_max = size_t{1} << 21;
  // Frames one session may exchange.
  size_t session_frames_max = size_t{1} << 16;
};

struct SessionReport {
  enum class Outcome : uint8_t {
    kConverged,     // equal ceilings: nothing to do (one round trip)
    kSynced,        // reconciled and committed
    kLocalWins,     // another universe met; ours wins, the peer will bootstrap
    kPeerWins,      // another universe met; ours loses: Bootstrap from this peer
    kBootstrapped,  // (initiator, kBootstrap) adopted the peer's universe
    kGranted,       // (responder) forked our party for a newcomer
    kRetired,       // (initiator, kRetire) synced, then gave our party away
    kTookDonation,  // (responder) synced, then took the peer's party in
  };
  Outcome outcome = Outcome::kConverged;
  NetworkId peer_network;
  uint64_t sent = 0;      // messages shipped
  uint64_t received = 0;  // messages accepted
  uint64_t deleted = 0;   // local messages the peer had deleted
  uint64_t frames = 0;    // frames written and read
  uint64_t bytes = 0;     // bytes written and read
};

// Starts a session in `mode` (kBootstrap adopts the peer's universe on
// success; kRetire syncs, then donates the party).
Result<SessionReport> Initiate(Stream& stream, Host& host, Mode mode, const SessionOptions& options,
                               Deadline deadline);
// Serves one session started by the peer.
Result<SessionReport> Respond(Stream& stream, Host& host, const SessionOptions& options,
                              Deadline deadline);

// The bootstrapping game: true iff (min_ticks of our greeting ceiling, our
// network id as unsigned bytes) > the peer's, lexicographically.
bool LocalWins(uint64_t local_min_ticks, const NetworkId& local, uint64_t peer_min_ticks,
               const NetworkId& peer);

}  // namespace once::gossip
