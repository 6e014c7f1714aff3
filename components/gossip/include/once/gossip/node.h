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
// application's on_reset callback runs.
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
};

struct NodeStats {
  uint64_t rounds = 0;           // gossip rounds run
  uint64_t sessions_ok = 0;      // sessions that completed (both roles)
  uint64_t sessions_failed = 0;  // sessions that failed (both roles)
  uint64_t bootstraps = 0;       // universes adopted
  uint64_t connects_failed = 0;  // outbound connects that failed
  uint64_t links_opened = 0;     // links that completed the link greeting
  uint64_t links_duplicate = 0;  // links closed because the pair had another
  uint64_t turns_yielded = 0;    // own sessions dropped to serve the peer's (both opened)
  uint64_t bytes_sent = 0;       // on links, counted after each session (greetings included)
  uint64_t bytes_received = 0;
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
  // Runs a gossip round now instead of at the next interval.
  void Nudge();
  void Stop();

  struct Impl;

 private:
  explicit Node(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace once::gossip
