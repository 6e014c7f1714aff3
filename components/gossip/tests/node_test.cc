#include "once/gossip/node.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "harness.h"
#include "once/gossip/bookmark.h"

namespace once::gossip {
namespace {

using namespace std::chrono_literals;
using testing::Payload;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("gossip-" + name + "-" + std::to_string(::getpid())))
      .string();
}

TEST(BookmarkTest, RoundTripsAndRejectsCorruption) {
  SeededRng rng(51);
  Replica r = Replica::Seed(rng);
  ASSERT_TRUE(r.Send(Payload("x")));
  const Bookmark b = r.MakeBookmark();
  const Bytes bytes = EncodeBookmark(b);
  auto back = DecodeBookmark(bytes);
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(back->network, b.network);
  EXPECT_EQ(back->party, b.party);
  EXPECT_EQ(back->version, b.version);
  for (size_t i = 0; i < bytes.size(); ++i) {
    Bytes bad = bytes;
    bad[i] ^= 0x10;
    auto d = DecodeBookmark(bad);
    ASSERT_FALSE(d) << i;
    EXPECT_EQ(d.error().code, ErrorCode::kCorruption);
  }
  EXPECT_FALSE(DecodeBookmark(std::span(bytes).first(bytes.size() - 1)));
}

TEST(BookmarkTest, FileStoreReplacesAtomically) {
  const std::string path = TempPath("bookmark");
  std::filesystem::remove(path);
  FileBookmarkStore store(path);
  auto none = store.Load();
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  SeededRng rng(52);
  Replica r = Replica::Seed(rng);
  ASSERT_TRUE(store.Save(r.MakeBookmark()));
  ASSERT_TRUE(r.Send(Payload("y")));
  ASSERT_TRUE(store.Save(r.MakeBookmark()));
  auto loaded = store.Load();
  ASSERT_TRUE(loaded && loaded->has_value());
  EXPECT_EQ((*loaded)->version, r.ceiling());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
}

std::vector<uint16_t> FreePorts(int count) {
  std::vector<uint16_t> ports;
  std::vector<std::unique_ptr<TcpListener>> held;
  for (int i = 0; i < count; ++i) {
    held.push_back(std::move(*TcpListener::Listen(0)));
    ports.push_back(held.back()->port());
  }
  return ports;
}

// Node i of a full mesh on `ports`, gossiping every 20 ms.
NodeOptions MeshOptions(const std::vector<uint16_t>& ports, size_t i, const std::string& name) {
  NodeOptions o;
  o.port = ports[i];
  for (size_t j = 0; j < ports.size(); ++j) {
    if (j != i) o.peers.push_back(PeerAddress{"127.0.0.1", ports[j]});
  }
  o.gossip_interval_ms = 20ms;
  o.bookmark_path = TempPath(name + std::to_string(i));
  o.rng_seed = 1000 + i;
  return o;
}

std::vector<std::unique_ptr<Node>> StartNodes(int count, const std::string& name) {
  const std::vector<uint16_t> ports = FreePorts(count);
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < count; ++i) {
    NodeOptions o = MeshOptions(ports, i, name);
    std::filesystem::remove(o.bookmark_path);
    auto node = Node::Start(std::move(o));
    EXPECT_TRUE(node) << node.error().ToString();
    nodes.push_back(std::move(*node));
  }
  return nodes;
}

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

TEST(NodeTest, UniversesMergeAndMessagesSpreadOverTcp) {
  auto nodes = StartNodes(5, "node");
  ASSERT_TRUE(Eventually([&] {
    for (auto& n : nodes) {
      if (n->host().network() != nodes[0]->host().network()) return false;
    }
    return true;
  })) << "5 universes did not become one";
  auto v = nodes[2]->host().Send(Payload("over tcp"));
  ASSERT_TRUE(v);
  EXPECT_TRUE(Eventually([&] {
    for (auto& n : nodes) {
      if (!n->host().Snap().Find(PathOf(*v))) return false;
    }
    return true;
  }));
  uint64_t bootstraps = 0;
  for (auto& n : nodes) bootstraps += n->stats().bootstraps;
  EXPECT_GE(bootstraps, 4u);
  // Every node counted bytes both ways on its links (sush-server's metrics).
  for (auto& n : nodes) {
    EXPECT_GT(n->stats().bytes_sent, 0u);
    EXPECT_GT(n->stats().bytes_received, 0u);
  }
  // Parties stayed disjoint through every bootstrap.
  std::vector<Bytes> parties;
  for (auto& n : nodes) {
    parties.push_back(n->host().Read([](const Replica& r) { return r.party()->Encode(); }));
  }
  for (size_t i = 0; i < parties.size(); ++i) {
    for (size_t j = i + 1; j < parties.size(); ++j) {
      EXPECT_TRUE(Disjoint(*itc::Party::Decode(parties[i]), *itc::Party::Decode(parties[j])));
    }
  }
  for (auto& n : nodes) n->Stop();
}

// Established TCP connections whose accepting end listens on one of `ports`,
// as the kernel counts them (/proc/net/tcp: each connection has one such end).
size_t KernelConnections(const std::vector<uint16_t>& ports) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  size_t count = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const auto colon = local.find(':');
    if (state != "01" || colon == std::string::npos) continue;  // 01: ESTABLISHED
    const auto port = static_cast<uint16_t>(std::stoul(local.substr(colon + 1), nullptr, 16));
    count += std::find(ports.begin(), ports.end(), port) != ports.end() ? 1 : 0;
  }
  return count;
}

// Every node holds one live link to each other node, and the kernel sees one
// connection per pair.
bool OneLinkPerPair(const std::vector<std::unique_ptr<Node>>& nodes,
                    const std::vector<uint16_t>& ports) {
  for (const auto& n : nodes) {
    std::set<uint16_t> peers;
    for (const LinkInfo& link : n->links()) peers.insert(link.peer.port);
    if (peers.size() != nodes.size() - 1 || n->links().size() != nodes.size() - 1) return false;
  }
  return KernelConnections(ports) == nodes.size() * (nodes.size() - 1) / 2;
}

bool OneUniverse(const std::vector<std::unique_ptr<Node>>& nodes) {
  for (const auto& n : nodes) {
    if (n->host().network() != nodes[0]->host().network()) return false;
    if (!SameState(n->host().Snap(), nodes[0]->host().Snap())) return false;
  }
  return true;
}

TEST(NodeTest, APairSharesOneTcpLinkAlsoAfterAPeerRestarts) {
  const std::vector<uint16_t> ports = FreePorts(4);
  std::vector<std::unique_ptr<Node>> nodes;
  for (size_t i = 0; i < ports.size(); ++i) {
    NodeOptions o = MeshOptions(ports, i, "link");
    std::filesystem::remove(o.bookmark_path);
    auto node = Node::Start(std::move(o));
    ASSERT_TRUE(node) << node.error().ToString();
    nodes.push_back(std::move(*node));
  }
  ASSERT_TRUE(Eventually([&] { return OneUniverse(nodes) && OneLinkPerPair(nodes, ports); }))
      << "connections: " << KernelConnections(ports);

  nodes[1]->Stop();
  nodes[1].reset();
  auto restarted = Node::Start(MeshOptions(ports, 1, "link"));  // reclaims its bookmark
  ASSERT_TRUE(restarted) << restarted.error().ToString();
  nodes[1] = std::move(*restarted);
  ASSERT_TRUE(nodes[1]->host().Send(Payload("after the restart")));
  EXPECT_TRUE(Eventually([&] { return OneUniverse(nodes) && OneLinkPerPair(nodes, ports); }))
      << "connections: " << KernelConnections(ports);
  for (auto& n : nodes) n->Stop();
}

// Two nodes gossiping every millisecond open sessions on their one link at
// the same time again and again: the side that did not dial yields each time,
// and no session is lost to it.
TEST(NodeTest, SessionsOpenedAtOnceOnOneLinkTakeTurns) {
  const std::vector<uint16_t> ports = FreePorts(2);
  std::vector<std::unique_ptr<Node>> nodes;
  for (size_t i = 0; i < 2; ++i) {
    NodeOptions o = MeshOptions(ports, i, "turns");
    std::filesystem::remove(o.bookmark_path);
    o.gossip_interval_ms = 1ms;
    auto node = Node::Start(std::move(o));
    ASSERT_TRUE(node) << node.error().ToString();
    nodes.push_back(std::move(*node));
  }
  // The start may cut a few sessions (a duplicate link closed, a universe
  // adopted mid-session); count from a settled pair on.
  ASSERT_TRUE(Eventually([&] { return OneUniverse(nodes) && OneLinkPerPair(nodes, ports); }));
  const uint64_t failed_before =
      nodes[0]->stats().sessions_failed + nodes[1]->stats().sessions_failed;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(nodes[i % 2]->host().Send(Payload(std::to_string(i))));
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(Eventually([&] {
    return OneUniverse(nodes) && nodes[0]->host().Snap().size() == 200 &&
           OneLinkPerPair(nodes, ports) &&
           nodes[0]->stats().turns_yielded + nodes[1]->stats().turns_yielded > 0;
  })) << "yielded "
      << nodes[0]->stats().turns_yielded + nodes[1]->stats().turns_yielded;
  const uint64_t failed = nodes[0]->stats().sessions_failed + nodes[1]->stats().sessions_failed;
  EXPECT_EQ(failed, failed_before);
  for (auto& n : nodes) n->Stop();
}

TEST(NodeTest, APeerFilterKeepsTwoNodesApartUntilItAllowsThem) {
  std::atomic<bool> allowed{false};
  std::vector<uint16_t> ports;
  {
    auto a = TcpListener::Listen(0), b = TcpListener::Listen(0);
    ports = {(*a)->port(), (*b)->port()};
  }
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 2; ++i) {
    NodeOptions o;
    o.port = ports[i];
    o.peers.push_back(PeerAddress{"127.0.0.1", ports[1 - i]});
    o.gossip_interval_ms = 20ms;
    o.rng_seed = 2000 + i;
    o.peer_allowed = [&allowed](size_t peer) { return peer == 0 && allowed.load(); };
    auto node = Node::Start(std::move(o));
    ASSERT_TRUE(node) << node.error().ToString();
    nodes.push_back(std::move(*node));
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_NE(nodes[0]->host().network(), nodes[1]->host().network());
  EXPECT_EQ(nodes[0]->stats().rounds + nodes[1]->stats().rounds, 0u);
  allowed = true;
  EXPECT_TRUE(Eventually([&] { return nodes[0]->host().network() == nodes[1]->host().network(); }));
  for (auto& n : nodes) n->Stop();
}

// A cut told to one side only holds both ways: the cut node refuses the
// other's dials and the sessions it opens, not only its own rounds.
TEST(NodeTest, AnInboundFilterRefusesThePeersLinksAndSessions) {
  std::atomic<bool> cut{true};
  std::vector<uint16_t> ports;
  {
    auto a = TcpListener::Listen(0), b = TcpListener::Listen(0);
    ports = {(*a)->port(), (*b)->port()};
  }
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 2; ++i) {
    NodeOptions o;
    o.port = ports[i];
    o.peers.push_back(PeerAddress{"127.0.0.1", ports[1 - i]});
    o.gossip_interval_ms = 20ms;
    o.rng_seed = 3000 + i;
    if (i == 0) {  // only node 0 is told
      o.peer_allowed = [&cut](size_t) { return !cut.load(); };
      o.peer_allowed_inbound = [&cut, port = ports[1]](const PeerAddress& peer) {
        return !cut.load() || peer.port != port;
      };
    }
    auto node = Node::Start(std::move(o));
    ASSERT_TRUE(node) << node.error().ToString();
    nodes.push_back(std::move(*node));
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(nodes[1]->stats().rounds, 0u) << "node 1 kept dialling";
  EXPECT_EQ(nodes[0]->stats().sessions_ok + nodes[1]->stats().sessions_ok, 0u);
  EXPECT_NE(nodes[0]->host().network(), nodes[1]->host().network());
  cut = false;
  EXPECT_TRUE(Eventually([&] { return nodes[0]->host().network() == nodes[1]->host().network(); }));
  for (auto& n : nodes) n->Stop();
}

}  // namespace
}  // namespace once::gossip
