#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "bench.h"
#include "once/events/envelope.h"

namespace once::bench {

using SteadyClock = std::chrono::steady_clock;

Row MakeRow(const Workload& w) {
  // A STEP_COMPLETED payload: the step, its attempt and its output, padded
  // with printable filler to exactly payload_bytes of JSON.
  events::Json payload = {{"name", "charge-card"}, {"attempt", 1}, {"output", ""}};
  size_t base = payload.dump().size();
  std::string filler;
  for (size_t i = base; i < w.payload_bytes; ++i) filler.push_back('a' + i % 26);
  payload["output"] = filler;
  Row row;
  row.payload_json = payload.dump();
  events::Envelope e =
      events::KernelEvent(events::KernelKind::kStepCompleted, payload, w.fenced ? 1 : 0);
  row.kind = e.kind;
  row.metadata_json = e.metadata.ToJson().dump();
  return row;
}

std::string ExecutionId(std::string_view tag, int client, int execution) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "bench-%-8.8s-c%02d-e%04d", std::string(tag).c_str(), client,
                execution);
  return buf;
}

Result<RunResult> Run(Target& target, const Workload& w, std::string_view tag) {
  ONCE_CHECK(w.clients >= 1);
  std::vector<std::unique_ptr<Writer>> writers;
  for (int c = 0; c < w.clients; ++c) {
    ONCE_ASSIGN_OR_RETURN(auto writer, target.NewWriter(w, tag, c));
    writers.push_back(std::move(writer));
  }

  struct ClientResult {
    int64_t events = 0;
    int64_t transactions = 0;  // measured and warm-up alike: for Verify
    SteadyClock::time_point end;
  };
  std::vector<ClientResult> results(writers.size());
  std::mutex error_mu;
  std::optional<Error> first_error;  // GUARDED_BY(error_mu)
  std::atomic<bool> stop{false};
  std::atomic<int64_t> events_started{0};
  std::latch warmed(static_cast<ptrdiff_t>(writers.size()) + 1);
  std::latch go(1);
  SteadyClock::time_point start;  // written before go, read after it
  const auto measured =
      std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(w.seconds));
  const auto warmup = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(w.warmup_seconds));
  const int64_t per_tx = w.events_per_transaction();

  auto fail = [&](Error e) {
    std::lock_guard<std::mutex> lock(error_mu);
    if (!first_error) first_error = std::move(e);
    stop = true;
  };

  std::vector<std::thread> threads;
  for (size_t c = 0; c < writers.size(); ++c) {
    threads.emplace_back([&, c] {
      Writer& writer = *writers[c];
      ClientResult& out = results[c];
      // Warm-up: at least one commit (it creates the executions), then
      // until the warm-up time has passed.
      auto warm_end = SteadyClock::now() + warmup;
      do {
        auto r = writer.Commit();
        if (!r) {
          fail(r.error());
          break;
        }
        ++out.transactions;
      } while (SteadyClock::now() < warm_end && !stop);
      warmed.count_down();
      go.wait();
      const auto deadline = start + measured;
      while (!stop) {
        if (w.events_max > 0) {
          if (events_started.fetch_add(per_tx) + per_tx > w.events_max) break;
        } else if (SteadyClock::now() >= deadline) {
          break;
        }
        auto r = writer.Commit();
        if (!r) {
          fail(r.error());
          break;
        }
        out.events += *r;
        ++out.transactions;
      }
      out.end = SteadyClock::now();
    });
  }
  warmed.arrive_and_wait();
  const double client_cpu0 = ProcessCpuSeconds();
  const std::optional<double> server_cpu0 = target.ServerCpuSeconds();
  start = SteadyClock::now();
  go.count_down();
  for (auto& t : threads) t.join();
  const double client_cpu1 = ProcessCpuSeconds();
  const std::optional<double> server_cpu1 = target.ServerCpuSeconds();
  if (first_error) return std::unexpected(*first_error);

  RunResult run;
  run.client_cpu_s = client_cpu1 - client_cpu0;
  if (server_cpu0 && server_cpu1) run.server_cpu_s = *server_cpu1 - *server_cpu0;
  SteadyClock::time_point end = start;
  for (size_t c = 0; c < results.size(); ++c) {
    run.events += results[c].events;
    end = std::max(end, results[c].end);
    ONCE_RETURN_IF_ERROR(target.Verify(w, tag, static_cast<int>(c), results[c].transactions));
  }
  for (const auto& r : results) run.transactions += r.events / per_tx;
  run.seconds = std::chrono::duration<double>(end - start).count();
  return run;
}

}  // namespace once::bench
