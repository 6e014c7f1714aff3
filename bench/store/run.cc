#include <algorithm>
#include <array>
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

namespace {

// `seconds` as the clock's duration.
SteadyClock::duration Span(double seconds) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(seconds));
}

// The first error of a run's clients; recording one stops them all.
class FirstError {
 public:
  void Record(Error e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::move(e);
    stopped_ = true;
  }
  bool stopped() const { return stopped_; }
  std::optional<Error> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(error_);
  }

 private:
  std::mutex mu_;
  std::optional<Error> error_;  // GUARDED_BY(mu_)
  std::atomic<bool> stopped_{false};
};

}  // namespace

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
  FirstError errors;
  std::atomic<int64_t> events_started{0};
  std::latch warmed(static_cast<ptrdiff_t>(writers.size()) + 1);
  std::latch go(1);
  SteadyClock::time_point start;  // written before go, read after it
  const auto measured = Span(w.seconds);
  const auto warmup = Span(w.warmup_seconds);
  const int64_t per_tx = w.events_per_transaction();

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
          errors.Record(r.error());
          break;
        }
        ++out.transactions;
      } while (SteadyClock::now() < warm_end && !errors.stopped());
      warmed.count_down();
      go.wait();
      const auto deadline = start + measured;
      while (!errors.stopped()) {
        if (w.events_max > 0) {
          if (events_started.fetch_add(per_tx) + per_tx > w.events_max) break;
        } else if (SteadyClock::now() >= deadline) {
          break;
        }
        auto r = writer.Commit();
        if (!r) {
          errors.Record(r.error());
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
  if (std::optional<Error> e = errors.Take()) return std::unexpected(*e);

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

Result<std::pair<RunResult, RunResult>> RunInterleaved(Target& a, Target& b, const Workload& w,
                                                       double slice_seconds, std::string_view tag_a,
                                                       std::string_view tag_b) {
  ONCE_CHECK(w.clients >= 1);
  struct Side {
    std::unique_ptr<Writer> writer;
    int64_t events = 0;        // measured
    int64_t transactions = 0;  // measured and warm-up alike: for Verify
    SteadyClock::duration busy{};
  };
  std::vector<std::array<Side, 2>> clients(static_cast<size_t>(w.clients));
  for (int c = 0; c < w.clients; ++c) {
    ONCE_ASSIGN_OR_RETURN(clients[c][0].writer, a.NewWriter(w, tag_a, c));
    ONCE_ASSIGN_OR_RETURN(clients[c][1].writer, b.NewWriter(w, tag_b, c));
  }
  FirstError errors;
  // One commit of `side`, timed; false after an error.
  auto commit = [&](Side& side, bool measured) {
    const auto t0 = SteadyClock::now();
    auto r = side.writer->Commit();
    if (!r) {
      errors.Record(r.error());
      return false;
    }
    ++side.transactions;
    if (measured) {
      side.busy += SteadyClock::now() - t0;
      side.events += *r;
    }
    return true;
  };
  std::latch warmed(static_cast<ptrdiff_t>(clients.size()) + 1);
  std::latch go(1);
  SteadyClock::time_point start;  // written before go, read after it
  const auto measured = Span(w.seconds);
  const auto warmup = Span(w.warmup_seconds);
  const auto slice = Span(slice_seconds);
  // Commits to `side` until `end` (at least one); false after an error.
  auto turn = [&](Side& side, SteadyClock::time_point end, bool measured) {
    do {
      if (!commit(side, measured)) return false;
    } while (SteadyClock::now() < end && !errors.stopped());
    return true;
  };
  std::vector<std::thread> threads;
  for (auto& sides : clients) {
    threads.emplace_back([&] {
      // At least one commit a side (it creates the executions), then turns.
      const auto warm_end = SteadyClock::now() + warmup;
      for (int k = 0; !errors.stopped() && (k < 2 || SteadyClock::now() < warm_end); ++k) {
        if (!turn(sides[k % 2], std::min(SteadyClock::now() + slice, warm_end), false)) break;
      }
      warmed.count_down();
      go.wait();
      const auto deadline = start + measured;
      for (int k = 0; !errors.stopped() && SteadyClock::now() < deadline; ++k) {
        if (!turn(sides[k % 2], std::min(SteadyClock::now() + slice, deadline), true)) break;
      }
    });
  }
  warmed.arrive_and_wait();
  start = SteadyClock::now();
  go.count_down();
  for (auto& t : threads) t.join();
  if (std::optional<Error> e = errors.Take()) return std::unexpected(*e);

  // A side's rate is what its clients' commits would give back to back:
  // the sum over clients of events over the time their commits took.
  std::pair<RunResult, RunResult> out;
  for (int k = 0; k < 2; ++k) {
    Target& target = k == 0 ? a : b;
    RunResult& run = k == 0 ? out.first : out.second;
    double rate = 0;
    for (size_t c = 0; c < clients.size(); ++c) {
      const Side& side = clients[c][k];
      ONCE_RETURN_IF_ERROR(
          target.Verify(w, k == 0 ? tag_a : tag_b, static_cast<int>(c), side.transactions));
      const double busy = std::chrono::duration<double>(side.busy).count();
      if (busy > 0) rate += static_cast<double>(side.events) / busy;
      run.events += side.events;
    }
    run.transactions = run.events / w.events_per_transaction();
    run.seconds = rate > 0 ? static_cast<double>(run.events) / rate : 0;
  }
  return out;
}

}  // namespace once::bench
