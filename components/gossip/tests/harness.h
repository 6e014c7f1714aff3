// Test helpers: run both ends of a session over an in-memory pipe.

#pragma once

#include <chrono>
#include <thread>

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
