// gossip_bench: one reconciliation session over an in-memory pipe, for the
// shapes (common, differing per side, redacted per side) of the published
// figures in the rumors notes, all eight of them (and a converged pair).
// Prints a markdown table (BENCHMARKS.md). The shapes' indexes (for
// `shape-index`) are the table's rows from 0: 6 is (100000,0,10000), and the
// two bulk transfers, (0,100000,0) and (100000,100000,0), are 7 and 8.
//
// Each shape is measured twice, on fresh pairs: over the pipe, a thread per
// side (every frame wakes the other thread), and on one thread that moves
// the frames between the two sides' SessionMachines itself (session.h): the
// same frames, bytes, checks and commits, without the wake-ups. On this
// project's VMs a wake-up costs more than a small session's protocol work,
// so the second column is the protocol's own cost. After the table, the
// pipe's raw limit in the same run: the time of a hop (PipeHopUs). Run with
// both threads on one core (`taskset -c 0 gossip_bench`), a hop is a switch
// between two threads of that core instead of a wake-up of the other one.
//
//   gossip_bench [repetitions-scale [shape-index]]
//   gossip_bench cold [repetitions]
//   gossip_bench apply [repetitions]   (Host::Apply batches: ApplyBatches)
//
// `cold` takes the first sessions after loading apart: on fresh (100000,1,0)
// pairs, the one-thread times of the first four sessions (one new message per
// side before each after the first), as loaded and after each of: a session
// on another, small pair (the session's code and the allocator's lists warm,
// not this pair's tree), a sweep of 64 MiB (everything cold), the sweep then
// the small session (the tree cold, the code warm), and a session on another
// (100000,1,0) pair loaded just before (the code warm and trained on the same
// shape; only this pair's own tree and leaves cold).

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cpu.h"
#include "once/gossip/session.h"

namespace {

using namespace once;
using namespace once::gossip;

// CPU time of the calling thread, in microseconds.
double ThreadCpuUs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

// Microseconds from `start` to now, on the steady clock.
double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

struct Shape {
  int common, differing, redacted;
  const char* published;
  int repetitions;
};

// A responder thread that serves one session each time it is handed a pipe
// end (so thread start-up is not timed).
class Responder {
 public:
  Responder() : thread_([this] { Loop(); }) {}
  ~Responder() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Serve(Stream* stream, Host* host) {
    std::lock_guard lock(mu_);
    stream_ = stream;
    host_ = host;
    done_ = false;
    cv_.notify_all();
  }
  Result<SessionReport> Wait(double* cpu_us = nullptr) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (cpu_us) *cpu_us = cpu_us_;
    return result_;
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || stream_ != nullptr; });
      if (quit_) return;
      Stream* stream = stream_;
      Host* host = host_;
      stream_ = nullptr;
      lock.unlock();
      const double cpu0 = ThreadCpuUs();
      auto r = Respond(*stream, *host, {}, DeadlineIn(std::chrono::seconds(60)));
      const double cpu = ThreadCpuUs() - cpu0;
      lock.lock();
      cpu_us_ = cpu;
      result_ = std::move(r);
      done_ = true;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  Stream* stream_ = nullptr;
  Host* host_ = nullptr;
  bool done_ = false;
  bool quit_ = false;
  double cpu_us_ = 0;
  Result<SessionReport> result_;
  std::thread thread_;
};

Bytes Unit() { return Bytes{1}; }

// Two hosts of one universe in the shape, fresh for each repetition.
std::pair<std::unique_ptr<Host>, std::unique_ptr<Host>> Build(const Shape& s, Responder& responder,
                                                              uint64_t seed) {
  SeededRng rng(seed);
  Replica seed_replica = Replica::Seed(rng);
  const NetworkId network = seed_replica.network();
  itc::Party pa = std::move(*seed_replica.TakeParty());
  itc::Party pb = *pa.Fork();
  auto a = std::make_unique<Host>(Replica::Fresh(network, std::move(pa)));
  auto b = std::make_unique<Host>(Replica::Fresh(network, std::move(pb)));
  std::vector<itc::Version> common;
  for (int i = 0; i < s.common; ++i) common.push_back(*a->Send(Unit()));
  if (s.common > 0) {
    auto [sa, sb] = MakePipe();
    responder.Serve(sb.get(), b.get());
    (void)Initiate(*sa, *a, Mode::kSync, {}, DeadlineIn(std::chrono::seconds(60)));
    (void)responder.Wait();
  }
  for (int i = 0; i < s.differing; ++i) {
    (void)a->Send(Unit());
    (void)b->Send(Unit());
  }
  for (int i = 0; i < s.redacted; ++i) {
    (void)a->Redact(common[i]);
    (void)b->Redact(common[s.redacted + i]);
  }
  return {std::move(a), std::move(b)};
}

// With GOSSIP_BENCH_PERF_CTL=<fifo> (perf record -D -1 --control
// fifo:<fifo>,<ack>) and GOSSIP_BENCH_PERF_CTL_ACK=<ack>, perf samples the
// timed sessions only, not the setup that builds each pair nor the check of
// each session's result (without the ack fifo the span's edges are late).
void PerfControl(const char* command) { bench::PerfControl("GOSSIP_BENCH_PERF_CTL", command); }

// glibc defers sorting freed chunks to the next allocation it cannot serve
// from its caches; settle what setup and checks freed before timing starts.
void SettleAllocator() {
  if (std::getenv("GOSSIP_BENCH_TRIM")) malloc_trim(0);
}

// The middle value (the upper one of an even count); `values` not empty.
double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Measured {
  double median_us = 0;
  double cpu_median_us = 0;
  double one_thread_median_us = 0;
  SessionReport report;
  bool ok = true;
};

// `m` with the medians of its sessions' wall times, CPU times over the pipe
// and CPU times on one thread.
Measured WithMedians(Measured m, const std::vector<double>& times,
                     const std::vector<double>& cpu_times,
                     const std::vector<double>& one_thread_times) {
  m.median_us = Median(times);
  m.cpu_median_us = Median(cpu_times);
  m.one_thread_median_us = Median(one_thread_times);
  return m;
}

// One session initiated by `a` against `b` over a fresh in-memory pipe, timed:
// wall time and both sides' thread CPU.
struct Timed {
  Result<SessionReport> initiator;
  Result<SessionReport> responder;
  double wall_us = 0;
  double cpu_us = 0;
};

Timed TimedSession(Host& a, Host& b, Responder& responder) {
  auto [sa, sb] = MakePipe();
  SettleAllocator();
  PerfControl("enable\n");
  const auto start = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuUs();
  responder.Serve(sb.get(), &b);
  Timed t{Initiate(*sa, a, Mode::kSync, {}, DeadlineIn(std::chrono::seconds(60))), SessionReport{}};
  const double cpu_initiator = ThreadCpuUs() - cpu0;
  double cpu_responder = 0;
  t.responder = responder.Wait(&cpu_responder);
  t.wall_us = MicrosSince(start);
  t.cpu_us = cpu_initiator + cpu_responder;
  PerfControl("disable\n");
  return t;
}

// The pipe's raw limit: the median time for one byte written to a MakePipe
// end to reach a thread waiting on the other end (a hop), from
// `round_trips` round trips between this thread and an echoing one. A
// session over the pipe pays at least a hop for each of its frames, and two
// more for handing the pipe to the responder thread and hearing that it
// finished (TimedSession); the one-thread column pays none. A hop after a
// thread has slept longer (a frame's work on the other side) costs more on
// this project's VMs: the figure is a floor.
constexpr int kHopRoundTrips = 2000;
Result<double> PipeHopUs(int round_trips) {
  auto [near, far] = MakePipe();
  std::thread echo([&far = *far, round_trips] {
    uint8_t byte = 0;
    for (int i = 0; i < round_trips; ++i) {
      const Deadline deadline = DeadlineIn(std::chrono::seconds(10));
      if (!far.Read({&byte, 1}, deadline) || !far.Write({&byte, 1}, deadline)) return;
    }
  });
  std::vector<double> round_trip_us;
  round_trip_us.reserve(round_trips);
  bool ok = true;
  for (int i = 0; i < round_trips && ok; ++i) {
    uint8_t byte = static_cast<uint8_t>(i);
    const Deadline deadline = DeadlineIn(std::chrono::seconds(10));
    const auto start = std::chrono::steady_clock::now();
    ok = near->Write({&byte, 1}, deadline) && near->Read({&byte, 1}, deadline);
    round_trip_us.push_back(MicrosSince(start));
  }
  near->Close();  // an echo still waiting (after a failure) returns
  echo.join();
  if (!ok) return MakeError(ErrorCode::kUnavailable, "a round trip over the pipe failed");
  return Median(std::move(round_trip_us)) / 2;
}

// One session between a and b on this thread, both sides' SessionMachines
// driven frame by frame (no pipe, no other thread). A round that moves no
// frame while a side is unfinished is an error, not a loop.
Status DriveOneThread(Host& a, Host& b) {
  ONCE_ASSIGN_OR_RETURN(SessionMachine ma, SessionMachine::Initiate(a, Mode::kSync, {}));
  ONCE_ASSIGN_OR_RETURN(SessionMachine mb, SessionMachine::Respond(b, {}));
  while (!ma.done() || !mb.done()) {
    size_t moved = 0;
    for (const Bytes& f : ma.TakeOutgoing()) {
      ONCE_RETURN_IF_ERROR(mb.OnFrame(f));
      ++moved;
    }
    ONCE_RETURN_IF_ERROR(ma.OnWritten());
    for (const Bytes& f : mb.TakeOutgoing()) {
      ONCE_RETURN_IF_ERROR(ma.OnFrame(f));
      ++moved;
    }
    ONCE_RETURN_IF_ERROR(mb.OnWritten());
    if (moved == 0 && (!ma.done() || !mb.done())) {
      return MakeError(ErrorCode::kInternal, "session stalled: no frame to move");
    }
  }
  return Ok();
}

// DriveOneThread, timed (and sampled, with GOSSIP_BENCH_PERF_CTL): its CPU
// time in microseconds, or its error.
Result<double> OneThreadSession(Host& a, Host& b) {
  PerfControl("enable\n");
  const double cpu0 = ThreadCpuUs();
  const Status s = DriveOneThread(a, b);
  const double cpu = ThreadCpuUs() - cpu0;
  PerfControl("disable\n");
  if (!s) return std::unexpected(s.error());
  return cpu;
}

Measured Measure(const Shape& s, Responder& responder) {
  std::vector<double> times, cpu_times, one_thread_times;
  Measured m;
  for (int rep = 0; rep < s.repetitions; ++rep) {
    auto [a, b] = Build(s, responder, 100 + rep);
    Timed t = TimedSession(*a, *b, responder);
    const auto& r = t.initiator;
    const auto& rb = t.responder;
    cpu_times.push_back(t.cpu_us);
    if (!r || !rb) {
      std::fprintf(stderr, "session failed: %s\n",
                   (!r ? r.error() : rb.error()).ToString().c_str());
      m.ok = false;
      return m;
    }
    const uint64_t expect = s.common - 2 * s.redacted + 2 * s.differing;
    if (a->Snap().size() != expect || !SameState(a->Snap(), b->Snap())) {
      std::fprintf(stderr, "session did not converge\n");
      m.ok = false;
      return m;
    }
    m.report = *r;
    times.push_back(t.wall_us);
    auto [a1, b1] = Build(s, responder, 100 + rep);
    SettleAllocator();
    Result<double> one = OneThreadSession(*a1, *b1);
    if (!one || a1->Snap().size() != expect || !SameState(a1->Snap(), b1->Snap())) {
      std::fprintf(stderr, "one-thread session failed: %s\n",
                   one ? "did not converge" : one.error().ToString().c_str());
      m.ok = false;
      return m;
    }
    one_thread_times.push_back(*one);
  }
  return WithMedians(std::move(m), times, cpu_times, one_thread_times);
}

// Repeated sessions on one pair holding `common` messages, each after one new
// message per side: what a node pays per gossip round in steady state.
Measured Steady(int common, int sessions, Responder& responder) {
  Shape s{common, 0, 0, "", 1};
  auto [a, b] = Build(s, responder, 7);
  std::vector<double> times, cpu_times;
  Measured m;
  for (int i = 0; i < sessions; ++i) {
    (void)a->Send(Unit());
    (void)b->Send(Unit());
    Timed t = TimedSession(*a, *b, responder);
    const auto& r = t.initiator;
    const auto& rb = t.responder;
    if (!r || !rb || (i == sessions - 1 && !SameState(a->Snap(), b->Snap()))) {
      m.ok = false;
      return m;
    }
    m.report = *r;
    times.push_back(t.wall_us);
    cpu_times.push_back(t.cpu_us);
  }
  // The same on one thread, on the pair as the sessions above left it.
  std::vector<double> one_thread_times;
  for (int i = 0; i < sessions; ++i) {
    (void)a->Send(Unit());
    (void)b->Send(Unit());
    Result<double> one = OneThreadSession(*a, *b);
    if (!one) {
      m.ok = false;
      return m;
    }
    one_thread_times.push_back(*one);
  }
  return WithMedians(std::move(m), times, cpu_times, one_thread_times);
}

std::string Pretty(double us) {
  char buf[32];
  if (us >= 1000) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", us / 1000);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f us", us);
  }
  return buf;
}

// A pass over 64 MiB, larger than this machine's caches: what was cached
// before it is not after.
void SweepCaches() {
  static std::vector<uint64_t> block(size_t{64} << 17);
  uint64_t sum = 0;
  for (size_t i = 0; i < block.size(); i += 8) sum += ++block[i];  // a line at a time
  asm volatile("" : : "r"(sum) : "memory");                        // keep the pass
}

// What runs between loading a pair and its first session, in this order and
// each or not: a pass over 64 MiB, a session on a small pair, a session on
// another pair of the measured shape.
struct ColdCase {
  bool sweep;
  bool small_session;
  bool shape_session;  // a session on another pair of the measured shape
  const char* name;
  const char* what;
};

// `gossip_bench cold`: the first four sessions on fresh (100000,1,0) pairs,
// one thread, after each of the ColdCases.
bool ColdSessions(int repetitions, Responder& responder) {
  const Shape loaded{100000, 1, 0, "", 1};
  const Shape small{0, 1, 0, "", 1};
  const ColdCase cases[] = {
      {false, false, false, "as loaded", "nothing"},
      {false, true, false, "code warm", "a session on another, small pair"},
      {true, false, false, "all cold", "a pass over 64 MiB"},
      {true, true, false, "tree cold, code warm",
       "a pass over 64 MiB, then a session on a small pair"},
      {false, false, true, "shape warm", "a session on another (100000,1,0) pair"},
  };
  std::printf(
      "| case | before the first session | session 1 | session 2 | session 3 | session 4 |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  for (const ColdCase& c : cases) {
    std::vector<std::vector<double>> times(4);
    for (int rep = 0; rep < repetitions; ++rep) {
      // The other pairs are made in every case, used or not, so that each
      // case's allocations before the timed sessions are the same; the other
      // big pair first, so that the measured pair is the last one loaded.
      auto [wa, wb] = Build(loaded, responder, 300 + rep);
      auto [a, b] = Build(loaded, responder, 100 + rep);
      auto [sa, sb] = Build(small, responder, 5);
      if (c.sweep) SweepCaches();
      if (c.small_session && !OneThreadSession(*sa, *sb)) return false;
      if (c.shape_session && !OneThreadSession(*wa, *wb)) return false;
      for (int k = 0; k < 4; ++k) {
        if (k > 0) {
          (void)a->Send(Unit());
          (void)b->Send(Unit());
        }
        Result<double> one = OneThreadSession(*a, *b);
        if (!one) return false;
        times[k].push_back(*one);
      }
      // Checked after the four, not between them: the check reads both
      // trees whole, which would warm the next session's.
      if (!SameState(a->Snap(), b->Snap())) {
        std::fprintf(stderr, "the cold sessions did not converge\n");
        return false;
      }
    }
    std::printf("| %s | %s |", c.name, c.what);
    for (const std::vector<double>& t : times) std::printf(" %s |", Pretty(Median(t)).c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("\n(medians of %d fresh pairs; one thread)\n", repetitions);
  return true;
}

// `gossip_bench apply`: one Host::Apply batch of kBatchOpsMax operations on a
// host that holds 100,000 messages, timed on one thread (the call holds the
// host's lock throughout): redactions of held messages; sends; and sends
// followed by redactions of held messages. Beside them, the same redactions
// as one Host::Redact call each (the time of all 4,096 calls).
struct ApplyCase {
  const char* name;
  int sends;         // new messages in the batch
  int redact_held;   // redactions of messages the host held before
  int redact_after;  // redactions of messages held before, after the sends
  bool one_by_one;   // each redaction a Host::Redact of its own (no sends)
};

bool ApplyBatches(int repetitions) {
  const int n = static_cast<int>(kBatchOpsMax);
  const ApplyCase cases[] = {
      {"redact held", 0, n, 0, false},
      {"send", n, 0, 0, false},
      {"send half, then redact held", n / 2, 0, n / 2, false},
      {"redact held, one Host::Redact each (all calls)", 0, n, 0, true},
  };
  std::printf("| batch of %d operations | Host::Apply (median) | fastest | slowest |\n", n);
  std::printf("|---|---:|---:|---:|\n");
  for (const ApplyCase& c : cases) {
    std::vector<double> times;
    for (int rep = 0; rep < repetitions; ++rep) {
      SeededRng rng(700 + rep);
      Replica seed = Replica::Seed(rng);
      const NetworkId network = seed.network();
      Host host(Replica::Fresh(network, std::move(*seed.TakeParty())));
      std::vector<itc::Version> held;
      for (int i = 0; i < 100000; ++i) held.push_back(*host.Send(Unit()));
      std::vector<Op> ops;
      for (int i = 0; i < c.redact_held; ++i) ops.push_back(Op::Redact(held[i * 24]));
      for (int i = 0; i < c.sends; ++i) ops.push_back(Op::Send(Unit()));
      for (int i = 0; i < c.redact_after; ++i) ops.push_back(Op::Redact(held[i * 48 + 1]));
      const auto start = std::chrono::steady_clock::now();
      Status applied = Ok();
      if (c.one_by_one) {
        for (size_t i = 0; i < ops.size() && applied; ++i) applied = host.Redact(ops[i].target);
      } else if (auto sent = host.Apply(ops); !sent) {
        applied = std::unexpected(sent.error());
      }
      const double us = MicrosSince(start);
      if (!applied) {
        std::fprintf(stderr, "apply: %s\n", applied.error().ToString().c_str());
        return false;
      }
      times.push_back(us);
    }
    std::sort(times.begin(), times.end());
    std::printf("| %s | %s | %s | %s |\n", c.name, Pretty(Median(times)).c_str(),
                Pretty(times.front()).c_str(), Pretty(times.back()).c_str());
    std::fflush(stdout);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "apply") {
    return ApplyBatches(argc > 2 ? std::max(1, std::atoi(argv[2])) : 5) ? 0 : 1;
  }
  if (argc > 1 && std::string(argv[1]) == "cold") {
    Responder responder;
    return ColdSessions(argc > 2 ? std::max(1, std::atoi(argv[2])) : 5, responder) ? 0 : 1;
  }
  const double scale = argc > 1 ? std::atof(argv[1]) : 1.0;
  const int only = argc > 2 ? std::atoi(argv[2]) : -1;  // one shape, by index
  const Shape shapes[] = {
      {0, 0, 0, "(converged)", 200},    {0, 1, 0, "34.5 us", 200},
      {0, 1000, 0, "2.98 ms", 20},      {10000, 0, 1, "155 us", 5},
      {10000, 1000, 0, "7.99 ms", 5},   {100000, 1, 0, "320 us", 3},
      {100000, 0, 10000, "4.12 ms", 3}, {0, 100000, 0, "408 ms", 3},
      {100000, 100000, 0, "537 ms", 3},
  };
  Responder responder;
  const Result<double> hop_before = PipeHopUs(kHopRoundTrips);
  std::printf(
      "| common | differing/side | redacted/side | published | wall (median) | "
      "cpu, both sides (median) | one thread (median) | frames | bytes | "
      "cpu per disputed msg/side |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  bool ok = true;
  for (int index = 0; index < static_cast<int>(std::size(shapes)); ++index) {
    if (only >= 0 && index != only) continue;
    Shape s = shapes[index];
    s.repetitions = std::max(1, static_cast<int>(s.repetitions * scale));
    const Measured m = Measure(s, responder);
    ok = ok && m.ok;
    const int disputed = s.differing + s.redacted;
    std::string per = disputed > 0 ? Pretty(m.cpu_median_us / 2 / disputed) : "-";
    std::printf("| %d | %d | %d | %s | %s | %s | %s | %llu | %llu | %s |\n", s.common, s.differing,
                s.redacted, s.published, Pretty(m.median_us).c_str(),
                Pretty(m.cpu_median_us).c_str(), Pretty(m.one_thread_median_us).c_str(),
                static_cast<unsigned long long>(m.report.frames),
                static_cast<unsigned long long>(m.report.bytes), per.c_str());
    std::fflush(stdout);
  }
  const Result<double> hop_after = PipeHopUs(kHopRoundTrips);
  if (!hop_before || !hop_after) {
    std::fprintf(stderr, "the pipe's raw limit: %s\n",
                 (!hop_before ? hop_before : hop_after).error().ToString().c_str());
    return 1;
  }
  std::printf(
      "\nThe pipe's raw limit in this run: a hop (one byte to a thread waiting on the other "
      "end) %s before the shapes, %s after (medians of %d round trips)\n",
      Pretty(*hop_before).c_str(), Pretty(*hop_after).c_str(), kHopRoundTrips);
#ifdef ONCE_MALLOC_TCMALLOC
  std::printf("\nallocator: tcmalloc\n");
#else
  std::printf("\nallocator: system (glibc)\n");
#endif
  if (only < 0) {
    std::printf("\nSteady state: repeated sessions on one pair, one new message per side each\n\n");
    std::printf(
        "| common | sessions | wall (median) | cpu, both sides (median) | one thread (median) | "
        "frames | bytes |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int common : {10000, 100000}) {
      const Measured m = Steady(common, 30, responder);
      ok = ok && m.ok;
      std::printf("| %d | 30 | %s | %s | %s | %llu | %llu |\n", common, Pretty(m.median_us).c_str(),
                  Pretty(m.cpu_median_us).c_str(), Pretty(m.one_thread_median_us).c_str(),
                  static_cast<unsigned long long>(m.report.frames),
                  static_cast<unsigned long long>(m.report.bytes));
    }
  }
  return ok ? 0 : 1;
}
