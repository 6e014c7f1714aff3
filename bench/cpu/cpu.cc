// CPU accounting shared by the benchmarks (cpu.h): this process through
// getrusage, the PostgreSQL server through /proc (its postmaster and the
// children but autovacuum workers).

#include "cpu.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace once::bench {
namespace {

struct ProcStat {
  int ppid = 0;
  double cpu_s = 0;  // utime + stime
};

// /proc/<pid>/stat: "pid (comm) state ppid ... utime(14) stime(15) ...";
// comm may hold spaces, so fields are counted after the last ')'.
std::optional<ProcStat> ReadProcStat(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  ProcStat out;
  long long utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {  // field 3 is the state
    if (i == 4) out.ppid = std::atoi(field.c_str());
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) {
      stime = std::atoll(field.c_str());
      break;
    }
  }
  out.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return out;
}

}  // namespace

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

Result<PostgresServerCpu> PostgresServerCpu::Find(const std::string& conn_url) {
  PGconn* conn = PQconnectdb(conn_url.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string why = PQerrorMessage(conn);
    PQfinish(conn);
    return MakeError(ErrorCode::kUnavailable, "connect: " + why);
  }
  // A backend's parent is the postmaster; read it while the backend lives.
  PGresult* res = PQexec(conn, "SELECT pg_backend_pid()");
  int backend = PQresultStatus(res) == PGRES_TUPLES_OK ? std::atoi(PQgetvalue(res, 0, 0)) : 0;
  PQclear(res);
  std::optional<ProcStat> stat = backend > 0 ? ReadProcStat(backend) : std::nullopt;
  PQfinish(conn);
  if (!stat || stat->ppid <= 1) {
    return MakeError(ErrorCode::kUnavailable,
                     "the PostgreSQL server is not a local process this one can see");
  }
  return PostgresServerCpu(stat->ppid);
}

namespace {

// An autovacuum worker runs when the server decides, not when a write asks;
// counted, it lands on whichever side of a paired run it falls in.
bool IsAutovacuum(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find("autovacuum") != std::string::npos;
}

}  // namespace

double PostgresServerCpu::Seconds() const {
  double total = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    int pid = std::atoi(entry.path().filename().c_str());
    if (pid <= 0) continue;
    std::optional<ProcStat> stat = ReadProcStat(pid);
    if (!stat || (pid != postmaster_pid_ && stat->ppid != postmaster_pid_)) continue;
    if (!IsAutovacuum(pid)) total += stat->cpu_s;
  }
  return total;
}

void PerfControl(const char* fifo_env, const char* command) {
  const char* fifo = std::getenv(fifo_env);
  if (fifo == nullptr) return;
  const int fd = open(fifo, O_WRONLY);
  if (fd < 0) return;
  (void)!write(fd, command, std::strlen(command));
  close(fd);
  const char* ack = std::getenv((std::string(fifo_env) + "_ACK").c_str());
  if (ack == nullptr) return;
  const int ack_fd = open(ack, O_RDONLY);
  if (ack_fd < 0) return;
  char reply[8];
  (void)!read(ack_fd, reply, sizeof(reply));  // perf writes "ack\n" once it has acted
  close(ack_fd);
}

}  // namespace once::bench
