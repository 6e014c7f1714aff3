// File: sled.h
//
// Wires one SledCore to its effects, the same way in the server and in the
// rack simulator: gossip deliveries (causal order, own sends included) and
// universe changes come from a GossipPort into the core, the core's
// Broadcasts go back into it, process starts and stops go to a JobRunner,
// process ends come back into the core, and time passes. What is left
// (replies, statuses, session and boundary changes, sled errors, diagnostics)
// is returned to the caller: the HTTP server, watchers, the simulator.
//
//   SledCore core(config, rng, drives);
//   HostPort port(node->host(), {.nudge = [&] { node->Nudge(); }, ...});
//   Sled sled(core, executor, port);
//   for (;;) {                                       // the serving loop
//     for (const Output& out : sled.Pump(clock.Now())) ...
//   }
//   sled.Handle(ClientSubmit{request_bytes});        // from an HTTP handler
//
// The replay-drained signal: after a Joined, the core's gate opens once a
// reconciliation with a peer completed since (GossipPort::sessions_completed
// grew), or at once without peers, or after drain_timeout; right after a
// universe change (the bootstrap session delivered the winner's whole set).
//
// Not thread-safe: one serving loop owns a Sled, its core and its runner
// (the server holds one mutex around every call).

#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/gossip/session.h"
#include "once/rack/executor.h"
#include "once/rack/sled_core.h"

namespace once::rack {

// What the gossip replica holds past a checkpoint.
struct GossipFeed {
  NetworkId network;
  uint64_t generation = 0;                // gossip::Host's: a re-adoption of `network` differs
  std::vector<gossip::Message> messages;  // in causal delivery order
  itc::Version checkpoint;                // to read from next time
  itc::Version ceiling;                   // the replica's ceiling
  Bytes party;                            // the replica's party (encoded); empty: none
};
// What `host`'s replica holds past `checkpoint`, read under the host's lock
// (every GossipPort over a gossip::Host reads through this).
GossipFeed FeedOf(const gossip::Host& host, const itc::Version& checkpoint);

// The core's view of its gossip layer.
class GossipPort {
 public:
  virtual ~GossipPort() = default;
  // Sends into the replica; the message comes back through Read.
  virtual Status Send(Bytes payload) = 0;
  virtual GossipFeed Read(const itc::Version& checkpoint) = 0;
  // Makes the bookmark cover every own event sent so far, and every later own
  // event strictly above `tick_floor` (durable on return).
  virtual Status PersistIdentity(const itc::Version& tick_floor) = 0;
  // Reconciliation sessions completed (either role) since the port began.
  virtual uint64_t sessions_completed() const = 0;
  virtual bool has_peers() const = 0;
};

// A GossipPort over a gossip::Host. `nudge` (optional) asks the node for a
// round at once after a send; `sessions` counts completed sessions.
class HostPort final : public GossipPort {
 public:
  struct Hooks {
    std::function<void()> nudge;
    std::function<uint64_t()> sessions;
    bool has_peers = false;
  };
  HostPort(gossip::Host& host, Hooks hooks) : host_(host), hooks_(std::move(hooks)) {}
  Status Send(Bytes payload) override;
  GossipFeed Read(const itc::Version& checkpoint) override;
  Status PersistIdentity(const itc::Version& tick_floor) override {
    return host_.PersistAbove(tick_floor);
  }
  uint64_t sessions_completed() const override { return hooks_.sessions ? hooks_.sessions() : 0; }
  bool has_peers() const override { return hooks_.has_peers; }

 private:
  gossip::Host& host_;
  Hooks hooks_;
};

struct SledOptions {
  // After a Joined, the gate opens by this time even if no peer answered.
  Duration drain_timeout = std::chrono::seconds(2);
  // How often the core sees time pass.
  Duration tick_period = std::chrono::milliseconds(100);
};

class Sled {
 public:
  // All three must outlive the Sled.
  Sled(SledCore& core, JobRunner& runner, GossipPort& gossip, SledOptions options = {})
      : core_(core), runner_(runner), gossip_(gossip), options_(options) {}

  // Applies `input` (a client's submit or nonce request), performs its effects.
  std::vector<Output> Handle(const Input& input);
  // Delivers what gossip holds past the checkpoint (and a universe change).
  std::vector<Output> Deliver(TimePoint now);
  // One turn of the serving loop: Deliver, the drain signal, process output
  // and exits (waiting up to `poll_timeout`), and a TimerTick when one is due.
  std::vector<Output> Pump(TimePoint now,
                           std::chrono::milliseconds poll_timeout = std::chrono::milliseconds(0));

  SledCore& core() { return core_; }
  bool drained() const { return drained_; }

 private:
  void Dispatch(std::vector<Output> outputs, std::vector<Output>& rest);
  void DeliverInto(TimePoint now, std::vector<Output>& rest);

  SledCore& core_;
  JobRunner& runner_;
  GossipPort& gossip_;
  SledOptions options_;
  bool joined_ = false;
  bool drained_ = false;
  bool drain_now_ = false;
  NetworkId network_;
  uint64_t generation_ = 0;
  itc::Version checkpoint_;
  itc::Version ceiling_;
  uint64_t sessions_at_join_ = 0;
  TimePoint joined_at_{};
  std::optional<TimePoint> next_tick_;
};

}  // namespace once::rack
