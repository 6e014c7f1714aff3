// File: sled.h
//
// Wires one SledCore to its effects: gossip sends go to a GossipSender,
// process starts and stops to a JobRunner, and process ends come back into
// the core. What is left (replies, statuses, session changes, sled errors,
// diagnostics) is returned to the caller: the HTTP server and watchers.
//
//   SledCore core(config, rng, drives);
//   Sled sled(core, executor, gossip);
//   sled.Handle(TimerTick{clock.Now()});
//   for (const Output& out : sled.Handle(ClientSubmit{request_bytes})) ...
//   sled.PollProcesses(std::chrono::milliseconds(100));   // in the serving loop
//   // and for each gossip delivery: sled.Handle(Delivered{version, bytes});
//
// Not thread-safe: one serving loop owns a Sled, its core and its runner.

#pragma once

#include <chrono>
#include <vector>

#include "once/base/result.h"
#include "once/rack/executor.h"
#include "once/rack/sled_core.h"

namespace once::rack {

// Where the core's gossip sends go (the gossip replica, or a test's network).
// Send must not call back into the Sled; the message comes back later as a
// Delivered input, own sends included.
class GossipSender {
 public:
  virtual ~GossipSender() = default;
  virtual Status Send(Bytes payload) = 0;
};

class Sled {
 public:
  // All three must outlive the Sled.
  Sled(SledCore& core, JobRunner& runner, GossipSender& gossip)
      : core_(core), runner_(runner), gossip_(gossip) {}

  // Applies `input`, performs its effects, returns the rest.
  std::vector<Output> Handle(const Input& input);
  // Copies output and reaps processes for up to `timeout`; feeds ends back.
  std::vector<Output> PollProcesses(std::chrono::milliseconds timeout);

  SledCore& core() { return core_; }

 private:
  void Dispatch(std::vector<Output> outputs, std::vector<Output>& rest);

  SledCore& core_;
  JobRunner& runner_;
  GossipSender& gossip_;
};

}  // namespace once::rack
