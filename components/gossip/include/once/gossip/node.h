// File: node.h
//
// A gossip Node: a Host on TCP. It listens on 127.0.0.1:port, and every
// gossip interval runs one push-pull session with a random peer from its
// list. A pair of nodes shares one full-duplex TCP link, whoever dialled it:
// sessions in either direction take turns on it (docs/gossip-protocol.md,
// "Node"). When both dial at once, the link dialled by the node with the
// smaller node id is kept and the other closed; a dropped link is redialled
// at the next round that needs it. Universes meet without consensus:
// every node starts as its own seed (or reclaims its bookmark); when a
// session finds another network, the side that loses the (min_ticks, network
// id) game bootstraps into the winner's universe at once and the
// application's on_reset callback runs. The loser bootstraps over the link
// the meeting happened on, whoever dialled it: a node that learns of a
// winning universe from an inbound session (a peer whose list names it, when
// its own list does not name the peer) joins it as one that dialled would. A
// foreign universe met again and again for split_report_ms without either
// side joining is reported (split()), as are recent session failures
// (errors()).
//
// Rounds: every gossip interval while there is news (a round that moved
// messages, a local send, a nudge); each round that finds the peer converged
// doubles the interval, up to gossip_interval_max_ms, so an idle rack costs
// little; news resets it. A node that received messages runs a round at
// once, so news spreads in a few round trips.
//
//   NodeOptions options;
//   options.port = 7000;
//   options.peers = {{"127.0.0.1", 7001}, {"127.0.0.1", 7002}};
//   options.bookmark_path = "/var/lib/node/bookmark";
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<Node> node, Node::Start(std::move(options)));
//   ONCE_RETURN_IF_ERROR(node->host().Send(payload));
//   ...
//   node->Stop();
//
// Threads: Start spawns the accept thread, the gossip thread and one thread
// per link (at most links_max); Stop joins them all. host()
// and stats() may be called from any thread. Errors: Start fails with
// kUnavailable if the port cannot be bound, and with the bookmark's errors if
// a persisted bookmark cannot be read. Session failures are counted, never
// fatal.

#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "once/gossip/bookmark.h"
#include "once/gossip/session.h"

namespace once::gossip {

struct PeerAddress {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
};

struct NodeOptions {
  uint16_t port = 0;  // 0: any free port (see Node::port)
  std::vector<PeerAddress> peers;
  std::chrono::milliseconds gossip_interval_ms{100};
  // The interval converged rounds back off to (never below gossip_interval_ms).
  std::chrono::milliseconds gossip_interval_max_ms{1000};
  // Rounds in a row without news before the interval starts to double: a
  // rumor is still spreading for a few rounds after a node last moved it,
  // and the nodes that have not heard it yet only pull at their interval
  // (backing off at the first quiet round made a 32-node spread take 8.4
  // rounds of gossip_interval_ms instead of at most 7).
  uint32_t idle_rounds_before_backoff = 8;
  // A foreign universe met for this long without a bootstrap is a split.
  std::chrono::milliseconds split_report_ms{3000};
  // Session failures remembered for errors() (consecutive repeats of one
  // are counted, not kept).
  size_t errors_kept = 16;
  std::chrono::milliseconds connect_timeout_ms{500};
  std::chrono::milliseconds session_timeout_ms{5000};
  // A link with no session in either direction for this long is closed.
  std::chrono::milliseconds link_idle_timeout_ms{30000};
  // Links held at once (one per peer); an accepted link past it is closed.
  size_t links_max = 256;
  std::string bookmark_path;  // empty: no persistence
  SessionOptions session;
  ResetCallback on_reset;
  uint64_t rng_seed = 0;  // 0: seeded from the operating system
  // If set, consulted (from the gossip thread) before each round: a peer it
  // refuses (by index into `peers`) is skipped and its cached link dropped.
  // Only outbound rounds are filtered here; see peer_allowed_inbound.
  std::function<bool(size_t peer)> peer_allowed;
  // If set, consulted (from a link's thread) with the peer's listening
  // address after the link greeting of an accepted link, and before serving
  // each session the peer opens on any link: a peer it refuses has its link
  // closed. With peer_allowed refusing the same peer, a cut holds both ways
  // (tests use it to cut real processes apart).
  std::function<bool(const PeerAddress& peer)> peer_allowed_inbound;
  // If set, called (from a link's thread, under no lock) after a session
  // brought messages into the replica or adopted another universe.
  std::function<void()> on_received;
};

struct NodeStats {
  uint64_t rounds = 0;            // gossip rounds run
  uint64_t sessions_ok = 0;       // sessions that completed (both roles)
  uint64_t sessions_failed = 0;   // sessions that failed (both roles)
  uint64_t bootstraps = 0;        // universes adopted
  uint64_t connects_failed = 0;   // outbound connects that failed
  uint64_t links_opened = 0;      // links that completed the link greeting
  uint64_t links_duplicate = 0;   // links closed because the pair had another
  uint64_t turns_yielded = 0;     // own sessions dropped to serve the peer's (both opened)
  uint64_t foreign_meetings = 0;  // sessions that met another universe (either role)
  uint64_t bytes_sent = 0;        // on links, counted after each session (greetings included)
  uint64_t bytes_received = 0;
};

// Another universe met through `peer` again and again since `since` (wall
// clock), `meetings` times, the last at `last`, and still not joined.
struct SplitSeen {
  NetworkId network;
  std::string peer;  // HOST:PORT
  std::chrono::system_clock::time_point since;
  std::chrono::system_clock::time_point last;
  uint64_t meetings = 0;
};

// A session that failed (either role): the latest of a run of equal ones.
struct GossipError {
  std::string peer;  // HOST:PORT
  std::string message;
  std::chrono::system_clock::time_point at;
  uint64_t count = 1;  // consecutive repeats
};

// One live link: the peer's listening address and who dialled.
struct LinkInfo {
  PeerAddress peer;
  bool dialed = false;  // this node dialled it
};

class Node {
 public:
  static Result<std::unique_ptr<Node>> Start(NodeOptions options);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  Host& host();
  uint16_t port() const;
  NodeStats stats() const;
  // The live links (at most one per peer).
  std::vector<LinkInfo> links() const;
  // A split that has lasted split_report_ms and was met again recently.
  std::optional<SplitSeen> split() const;
  // The latest session failures, oldest first.
  std::vector<GossipError> errors() const;
  // Runs a gossip round now instead of at the next interval.
  void Nudge();
  void Stop();

  struct Impl;

 private:
  explicit Node(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace once::gossip
