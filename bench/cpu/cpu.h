// CPU accounting shared by the benchmarks: this process through getrusage,
// a local PostgreSQL server through /proc, and perf's sampling switched on
// for a timed span only.

#pragma once

#include <string>

#include "once/base/result.h"

namespace once::bench {

// CPU seconds (user + system) of this process, all threads.
double ProcessCpuSeconds();

// Tells `perf record -D -1 --control fifo:<fifo>` to start or stop sampling
// ("enable\n", "disable\n") when the environment variable `fifo_env` names
// the fifo; does nothing otherwise. So a profile covers a benchmark's timed
// span only, not the setup around it. Writes with open/write, no stdio: a
// FILE buffer would be a heap block inside the span it brackets. perf reads
// the fifo when it gets to it, so without more the profile starts late and
// ends late (it took in a bench's checks after its span); with
// `--control fifo:<fifo>,<ack>` and `<fifo_env>_ACK=<ack>` in the
// environment, it returns only once perf has acknowledged the command.
void PerfControl(const char* fifo_env, const char* command);

// CPU seconds of the PostgreSQL server behind `conn_url`: its postmaster and
// every child (backends, WAL writer, checkpointer) but autovacuum workers
// (they run when the server decides, so they would land on either side of a
// paired run at random), read from /proc.
class PostgresServerCpu {
 public:
  static Result<PostgresServerCpu> Find(const std::string& conn_url);
  static PostgresServerCpu OfPostmaster(int postmaster_pid) {
    return PostgresServerCpu(postmaster_pid);
  }
  double Seconds() const;

 private:
  explicit PostgresServerCpu(int postmaster_pid) : postmaster_pid_(postmaster_pid) {}
  int postmaster_pid_;
};

}  // namespace once::bench
