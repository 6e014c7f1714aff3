// Random schedules of sends, redactions, partitions, joins and sessions (some
// cut at random byte offsets) among 2-8 replicas, then gossip to quiescence:
// every replica equals a plain map model, ceilings are equal, parties are
// pairwise disjoint and together still the seed.

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>

#include "harness.h"

namespace once::gossip {
namespace {

using testing::Payload;
using testing::RunPair;

struct Step {
  int kind = 0;  // 0-3 send, 4 redact, 5-7 session, 8 partition, 9 heal, 10 join, 11 burst
  int a = 0;
  int b = 0;
  int cut = 0;  // 0: no cut; otherwise a byte offset
};

itc::Party CopyParty(const itc::Party& p) { return itc::Party::Decode(p.Encode()).value(); }

class World {
 public:
  World(uint64_t seed, int count) : rng_(seed) {
    auto hosts = testing::MakeUniverse(rng_, count);
    for (auto& h : hosts) hosts_.push_back(std::move(h));
    side_.assign(hosts_.size(), 0);
  }

  void Run(const Step& step) {
    const int n = static_cast<int>(hosts_.size());
    const int a = step.a % n, b = step.b % n;
    if (step.kind <= 3) return Send(a);
    if (step.kind == 4) return Redact(a, step.b);
    if (step.kind <= 7) return Session(a, b, step.cut);
    if (step.kind == 8) {
      for (int i = 0; i < n; ++i) side_[i] = (step.b >> (i % 16)) & 1;
      return;
    }
    if (step.kind == 9) return std::fill(side_.begin(), side_.end(), 0);
    if (step.kind == 10 && n < 8) return Join(a);
    if (step.kind == 11) {  // enough sends to split the digest tree's buckets
      for (int i = 0; i < 30; ++i) Send(a);
    }
  }

  // Gossip among all pairs until nothing changes.
  void Quiesce() {
    std::fill(side_.begin(), side_.end(), 0);
    for (int pass = 0; pass < 4; ++pass) {
      for (size_t i = 0; i < hosts_.size(); ++i) {
        for (size_t j = i + 1; j < hosts_.size(); ++j) Session(i, j, 0);
      }
    }
  }

  void CheckConverged() {
    const Snapshot first = hosts_[0]->Snap();
    for (auto& h : hosts_) RC_ASSERT(SameState(first, h->Snap()));
    std::map<Path, Bytes> held;
    for (const Message& m : first.Messages()) held[m.path] = m.payload;
    RC_ASSERT(held == model_);
    for (const Path& p : redacted_) RC_ASSERT(!first.Find(p));
    itc::Version ceiling;
    for (const auto& v : sent_) ceiling = itc::Join(ceiling, v);
    RC_ASSERT(itc::Leq(ceiling, first.ceiling()));
  }

  void CheckIdentity() {
    std::vector<itc::Party> parties;
    for (auto& h : hosts_) {
      h->Read([&](const Replica& r) { parties.push_back(CopyParty(*r.party())); });
    }
    for (size_t i = 0; i < parties.size(); ++i) {
      for (size_t j = i + 1; j < parties.size(); ++j) RC_ASSERT(Disjoint(parties[i], parties[j]));
    }
    itc::Party all = std::move(parties[0]);
    for (size_t i = 1; i < parties.size(); ++i)
      RC_ASSERT(all.Join(std::move(parties[i])).has_value());
    RC_ASSERT(all == itc::Party::Seed());
  }

 private:
  void Send(int a) {
    Bytes payload = Payload("m" + std::to_string(counter_++));
    auto v = hosts_[a]->Send(payload);
    RC_ASSERT(v.has_value());
    model_[PathOf(*v)] = payload;
    sent_.push_back(*v);
  }

  void Redact(int a, int pick) {
    const auto messages = hosts_[a]->Snap().Messages();
    if (messages.empty()) return;
    const Message& m = messages[pick % messages.size()];
    RC_ASSERT(hosts_[a]->Redact(m.version).has_value());
    model_.erase(m.path);
    redacted_.push_back(m.path);
  }

  void Session(int a, int b, int cut) {
    if (a == b || side_[a] != side_[b]) return;
    const Snapshot sa = hosts_[a]->Snap(), sb = hosts_[b]->Snap();
    const Snapshot joined = Merge(sa, sb);
    PipeFaults ab, ba;
    if (cut > 0) (cut % 2 ? ab : ba).cut_after_bytes = static_cast<uint64_t>(cut / 2);
    auto r = RunPair(*hosts_[a], *hosts_[b], Mode::kSync, ab, ba);
    if (cut == 0) {
      RC_ASSERT(r.initiator.has_value());
      RC_ASSERT(r.responder.has_value());
    }
    // Each side is either untouched or holds exactly the join.
    RC_ASSERT(SameState(hosts_[a]->Snap(), r.initiator ? joined : sa));
    RC_ASSERT(SameState(hosts_[b]->Snap(), r.responder ? joined : sb));
  }

  void Join(int sponsor) {
    auto newcomer = std::make_unique<Host>(Replica::Seed(rng_));
    auto r = RunPair(*newcomer, *hosts_[sponsor], Mode::kBootstrap);
    RC_ASSERT(r.initiator.has_value());
    RC_ASSERT(SameState(newcomer->Snap(), hosts_[sponsor]->Snap()));
    hosts_.push_back(std::move(newcomer));
    side_.push_back(side_[sponsor]);
  }

  SeededRng rng_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<int> side_;
  std::map<Path, Bytes> model_;
  std::vector<Path> redacted_;
  std::vector<itc::Version> sent_;
  int counter_ = 0;
};

rc::Gen<Step> GenStep() {
  return rc::gen::build<Step>(rc::gen::set(&Step::kind, rc::gen::inRange(0, 12)),
                              rc::gen::set(&Step::a, rc::gen::inRange(0, 8)),
                              rc::gen::set(&Step::b, rc::gen::inRange(0, 1 << 16)),
                              rc::gen::set(&Step::cut, rc::gen::weightedOneOf<int>({
                                                           {3, rc::gen::just(0)},
                                                           {1, rc::gen::inRange(1, 4000)},
                                                       })));
}

RC_GTEST_PROP(GossipPropertyTest, RandomSchedulesConvergeToTheModel, ()) {
  const int count = *rc::gen::inRange(2, 9);
  const auto steps = *rc::gen::container<std::vector<Step>>(GenStep());
  World world(*rc::gen::arbitrary<uint64_t>(), count);
  for (const Step& step : steps) world.Run(step);
  world.Quiesce();
  world.CheckConverged();
  world.CheckIdentity();
}

// Two replicas with a random shared past (a third party's messages among
// it), random redactions and sends on each side since: a session of two
// machines driven by hand leaves both equal to the in-memory Merge of their
// starting snapshots, whatever the frame budget; one dropped after a random
// number of frames leaves both exactly as they were.
RC_GTEST_PROP(GossipPropertyTest, MachineSessionEqualsTheMergeOfTheStartingSnapshots, ()) {
  SeededRng rng(*rc::gen::arbitrary<uint64_t>());
  auto hosts = testing::MakeUniverse(rng, 3);
  Host& a = *hosts[0];
  Host& b = *hosts[1];
  const int past = *rc::gen::inRange(0, 300);
  for (int i = 0; i < past; ++i) {
    RC_ASSERT(hosts[i % 3]->Send(Payload("p" + std::to_string(i))).has_value());
  }
  RC_ASSERT(testing::RunMachines(*hosts[2], a).initiator.has_value());
  RC_ASSERT(testing::RunMachines(*hosts[2], b).initiator.has_value());
  RC_ASSERT(testing::RunMachines(a, b).initiator.has_value());
  for (Host* side : {&a, &b}) {
    const auto held = side->Snap().Messages();
    const int redactions = *rc::gen::inRange(0, 40);
    for (int i = 0; i < redactions && !held.empty(); ++i) {
      const size_t pick = *rc::gen::inRange<size_t>(0, held.size());
      RC_ASSERT(side->Redact(held[pick].version).has_value());
    }
    const int sends = *rc::gen::inRange(0, 40);
    for (int i = 0; i < sends; ++i) RC_ASSERT(side->Send(Payload("n" + std::to_string(i))));
  }
  SessionOptions options;
  options.frame_bytes_max = *rc::gen::inRange(kFrameBytesMin, kFrameBytesMax + 1);
  const bool cut = *rc::gen::arbitrary<bool>();
  const size_t frames_max = cut ? *rc::gen::inRange<size_t>(0, 8) : SIZE_MAX;
  const Snapshot a0 = a.Snap(), b0 = b.Snap();
  const Snapshot joined = Merge(a0, b0);
  const testing::MachineRun run = testing::RunMachines(a, b, Mode::kSync, options, frames_max);
  if (run.initiator && run.responder) {
    RC_ASSERT(SameState(a.Snap(), joined));
    RC_ASSERT(SameState(b.Snap(), joined));
    RC_ASSERT(run.initiator->sent == run.responder->received);
    RC_ASSERT(run.initiator->received == run.responder->sent);
    RC_ASSERT(run.initiator->frames == run.frames);
  } else {
    RC_ASSERT(cut);
    RC_ASSERT(SameState(a.Snap(), a0));
    RC_ASSERT(SameState(b.Snap(), b0));
  }
}

}  // namespace
}  // namespace once::gossip
