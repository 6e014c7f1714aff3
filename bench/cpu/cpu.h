// CPU accounting shared by the benchmarks: this process through getrusage,
// a local PostgreSQL server through /proc.

#pragma once

#include <string>

#include "once/base/result.h"

namespace once::bench {

// CPU seconds (user + system) of this process, all threads.
double ProcessCpuSeconds();
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
