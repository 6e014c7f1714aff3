#include "once/gossip/node.h"

#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

namespace once::gossip {

using Outcome = SessionReport::Outcome;

struct Node::Impl {
  NodeOptions options;
  SystemRng system_rng;
  std::unique_ptr<SeededRng> seeded_rng;
  std::unique_ptr<FileBookmarkStore> store;
  std::unique_ptr<Host> host;
  std::unique_ptr<TcpListener> listener;

  std::atomic<bool> stopping{false};
  std::mutex mu;  // guards the fields below
  std::condition_variable wake;
  bool nudged = false;
  std::vector<std::unique_ptr<TcpStream>> outbound;  // by peer index
  std::list<std::pair<std::thread, std::shared_ptr<TcpStream>>> inbound;
  NodeStats stats;

  std::thread accept_thread;
  std::thread gossip_thread;

  Rng& rng() { return seeded_rng ? static_cast<Rng&>(*seeded_rng) : system_rng; }

  void Count(uint64_t NodeStats::*field) {
    std::lock_guard lock(mu);
    ++(stats.*field);
  }

  void CountSession(bool ok) { Count(ok ? &NodeStats::sessions_ok : &NodeStats::sessions_failed); }

  void AcceptLoop() {
    while (!stopping) {
      auto stream = listener->Accept(DeadlineIn(std::chrono::milliseconds(200)));
      if (!stream) continue;
      std::shared_ptr<TcpStream> link = std::move(*stream);
      std::lock_guard lock(mu);
      ReapInbound();
      if (inbound.size() >= options.inbound_links_max || stopping) continue;  // dropped: closed
      inbound.emplace_back(std::thread([this, link] { ServeLoop(*link); }), link);
    }
  }

  // Joins finished inbound threads (called under mu).
  void ReapInbound() {
    for (auto it = inbound.begin(); it != inbound.end();) {
      if (it->second.use_count() == 1 && it->first.joinable()) {
        it->first.join();
        it = inbound.erase(it);
      } else {
        ++it;
      }
    }
  }

  void ServeLoop(TcpStream& link) {
    while (!stopping) {
      auto report = Respond(link, *host, options.session, DeadlineIn(options.link_idle_timeout_ms));
      CountSession(report.has_value());
      if (!report) break;
      if (report->outcome == Outcome::kPeerWins) Nudge();  // go and lose as the initiator
    }
    link.Close();
  }

  void Nudge() {
    std::lock_guard lock(mu);
    nudged = true;
    wake.notify_all();
  }

  void GossipLoop() {
    while (!stopping) {
      {
        std::unique_lock lock(mu);
        wake.wait_for(lock, options.gossip_interval_ms, [&] { return nudged || stopping.load(); });
        nudged = false;
      }
      if (stopping || options.peers.empty()) continue;
      const size_t peer = rng().Below(options.peers.size());
      if (options.peer_allowed && !options.peer_allowed(peer)) {
        DropLink(peer);
        continue;
      }
      Count(&NodeStats::rounds);
      Round(peer);
    }
  }

  Result<TcpStream*> Link(size_t peer) {
    std::unique_ptr<TcpStream> cached;
    {
      std::lock_guard lock(mu);
      if (outbound[peer]) return outbound[peer].get();
    }
    const PeerAddress& addr = options.peers[peer];
    auto stream = TcpStream::Connect(addr.host, addr.port, DeadlineIn(options.connect_timeout_ms));
    if (!stream) {
      Count(&NodeStats::connects_failed);
      return std::unexpected(stream.error());
    }
    std::lock_guard lock(mu);
    outbound[peer] = std::move(*stream);
    return outbound[peer].get();
  }

  void DropLink(size_t peer) {
    std::lock_guard lock(mu);
    outbound[peer].reset();
  }

  void Round(size_t peer) {
    auto link = Link(peer);
    if (!link) return;
    auto report = Initiate(**link, *host, Mode::kSync, options.session,
                           DeadlineIn(options.session_timeout_ms));
    CountSession(report.has_value());
    if (!report) return DropLink(peer);
    if (report->outcome != Outcome::kPeerWins) return;
    auto boot = Initiate(**link, *host, Mode::kBootstrap, options.session,
                         DeadlineIn(options.session_timeout_ms));
    CountSession(boot.has_value());
    if (!boot) return DropLink(peer);
    Count(&NodeStats::bootstraps);
  }

  void Stop() {
    if (stopping.exchange(true)) return;
    Nudge();
    listener->Close();
    {
      std::lock_guard lock(mu);
      for (auto& link : outbound) {
        if (link) link->Close();  // wakes a session in flight
      }
    }
    if (accept_thread.joinable()) accept_thread.join();
    if (gossip_thread.joinable()) gossip_thread.join();
    std::list<std::pair<std::thread, std::shared_ptr<TcpStream>>> links;
    {
      std::lock_guard lock(mu);
      links.swap(inbound);
      for (auto& [thread, link] : links) link->Close();
    }
    for (auto& [thread, link] : links) thread.join();
    std::lock_guard lock(mu);
    outbound.clear();
  }
};

Result<std::unique_ptr<Node>> Node::Start(NodeOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  if (impl->options.rng_seed != 0) {
    impl->seeded_rng = std::make_unique<SeededRng>(impl->options.rng_seed);
  }
  std::optional<Replica> replica;
  if (!impl->options.bookmark_path.empty()) {
    impl->store = std::make_unique<FileBookmarkStore>(impl->options.bookmark_path);
    ONCE_ASSIGN_OR_RETURN(std::optional<Bookmark> saved, impl->store->Load());
    if (saved) replica.emplace(Replica::Reclaim(std::move(*saved)));
  }
  if (!replica) replica.emplace(Replica::Seed(impl->rng()));
  impl->host =
      std::make_unique<Host>(std::move(*replica), impl->store.get(), impl->options.on_reset);
  ONCE_ASSIGN_OR_RETURN(impl->listener, TcpListener::Listen(impl->options.port));
  impl->outbound.resize(impl->options.peers.size());
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  impl->gossip_thread = std::thread([raw] { raw->GossipLoop(); });
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Node::Node(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Node::~Node() { Stop(); }
Host& Node::host() { return *impl_->host; }
uint16_t Node::port() const { return impl_->listener->port(); }
void Node::Nudge() { impl_->Nudge(); }
void Node::Stop() { impl_->Stop(); }

NodeStats Node::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace once::gossip
