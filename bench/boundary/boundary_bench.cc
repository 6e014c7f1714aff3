// boundary_bench: what the boundary record costs a sush job (issue 13,
// BENCHMARKS.md "Sush: the boundary record").
//
//   boundary_bench [--jobs N] [--dir DIR]    # DIR on the disk to measure (default /var/tmp)
//
// One sled core behind the server's glue (rack::Sled over a gossip Host with
// no peers) runs N jobs one after another; the runner starts nothing (it
// reports each job ended at the next poll), so what is timed is the core and
// its record: a job start is a client's submit until the StartProcess (the
// gate writes the record naming the job first: one locker write, 2 renames
// and 4 fsyncs), a job end is the exit until its outcome is recorded (one
// more write). Each run is done with the record in memory
// (MemoryBoundaryStore) and on two folders of DIR (LockerBoundaryStore over
// PosixFs), and LockerBoundaryStore::Record is also timed alone. Then the
// record's encoded size: after the run, for a typical rack sled (one left
// universe: its cold-boot seed) and for the worst case (every field at its
// named limit). Prints markdown tables.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "once/base/hex.h"
#include "once/itc/version.h"
#include "once/locker/fs.h"
#include "once/rack/chain.h"
#include "once/rack/locker_boundary_store.h"
#include "once/rack/sled.h"

namespace {

using namespace once;
using Steady = std::chrono::steady_clock;

constexpr char kBoard[] = "913-0000019:BENCH0";

// Ends every started job at the next poll, with exit 0.
class InstantRunner final : public rack::JobRunner {
 public:
  Status Start(const rack::JobSpec& spec) override {
    ended_.push_back(rack::ProcessExited{spec.job_id, {}});
    return Ok();
  }
  Status Stop(const rack::JobId&) override { return Ok(); }
  std::vector<rack::ProcessExited> Poll(std::chrono::milliseconds) override {
    return std::exchange(ended_, {});
  }
  size_t running() const override { return ended_.size(); }

 private:
  std::vector<rack::ProcessExited> ended_;
};

struct Stats {
  double median_us = 0, p90_us = 0, mean_us = 0;
};

Stats Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  Stats s;
  if (us.empty()) return s;
  s.median_us = us[us.size() / 2];
  s.p90_us = us[us.size() * 9 / 10];
  for (double u : us) s.mean_us += u;
  s.mean_us /= static_cast<double>(us.size());
  return s;
}

double Us(Steady::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

bool Started(const std::vector<rack::Output>& outputs) {
  for (const auto& o : outputs) {
    if (const auto* changed = std::get_if<rack::JobStatusChanged>(&o)) {
      if (changed->status.state == rack::JobState::kStarted) return true;
    }
  }
  return false;
}

Bytes Request(const rack::RequestPayload& payload, const rack::KeyPair& keys) {
  return *rack::Encode(rack::Message{*rack::Sign(payload, keys)});
}

struct RunResult {
  Stats start, end;
  size_t jobs = 0;
  size_t record_bytes = 0;
  rack::BoundaryRecord record;
};

// N jobs through one sled whose record lives in `store`.
RunResult RunJobs(rack::BoundaryStore& store, int jobs) {
  SeededRng rng(7);
  const rack::KeyPair keys = rack::KeyPair::Generate(rng);
  rack::TrustedKeys trusted;
  (void)trusted.Add(keys.public_key);
  gossip::Host host(gossip::Replica::Seed(rng));
  rack::HostPort port(host, {});
  InstantRunner runner;
  rack::SledCore core(rack::SledConfig{rack::SledIdentity{kBoard, 0}, "bench", trusted, {}, {}},
                      rng, store);
  rack::Sled sled(core, runner, port);
  TimePoint now = FromUnixMillis(1'700'000'000'000);
  for (int i = 0; i < 3; ++i) (void)sled.Pump(now);

  std::optional<rack::Nonce> nonce;
  for (const auto& o : sled.Handle(rack::IssueSessionNonce{})) {
    if (const auto* reply = std::get_if<rack::Reply>(&o)) nonce = reply->nonce;
  }
  (void)sled.Handle(rack::ClientSubmit{Request(rack::SessionStart{kBoard, *nonce, {}}, keys)});
  (void)sled.Deliver(now);
  const rack::SessionId session = *core.active_session();

  std::vector<double> start_us, end_us;
  for (int i = 0; i < jobs; ++i) {
    const rack::JobId id = *core.next_free_job_id();
    const Bytes request = Request(rack::JobStart{id, session, "true", "*", false}, keys);
    const auto t0 = Steady::now();
    std::vector<rack::Output> outputs = sled.Handle(rack::ClientSubmit{request});
    std::vector<rack::Output> delivered = sled.Deliver(now);
    const auto t1 = Steady::now();
    if (!Started(delivered)) {
      std::fprintf(stderr, "boundary_bench: job %d did not start\n", i);
      std::exit(1);
    }
    (void)sled.Pump(now);  // the exit, and the outcome recorded
    const auto t2 = Steady::now();
    start_us.push_back(Us(t1 - t0));
    end_us.push_back(Us(t2 - t1));
    now += std::chrono::milliseconds(1);
  }
  RunResult result;
  result.start = Summarize(start_us);
  result.end = Summarize(end_us);
  result.jobs = static_cast<size_t>(jobs);
  result.record = core.boundary();
  result.record_bytes = rack::EncodeBoundary(core.boundary())->size();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 200;
  std::filesystem::path dir = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--jobs") == 0 && i + 1 < argc) jobs = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) dir = argv[++i];
  }
  const auto root = dir / ("boundary-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "m2a");
  std::filesystem::create_directories(root / "m2b");

  rack::MemoryBoundaryStore memory;
  const RunResult in_memory = RunJobs(memory, jobs);

  locker::PosixFs fs;
  SeededRng rng(9);
  auto drives =
      rack::LockerBoundaryStore::Open({{root / "m2a", root / "m2b"}, &fs, &rng, "boundary"});
  if (!drives) {
    std::fprintf(stderr, "boundary_bench: %s\n", drives.error().ToString().c_str());
    return 1;
  }
  const RunResult on_disk = RunJobs(**drives, jobs);
  std::vector<double> record_us;
  for (int i = 0; i < jobs; ++i) {
    const auto t0 = Steady::now();
    if (auto written = (*drives)->Record(on_disk.record); !written) {
      std::fprintf(stderr, "boundary_bench: %s\n", written.error().ToString().c_str());
      return 1;
    }
    record_us.push_back(Us(Steady::now() - t0));
  }
  const Stats record = Summarize(record_us);
  const uint64_t writes = (*drives)->writes();
  drives->reset();
  std::filesystem::remove_all(root);

  std::printf("%d jobs, one after another; the drives: two folders of %s\n\n", jobs, dir.c_str());
  std::printf("| record kept | job start median | p90 | mean | job end median | p90 | mean |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [name, r] :
       {std::pair{"in memory (MemoryBoundaryStore)", &in_memory},
        std::pair{"on two drive folders (LockerBoundaryStore, 4 fsyncs a write)", &on_disk}}) {
    std::printf("| %s | %.0f us | %.0f us | %.0f us | %.0f us | %.0f us | %.0f us |\n", name,
                r->start.median_us, r->start.p90_us, r->start.mean_us, r->end.median_us,
                r->end.p90_us, r->end.mean_us);
  }
  std::printf(
      "\nLockerBoundaryStore::Record alone: median %.0f us, p90 %.0f us, mean %.0f us (%llu "
      "writes in all)\n\n",
      record.median_us, record.p90_us, record.mean_us, static_cast<unsigned long long>(writes));

  // Sizes.
  rack::BoundaryRecord typical = on_disk.record;
  gossip::NetworkId seed;
  seed.bytes.fill(0x5e);
  rack::UniverseBoundary seed_universe;
  seed_universe.floor = typical.here.floor;
  seed_universe.markers = typical.here.floor;
  typical.left.push_back(rack::LeftUniverse{seed, seed_universe});
  const rack::BoundaryRecord worst = rack::WorstCaseBoundaryRecord();
  auto worst_bytes = rack::EncodeBoundary(worst);
  std::printf("| record | bytes encoded |\n|---|---:|\n");
  std::printf("| after the run (one universe, %zu jobs) | %zu |\n", in_memory.jobs,
              on_disk.record_bytes);
  std::printf("| a typical rack sled (its cold-boot seed universe in the map) | %zu |\n",
              rack::EncodeBoundary(typical)->size());
  std::printf(
      "| worst case (rack::WorstCaseBoundaryRecord: %zu left universes, V at %zu bytes, %zu + %zu "
      "markers of %zu bytes each, 256-byte error texts) | %s |\n",
      rack::kLeftUniversesMax, rack::kBoundaryVersionBytesMax, rack::kMarkersMax, rack::kMarkersMax,
      rack::kMarkerBytesMax,
      worst_bytes ? std::to_string(worst_bytes->size()).c_str()
                  : worst_bytes.error().ToString().c_str());
  std::printf(
      "(a drive's file is the record plus the locker's 66-byte envelope, docs/locker-format.md; "
      "kBoundaryRecordBytesMax is %zu)\n",
      rack::kBoundaryRecordBytesMax);
  return 0;
}
