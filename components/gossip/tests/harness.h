// Test helpers: run both ends of a session over an in-memory pipe, or as
// two session machines in one thread.

#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "once/gossip/session.h"

namespace once::gossip::testing {

struct PairResult {
  Result<SessionReport> initiator;
  Result<SessionReport> responder;
};

inline PairResult RunPair(Host& a, Host& b, Mode mode = Mode::kSync, PipeFaults a_to_b = {},
                          PipeFaults b_to_a = {}, SessionOptions options = {}) {
  auto [sa, sb] = MakePipe(a_to_b, b_to_a);
  PairResult out;
  std::thread responder([&, &sb = sb] {
    out.responder = Respond(*sb, b, options, DeadlineIn(std::chrono::seconds(20)));
    if (!out.responder) sb->Close();
  });
  out.initiator = Initiate(*sa, a, mode, options, DeadlineIn(std::chrono::seconds(20)));
  if (!out.initiator) sa->Close();
  responder.join();
  return out;
}

// Both ends of a session as SessionMachines driven by hand in this thread.
struct MachineRun {
  // A side the exchange was dropped under (or whose peer failed) is
  // kUnavailable, as over a closed pipe.
  Result<SessionReport> initiator;
  Result<SessionReport> responder;
  std::vector<Bytes> a_to_b;  // the frames moved, each way
  std::vector<Bytes> b_to_a;
  size_t frames = 0;  // moved, both ways
};

// Moves frames between an initiating machine on `a` and a responding one on
// `b` until neither has anything to send. Once `frames_max` frames have
// moved, both machines are dropped (a cut link: the next frame is never
// written). `between` runs after every frame moved (local activity).
inline MachineRun RunMachines(Host& a, Host& b, Mode mode = Mode::kSync,
                              SessionOptions options = {}, size_t frames_max = SIZE_MAX,
                              const std::function<void()>& between = {}) {
  MachineRun out;
  out.initiator = out.responder = MakeError(ErrorCode::kUnavailable, "the exchange was dropped");
  auto ma = SessionMachine::Initiate(a, mode, options);
  if (!ma) {
    out.initiator = std::unexpected(ma.error());
    return out;
  }
  auto mb = SessionMachine::Respond(b, options);
  if (!mb) {
    out.responder = std::unexpected(mb.error());
    return out;
  }
  struct End {
    SessionMachine& machine;
    std::vector<Bytes>& log;
    Status status = Ok();
    void Record(Status s) {
      if (status && !s) status = std::move(s);
    }
  };
  End ends[2] = {End{*ma, out.a_to_b}, End{*mb, out.b_to_a}};
  for (bool moved = true; moved;) {
    moved = false;
    for (int i = 0; i < 2; ++i) {
      End& from = ends[i];
      End& to = ends[1 - i];
      std::vector<Bytes> frames = from.machine.TakeOutgoing();
      if (frames.empty()) continue;
      moved = true;
      const bool cut = frames.size() > frames_max - out.frames;
      if (cut) frames.resize(frames_max - out.frames);
      // Written first (the writer's commit), then read: the order of a pipe.
      if (!cut && !from.machine.finished()) from.Record(from.machine.OnWritten());
      for (const Bytes& frame : frames) {
        from.log.push_back(frame);
        ++out.frames;
        if (!to.machine.finished()) to.Record(to.machine.OnFrame(frame));
        if (between) between();
      }
      if (cut) return out;
    }
  }
  for (int i = 0; i < 2; ++i) {
    Result<SessionReport>& result = i == 0 ? out.initiator : out.responder;
    if (!ends[i].status) {
      result = std::unexpected(ends[i].status.error());
    } else if (ends[i].machine.done()) {
      result = ends[i].machine.report();
    }
  }
  return out;
}

// A universe of `count` hosts forked from one seed.
inline std::vector<std::unique_ptr<Host>> MakeUniverse(Rng& rng, size_t count) {
  Replica seed = Replica::Seed(rng);
  const NetworkId network = seed.network();
  auto parties = itc::Party::Forks(std::move(*seed.TakeParty()), count);
  std::vector<std::unique_ptr<Host>> hosts;
  for (auto& party : *parties) {
    hosts.push_back(std::make_unique<Host>(Replica::Fresh(network, std::move(party))));
  }
  return hosts;
}

inline Bytes Payload(const std::string& s) { return Bytes(s.begin(), s.end()); }

}  // namespace once::gossip::testing
