#include "once/gossip/node.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

namespace once::gossip {

using Outcome = SessionReport::Outcome;

namespace {

// The link greeting, sent by each end once after connecting: magic, link
// protocol version, node id (8 bytes, big-endian), listening port (2 bytes).
constexpr uint8_t kLinkMagic[4] = {'G', 'L', 'N', 'K'};
constexpr uint8_t kLinkVersion = 1;
constexpr size_t kLinkGreetingBytes = 4 + 1 + 8 + 2;
// Between sessions, a side opens one as the initiator with kOpen (sent with
// its greeting frame) and the peer grants it with kGrant (sent before its
// reply), so a converged pair still settles in one round trip.
constexpr uint8_t kOpen = 'O';
constexpr uint8_t kGrant = 'G';
// Collisions in a row a side that yields sits through before giving up its
// round (each one serves a whole session of the peer's).
constexpr int kTurnAttemptsMax = 4;

std::array<uint8_t, kLinkGreetingBytes> EncodeGreeting(uint64_t node_id, uint16_t port) {
  std::array<uint8_t, kLinkGreetingBytes> out{};
  std::copy(std::begin(kLinkMagic), std::end(kLinkMagic), out.begin());
  out[4] = kLinkVersion;
  for (int i = 0; i < 8; ++i) out[5 + i] = static_cast<uint8_t>(node_id >> (56 - 8 * i));
  out[13] = static_cast<uint8_t>(port >> 8);
  out[14] = static_cast<uint8_t>(port);
  return out;
}

struct Greeting {
  uint64_t node_id = 0;
  uint16_t port = 0;
};

Result<Greeting> DecodeGreeting(std::span<const uint8_t, kLinkGreetingBytes> in) {
  if (!std::equal(std::begin(kLinkMagic), std::end(kLinkMagic), in.begin()) ||
      in[4] != kLinkVersion) {
    return MakeError(ErrorCode::kCorruption, "gossip link: not a link greeting");
  }
  Greeting g;
  for (int i = 0; i < 8; ++i) g.node_id = g.node_id << 8 | in[5 + i];
  g.port = static_cast<uint16_t>(in[13] << 8 | in[14]);
  if (g.node_id == 0) return MakeError(ErrorCode::kCorruption, "gossip link: node id 0");
  return g;
}

// The initiator's view of a link for one session: its first write is
// prefixed with kOpen (so opening costs no round trip), and its first read
// expects kGrant. If the peer opened at the same time (kOpen instead), the
// side with priority discards the peer's greeting frame and waits for the
// grant; the other fails the session as `yielded` and then serves the peer's
// session, whose greeting follows on the stream. Both sides see every such
// collision, so they can pass the priority back and forth in step.
class TurnStream final : public Stream {
 public:
  TurnStream(TcpStream& link, bool priority, size_t frame_bytes_max)
      : link_(link), priority_(priority), frame_bytes_max_(frame_bytes_max) {}
  Status Write(std::span<const uint8_t> bytes, Deadline deadline) override {
    if (opened_) return link_.Write(bytes, deadline);
    opened_ = true;
    Bytes first;
    first.reserve(bytes.size() + 1);
    first.push_back(kOpen);
    first.insert(first.end(), bytes.begin(), bytes.end());
    return link_.Write(first, deadline);
  }
  Status Read(std::span<uint8_t> out, Deadline deadline) override {
    if (!granted_) ONCE_RETURN_IF_ERROR(AwaitGrant(deadline));
    return link_.Read(out, deadline);
  }
  void Close() override { link_.Close(); }
  bool yielded() const { return yielded_; }
  bool collided() const { return collided_; }

 private:
  Status AwaitGrant(Deadline deadline) {
    uint8_t byte = 0;
    ONCE_RETURN_IF_ERROR(link_.Read(std::span(&byte, 1), deadline));
    collided_ = byte == kOpen;
    if (byte == kOpen && !priority_) {
      yielded_ = true;
      return MakeError(ErrorCode::kUnavailable, "gossip link: yielded the turn");
    }
    if (byte == kOpen) {  // the peer yields: skip its greeting, then its grant
      uint8_t header[4];
      ONCE_RETURN_IF_ERROR(link_.Read(header, deadline));
      const uint32_t size = uint32_t{header[0]} << 24 | uint32_t{header[1]} << 16 |
                            uint32_t{header[2]} << 8 | header[3];
      if (size > frame_bytes_max_) {
        return LimitError("frame_bytes_max", size, static_cast<int64_t>(frame_bytes_max_));
      }
      Bytes skipped(size);
      ONCE_RETURN_IF_ERROR(link_.Read(skipped, deadline));
      ONCE_RETURN_IF_ERROR(link_.Read(std::span(&byte, 1), deadline));
    }
    if (byte != kGrant) return MakeError(ErrorCode::kCorruption, "gossip link: unexpected byte");
    granted_ = true;
    return Ok();
  }

  TcpStream& link_;
  const bool priority_;
  const size_t frame_bytes_max_;
  bool collided_ = false;
  bool opened_ = false;
  bool granted_ = false;
  bool yielded_ = false;
};

bool SameAddress(const PeerAddress& a, const PeerAddress& b) {
  return a.port == b.port && a.host == b.host;
}

}  // namespace

// One TCP link to one peer, served by its own thread, which does all the
// link's I/O: it answers the peer's kOpen and runs the rounds the gossip
// thread asks for.
struct Link {
  std::unique_ptr<TcpStream> stream;
  bool dialed = false;
  int wake_fd = -1;  // an eventfd: the gossip thread posted a round, or the link closed
  std::thread thread;
  // Guarded by Impl::mu.
  PeerAddress peer;
  uint64_t peer_id = 0;
  bool registered = false;
  bool closed = false;
  bool exited = false;
  bool round_wanted = false;
  uint64_t rounds_done = 0;
  bool round_news = false;  // the last round moved messages or met another universe
  // The stream's byte counts already added to the node's stats (the link
  // thread's own).
  uint64_t bytes_sent_counted = 0;
  uint64_t bytes_received_counted = 0;
  // Both sides opened at once this many times (the link thread's own): the
  // dialler has priority after an even count, the other side after an odd.
  uint64_t collisions = 0;

  ~Link() {
    if (wake_fd >= 0) ::close(wake_fd);
  }
  void Wake() const {
    const uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof(one));
  }
  void DrainWake() const {
    uint64_t n;
    (void)!::read(wake_fd, &n, sizeof(n));
  }
};

struct Node::Impl {
  NodeOptions options;
  SystemRng system_rng;
  std::unique_ptr<SeededRng> seeded_rng;
  std::unique_ptr<FileBookmarkStore> store;
  std::unique_ptr<Host> host;
  std::unique_ptr<TcpListener> listener;
  uint64_t node_id = 0;

  std::atomic<bool> stopping{false};
  mutable std::mutex mu;  // guards the fields below and every Link's guarded fields
  std::condition_variable wake;
  std::condition_variable round_finished;
  bool nudged = false;
  std::list<std::shared_ptr<Link>> links;
  NodeStats stats;
  std::optional<SplitSeen> split;
  std::deque<GossipError> errors;

  std::thread accept_thread;
  std::thread gossip_thread;

  Rng& rng() { return seeded_rng ? static_cast<Rng&>(*seeded_rng) : system_rng; }

  void Count(uint64_t NodeStats::*field) {
    std::lock_guard lock(mu);
    ++(stats.*field);
  }

  // A session ended on `link`: counts it, and the bytes the link carried
  // since the last one (on the link's thread).
  void CountSession(Link& link, bool ok) {
    const uint64_t sent = link.stream->bytes_written(), received = link.stream->bytes_read();
    std::lock_guard lock(mu);
    ++(ok ? stats.sessions_ok : stats.sessions_failed);
    stats.bytes_sent += sent - link.bytes_sent_counted;
    stats.bytes_received += received - link.bytes_received_counted;
    link.bytes_sent_counted = sent;
    link.bytes_received_counted = received;
  }

  // A failed session, for errors(): a repeat of the latest is counted.
  void NoteError(const Link& link, const Error& error) {
    std::lock_guard lock(mu);
    const std::string peer = link.peer.host + ":" + std::to_string(link.peer.port);
    const auto now = std::chrono::system_clock::now();
    if (!errors.empty() && errors.back().peer == peer && errors.back().message == error.message) {
      errors.back().at = now;
      ++errors.back().count;
      return;
    }
    errors.push_back(GossipError{peer, error.message, now, 1});
    while (errors.size() > options.errors_kept) errors.pop_front();
  }

  // What a completed session tells: news (messages moved, another universe)
  // and meetings of another universe.
  bool NoteReport(const Link& link, const SessionReport& report) {
    const bool foreign =
        report.outcome == Outcome::kLocalWins || report.outcome == Outcome::kPeerWins;
    const bool adopted = report.outcome == Outcome::kBootstrapped;
    if (foreign || adopted) {
      std::lock_guard lock(mu);
      const auto now = std::chrono::system_clock::now();
      if (adopted) {
        split.reset();
      } else {
        ++stats.foreign_meetings;
        const std::string peer = link.peer.host + ":" + std::to_string(link.peer.port);
        if (!split || !(split->network == report.peer_network) ||
            now - split->last > SplitForget()) {
          split = SplitSeen{report.peer_network, peer, now, now, 1};
        } else {
          split->last = now;
          split->peer = peer;
          ++split->meetings;
        }
      }
    }
    if ((report.received > 0 || adopted) && options.on_received) options.on_received();
    return foreign || adopted || report.received > 0 || report.sent > 0 || report.deleted > 0;
  }

  // A split not met again for this long is over.
  std::chrono::milliseconds SplitForget() const {
    return std::max(options.split_report_ms, 3 * options.gossip_interval_max_ms);
  }

  // --- links -------------------------------------------------------------

  std::shared_ptr<Link> NewLink(std::unique_ptr<TcpStream> stream, bool dialed) {
    auto link = std::make_shared<Link>();
    link->stream = std::move(stream);
    link->dialed = dialed;
    link->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (link->wake_fd < 0) return nullptr;  // out of descriptors: the stream closes
    return link;
  }

  // Under mu. The link's thread notices and exits; a session on it fails.
  void CloseLocked(Link& link) {
    if (link.closed) return;
    link.closed = true;
    link.stream->Close();
    link.Wake();
    round_finished.notify_all();
  }

  // Joins the threads of links that have exited (under mu).
  void ReapLocked() {
    for (auto it = links.begin(); it != links.end();) {
      if ((*it)->exited && (*it)->thread.joinable()) {
        (*it)->thread.join();
        it = links.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Exchanges link greetings. The acceptor learns the peer's listening
  // address from the peer's host and announced port.
  Status Greet(Link& link, const PeerAddress* dialed_peer) {
    const Deadline deadline = DeadlineIn(options.connect_timeout_ms);
    const auto mine = EncodeGreeting(node_id, listener->port());
    ONCE_RETURN_IF_ERROR(link.stream->Write(mine, deadline));
    std::array<uint8_t, kLinkGreetingBytes> theirs{};
    ONCE_RETURN_IF_ERROR(link.stream->Read(theirs, deadline));
    ONCE_ASSIGN_OR_RETURN(Greeting g, DecodeGreeting(theirs));
    if (g.node_id == node_id) return MakeError(ErrorCode::kInvalidArgument, "a link to itself");
    std::lock_guard lock(mu);
    link.peer_id = g.node_id;
    link.peer = dialed_peer ? *dialed_peer : PeerAddress{link.stream->PeerHost(), g.port};
    return Ok();
  }

  // Registers a greeted link; with another live link to the same peer, keeps
  // one: the newer if the peer restarted (another node id), else the one
  // dialled by the smaller node id (both ends decide alike), else (both
  // dialled the same way) the newer. False if `link` itself was closed.
  bool RegisterLocked(const std::shared_ptr<Link>& link) {
    for (const auto& other : links) {
      if (other == link || !other->registered || other->closed) continue;
      if (!SameAddress(other->peer, link->peer)) continue;
      bool keep_new = true;
      if (other->peer_id == link->peer_id && other->dialed != link->dialed) {
        const bool keep_dialed = node_id < link->peer_id;
        keep_new = link->dialed == keep_dialed;
      }
      ++stats.links_duplicate;
      if (!keep_new) {
        CloseLocked(*link);
        return false;
      }
      CloseLocked(*other);
    }
    link->registered = true;
    ++stats.links_opened;
    return true;
  }

  std::shared_ptr<Link> FindLocked(const PeerAddress& peer) {
    for (const auto& link : links) {
      if (link->registered && !link->closed && SameAddress(link->peer, peer)) return link;
    }
    return nullptr;
  }

  size_t LiveLocked() const {
    size_t n = 0;
    for (const auto& link : links) n += link->closed ? 0 : 1;
    return n;
  }

  void DropLink(const PeerAddress& peer) {
    std::lock_guard lock(mu);
    if (auto link = FindLocked(peer)) CloseLocked(*link);
  }

  // The link thread: greets (accepted links), then serves until the link
  // closes, idles out or the node stops.
  void LinkLoop(std::shared_ptr<Link> link) {
    bool ok = link->dialed;  // a dialled link was greeted and registered by Dial
    if (!ok && Greet(*link, nullptr) && InboundAllowed(*link)) {
      std::lock_guard lock(mu);
      ok = !link->closed && RegisterLocked(link);
    }
    while (ok && !stopping) ok = ServeOnce(*link);
    std::lock_guard lock(mu);
    CloseLocked(*link);
    link->exited = true;
    round_finished.notify_all();
  }

  // One step of a link: a requested round, or the peer's kOpen, or waiting.
  // False when the link is done.
  bool ServeOnce(Link& link) {
    bool wanted = false;
    {
      std::lock_guard lock(mu);
      if (link.closed) return false;
      wanted = link.round_wanted;
      link.round_wanted = false;
    }
    if (wanted) {
      bool news = false;
      const bool ok = RunRound(link, news);
      std::lock_guard lock(mu);
      ++link.rounds_done;
      link.round_news = news;
      round_finished.notify_all();
      return ok;
    }
    auto ready =
        link.stream->WaitReadableOr(link.wake_fd, DeadlineIn(options.link_idle_timeout_ms));
    if (!ready) return false;  // idle for too long
    if (!*ready) {
      link.DrainWake();
      return true;
    }
    uint8_t byte = 0;
    if (!link.stream->Read(std::span(&byte, 1), DeadlineIn(options.session_timeout_ms))) {
      return false;
    }
    return byte == kOpen && InboundAllowed(link) && Serve(link);
  }

  // Whether the peer of `link` may have its sessions served (the peer's
  // listening address is set by the greeting).
  bool InboundAllowed(const Link& link) {
    if (!options.peer_allowed_inbound) return true;
    PeerAddress peer;
    {
      std::lock_guard lock(mu);
      peer = link.peer;
    }
    return options.peer_allowed_inbound(peer);
  }

  // Grants the peer the turn and answers its session. A peer whose universe
  // wins is joined over this very link (its next step is a round here, as
  // the initiator: the sync loses again, then the bootstrap), whether or not
  // the peer is on this node's list. A session that brought news is passed
  // on at once (a round with a random peer).
  bool Serve(Link& link) {
    const Deadline deadline = DeadlineIn(options.session_timeout_ms);
    if (!link.stream->Write(std::span(&kGrant, 1), deadline)) return false;
    auto report = Respond(*link.stream, *host, options.session, deadline);
    CountSession(link, report.has_value());
    if (!report) {
      NoteError(link, report.error());
      return false;
    }
    const bool news = NoteReport(link, *report);
    if (report->outcome == Outcome::kPeerWins) {
      std::lock_guard lock(mu);
      link.round_wanted = true;
    } else if (news && report->received > 0) {
      Nudge();
    }
    return true;
  }

  // One session as the initiator on the link: when both sides opened at once
  // and the other has priority, serves the peer's session and asks again.
  // False if the link is unusable; `report` holds the session's.
  bool InitiateOn(Link& link, Mode mode, Result<SessionReport>& report) {
    for (int attempt = 0; attempt < kTurnAttemptsMax; ++attempt) {
      const bool priority = link.dialed == (link.collisions % 2 == 0);
      TurnStream turn(*link.stream, priority, options.session.frame_bytes_max);
      report = Initiate(turn, *host, mode, options.session, DeadlineIn(options.session_timeout_ms));
      if (turn.collided()) ++link.collisions;
      if (report || !turn.yielded()) {
        CountSession(link, report.has_value());
        if (!report) NoteError(link, report.error());
        return report.has_value();
      }
      Count(&NodeStats::turns_yielded);
      if (!Serve(link)) return false;
    }
    report = MakeError(ErrorCode::kUnavailable, "gossip link: the peer kept the turn");
    CountSession(link, false);
    return false;
  }

  // A sync session as the initiator, and a bootstrap if this side lost.
  // False if the link is unusable; `news` says whether it moved anything.
  bool RunRound(Link& link, bool& news) {
    Result<SessionReport> report;
    if (!InitiateOn(link, Mode::kSync, report)) return false;
    news = NoteReport(link, *report);
    if (report->outcome != Outcome::kPeerWins) return true;
    if (!InitiateOn(link, Mode::kBootstrap, report)) return false;
    NoteReport(link, *report);
    Count(&NodeStats::bootstraps);
    return true;
  }

  void StartThread(const std::shared_ptr<Link>& link) {
    link->thread = std::thread([this, link] { LinkLoop(link); });
  }

  // A link to `peer`: the live one, or a new dialled one.
  std::shared_ptr<Link> Dial(const PeerAddress& peer) {
    {
      std::lock_guard lock(mu);
      ReapLocked();
      if (auto link = FindLocked(peer)) return link;
    }
    auto stream = TcpStream::Connect(peer.host, peer.port, DeadlineIn(options.connect_timeout_ms));
    if (!stream) {
      Count(&NodeStats::connects_failed);
      return nullptr;
    }
    auto link = NewLink(std::move(*stream), /*dialed=*/true);
    if (!link || !Greet(*link, &peer)) {
      Count(&NodeStats::connects_failed);
      return nullptr;
    }
    std::lock_guard lock(mu);
    if (stopping) return nullptr;
    links.push_back(link);
    const bool kept = RegisterLocked(link);
    StartThread(link);  // a closed one exits at once
    return kept ? link : FindLocked(peer);
  }

  // Asks the link's thread for one round and waits for it. True if the
  // round moved anything (or failed: the peer may need another).
  bool Round(const PeerAddress& peer) {
    std::shared_ptr<Link> link = Dial(peer);
    if (!link) return true;
    std::unique_lock lock(mu);
    const uint64_t ticket = link->rounds_done;
    link->round_wanted = true;
    link->Wake();
    // A round is one or two sessions plus the turn: bounded by their timeouts.
    const auto bound = options.session_timeout_ms * (2 * kTurnAttemptsMax + 2);
    round_finished.wait_for(lock, bound, [&] {
      return link->rounds_done != ticket || link->exited || stopping.load();
    });
    return link->rounds_done == ticket || link->exited || link->round_news;
  }

  // --- loops -------------------------------------------------------------

  void AcceptLoop() {
    while (!stopping) {
      auto stream = listener->Accept(DeadlineIn(std::chrono::milliseconds(200)));
      if (!stream) continue;
      auto link = NewLink(std::move(*stream), /*dialed=*/false);
      if (!link) continue;
      std::lock_guard lock(mu);
      ReapLocked();
      if (LiveLocked() >= options.links_max || stopping) continue;  // dropped: closed
      links.push_back(link);
      StartThread(link);
    }
  }

  void Nudge() {
    std::lock_guard lock(mu);
    nudged = true;
    wake.notify_all();
  }

  void GossipLoop() {
    const auto base = options.gossip_interval_ms;
    const auto max = std::max(options.gossip_interval_max_ms, base);
    auto interval = base;
    uint32_t quiet_rounds = 0;
    while (!stopping) {
      bool was_nudged = false;
      {
        std::unique_lock lock(mu);
        wake.wait_for(lock, interval, [&] { return nudged || stopping.load(); });
        was_nudged = nudged;
        nudged = false;
      }
      if (stopping || options.peers.empty()) continue;
      const size_t peer = rng().Below(options.peers.size());
      if (options.peer_allowed && !options.peer_allowed(peer)) {
        DropLink(options.peers[peer]);
        continue;
      }
      Count(&NodeStats::rounds);
      const bool news = Round(options.peers[peer]);
      quiet_rounds = news || was_nudged ? 0 : quiet_rounds + 1;
      interval =
          quiet_rounds <= options.idle_rounds_before_backoff ? base : std::min(max, interval * 2);
    }
  }

  void Stop() {
    if (stopping.exchange(true)) return;
    Nudge();
    listener->Close();
    {
      std::lock_guard lock(mu);
      for (auto& link : links) CloseLocked(*link);  // wakes a session in flight
    }
    if (accept_thread.joinable()) accept_thread.join();
    if (gossip_thread.joinable()) gossip_thread.join();
    std::list<std::shared_ptr<Link>> all;
    {
      std::lock_guard lock(mu);
      all.swap(links);
      for (auto& link : all) CloseLocked(*link);
    }
    for (auto& link : all) {
      if (link->thread.joinable()) link->thread.join();
    }
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
  // A fresh id per start (a restarted node is a new link peer); never 0.
  while (impl->node_id == 0) impl->node_id = impl->system_rng.Next();
  impl->host =
      std::make_unique<Host>(std::move(*replica), impl->store.get(), impl->options.on_reset);
  ONCE_ASSIGN_OR_RETURN(impl->listener, TcpListener::Listen(impl->options.port));
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

std::optional<SplitSeen> Node::split() const {
  std::lock_guard lock(impl_->mu);
  const auto& seen = impl_->split;
  if (!seen) return std::nullopt;
  const auto now = std::chrono::system_clock::now();
  if (now - seen->last > impl_->SplitForget()) return std::nullopt;
  if (seen->last - seen->since < impl_->options.split_report_ms) return std::nullopt;
  return seen;
}

std::vector<GossipError> Node::errors() const {
  std::lock_guard lock(impl_->mu);
  return std::vector<GossipError>(impl_->errors.begin(), impl_->errors.end());
}

std::vector<LinkInfo> Node::links() const {
  std::lock_guard lock(impl_->mu);
  std::vector<LinkInfo> out;
  for (const auto& link : impl_->links) {
    if (link->registered && !link->closed) out.push_back(LinkInfo{link->peer, link->dialed});
  }
  return out;
}

}  // namespace once::gossip
