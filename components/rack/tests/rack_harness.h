// A rack of SledCores in one process: the test harness delivers gossip
// between them in causal orders the test chooses, stands in for the executor
// (a test decides when a process exits), and checks that every process start
// went through the boundary first.

#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "once/base/rng.h"
#include "once/gossip/replica.h"
#include "once/itc/clock.h"
#include "once/rack/chain.h"
#include "once/rack/sled_core.h"

namespace once::rack::testing {

// What a client keeps to sign the next job of its session.
struct ClientChain {
  SessionId session;
  JobId next;
};

class Rack {
 public:
  struct Sled {
    MemoryBoundaryStore drives;
    SledConfig config;
    std::unique_ptr<SledCore> core;
    std::vector<JobId> ever_started;  // every process start, across lives
    itc::Clock clock = itc::Clock::Seed();
    std::set<size_t> delivered;
    std::vector<StartProcess> started;
    std::vector<JobId> stop_requests;
    std::vector<SledError> sled_errors;
    std::vector<Error> diagnostics;
    std::optional<Reply> last_reply;
  };
  struct Sent {
    itc::Version version;
    Bytes payload;
  };

  Rack(size_t count, const SledLimits& limits = {}, uint64_t seed = 1) : rng_(seed) {
    support_ = KeyPair::Generate(rng_);
    EXPECT_TRUE(trusted_.Add(support_.public_key).has_value());
    itc::Clock seed_clock = itc::Clock::Seed();
    for (size_t i = 0; i < count; ++i) {
      auto sled = std::make_unique<Sled>();
      if (i + 1 < count) {
        auto forked = seed_clock.Fork();
        EXPECT_TRUE(forked.has_value());
        sled->clock = std::move(*forked);
      } else {
        sled->clock = std::move(seed_clock);
      }
      sled->config = SledConfig{SledIdentity{Baseboard(i), static_cast<uint8_t>(i)}, "once-test",
                                trusted_, limits};
      sled->core = std::make_unique<SledCore>(sled->config, rng_, sled->drives);
      sleds_.push_back(std::move(sled));
    }
    for (size_t i = 0; i < count; ++i) Boot(i);
    SyncAll();  // as `sush rack up` waits for: every sled has heard every other's markers
  }

  // One universe for the whole rack (the harness's clocks are forks of one seed).
  static NetworkId Network() {
    NetworkId network;
    network.bytes.fill(0x42);
    return network;
  }

  // Sled i's process starts: it joins the rack's universe, its replay drains
  // at once (the harness delivers by hand), and time starts.
  void Boot(size_t i) {
    Handle(i, Joined{Network()});
    Handle(i, ReplayDrained{sleds_[i]->clock.version()});
    Handle(i, TimerTick{FromUnixMillis(1'700'000'000'000)});
  }

  // Sled i's process dies and starts again: the drives keep the last record
  // written (or `load` replaces what they hold), the gossip set is forgotten
  // (the bookmark keeps only the own region of the clock), and the replay has
  // not drained yet: deliver to it, then call Drain.
  void Restart(size_t i, std::optional<BoundaryLoad> load = std::nullopt) {
    Sled& sled = *sleds_[i];
    if (!load) load = BoundaryLoad{sled.drives.current(), "adopted", "", {}};
    sled.core.reset();
    sled.drives = MemoryBoundaryStore(std::move(*load));
    sled.core = std::make_unique<SledCore>(sled.config, rng_, sled.drives);
    sled.delivered.clear();
    sled.started.clear();
    itc::Version own = gossip::Restrict(sled.clock.version(), sled.clock.party());
    auto party = itc::Party::Decode(sled.clock.party().Encode());
    sled.clock = itc::Clock(std::move(*party), std::move(own));
    Handle(i, Joined{Network()});
    Handle(i, TimerTick{FromUnixMillis(1'700'000'000'000)});
  }
  void Drain(size_t i) { Handle(i, ReplayDrained{sleds_[i]->clock.version()}); }
  // How many times sled i ever started `job`, across its lives.
  size_t Runs(size_t i, const JobId& job) const {
    const auto& all = sleds_[i]->ever_started;
    return static_cast<size_t>(std::count(all.begin(), all.end(), job));
  }
  // Everyone in `group` receives everything anyone in it has seen.
  void SyncGroup(const std::vector<size_t>& group) {
    size_t before = SIZE_MAX;
    while (before != sent_.size()) {
      before = sent_.size();
      for (size_t to : group) {
        for (size_t from : group) {
          if (from != to) Sync(from, to);
        }
      }
    }
  }

  static std::string Baseboard(size_t i) { return "913-0000019:BRM" + std::to_string(1000 + i); }

  SledCore& core(size_t i) { return *sleds_[i]->core; }
  Sled& sled(size_t i) { return *sleds_[i]; }
  const KeyPair& support() const { return support_; }
  Rng& rng() { return rng_; }

  void Handle(size_t i, const Input& input) { Process(i, sleds_[i]->core->Handle(input)); }

  // Submits `request` to sled i as a client would; returns the reply.
  Reply Submit(size_t i, const SignedRequest& request) {
    auto bytes = Encode(request);
    EXPECT_TRUE(bytes.has_value());
    return SubmitBytes(i, *bytes);
  }
  Reply SubmitBytes(size_t i, const Bytes& bytes) {
    sleds_[i]->last_reply.reset();
    Handle(i, ClientSubmit{bytes});
    EXPECT_TRUE(sleds_[i]->last_reply.has_value());
    return *sleds_[i]->last_reply;
  }

  SignedRequest SignOrDie(const RequestPayload& payload, const KeyPair& keys) {
    auto request = Sign(payload, keys);
    EXPECT_TRUE(request.has_value());
    return *request;
  }

  // The full session start protocol against sled i.
  std::optional<ClientChain> StartSession(size_t i) {
    sleds_[i]->last_reply.reset();
    Handle(i, IssueSessionNonce{});
    Reply nonce = *sleds_[i]->last_reply;
    EXPECT_TRUE(nonce.status.has_value());
    Nonce signer;
    rng_.Fill(signer.bytes.data(), signer.bytes.size());
    Reply reply = Submit(i, SignOrDie(SessionStart{Baseboard(i), *nonce.nonce, signer}, support_));
    EXPECT_TRUE(reply.status.has_value()) << reply.status.error().ToString();
    if (!reply.session_id) return std::nullopt;
    return ClientChain{*reply.session_id, FirstJobId(*reply.session_id)};
  }

  // Signs the chain's next job and advances the client's chain.
  SignedRequest NextJob(ClientChain& chain, std::string command, std::string target = "*",
                        bool concurrent = false) {
    SignedRequest request = SignOrDie(
        JobStart{chain.next, chain.session, std::move(command), std::move(target), concurrent},
        support_);
    chain.next = NextJobId(ToBeSignedDigest(request));
    return request;
  }

  // Broadcasts bytes from sled i as if it had sent them (for hostile input).
  void Inject(size_t i, const Bytes& payload) { Process(i, {Broadcast{payload}}); }

  // Delivers message m (and its causal past first) to sled i.
  void Deliver(size_t i, size_t m) {
    const itc::Version& target = sent_[m].version;
    for (size_t j = 0; j < m; ++j) {
      if (itc::Leq(sent_[j].version, target)) DeliverOne(i, j);
    }
    DeliverOne(i, m);
  }
  // Sled `to` receives everything sled `from` has seen.
  void Sync(size_t from, size_t to) {
    std::vector<size_t> seen(sleds_[from]->delivered.begin(), sleds_[from]->delivered.end());
    for (size_t m : seen) Deliver(to, m);
  }
  // Everyone receives everything, until nothing new is sent.
  void SyncAll() {
    size_t before = SIZE_MAX;
    while (before != sent_.size()) {
      before = sent_.size();
      for (size_t i = 0; i < sleds_.size(); ++i) {
        for (size_t m = 0; m < sent_.size(); ++m) Deliver(i, m);
      }
    }
  }

  void Exit(size_t i, const JobId& job, int code) {
    Handle(i, ProcessExited{job, ExitReport{ExitOutcome{ExitOutcome::Kind::kExited, code, ""}}});
  }
  void Killed(size_t i, const JobId& job, int signal) {
    Handle(i,
           ProcessExited{job, ExitReport{ExitOutcome{ExitOutcome::Kind::kSignaled, signal, ""}}});
  }

  bool Started(size_t i, const JobId& job) const {
    for (const auto& start : sleds_[i]->started) {
      if (start.job_id == job) return true;
    }
    return false;
  }
  // Sled i's view of sled `of`'s status for `job`.
  std::optional<JobState> State(size_t i, const JobId& job, size_t of) {
    const JobStatus* status = core(i).StatusOf(job, Baseboard(of));
    if (status == nullptr) return std::nullopt;
    return status->state;
  }
  const JobStatus* Status(size_t i, const JobId& job, size_t of) {
    return core(i).StatusOf(job, Baseboard(of));
  }
  size_t sent() const { return sent_.size(); }
  // A digest of every message sent, in order (for determinism checks).
  Digest256 TraceHash() const {
    Bytes all;
    for (const auto& s : sent_) {
      Bytes v = s.version.Encode();
      all.insert(all.end(), v.begin(), v.end());
      all.insert(all.end(), s.payload.begin(), s.payload.end());
    }
    return Blake2b256({all});
  }

 private:
  void DeliverOne(size_t i, size_t m) {
    Sled& sled = *sleds_[i];
    if (!sled.delivered.insert(m).second) return;
    sled.clock.Absorb(sent_[m].version);
    Process(i, sled.core->Handle(Delivered{sent_[m].version, sent_[m].payload}));
  }

  void Process(size_t i, std::vector<Output> outputs) {
    Sled& sled = *sleds_[i];
    for (auto& output : outputs) {
      if (auto* b = std::get_if<Broadcast>(&output)) {
        auto version = sled.clock.Send();
        EXPECT_TRUE(version.has_value());
        sent_.push_back(Sent{*version, b->payload});
        DeliverOne(i, sent_.size() - 1);  // the gossip layer delivers own sends too
      } else if (auto* s = std::get_if<StartProcess>(&output)) {
        // The gate wrote the record naming this job before asking for the process.
        const auto& records = sled.drives.records();
        EXPECT_TRUE(std::any_of(records.begin(), records.end(), [&](const BoundaryRecord& r) {
          return r.here.last_executed == s->job_id;
        })) << "a process started without its boundary record";
        sled.started.push_back(*s);
        sled.ever_started.push_back(s->job_id);
      } else if (auto* s = std::get_if<StopProcess>(&output)) {
        sled.stop_requests.push_back(s->job_id);
      } else if (auto* r = std::get_if<Reply>(&output)) {
        sled.last_reply = *r;
      } else if (auto* e = std::get_if<SledErrorSeen>(&output)) {
        sled.sled_errors.push_back(e->error);
      } else if (auto* d = std::get_if<Diagnostic>(&output)) {
        sled.diagnostics.push_back(d->error);
      }
    }
  }

  SeededRng rng_;
  KeyPair support_;
  TrustedKeys trusted_;
  std::vector<std::unique_ptr<Sled>> sleds_;
  std::vector<Sent> sent_;
};

}  // namespace once::rack::testing
