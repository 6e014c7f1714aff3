// Local sends on many threads while sessions run (issue 17): every session's
// result is the in-memory join of what each side held at its start, plus the
// sends made meanwhile, and no snapshot changes under its reader. Under
// ThreadSanitizer (scripts/test --tsan) this is also the test of the digest
// tree's sharing rule: a send may change a node in place only when no
// snapshot can reach it, and only after whoever held it last is done with it.

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "digest_tree.h"
#include "harness.h"

namespace once::gossip {
namespace {

using testing::MakeUniverse;
using testing::Payload;

// Threads that send to random hosts, a few every 20 us and at most
// kSendsPerResume between a Resume and the next Pause (so that the sets stay
// small); Pause waits until none is inside a Send. They remember what they
// sent to which host.
class Senders {
 public:
  Senders(std::vector<std::unique_ptr<Host>>& hosts, int threads) : hosts_(hosts) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { Loop(t); });
  }
  ~Senders() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      paused_ = false;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void Pause() {
    std::unique_lock lock(mu_);
    paused_ = true;
    cv_.wait(lock, [&] { return active_ == 0; });
  }
  void Resume() {
    {
      std::lock_guard lock(mu_);
      paused_ = false;
      budget_ = kSendsPerResume;
    }
    cv_.notify_all();
  }
  // What was sent to `host` since the last call (while paused).
  std::vector<itc::Version> TakeSent(size_t host) {
    std::lock_guard lock(mu_);
    return std::exchange(sent_[host], {});
  }

 private:
  void Loop(int t) {
    SeededRng rng(1000 + t);
    for (uint64_t i = 0;; ++i) {
      const size_t host = rng.Below(hosts_.size());
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return (!paused_ && budget_ > 0) || stop_; });
        if (stop_) return;
        ++active_;
        --budget_;
      }
      auto v = hosts_[host]->Send(Payload("t" + std::to_string(t) + "-" + std::to_string(i)));
      {
        std::lock_guard lock(mu_);
        if (v) sent_[host].push_back(std::move(*v));
        --active_;
      }
      cv_.notify_all();
      if (!v) ADD_FAILURE() << v.error().ToString();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  static constexpr int kSendsPerResume = 100;
  std::vector<std::unique_ptr<Host>>& hosts_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool paused_ = false;
  bool stop_ = false;
  int active_ = 0;
  int budget_ = kSendsPerResume;
  std::map<size_t, std::vector<itc::Version>> sent_;
  std::vector<std::thread> threads_;
};

// Every node's summary is the XOR and count of its leaves, and the floor
// and ceiling of every node above a leaf bound its version.
bool Consistent(const internal::Inner& node, std::vector<const internal::Inner*>& above,
                Summary& out) {
  out = Summary{};
  if (node.size() > node.capacity) return false;
  above.push_back(&node);
  bool ok = true;
  if (node.bucket) {
    for (const internal::Entry& e : node.entries()) {
      if (!e.leaf || e.leaf->path != e.path) ok = false;
      for (const internal::Inner* n : above) {
        if (n->summary.count > 0 &&
            (!itc::Leq(n->floor(), e.leaf->version) || !itc::Leq(e.leaf->version, n->ceiling()))) {
          ok = false;
        }
      }
      internal::XorInto(out.digest, e.path);
      ++out.count;
    }
  } else {
    for (const internal::NodeRef& child : node.children()) {
      Summary part;
      if (!child || !Consistent(*child, above, part)) ok = false;
      internal::XorInto(out.digest, part.digest);
      out.count += part.count;
    }
  }
  above.pop_back();
  return ok && out == node.summary;
}

bool Consistent(const Snapshot& snapshot, Summary& out) {
  std::vector<const internal::Inner*> above;
  return Consistent(*snapshot.root(), above, out);
}

// A snapshot as it was: its messages, copied out, and its summary.
struct Frozen {
  Snapshot snapshot;
  std::vector<Message> messages;
  explicit Frozen(Snapshot s) : snapshot(std::move(s)), messages(snapshot.Messages()) {}
  bool Unchanged() const {
    Summary total;
    return snapshot.Messages() == messages && Consistent(snapshot, total) &&
           total == snapshot.summary();
  }
};

// What a replica held: its paths and its ceiling, copied out (a snapshot kept
// would share the tree's nodes, which the test must let go).
struct Held {
  std::set<Path> paths;
  itc::Version ceiling;
  explicit Held(const Snapshot& s) : ceiling(s.ceiling()) {
    for (const Message& m : s.Messages()) paths.insert(m.path);
  }
};

// `now` is `base` with `sent` added: the messages and the ceiling.
::testing::AssertionResult IsWithSends(const Snapshot& now, const Held& base,
                                       const std::vector<itc::Version>& sent) {
  Held want = base;
  for (const itc::Version& v : sent) {
    want.paths.insert(PathOf(v));
    want.ceiling = itc::Join(want.ceiling, v);
  }
  const Held held(now);
  if (held.paths != want.paths) {
    return ::testing::AssertionFailure() << "messages differ: " << held.paths.size() << " held, "
                                         << want.paths.size() << " expected";
  }
  if (held.ceiling != want.ceiling) return ::testing::AssertionFailure() << "ceilings differ";
  return ::testing::AssertionSuccess();
}

// One session between hosts[i] and hosts[j], frames moved by hand in this
// thread, while the senders run; dropped after `cut` frames unless it is
// SIZE_MAX.
struct Session {
  size_t i, j;
  size_t cut;
  std::optional<Held> a0, b0, joined;  // at the start, and their Merge
  std::optional<SessionMachine> a, b;
  std::optional<Status> a_status, b_status;
  size_t moved = 0;
};

// Moves at most one frame of `s`; false when it has nothing more to move.
bool Step(Session& s) {
  for (int side = 0; side < 2; ++side) {
    SessionMachine& from = side == 0 ? *s.a : *s.b;
    SessionMachine& to = side == 0 ? *s.b : *s.a;
    std::optional<Status>& to_status = side == 0 ? s.b_status : s.a_status;
    std::optional<Status>& from_status = side == 0 ? s.a_status : s.b_status;
    if (s.moved == s.cut) return false;
    std::vector<Bytes> frames = from.TakeOutgoing();
    if (frames.empty()) continue;
    if (!from.finished()) {
      if (Status w = from.OnWritten(); !w) from_status = w;
    }
    for (const Bytes& f : frames) {
      ++s.moved;
      if (!to.finished()) {
        if (Status r = to.OnFrame(f); !r) to_status = r;
      }
    }
    return true;
  }
  return false;
}

TEST(ConcurrencyTest, SessionsUnderConcurrentSendsEqualTheJoinOfTheirStarts) {
  SeededRng rng(71);
  auto hosts = MakeUniverse(rng, 4);
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(hosts[i % 4]->Send(Payload("p" + std::to_string(i))));
  Senders senders(hosts, 4);
  const size_t pairings[3][4] = {{0, 1, 2, 3}, {0, 2, 1, 3}, {0, 3, 1, 2}};
  int completed = 0, dropped = 0;
  for (int round = 0; round < 30; ++round) {
    senders.Pause();
    for (size_t h = 0; h < hosts.size(); ++h) (void)senders.TakeSent(h);
    const size_t* p = pairings[round % 3];
    Session sessions[2] = {{p[0], p[1], SIZE_MAX}, {p[2], p[3], SIZE_MAX}};
    if (round % 4 == 3) sessions[round % 2].cut = rng.Below(6);
    for (Session& s : sessions) {
      const Snapshot a0 = hosts[s.i]->Snap(), b0 = hosts[s.j]->Snap();
      s.a0.emplace(a0);
      s.b0.emplace(b0);
      s.joined.emplace(Merge(a0, b0));
      s.a.emplace(*SessionMachine::Initiate(*hosts[s.i], Mode::kSync, {}));
      s.b.emplace(*SessionMachine::Respond(*hosts[s.j], {}));
      Step(s);  // the greeting: the responder's snapshot is taken too
    }
    senders.Resume();
    // The two sessions' frames interleave, each reading its snapshots (the
    // machines hold the only ones) while the senders change the replicas.
    for (bool more = true; more;) {
      more = false;
      for (Session& s : sessions) more = Step(s) || more;
    }
    bool done[2][2];
    for (int n = 0; n < 2; ++n) {
      done[n][0] = sessions[n].a->done();
      done[n][1] = sessions[n].b->done();
      sessions[n].a.reset();  // a dropped machine releases its snapshot here
      sessions[n].b.reset();
    }
    // The sends go on while the snapshots the sessions read are let go (what
    // they read must stay untouched until then, and be theirs no more after).
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    senders.Pause();
    for (int n = 0; n < 2; ++n) {
      const Session& s = sessions[n];
      SCOPED_TRACE(::testing::Message() << "round " << round << ", " << s.i << "-" << s.j);
      const std::vector<itc::Version> sent_a = senders.TakeSent(s.i);
      const std::vector<itc::Version> sent_b = senders.TakeSent(s.j);
      EXPECT_FALSE(s.a_status || s.b_status);  // no errors, only drops
      if (s.cut == SIZE_MAX) {
        EXPECT_TRUE(done[n][0] && done[n][1]);
      }
      EXPECT_EQ(done[n][0], done[n][1]);  // this driver never cuts between write and read
      EXPECT_TRUE(IsWithSends(hosts[s.i]->Snap(), done[n][0] ? *s.joined : *s.a0, sent_a));
      EXPECT_TRUE(IsWithSends(hosts[s.j]->Snap(), done[n][1] ? *s.joined : *s.b0, sent_b));
      (done[n][0] ? completed : dropped)++;
    }
    senders.Resume();
  }
  EXPECT_EQ(completed + dropped, 60);
  EXPECT_GE(dropped, 3);
  EXPECT_GE(completed, 45);
}

// The same over pipes, with every session on its own thread as in a node:
// blocking sessions between random pairs (some cut) while senders run, then
// quiescence; every replica holds everything sent, and no snapshot taken
// before changed.
TEST(ConcurrencyTest, BlockingSessionsOnManyThreadsUnderConcurrentSends) {
  SeededRng rng(72);
  auto hosts = MakeUniverse(rng, 4);
  std::vector<Frozen> frozen;
  std::vector<itc::Version> all;
  {
    Senders senders(hosts, 3);
    std::vector<std::thread> sessions;
    for (int t = 0; t < 3; ++t) {
      sessions.emplace_back([&hosts, t] {
        SeededRng local(200 + t);
        for (int n = 0; n < 40; ++n) {
          const size_t i = local.Below(hosts.size());
          const size_t j = (i + 1 + local.Below(hosts.size() - 1)) % hosts.size();
          const uint64_t cut = n % 5 == 4 ? local.Below(3000) : UINT64_MAX;
          (void)testing::RunPair(*hosts[i], *hosts[j], Mode::kSync, PipeFaults{cut});
        }
      });
    }
    for (int n = 0; n < 20; ++n) {
      frozen.emplace_back(hosts[n % hosts.size()]->Snap());
      senders.Resume();  // a new budget
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (auto& t : sessions) t.join();
    senders.Pause();
    for (size_t h = 0; h < hosts.size(); ++h) {
      for (auto& v : senders.TakeSent(h)) all.push_back(std::move(v));
    }
  }
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < hosts.size(); ++i) {
      for (size_t j = i + 1; j < hosts.size(); ++j) {
        ASSERT_TRUE(testing::RunPair(*hosts[i], *hosts[j]).initiator);
      }
    }
  }
  for (const Frozen& f : frozen) EXPECT_TRUE(f.Unchanged());
  const Snapshot first = hosts[0]->Snap();
  for (const auto& h : hosts) EXPECT_TRUE(SameState(first, h->Snap()));
  for (const itc::Version& v : all) EXPECT_TRUE(first.Find(PathOf(v)));
  EXPECT_EQ(first.size(), all.size());
}

}  // namespace
}  // namespace once::gossip
