// 32 gossip-node processes on loopback TCP: a cold start of 32 universes
// converges on one; a message reaches all 32 within 7 gossip rounds (median
// over 20 trials); a replaced node reclaims its identity and re-converges; a
// staggered start joins the established universe.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "once/base/hex.h"
#include "once/gossip/stream.h"
#include "once/itc/party.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kNodes = 32;
constexpr auto kInterval = 100ms;

// What all children report, shared with their reader threads.
struct Board {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::map<int, int64_t>> received;  // path -> node -> ns
  std::map<int, std::string> status;                       // node -> last status line
  std::map<int, std::deque<std::string>> replies;          // node -> "sent ..." lines

  template <class Pred>
  bool WaitFor(std::chrono::milliseconds timeout, Pred pred) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, pred);
  }
};

class Child {
 public:
  Child(int index, uint16_t port, const std::vector<uint16_t>& ports, const std::string& dir,
        Board& board)
      : index_(index), board_(board) {
    std::string peers;
    for (uint16_t p : ports) {
      if (p == port) continue;
      if (!peers.empty()) peers += ",";
      peers += std::to_string(p);
    }
    const std::vector<std::string> args = {GOSSIP_NODE_BINARY,
                                           "--port",
                                           std::to_string(port),
                                           "--peers",
                                           peers,
                                           "--interval-ms",
                                           std::to_string(kInterval.count()),
                                           "--session-timeout-ms",
                                           "2000",
                                           "--bookmark",
                                           dir + "/node" + std::to_string(index) + ".bm"};
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    in_ = in[1];
    out_ = ::fdopen(out[0], "r");
    reader_ = std::thread([this] { ReadLines(); });
  }

  ~Child() { Kill(); }

  // A node that died (SIGPIPE is ignored in this test) fails the test here.
  void Command(const std::string& line) {
    const std::string l = line + "\n";
    EXPECT_EQ(::write(in_, l.data(), l.size()), static_cast<ssize_t>(l.size()))
        << "node " << index_ << " is gone: " << std::strerror(errno);
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    ::close(in_);
    if (reader_.joinable()) reader_.join();
    std::fclose(out_);
  }

 private:
  void ReadLines() {
    char buf[512];
    while (std::fgets(buf, sizeof(buf), out_)) {
      std::istringstream line(buf);
      std::string kind;
      line >> kind;
      std::lock_guard lock(board_.mu);
      if (kind == "recv") {
        std::string path;
        int64_t ns = 0;
        line >> path >> ns;
        board_.received[path].emplace(index_, ns);
      } else if (kind == "status") {
        board_.status[index_] = buf;
      } else if (kind == "sent") {
        std::string path;
        line >> path;
        board_.replies[index_].push_back(path);
      }
      board_.cv.notify_all();
    }
  }

  int index_;
  Board& board_;
  pid_t pid_ = -1;
  int in_ = -1;
  FILE* out_ = nullptr;
  std::thread reader_;
};

// Ports for the nodes to listen on, free when chosen. They come from below
// the kernel's ephemeral range (32768 and up on Linux by default): port 0
// would hand out ports that the nodes' own outgoing connections, and other
// tests running alongside, also draw from between this choice and the
// node's bind ("Address already in use", seen under ctest -j2).
std::vector<uint16_t> FreePorts(int count) {
  constexpr uint16_t kLow = 20000, kHigh = 32000;  // [kLow, kHigh)
  std::vector<std::unique_ptr<once::gossip::TcpListener>> held;
  std::vector<uint16_t> ports;
  uint16_t next = static_cast<uint16_t>(kLow + (::getpid() * 97) % (kHigh - kLow));
  for (int tries = 0; static_cast<int>(ports.size()) < count && tries < kHigh - kLow; ++tries) {
    next = next + 1 >= kHigh ? kLow : next + 1;
    auto l = once::gossip::TcpListener::Listen(next);
    if (!l) continue;
    ports.push_back(next);
    held.push_back(std::move(*l));
  }
  EXPECT_EQ(static_cast<int>(ports.size()), count);
  return ports;
}

class Cluster {
 public:
  explicit Cluster(const std::string& name) {
    ::signal(SIGPIPE, SIG_IGN);  // a dead node is reported by Command, not by a signal
    dir_ = std::filesystem::temp_directory_path() /
           ("gossip-cluster-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ports_ = FreePorts(kNodes);
    children_.resize(kNodes);
  }
  ~Cluster() {
    for (auto& c : children_) c.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start(int i) { children_[i] = std::make_unique<Child>(i, ports_[i], ports_, dir_, board_); }
  void Kill(int i) { children_[i].reset(); }

  // The network of node i ("" if unknown), after asking everyone for status.
  std::map<int, std::string> Networks(const std::vector<int>& nodes) {
    {
      std::lock_guard lock(board_.mu);
      board_.status.clear();
    }
    for (int i : nodes) children_[i]->Command("status");
    board_.WaitFor(2s, [&] { return board_.status.size() >= nodes.size(); });
    std::map<int, std::string> out;
    std::lock_guard lock(board_.mu);
    for (auto& [i, line] : board_.status) {
      std::istringstream in(line);
      std::string kind, network;
      in >> kind >> network;
      out[i] = network;
    }
    return out;
  }

  // Every node's party, decoded from its status line.
  std::vector<once::itc::Party> Parties() {
    Networks(Range(0, kNodes));
    std::vector<once::itc::Party> out;
    std::lock_guard lock(board_.mu);
    for (auto& [i, line] : board_.status) {
      std::istringstream in(line);
      std::string kind, network, party;
      uint64_t skip = 0;
      in >> kind >> network >> skip >> skip >> skip >> skip >> party;
      auto bytes = once::HexDecode(party);
      EXPECT_TRUE(bytes) << line;
      if (!bytes) continue;
      auto decoded = once::itc::Party::Decode(*bytes);
      EXPECT_TRUE(decoded) << line;
      if (decoded) out.push_back(std::move(*decoded));
    }
    return out;
  }

  std::string StatusOf(int i) {
    Networks({i});
    std::lock_guard lock(board_.mu);
    return board_.status[i];
  }

  // Waits until all `nodes` report one network; returns it ("" on timeout).
  std::string Converge(const std::vector<int>& nodes, std::chrono::seconds timeout) {
    const auto end = Clock::now() + timeout;
    while (Clock::now() < end) {
      auto networks = Networks(nodes);
      std::set<std::string> distinct;
      for (auto& [i, n] : networks) distinct.insert(n);
      if (networks.size() == nodes.size() && distinct.size() == 1) return *distinct.begin();
      std::this_thread::sleep_for(200ms);
    }
    return "";
  }

  std::string Send(int i, const std::string& text) {
    children_[i]->Command("send " + text);
    std::string path;
    board_.WaitFor(5s, [&] {
      auto& q = board_.replies[i];
      if (q.empty()) return false;
      path = q.front();
      q.pop_front();
      return true;
    });
    return path;
  }

  // Rounds from the sender observing `path` until all `nodes` observed it;
  // -1 on timeout.
  double RoundsToReach(const std::string& path, int sender, const std::vector<int>& nodes,
                       std::chrono::seconds timeout) {
    const bool all = board_.WaitFor(timeout, [&] {
      auto it = board_.received.find(path);
      if (it == board_.received.end()) return false;
      for (int i : nodes) {
        if (!it->second.count(i)) return false;
      }
      return true;
    });
    if (!all) return -1;
    std::lock_guard lock(board_.mu);
    const auto& seen = board_.received[path];
    int64_t last = 0;
    for (int i : nodes) last = std::max(last, seen.at(i));
    return static_cast<double>(last - seen.at(sender)) /
           std::chrono::duration_cast<std::chrono::nanoseconds>(kInterval).count();
  }

  static std::vector<int> Range(int from, int to) {
    std::vector<int> out;
    for (int i = from; i < to; ++i) out.push_back(i);
    return out;
  }

 private:
  std::string dir_;
  std::vector<uint16_t> ports_;
  Board board_;
  std::vector<std::unique_ptr<Child>> children_;
};

TEST(GossipClusterTest, ColdStartSpreadAndAReplacedNode) {
  Cluster cluster("cold");
  const auto all = Cluster::Range(0, kNodes);
  for (int i : all) cluster.Start(i);
  const auto t0 = Clock::now();
  const std::string network = cluster.Converge(all, 30s);
  ASSERT_FALSE(network.empty()) << "32 universes did not converge";
  std::printf("cold start: 32 universes -> one in %.2f s\n",
              std::chrono::duration<double>(Clock::now() - t0).count());

  // Every bootstrap forked a member's party: identities stayed disjoint.
  const auto parties = cluster.Parties();
  ASSERT_EQ(parties.size(), static_cast<size_t>(kNodes));
  for (size_t i = 0; i < parties.size(); ++i) {
    for (size_t j = i + 1; j < parties.size(); ++j) {
      EXPECT_TRUE(Disjoint(parties[i], parties[j])) << i << " and " << j << " overlap";
    }
  }

  std::vector<double> rounds;
  for (int trial = 0; trial < 20; ++trial) {
    const int sender = (trial * 7) % kNodes;
    const std::string path = cluster.Send(sender, "trial-" + std::to_string(trial));
    ASSERT_FALSE(path.empty());
    const double r = cluster.RoundsToReach(path, sender, all, 10s);
    ASSERT_GE(r, 0) << "message " << trial << " did not reach all 32";
    rounds.push_back(r);
  }
  std::vector<double> sorted = rounds;
  std::sort(sorted.begin(), sorted.end());
  const double median = (sorted[9] + sorted[10]) / 2;
  std::printf("rounds to reach 32 nodes (interval %lld ms): median %.2f, min %.2f, max %.2f\n",
              static_cast<long long>(kInterval.count()), median, sorted.front(), sorted.back());
  EXPECT_LE(median, 7.0);
  EXPECT_EQ(cluster.Converge(all, 5s), network);

  // Replace node 5: killed, restarted on its port with its bookmark.
  cluster.Kill(5);
  std::this_thread::sleep_for(3 * kInterval);
  cluster.Start(5);
  EXPECT_EQ(cluster.Converge(all, 10s), network) << "the replaced node left the universe";
  const std::string status = cluster.StatusOf(5);
  std::istringstream in(status);
  std::string kind, net;
  uint64_t size = 0, min_ticks = 0, node_rounds = 0, bootstraps = 0;
  in >> kind >> net >> size >> min_ticks >> node_rounds >> bootstraps;
  EXPECT_EQ(bootstraps, 0u) << "the replaced node should reclaim, not bootstrap: " << status;
  const std::string path = cluster.Send(5, "after-restart");
  EXPECT_GE(cluster.RoundsToReach(path, 5, all, 10s), 0) << "the replaced node's message";
}

TEST(GossipClusterTest, StaggeredStartJoinsTheEstablishedUniverse) {
  Cluster cluster("staggered");
  const auto first = Cluster::Range(0, kNodes / 2);
  for (int i : first) cluster.Start(i);
  const std::string network = cluster.Converge(first, 30s);
  ASSERT_FALSE(network.empty());
  const std::string path = cluster.Send(0, "before-the-others");
  ASSERT_GE(cluster.RoundsToReach(path, 0, first, 10s), 0);
  for (int i = kNodes / 2; i < kNodes; ++i) cluster.Start(i);
  const auto all = Cluster::Range(0, kNodes);
  EXPECT_EQ(cluster.Converge(all, 30s), network) << "late nodes must lose on min_ticks";
  EXPECT_GE(cluster.RoundsToReach(path, 0, all, 10s), 0);
}

}  // namespace
