// sush_bench: a local rack of real sush-server processes under load
// (BENCHMARKS.md, "Sush: the API under load").
//
//   build/bench/sush/sush_bench --sleds 16 --dir /tmp/sush-bench
//
// What it measures, in one run, on a rack `sush rack up` starts:
//   idle CPU    every server's utime+stime over --idle-s seconds once the rack has
//               converged, as a share of one core (all sleds together)
//   raw floors  one /v1/info round trip on a keep-alive connection (the HTTP
//               floor), and `bash -c true` started and reaped in this process
//               (the executor's floor for a trivial job)
//   API submit  --jobs pre-signed jobs of one chain POSTed one after another
//               on one keep-alive connection to sled 0: jobs accepted per second,
//               for jobs that target no sled (the accept path alone) and for
//               `true` on sled 0 (then also how fast they run to Stopped)
//   client      --client-jobs runs of `sush --rack DIR job start -T 0 true`:
//               jobs per second through the client (a process each)
//   latency     --latency-jobs jobs `true` on every sled, one at a time, each
//               submitted to the next sled in turn: from the POST to every sled's
//               own status being terminal (each sled asked for its own), p50/p99
//   idle conns  /v1/info p50/p99 with --idle-connections idle TCP connections
//               held to sled 0, against the same without them
// The rack is stopped at the end (`sush rack down`).

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "once/base/hex.h"
#include "once/rack/chain.h"
#include "once/sush_net/api.h"

namespace {

using namespace once;
using namespace std::chrono_literals;
using nlohmann::json;
using Steady = std::chrono::steady_clock;

struct Options {
  int sleds = 4;
  std::string dir = "/tmp/sush-bench";
  int jobs = 1000;
  int client_jobs = 50;
  int latency_jobs = 100;
  int idle_s = 20;
  int idle_connections = 1000;
  std::string sush = SUSH_BINARY;
};

struct RackSled {
  std::string baseboard;
  sush_net::Address http;
  int pid = 0;
};

double Ms(Steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t i = std::min(values.size() - 1, static_cast<size_t>(p * (values.size() - 1) + 0.5));
  return values[i];
}

// Runs a program, waits; its stdout.
std::string Run(const std::vector<std::string>& args, int* status = nullptr) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return "";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    const int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(out[0], buffer, sizeof buffer)) > 0) text.append(buffer, n);
  ::close(out[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (status) *status = st;
  return text;
}

uint64_t CpuTicks(const std::vector<RackSled>& sleds) {
  uint64_t total = 0;
  for (const RackSled& s : sleds) {
    std::ifstream in("/proc/" + std::to_string(s.pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t close = text.rfind(')');
    std::istringstream fields(text.substr(close + 2));
    std::string f;
    for (int i = 3; i <= 15; ++i) {
      fields >> f;
      if (i == 14 || i == 15) total += std::stoull(f);
    }
  }
  return total;
}

std::string MachineLine() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model;
  int cpus = 0;
  while (std::getline(cpu, line)) {
    if (line.starts_with("model name") && model.empty()) model = line.substr(line.find(':') + 2);
    if (line.starts_with("processor")) ++cpus;
  }
  std::ifstream load("/proc/loadavg");
  std::string l1, l5;
  load >> l1 >> l5;
  return std::to_string(cpus) + " CPUs (" + model + "), load average " + l1 + " / " + l5;
}

bool OwnTerminal(const sush_net::SushClient& client, const rack::JobId& id,
                 const std::string& baseboard) {
  auto job = client.Job(id);
  if (!job || !(*job)["statuses"].contains(baseboard)) return false;
  return (*job)["statuses"][baseboard].value("terminal", false);
}

// A chain of jobs signed ahead, from the session's next position.
std::vector<Bytes> SignChain(const rack::KeyPair& keys, const rack::SessionId& session,
                             rack::JobId next, int count, const std::string& command,
                             const std::string& target, std::vector<rack::JobId>* ids) {
  std::vector<Bytes> out;
  for (int i = 0; i < count; ++i) {
    auto request = rack::Sign(rack::JobStart{next, session, command, target, false}, keys);
    if (ids) ids->push_back(next);
    next = rack::NextJobId(rack::ToBeSignedDigest(*request));
    out.push_back(*rack::Encode(rack::Message{*request}));
  }
  return out;
}

// Submits pre-signed jobs one after another; jobs per second.
double SubmitAll(const sush_net::SushClient& sled, const std::vector<Bytes>& wires) {
  const auto start = Steady::now();
  for (size_t i = 0; i < wires.size(); ++i) {
    auto answer = sled.SubmitBytes(wires[i]);
    if (!answer) {
      std::fprintf(stderr, "submit %zu: %s\n", i, answer.error().ToString().c_str());
      std::exit(1);
    }
  }
  return wires.size() / std::chrono::duration<double>(Steady::now() - start).count();
}

rack::JobId NextOf(const sush_net::SushClient& sled) {
  auto session = sled.Session();
  return **sush_net::IdField<rack::JobId>(*session, "next_job_id");
}

std::vector<double> InfoLatencies(const sush_net::SushClient& sled, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i) {
    const auto t = Steady::now();
    if (!sled.Info()) std::fprintf(stderr, "info failed\n");
    out.push_back(Ms(Steady::now() - t));
  }
  return out;
}

int ConnectIdle(const sush_net::Address& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(address.port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One small write and fsync of a file in `dir` (what a record write repeats).
double FsyncMs(const std::string& dir) {
  std::vector<double> times;
  const std::string path = dir + "/fsync-probe";
  for (int i = 0; i < 30; ++i) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const auto t = Steady::now();
    (void)!::write(fd, "0123456789abcdef", 16);
    ::fsync(fd);
    times.push_back(Ms(Steady::now() - t));
    ::close(fd);
  }
  ::unlink(path.c_str());
  return Percentile(times, 0.5);
}

double BashTrueMs() {
  std::vector<double> times;
  for (int i = 0; i < 50; ++i) {
    const auto t = Steady::now();
    Run({"/bin/bash", "-c", "true"});
    times.push_back(Ms(Steady::now() - t));
  }
  return Percentile(times, 0.5);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--sleds")
      o.sleds = std::stoi(value);
    else if (flag == "--dir")
      o.dir = value;
    else if (flag == "--jobs")
      o.jobs = std::stoi(value);
    else if (flag == "--client-jobs")
      o.client_jobs = std::stoi(value);
    else if (flag == "--latency-jobs")
      o.latency_jobs = std::stoi(value);
    else if (flag == "--idle-s")
      o.idle_s = std::stoi(value);
    else if (flag == "--idle-connections")
      o.idle_connections = std::stoi(value);
    else if (flag == "--sush")
      o.sush = value;
    else {
      std::fprintf(stderr, "sush_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::printf("machine: %s\n", MachineLine().c_str());
  std::filesystem::remove_all(o.dir);
  int status = 0;
  const std::string up =
      Run({o.sush, "rack", "up", std::to_string(o.sleds), "--dir", o.dir, "--json"}, &status);
  if (status != 0) {
    std::fprintf(stderr, "rack up failed: %s\n", up.c_str());
    return 1;
  }
  const json rack = json::parse(up);
  std::vector<RackSled> sleds;
  for (const json& s : rack["sleds"]) {
    sleds.push_back(RackSled{s["baseboard"], *sush_net::ParseAddress(s["http"].get<std::string>()),
                             s["pid"].get<int>()});
  }
  auto keys = sush_net::LoadKeyPair(rack["key"].get<std::string>());
  if (!keys) return 1;
  std::vector<sush_net::SushClient> clients;
  for (const RackSled& s : sleds) clients.emplace_back(s.http, sush_net::ClientOptions{10000ms});

  // Idle CPU, after the rack settled.
  std::this_thread::sleep_for(3s);
  const uint64_t ticks0 = CpuTicks(sleds);
  const auto t0 = Steady::now();
  std::this_thread::sleep_for(std::chrono::seconds(o.idle_s));
  const double idle_share = 100.0 * (CpuTicks(sleds) - ticks0) / ::sysconf(_SC_CLK_TCK) /
                            std::chrono::duration<double>(Steady::now() - t0).count();
  std::printf("sleds %d: idle CPU of the rack %.2f%% of one core (%d s)\n", o.sleds, idle_share,
              o.idle_s);

  // Raw floors.
  const double info_ms = Percentile(InfoLatencies(clients[0], 200), 0.5);
  const double bash_ms = BashTrueMs();
  const double fsync_ms = FsyncMs(o.dir);
  std::printf(
      "raw: /v1/info round trip p50 %.3f ms; bash -c true p50 %.2f ms; a 16-byte write+fsync in "
      "%s p50 %.2f ms (a job costs each sled two boundary records, 4 fsyncs each)\n",
      info_ms, bash_ms, o.dir.c_str(), fsync_ms);

  auto session = clients[0].StartSession(*keys);
  if (!session) {
    std::fprintf(stderr, "session: %s\n", session.error().ToString().c_str());
    return 1;
  }
  for (const auto& c : clients) {
    while (true) {
      auto s = c.Session();
      if (s && (*s)["active"] == session->ToString()) break;
      std::this_thread::sleep_for(10ms);
    }
  }

  // API submit: jobs that target no sled, then `true` on sled 0.
  std::vector<Bytes> none =
      SignChain(*keys, *session, NextOf(clients[0]), o.jobs, "true", "31", nullptr);
  const double accept_none = SubmitAll(clients[0], none);
  std::this_thread::sleep_for(1s);
  std::vector<rack::JobId> run_ids;
  const int run_jobs = std::min(o.jobs, 900);  // within queued_jobs_per_session_max
  std::vector<Bytes> runs =
      SignChain(*keys, *session, NextOf(clients[0]), run_jobs, "true", "0", &run_ids);
  const auto run_start = Steady::now();
  const double accept_run = SubmitAll(clients[0], runs);
  while (!OwnTerminal(clients[0], run_ids.back(), sleds[0].baseboard)) {
    std::this_thread::sleep_for(5ms);
  }
  const double ran = run_jobs / std::chrono::duration<double>(Steady::now() - run_start).count();
  std::printf(
      "API, one connection, sled 0: %.0f jobs/s accepted (targeting no sled, %d jobs); %.0f "
      "jobs/s accepted and %.0f jobs/s run to Stopped (`true` on sled 0, %d jobs)\n",
      accept_none, o.jobs, accept_run, ran, run_jobs);

  // Through the client: a process a job.
  const auto client_start = Steady::now();
  for (int i = 0; i < o.client_jobs; ++i) {
    Run({o.sush, "--rack", o.dir, "job", "start", "-T", "0", "true"}, &status);
    if (status != 0) {
      std::fprintf(stderr, "sush job start failed\n");
      return 1;
    }
  }
  const double client_rate =
      o.client_jobs / std::chrono::duration<double>(Steady::now() - client_start).count();
  std::printf("client: %.1f jobs/s through `sush job start` (%d runs, a process each)\n",
              client_rate, o.client_jobs);
  std::this_thread::sleep_for(2s);

  // Submit to terminal on every sled.
  std::vector<double> latencies;
  for (int i = 0; i < o.latency_jobs; ++i) {
    const sush_net::SushClient& via = clients[i % clients.size()];
    std::vector<rack::JobId> ids;
    std::vector<Bytes> one = SignChain(*keys, *session, NextOf(via), 1, "true", "*", &ids);
    const auto start = Steady::now();
    if (!via.SubmitBytes(one[0])) {
      std::fprintf(stderr, "latency submit failed\n");
      return 1;
    }
    std::vector<bool> done(sleds.size(), false);
    size_t left = sleds.size();
    while (left > 0) {
      for (size_t s = 0; s < sleds.size(); ++s) {
        if (!done[s] && OwnTerminal(clients[s], ids[0], sleds[s].baseboard)) {
          done[s] = true;
          --left;
        }
      }
      if (left > 0) std::this_thread::sleep_for(1ms);
      if (Steady::now() - start > 30s) {
        std::fprintf(stderr, "job %d not terminal everywhere in 30 s\n", i);
        return 1;
      }
    }
    latencies.push_back(Ms(Steady::now() - start));
  }
  std::printf(
      "latency, %d jobs `true` on all %d sleds: submit to terminal everywhere p50 %.1f ms, "
      "p99 %.1f ms, max %.1f ms\n",
      o.latency_jobs, o.sleds, Percentile(latencies, 0.5), Percentile(latencies, 0.99),
      Percentile(latencies, 1.0));

  // /v1/info with idle connections held.
  const std::vector<double> before = InfoLatencies(clients[0], 100);
  std::vector<int> idle;
  for (int i = 0; i < o.idle_connections; ++i) {
    const int fd = ConnectIdle(sleds[0].http);
    if (fd >= 0) idle.push_back(fd);
  }
  std::this_thread::sleep_for(500ms);
  std::vector<double> held;
  for (int i = 0; i < 100; ++i) {  // a fresh connection each time, as a new client
    sush_net::SushClient fresh(sleds[0].http, {5000ms});
    const auto t = Steady::now();
    if (!fresh.Info()) std::fprintf(stderr, "info failed with idle connections\n");
    held.push_back(Ms(Steady::now() - t));
  }
  for (int fd : idle) ::close(fd);
  std::printf(
      "/v1/info: p50 %.2f ms, p99 %.2f ms alone; with %zu idle connections held, a new "
      "client p50 %.2f ms, p99 %.2f ms\n",
      Percentile(before, 0.5), Percentile(before, 0.99), idle.size(), Percentile(held, 0.5),
      Percentile(held, 0.99));

  Run({o.sush, "rack", "down", "--dir", o.dir});
  std::printf("machine after: %s\n", MachineLine().c_str());
  return 0;
}
