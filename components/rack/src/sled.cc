#include "once/rack/sled.h"

namespace once::rack {

std::vector<Output> Sled::Handle(const Input& input) {
  std::vector<Output> rest;
  Dispatch(core_.Handle(input), rest);
  return rest;
}

std::vector<Output> Sled::PollProcesses(std::chrono::milliseconds timeout) {
  std::vector<Output> rest;
  for (const ProcessExited& ended : runner_.Poll(timeout)) Dispatch(core_.Handle(ended), rest);
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
    } else if (auto* stop = std::get_if<StopProcess>(&output)) {
      (void)runner_.Stop(stop->job_id);  // kNotFound: it already ended; Poll reports it
    } else {
      rest.push_back(std::move(output));
    }
  }
}

}  // namespace once::rack
