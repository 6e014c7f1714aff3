#include "once/rack/sled.h"

namespace once::rack {

Status HostPort::Send(Bytes payload) {
  ONCE_RETURN_IF_ERROR(host_.Send(std::move(payload)));
  if (hooks_.nudge) hooks_.nudge();
  return Ok();
}

GossipFeed FeedOf(const gossip::Host& host, const itc::Version& checkpoint) {
  return host.ReadWithGeneration([&](const gossip::Replica& replica, uint64_t generation) {
    gossip::Observation seen = replica.Observe(checkpoint);
    return GossipFeed{
        replica.network(),        generation,
        std::move(seen.messages), std::move(seen.checkpoint),
        replica.ceiling(),        replica.party() ? replica.party()->Encode() : Bytes{}};
  });
}

GossipFeed HostPort::Read(const itc::Version& checkpoint) { return FeedOf(host_, checkpoint); }

std::vector<Output> Sled::Handle(const Input& input) {
  std::vector<Output> rest;
  Dispatch(core_.Handle(input), rest);
  return rest;
}

std::vector<Output> Sled::Deliver(TimePoint now) {
  std::vector<Output> rest;
  DeliverInto(now, rest);
  return rest;
}

void Sled::DeliverInto(TimePoint now, std::vector<Output>& rest) {
  // A second read only after a universe change: its messages, from zero. A
  // change is told by the generation, not the network alone: the host may
  // drop a universe and come back to it between two reads (a bootstrap that
  // lost, then one that won), with a fresh replica that holds none of what
  // the core sent meanwhile (its announcement, its markers).
  for (int attempt = 0; attempt < 2; ++attempt) {
    GossipFeed feed = gossip_.Read(checkpoint_);
    ceiling_ = feed.ceiling;
    if (!joined_ || feed.network != network_ || feed.generation != generation_) {
      drain_now_ = joined_;  // a bootstrap delivered the winner's whole set
      joined_ = true;
      drained_ = false;
      network_ = feed.network;
      generation_ = feed.generation;
      checkpoint_ = itc::Version{};
      sessions_at_join_ = gossip_.sessions_completed();
      joined_at_ = now;
      Dispatch(core_.Handle(Joined{network_, std::move(feed.party)}), rest);
      continue;
    }
    for (gossip::Message& message : feed.messages) {
      Dispatch(core_.Handle(Delivered{std::move(message.version), std::move(message.payload)}),
               rest);
    }
    checkpoint_ = std::move(feed.checkpoint);
    return;
  }
}

std::vector<Output> Sled::Pump(TimePoint now, std::chrono::milliseconds poll_timeout) {
  std::vector<Output> rest;
  DeliverInto(now, rest);
  if (joined_ && !drained_ &&
      (drain_now_ || !gossip_.has_peers() || gossip_.sessions_completed() > sessions_at_join_ ||
       now - joined_at_ >= options_.drain_timeout)) {
    drained_ = true;
    Dispatch(core_.Handle(ReplayDrained{ceiling_}), rest);
    DeliverInto(now, rest);  // what the drain sent (markers, statuses)
  }
  for (const ProcessExited& ended : runner_.Poll(poll_timeout)) {
    Dispatch(core_.Handle(ended), rest);
  }
  if (!next_tick_ || now >= *next_tick_) {
    Dispatch(core_.Handle(TimerTick{now}), rest);
    next_tick_ = now + options_.tick_period;
  }
  return rest;
}

void Sled::Dispatch(std::vector<Output> outputs, std::vector<Output>& rest) {
  for (auto& output : outputs) {
    if (auto* broadcast = std::get_if<Broadcast>(&output)) {
      if (auto sent = gossip_.Send(std::move(broadcast->payload)); !sent) {
        rest.push_back(Diagnostic{sent.error()});
      }
    } else if (auto* start = std::get_if<StartProcess>(&output)) {
      auto started =
          runner_.Start(JobSpec{start->job_id, start->session_id, start->command, start->request});
      if (!started) {
        // The process never ran: the core records the job as ended in error.
        ExitOutcome failed{ExitOutcome::Kind::kFailed, static_cast<int32_t>(started.error().code),
                           started.error().message};
        Dispatch(core_.Handle(ProcessExited{start->job_id, ExitReport{failed}}), rest);
      }
    } else if (auto* persist = std::get_if<PersistGossipIdentity>(&output)) {
      if (auto persisted = gossip_.PersistIdentity(persist->tick_floor); !persisted) {
        rest.push_back(Diagnostic{persisted.error()});
      }
    } else if (auto* stop = std::get_if<StopProcess>(&output)) {
      (void)runner_.Stop(stop->job_id);  // kNotFound: it already ended; Poll reports it
    } else {
      rest.push_back(std::move(output));
    }
  }
}

}  // namespace once::rack
