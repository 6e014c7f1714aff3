// The session machine without I/O: driven by hand in one thread, it sends
// the bytes, reports and states of the blocking functions over a pipe, and a
// session dropped after any number of frames changes nothing.

#include <gtest/gtest.h>

#include <functional>
#include <mutex>

#include "harness.h"
#include "wire.h"

namespace once::gossip {
namespace {

using testing::MachineRun;
using testing::MakeUniverse;
using testing::Payload;
using testing::RunMachines;
using Outcome = SessionReport::Outcome;

struct Pair {
  std::unique_ptr<Host> a;  // the initiator
  std::unique_ptr<Host> b;
};

// A session to run: how to build the two hosts (deterministically, so that
// two copies can be built), the mode, the options, and how many frames at
// the end of the session follow the commit (the retirement's donation and
// ack).
struct Scenario {
  std::string name;
  std::function<Pair()> make;
  Mode mode = Mode::kSync;
  SessionOptions options;
  size_t frames_after_commit = 0;
};

Pair FromUniverse(uint64_t seed, const std::function<void(Host&, Host&)>& fill) {
  SeededRng rng(seed);
  auto hosts = MakeUniverse(rng, 2);
  fill(*hosts[0], *hosts[1]);
  return Pair{std::move(hosts[0]), std::move(hosts[1])};
}

void SendSome(Host& host, int count, const std::string& tag) {
  for (int i = 0; i < count; ++i) ASSERT_TRUE(host.Send(Payload(tag + std::to_string(i))));
}

// Both hold a common past, then each redacts some of it and sends more.
void Diverge(Host& a, Host& b) {
  std::vector<itc::Version> vs;
  for (int i = 0; i < 600; ++i) vs.push_back(*(i % 2 ? a : b).Send(Payload(std::to_string(i))));
  auto [sa, sb] = MakePipe();
  std::thread peer(
      [&, &sb = sb] { (void)Respond(*sb, b, {}, DeadlineIn(std::chrono::seconds(20))); });
  ASSERT_TRUE(Initiate(*sa, a, Mode::kSync, {}, DeadlineIn(std::chrono::seconds(20))));
  peer.join();
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(a.Redact(vs[7 * i]));
    ASSERT_TRUE(b.Redact(vs[7 * i + 3]));
  }
  SendSome(a, 40, "a");
  SendSome(b, 30, "b");
}

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> out;
  out.push_back({"converged", [] { return FromUniverse(41, [](Host&, Host&) {}); }});
  out.push_back({"transfer", [] {
                   return FromUniverse(42, [](Host& a, Host& b) {
                     SendSome(a, 30, "a");
                     SendSome(b, 20, "b");
                   });
                 }});
  out.push_back({"diverged", [] { return FromUniverse(43, Diverge); }});
  Scenario small{"small frames", [] {
                   return FromUniverse(44, [](Host& a, Host&) {
                     for (int i = 0; i < 12; ++i) ASSERT_TRUE(a.Send(Bytes(60 << 10, 'p')));
                   });
                 }};
  small.options.frame_bytes_max = kFrameBytesMin;
  out.push_back(small);
  out.push_back({"retire",
                 [] {
                   return FromUniverse(45, [](Host& a, Host& b) {
                     SendSome(a, 10, "last");
                     SendSome(b, 5, "b");
                   });
                 },
                 Mode::kRetire,
                 {},
                 2});
  out.push_back({"retire converged",
                 [] { return FromUniverse(46, [](Host&, Host&) {}); },
                 Mode::kRetire,
                 {},
                 2});
  out.push_back({"bootstrap",
                 [] {
                   SeededRng rng(47);
                   auto newcomer = std::make_unique<Host>(Replica::Seed(rng));
                   auto sponsor = std::make_unique<Host>(Replica::Seed(rng));
                   EXPECT_TRUE(newcomer->Send(Payload("lost")));
                   std::vector<itc::Version> vs;
                   for (int i = 0; i < 40; ++i) vs.push_back(*sponsor->Send(Payload("s")));
                   EXPECT_TRUE(sponsor->Redact(vs[5]));
                   return Pair{std::move(newcomer), std::move(sponsor)};
                 },
                 Mode::kBootstrap});
  // Another universe that wins (min_ticks 1 beats 0), and one that loses.
  for (const bool initiator_wins : {false, true}) {
    out.push_back({initiator_wins ? "mismatch, local wins" : "mismatch, peer wins", [=] {
                     SeededRng rng(48);
                     auto a = std::make_unique<Host>(Replica::Seed(rng));
                     auto b = std::make_unique<Host>(Replica::Seed(rng));
                     EXPECT_TRUE((initiator_wins ? *a : *b).Send(Payload("one")));
                     return Pair{std::move(a), std::move(b)};
                   }});
  }
  return out;
}

// A stream that keeps a copy of every write.
class Recording final : public Stream {
 public:
  Recording(Stream& inner, std::vector<Bytes>& log) : inner_(inner), log_(log) {}
  Status Read(std::span<uint8_t> out, Deadline deadline) override {
    return inner_.Read(out, deadline);
  }
  Status Write(std::span<const uint8_t> bytes, Deadline deadline) override {
    log_.emplace_back(bytes.begin(), bytes.end());
    return inner_.Write(bytes, deadline);
  }
  void Close() override { inner_.Close(); }

 private:
  Stream& inner_;
  std::vector<Bytes>& log_;
};

// The blocking functions over a pipe, recording the frames each way.
MachineRun RunBlocking(Host& a, Host& b, Mode mode, const SessionOptions& options) {
  auto [sa, sb] = MakePipe();
  MachineRun out;
  Recording ra(*sa, out.a_to_b), rb(*sb, out.b_to_a);
  std::thread responder([&, &sb = sb] {
    out.responder = Respond(rb, b, options, DeadlineIn(std::chrono::seconds(20)));
    if (!out.responder) sb->Close();
  });
  out.initiator = Initiate(ra, a, mode, options, DeadlineIn(std::chrono::seconds(20)));
  if (!out.initiator) sa->Close();
  responder.join();
  out.frames = out.a_to_b.size() + out.b_to_a.size();
  return out;
}

void ExpectSameResult(const Result<SessionReport>& x, const Result<SessionReport>& y) {
  ASSERT_EQ(x.has_value(), y.has_value());
  if (!x) {
    EXPECT_EQ(x.error().code, y.error().code);
    EXPECT_EQ(x.error().message, y.error().message);
    return;
  }
  EXPECT_EQ(x->outcome, y->outcome);
  EXPECT_EQ(x->peer_network, y->peer_network);
  EXPECT_EQ(x->sent, y->sent);
  EXPECT_EQ(x->received, y->received);
  EXPECT_EQ(x->deleted, y->deleted);
  EXPECT_EQ(x->frames, y->frames);
  EXPECT_EQ(x->bytes, y->bytes);
}

Bytes PartyOf(const Host& host) {
  return host.Read([](const Replica& r) { return r.party() ? r.party()->Encode() : Bytes{}; });
}

void ExpectSameHost(const Host& x, const Host& y) {
  EXPECT_TRUE(SameState(x.Snap(), y.Snap()));
  EXPECT_EQ(PartyOf(x), PartyOf(y));
}

TEST(MachineTest, SameBytesReportsAndStatesAsTheBlockingFunctions) {
  for (const Scenario& s : Scenarios()) {
    SCOPED_TRACE(s.name);
    Pair blocking = s.make(), by_hand = s.make();
    ASSERT_TRUE(SameState(blocking.a->Snap(), by_hand.a->Snap()));
    const MachineRun want = RunBlocking(*blocking.a, *blocking.b, s.mode, s.options);
    const MachineRun got = RunMachines(*by_hand.a, *by_hand.b, s.mode, s.options);
    ASSERT_TRUE(want.initiator) << want.initiator.error().ToString();
    ASSERT_TRUE(want.responder) << want.responder.error().ToString();
    ExpectSameResult(got.initiator, want.initiator);
    ExpectSameResult(got.responder, want.responder);
    EXPECT_EQ(got.a_to_b, want.a_to_b);
    EXPECT_EQ(got.b_to_a, want.b_to_a);
    EXPECT_EQ(got.frames, got.initiator->frames);
    ExpectSameHost(*by_hand.a, *blocking.a);
    ExpectSameHost(*by_hand.b, *blocking.b);
  }
}

TEST(MachineTest, OutcomesOfEveryScenario) {
  const std::vector<std::pair<Outcome, Outcome>> expected = {
      {Outcome::kConverged, Outcome::kConverged},  {Outcome::kSynced, Outcome::kSynced},
      {Outcome::kSynced, Outcome::kSynced},        {Outcome::kSynced, Outcome::kSynced},
      {Outcome::kRetired, Outcome::kTookDonation}, {Outcome::kRetired, Outcome::kTookDonation},
      {Outcome::kBootstrapped, Outcome::kGranted}, {Outcome::kPeerWins, Outcome::kLocalWins},
      {Outcome::kLocalWins, Outcome::kPeerWins},
  };
  const auto scenarios = Scenarios();
  ASSERT_EQ(scenarios.size(), expected.size());
  for (size_t i = 0; i < scenarios.size(); ++i) {
    SCOPED_TRACE(scenarios[i].name);
    Pair p = scenarios[i].make();
    const Snapshot a0 = p.a->Snap(), b0 = p.b->Snap();
    const MachineRun run = RunMachines(*p.a, *p.b, scenarios[i].mode, scenarios[i].options);
    ASSERT_TRUE(run.initiator) << run.initiator.error().ToString();
    ASSERT_TRUE(run.responder) << run.responder.error().ToString();
    EXPECT_EQ(run.initiator->outcome, expected[i].first);
    EXPECT_EQ(run.responder->outcome, expected[i].second);
    if (scenarios[i].mode == Mode::kBootstrap) {
      EXPECT_TRUE(SameState(p.a->Snap(), b0));
    } else if (run.initiator->outcome != Outcome::kLocalWins &&
               run.initiator->outcome != Outcome::kPeerWins) {
      EXPECT_TRUE(SameState(p.a->Snap(), Merge(a0, b0)));
      EXPECT_TRUE(SameState(p.b->Snap(), Merge(a0, b0)));
    }
  }
}

// A cut link: after k frames, neither machine sees another. Until the last
// frame before the commit has moved, both replicas are exactly as they were
// (messages, ceiling, network, party); after it, both hold the join.
TEST(MachineTest, DroppedAfterAnyNumberOfFramesChangesNothing) {
  for (const Scenario& s : Scenarios()) {
    SCOPED_TRACE(s.name);
    Pair whole = s.make();
    const size_t total = RunMachines(*whole.a, *whole.b, s.mode, s.options).frames;
    ASSERT_GE(total, 2u);
    for (size_t k = 0; k < total; ++k) {
      SCOPED_TRACE(k);
      Pair p = s.make();
      const Snapshot a0 = p.a->Snap(), b0 = p.b->Snap();
      const Bytes party_a = PartyOf(*p.a), party_b = PartyOf(*p.b);
      const MachineRun run = RunMachines(*p.a, *p.b, s.mode, s.options, k);
      EXPECT_FALSE(run.initiator && run.responder);
      if (k < total - s.frames_after_commit) {
        EXPECT_TRUE(SameState(p.a->Snap(), a0));
        EXPECT_TRUE(SameState(p.b->Snap(), b0));
        EXPECT_EQ(PartyOf(*p.a), party_a);
        // A grant leaves with the sponsor's first frame (a lost one leaks).
        if (s.mode != Mode::kBootstrap) {
          EXPECT_EQ(PartyOf(*p.b), party_b);
        }
      } else {
        EXPECT_TRUE(SameState(p.a->Snap(), Merge(a0, b0)));
        EXPECT_TRUE(SameState(p.b->Snap(), Merge(a0, b0)));
      }
    }
  }
}

// Local sends between any two frames (one thread, as in a simulator) survive
// the session, and the rest equals the join of the starting states.
TEST(MachineTest, LocalSendsBetweenFramesSurvive) {
  Pair p = FromUniverse(49, Diverge);
  const Snapshot joined = Merge(p.a->Snap(), p.b->Snap());
  std::vector<itc::Version> during[2];
  int turn = 0;
  const MachineRun run = RunMachines(*p.a, *p.b, Mode::kSync, {}, SIZE_MAX, [&] {
    const int side = ++turn % 2;
    Host& host = side == 0 ? *p.a : *p.b;
    during[side].push_back(*host.Send(Payload("during " + std::to_string(turn))));
  });
  ASSERT_TRUE(run.initiator) << run.initiator.error().ToString();
  ASSERT_TRUE(run.responder) << run.responder.error().ToString();
  ASSERT_GE(run.frames, 4u);
  for (int side = 0; side < 2; ++side) {
    const Snapshot now = (side == 0 ? *p.a : *p.b).Snap();
    for (const itc::Version& v : during[side]) EXPECT_TRUE(now.Find(PathOf(v)));
    EXPECT_EQ(now.size(), joined.size() + during[side].size());
    for (const Message& m : joined.Messages()) EXPECT_TRUE(now.Find(m.path));
  }
}

TEST(MachineTest, AFrameOutOfTurnOrOfTheWrongLengthFailsAndChangesNothing) {
  Pair p = FromUniverse(50, [](Host& a, Host& b) {
    SendSome(a, 5, "a");
    SendSome(b, 5, "b");
  });
  const Snapshot a0 = p.a->Snap(), b0 = p.b->Snap();
  auto a = SessionMachine::Initiate(*p.a, Mode::kSync, {});
  auto b = SessionMachine::Respond(*p.b, {});
  ASSERT_TRUE(a && b);
  std::vector<Bytes> hello = a->TakeOutgoing();
  ASSERT_EQ(hello.size(), 1u);
  ASSERT_TRUE(b->OnFrame(hello[0]));
  // The responder's reply is queued, not taken: a frame now is out of turn.
  Status early = b->OnFrame(hello[0]);
  ASSERT_FALSE(early);
  EXPECT_EQ(early.error().code, ErrorCode::kCorruption);
  EXPECT_TRUE(b->finished());
  EXPECT_FALSE(b->done());
  EXPECT_EQ(b->OnWritten().error().message, early.error().message);  // the same error again
  // A frame whose header announces another size.
  ASSERT_TRUE(a->OnWritten());
  Bytes reply = hello[0];
  reply.push_back(0);
  Status bad = a->OnFrame(reply);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(SameState(p.a->Snap(), a0));
  EXPECT_TRUE(SameState(p.b->Snap(), b0));
}

TEST(MachineTest, TheHeaderIsCheckedBeforeTheBody) {
  Pair p = FromUniverse(51, [](Host&, Host&) {});
  SessionOptions options;
  options.session_frames_max = 1;
  auto b = SessionMachine::Respond(*p.b, options);
  ASSERT_TRUE(b);
  const uint32_t big = kFrameBytesMax + 1;
  const std::array<uint8_t, 4> over = {static_cast<uint8_t>(big >> 24),
                                       static_cast<uint8_t>(big >> 16),
                                       static_cast<uint8_t>(big >> 8), static_cast<uint8_t>(big)};
  auto size = b->BodyBytes(over);
  ASSERT_FALSE(size);
  ASSERT_NE(size.error().As<LimitDetail>(), nullptr);
  EXPECT_EQ(size.error().As<LimitDetail>()->limit, "frame_bytes_max");
  EXPECT_EQ(*b->BodyBytes(std::array<uint8_t, 4>{0, 0, 1, 0}), 256u);
  // The greeting is the one frame allowed: its reply would be the second.
  auto a = SessionMachine::Initiate(*p.a, Mode::kSync, {});
  ASSERT_TRUE(a);
  Status replied = b->OnFrame(a->TakeOutgoing().at(0));
  ASSERT_FALSE(replied);
  ASSERT_NE(replied.error().As<LimitDetail>(), nullptr);
  EXPECT_EQ(replied.error().As<LimitDetail>()->limit, "session_frames_max");
  EXPECT_TRUE(b->finished());
  EXPECT_TRUE(b->TakeOutgoing().empty());
}

// A data frame with every lacking listing passed through `tamper` (decoded,
// changed, encoded again); any other frame as it was.
Bytes Tampered(const Bytes& frame, const std::function<void(wire::Record&)>& tamper) {
  auto decoded = wire::Decode(std::span(frame).subspan(wire::kFrameHeaderBytes));
  EXPECT_TRUE(decoded);
  if (!decoded || decoded->kind != wire::Kind::kData) return frame;
  wire::FrameBuilder fb(wire::Kind::kData, kFrameBytesMax);
  for (wire::Record& rec : decoded->data.records) {
    if (rec.lacking) tamper(rec);
    EXPECT_TRUE(fb.AddRecord(rec));
  }
  for (const auto& leaf : decoded->data.messages) EXPECT_TRUE(fb.AddMessage(*leaf));
  return fb.Finish(decoded->data.idle);
}

// Runs a session on this thread, every data frame both ways through
// `tamper`, until a side fails (its error) or both are done.
Status RunTampered(Host& a, Host& b, const std::function<void(wire::Record&)>& tamper) {
  ONCE_ASSIGN_OR_RETURN(SessionMachine ma, SessionMachine::Initiate(a, Mode::kSync, {}));
  ONCE_ASSIGN_OR_RETURN(SessionMachine mb, SessionMachine::Respond(b, {}));
  for (int round = 0; round < 100 && (!ma.done() || !mb.done()); ++round) {
    for (const Bytes& f : ma.TakeOutgoing()) ONCE_RETURN_IF_ERROR(mb.OnFrame(Tampered(f, tamper)));
    ONCE_RETURN_IF_ERROR(ma.OnWritten());
    for (const Bytes& f : mb.TakeOutgoing()) ONCE_RETURN_IF_ERROR(ma.OnFrame(Tampered(f, tamper)));
    ONCE_RETURN_IF_ERROR(mb.OnWritten());
  }
  EXPECT_TRUE(ma.done() && mb.done());
  return Ok();
}

// One side lists its disputed nodes and the other answers each with the
// fingerprints it lacks. An answer that names a leaf the listing did not
// name, or one leaf twice, is hostile: the lister fails, and neither side
// changes. Under 40 messages the nodes listed are parts of one bucket (the
// responder lists them); under 1,120, mostly first-level branches that split
// and shrank (their buckets' runs gathered); under 3,000, whole
// buckets (the initiator lists them).
TEST(MachineTest, ALackingListingOfLeavesNotListedFailsAndChangesNothing) {
  struct Size {
    int common;
    int redacted;  // on each side, spread out
  };
  for (const Size& size : {Size{40, 2}, Size{1120, 160}, Size{3000, 150}}) {
    // Named copies, not a structured binding: clang 14 captures no binding.
    const int common = size.common;
    const int redacted = size.redacted;
    SCOPED_TRACE(common);
    auto make = [common, redacted] {
      return FromUniverse(60, [common, redacted](Host& a, Host& b) {
        std::vector<itc::Version> vs;
        for (int i = 0; i < common; ++i) vs.push_back(*a.Send(Payload(std::to_string(i))));
        auto [sa, sb] = MakePipe();
        std::thread peer(
            [&, &sb = sb] { (void)Respond(*sb, b, {}, DeadlineIn(std::chrono::seconds(20))); });
        ASSERT_TRUE(Initiate(*sa, a, Mode::kSync, {}, DeadlineIn(std::chrono::seconds(20))));
        peer.join();
        // Spread out, so that most listed nodes hold a leaf one side lacks.
        const int stride = common / redacted;
        for (int i = 0; i < redacted; ++i) {
          ASSERT_TRUE(a.Redact(vs[stride * i]));
          ASSERT_TRUE(b.Redact(vs[stride * i + stride / 2]));
        }
      });
    };
    // Untampered (the control): the session settles, and the initiator did
    // answer with lacking fingerprints.
    {
      Pair p = make();
      size_t lacked = 0;
      ASSERT_TRUE(
          RunTampered(*p.a, *p.b, [&](wire::Record& rec) { lacked += rec.fingerprints.size(); }));
      EXPECT_GT(lacked, 0u);
      EXPECT_TRUE(SameState(p.a->Snap(), p.b->Snap()));
      EXPECT_EQ(p.b->Snap().size(), static_cast<uint64_t>(common - 2 * redacted));
    }
    const std::function<void(wire::Record&)> tampers[] = {
        // One more fingerprint, after the last (the listing's order kept).
        [](wire::Record& rec) {
          if (!rec.fingerprints.empty()) rec.fingerprints.push_back(rec.fingerprints.back() + 1);
        },
        // The last fingerprint twice.
        [](wire::Record& rec) {
          if (!rec.fingerprints.empty()) rec.fingerprints.push_back(rec.fingerprints.back());
        },
    };
    for (const auto& tamper : tampers) {
      Pair p = make();
      const Snapshot a0 = p.a->Snap(), b0 = p.b->Snap();
      Status s = RunTampered(*p.a, *p.b, tamper);
      ASSERT_FALSE(s);
      EXPECT_EQ(s.error().code, ErrorCode::kCorruption);
      EXPECT_NE(s.error().message.find("did not list"), std::string::npos) << s.error().message;
      EXPECT_TRUE(SameState(p.a->Snap(), a0));
      EXPECT_TRUE(SameState(p.b->Snap(), b0));
    }
    if (common != 1120) continue;
    // The same lie about a first-level node only where it is a branch on the
    // lister's side (the responder's), whose listed leaves were gathered.
    Pair p = make();
    const Snapshot a0 = p.a->Snap(), b0 = p.b->Snap();
    size_t told = 0;
    Status s = RunTampered(*p.a, *p.b, [&](wire::Record& rec) {
      const internal::View node = internal::View::Of(b0.root()).Child(0, rec.key.prefix[0] >> 4);
      if (rec.key.depth != 1 || node.bucket() || rec.fingerprints.empty()) return;
      rec.fingerprints.push_back(rec.fingerprints.back() + 1);
      ++told;
    });
    ASSERT_GT(told, 0u);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, ErrorCode::kCorruption);
    EXPECT_NE(s.error().message.find("did not list"), std::string::npos) << s.error().message;
    EXPECT_TRUE(SameState(p.a->Snap(), a0));
    EXPECT_TRUE(SameState(p.b->Snap(), b0));
  }
}

}  // namespace
}  // namespace once::gossip
