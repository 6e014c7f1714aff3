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
// could have moved past the last one persisted (the snapshot the session
// ships is taken with that bookmark; local sends are not held up by its
// fsync).
//
// Errors of a session: kTimeout/kUnavailable from the stream (retryable);
// kLimitExceeded for a frame or count over its limit; kInvalidArgument or
// kCorruption for malformed or inconsistent frames (typed per check, see the
// message); kUnsupported for a peer speaking another protocol version or a
// replica without the party a mode needs; kCancelled when the replica left
// its universe during the session. The stream is unusable after an error.
//
// Initiate and Respond are loops over a SessionMachine, which holds the whole
// protocol and does no I/O: a caller that moves the frames itself (a
// deterministic simulator, an event loop) runs the same sessions, frame by
// frame, with the same bytes, limits, errors and commit points.
//
//   ONCE_ASSIGN_OR_RETURN(SessionMachine a, SessionMachine::Initiate(host_a, Mode::kSync, {}));
//   ONCE_ASSIGN_OR_RETURN(SessionMachine b, SessionMachine::Respond(host_b, {}));
//   while (!a.done() || !b.done()) {   // one thread; a real driver also stops on errors
//     for (const Bytes& f : a.TakeOutgoing()) ONCE_RETURN_IF_ERROR(b.OnFrame(f));
//     ONCE_RETURN_IF_ERROR(a.OnWritten());
//     for (const Bytes& f : b.TakeOutgoing()) ONCE_RETURN_IF_ERROR(a.OnFrame(f));
//     ONCE_RETURN_IF_ERROR(b.OnWritten());
//   }

#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

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
  // Replica::Apply under the host's lock; the leaves a redaction removes are
  // freed after the lock is let go (RemovedLeaves), as a commit's are.
  Result<std::vector<itc::Version>> Apply(std::span<const Op> ops);
  Observation Observe(const itc::Version& checkpoint) const;
  Snapshot Snap() const;
  NetworkId network() const;
  // Saves the bookmark if the own events moved past the saved one (as Begin
  // does before a session): durable on return.
  Status Persist();
  // Makes every later own event strictly above `floor` in this replica's own
  // region (a restarted sled's record may hold own events its bookmark lost:
  // they must never be issued again), then persists: durable on return.
  Status PersistAbove(const itc::Version& floor);
  // Runs `f(const Replica&)` under the host's lock.
  template <class F>
  auto Read(F&& f) const {
    std::lock_guard lock(mu_);
    return f(replica_);
  }
  // Runs `f(const Replica&, uint64_t generation)` under the host's lock. The
  // generation counts the universes this host adopted: a return to a network
  // it held before (a fresh replica, another party, none of the own messages
  // sent in between) is a new generation though the network is the same.
  template <class F>
  auto ReadWithGeneration(F&& f) const {
    std::lock_guard lock(mu_);
    return f(replica_, generation_);
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
  // The snapshot is released first (before the lock), so that nodes no other
  // snapshot shares are changed in place rather than copied: the caller must
  // not read through it afterwards (`received` and `deleted` are its own).
  // Safe against concurrent sends: a node becomes the replica's to change
  // only once every other holder has let go of it (src/digest_tree.h). The
  // removed messages are freed after the lock is let go (RemovedLeaves):
  // sends and reads wait for the join, not for the frees.
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
  // The end of a bootstrap into `network`: adopts a fresh replica of it with
  // the `granted` party and the winner's messages, unless this replica is
  // already of that universe (another bootstrap got there first while this
  // one ran): then the granted party and the messages are joined into it, so
  // nothing of its own (events not shipped yet) is lost. True if the
  // universe changed.
  Result<bool> Bootstrapped(const NetworkId& network, itc::Party granted, ReceivedLeaves&& received,
                            const itc::Version& ceiling);
  // Gives the party away (persisted as retired first).
  Result<itc::Party> Donate();
  // Takes a donated party in (persisted after the join, before any ack).
  Status TakeDonation(itc::Party party);

 private:
  Status PersistLocked();
  // Held by every path that saves the bookmark (before mu_): saves happen one
  // at a time, and Begin saves without mu_ (sends go on during its fsync).
  std::mutex save_mu_;
  mutable std::mutex mu_;
  Replica replica_;
  uint64_t generation_ = 0;
  BookmarkStore* store_;
  ResetCallback on_reset_;
  std::optional<Bookmark> persisted_;
  // Bumped by every call that may change the replica (guarded by mu_), so
  // that PersistLocked builds and compares a bookmark only after a change:
  // every session's Begin calls it.
  uint64_t revision_ = 0;
  uint64_t checked_revision_ = ~uint64_t{0};
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

// One side of a session as a state machine without I/O (see the file
// comment). The caller writes each frame TakeOutgoing returns, in order, then
// calls OnWritten; it hands each frame it reads from the peer to OnFrame. At
// most one frame is in flight in each session, so a machine never has more
// than one frame to write, except a refusal after an error.
//
// The machine calls its Host at the protocol points the blocking functions
// do: Begin (or Grant) before its first frame leaves; Commit, Adopt, Donate
// and TakeDonation only once the last data frame of the session has been
// read, or written (OnWritten). A caller that stops moving frames (a cut link,
// a deadline it keeps itself) just drops the machine: the replica is
// unchanged, and local Sends made meanwhile are kept.
//
// Errors: those of the blocking session (see the file comment) except the
// stream's (the caller's I/O), plus kInvalidArgument for a frame whose length
// header disagrees with its size and kCorruption for a frame that arrives out
// of turn (before this side's own frame was taken). After an error the machine
// is finished and every later call returns the same error. The replica is as
// it was before the session, unless the error came in the retirement step
// that follows a kRetire session's commit (the donation and its ack), as with
// the blocking functions. TakeOutgoing may still hold a refusal (kRefuse) for
// the caller to write, at its option, before it closes the link.
//
// Threads: one thread at a time per machine; the Host is thread-safe.
class SessionMachine {
 public:
  // Bytes of a frame's length header (big-endian body size).
  static constexpr size_t kHeaderBytes = 4;

  // The initiating side: checks the options, takes the snapshot (Host::Begin,
  // which persists the bookmark first; nothing for kBootstrap) and queues the
  // greeting.
  static Result<SessionMachine> Initiate(Host& host, Mode mode, const SessionOptions& options);
  // The responding side: checks the options and waits for the peer's greeting.
  static Result<SessionMachine> Respond(Host& host, const SessionOptions& options);

  SessionMachine(SessionMachine&&) noexcept;
  SessionMachine& operator=(SessionMachine&&) noexcept;
  ~SessionMachine();

  // The frames to write next, in order, each complete (header and body);
  // empty when there is nothing to write.
  std::vector<Bytes> TakeOutgoing();
  // Every frame taken so far was written. A session whose last data frame is
  // this side's commits here (and a retiring initiator then donates and queues
  // the donation). A no-op when nothing taken is unconfirmed.
  Status OnWritten();
  // One frame from the peer, header and body. A frame while frames taken are
  // still unconfirmed confirms them first (the peer answered them). A frame
  // after the session's end is kCorruption and changes nothing.
  Status OnFrame(std::span<const uint8_t> frame);
  // The body size a received header announces, or the error OnFrame would
  // return for any frame with that header (frame_bytes_max, checked before
  // the body is read; session_frames_max). For a reader of byte streams.
  Result<size_t> BodyBytes(std::span<const uint8_t, kHeaderBytes> header) const;

  // Finished successfully: nothing left to write or read, report() valid.
  bool done() const;
  // Finished, successfully or by an error.
  bool finished() const;
  // The session's report (only when done()).
  const SessionReport& report() const;

 private:
  struct State;
  explicit SessionMachine(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
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
