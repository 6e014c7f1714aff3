#include "once/rack/executor.h"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sodium.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "once/rack/limits.h"

namespace once::rack {
namespace {

constexpr const char* kPath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
constexpr size_t kReadChunkBytes = 64 * 1024;

Error Errno(const std::string& what) {
  return MakeError(ErrorCode::kUnavailable, what + ": " + std::strerror(errno)).error();
}

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

Result<Fd> CreatePrivateFile(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(Errno("create " + path.string()));
  Fd owned(fd);
  if (::fchmod(fd, 0600) != 0) return std::unexpected(Errno("chmod " + path.string()));
  return owned;
}

Status WriteAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(Errno("write"));
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Ok();
}

Status MakePrivateDir(const std::filesystem::path& path, bool must_be_new) {
  if (::mkdir(path.c_str(), 0700) != 0) {
    if (errno != EEXIST) return std::unexpected(Errno("mkdir " + path.string()));
    if (must_be_new) {
      return MakeError(ErrorCode::kPermissionDenied,
                       "job output folder exists: the job ran here before", path.string());
    }
  }
  if (::chmod(path.c_str(), 0700) != 0) return std::unexpected(Errno("chmod " + path.string()));
  return Ok();
}

// What the child reports through the exec-error pipe when it cannot exec.
struct ChildFailure {
  int stage;  // 1 chdir, 2 dup2, 3 rlimit, 4 exec, 5 stdin
  int error;
};

[[noreturn]] void ChildFail(int pipe_fd, int stage) {
  ChildFailure failure{stage, errno};
  [[maybe_unused]] ssize_t n = ::write(pipe_fd, &failure, sizeof failure);
  ::_exit(127);
}

struct ChildPlan {
  const char* shell;
  char* const* argv;
  char* const* envp;
  const char* home;
  int stdout_fd;
  int stderr_fd;
  int error_fd;
  int go_fd;  // the parent writes one byte once the job's pidfile is durable
  // The write end of the go pipe, which the fork copied: closed at once, or a
  // parent that dies before its go would leave this child waiting forever
  // (holding every descriptor of the server: the drives' locks, its ports).
  int go_write_fd;
  ResourceLimits limits;
};

// Runs in the forked child: only async-signal-safe calls.
[[noreturn]] void RunChild(const ChildPlan& plan) {
  ::setsid();
  ::close(plan.go_write_fd);
  // Nothing runs before the parent has recorded this process: a server that
  // dies in between leaves no job it cannot find again (EOF: it died).
  char go = 0;
  ssize_t got;
  while ((got = ::read(plan.go_fd, &go, 1)) < 0 && errno == EINTR) {
  }
  if (got != 1) ::_exit(126);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
  sigset_t empty;
  ::sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  rlimit cpu{plan.limits.cpu_seconds, plan.limits.cpu_seconds + 1};
  rlimit as{plan.limits.memory_bytes, plan.limits.memory_bytes};
  rlimit fsize{plan.limits.file_bytes, plan.limits.file_bytes};
  if (::setrlimit(RLIMIT_CPU, &cpu) != 0 || ::setrlimit(RLIMIT_AS, &as) != 0 ||
      ::setrlimit(RLIMIT_FSIZE, &fsize) != 0) {
    ChildFail(plan.error_fd, 3);
  }
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0) ChildFail(plan.error_fd, 5);
  if (::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0) ChildFail(plan.error_fd, 2);
  if (::chdir(plan.home) != 0) ChildFail(plan.error_fd, 1);
  // Everything else this process had open stays out of the job (the error
  // pipe is close-on-exec).
  if (plan.error_fd > 3) ::close_range(3, plan.error_fd - 1, 0);
  ::close_range(plan.error_fd + 1, ~0U, 0);
  ::execve(plan.shell, plan.argv, plan.envp);
  ChildFail(plan.error_fd, 4);
}

// NULL-terminated char* views over strings that outlive them.
std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The kernel's start time of `pid` (clock ticks since boot, /proc/PID/stat
// field 22), or nullopt if there is no such process.
std::optional<uint64_t> ProcessStartTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (!in.good() && text.empty()) return std::nullopt;
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return std::nullopt;
}

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// Kills a process group and waits (bounded) until none of it is left.
bool KillGroup(pid_t pgid, std::chrono::milliseconds wait) {
  ::kill(-pgid, SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (::kill(-pgid, 0) == 0 || errno != ESRCH) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ::usleep(5000);
  }
  return true;
}

}  // namespace

struct ProcessExecutor::Job {
  JobId id;
  pid_t pid = -1;
  Fd pipes[2];  // stdout, stderr read ends
  Fd files[2];  // stdout, stderr output files
  crypto_generichash_state hashes[2];
  uint64_t bytes[2] = {0, 0};
  std::optional<int> wait_status;  // once the leader is reaped
  std::string failure;             // why the executor killed it, if it did
  ErrorCode failure_code = ErrorCode::kInternal;
};

Result<ExecutorConfig> CompleteExecutorConfig(ExecutorConfig config) {
  if (config.base_dir.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "executor base_dir is not set");
  }
  const ResourceLimits& l = config.limits;
  const ResourceLimits& c = kResourceCeilings;
  if (l.cpu_seconds == 0 || l.cpu_seconds > c.cpu_seconds) {
    return LimitError("cpu_seconds", static_cast<int64_t>(l.cpu_seconds),
                      static_cast<int64_t>(c.cpu_seconds));
  }
  if (l.memory_bytes > c.memory_bytes) {
    return LimitError("memory_bytes", static_cast<int64_t>(l.memory_bytes),
                      static_cast<int64_t>(c.memory_bytes));
  }
  if (l.file_bytes > c.file_bytes) {
    return LimitError("file_bytes", static_cast<int64_t>(l.file_bytes),
                      static_cast<int64_t>(c.file_bytes));
  }
  if (config.output_bytes_max > kOutputBytesCeiling) {
    return LimitError("output_bytes_max", static_cast<int64_t>(config.output_bytes_max),
                      static_cast<int64_t>(kOutputBytesCeiling));
  }
  if (config.home.empty() || config.user.empty()) {
    struct passwd entry {};
    struct passwd* found = nullptr;
    std::array<char, 4096> buffer{};
    if (::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
        found == nullptr) {
      return MakeError(ErrorCode::kUnavailable, "no passwd entry for this user");
    }
    if (config.home.empty()) config.home = entry.pw_dir;
    if (config.user.empty()) config.user = entry.pw_name;
  }
  return config;
}

Result<std::unique_ptr<ProcessExecutor>> ProcessExecutor::Create(ExecutorConfig config) {
  EnsureSodium();
  ONCE_ASSIGN_OR_RETURN(config, CompleteExecutorConfig(std::move(config)));
  std::error_code ec;
  std::filesystem::create_directories(config.base_dir, ec);
  if (ec) return MakeError(ErrorCode::kUnavailable, "create " + config.base_dir.string());
  ONCE_RETURN_IF_ERROR(MakePrivateDir(config.base_dir / "jobs", /*must_be_new=*/false));
  ONCE_RETURN_IF_ERROR(MakePrivateDir(config.base_dir / "running", /*must_be_new=*/false));
  std::unique_ptr<ProcessExecutor> executor(new ProcessExecutor(std::move(config)));
  ONCE_RETURN_IF_ERROR(executor->EndOrphans());
  return executor;
}

std::filesystem::path ProcessExecutor::PidfilePath(const JobId& id) const {
  return config_.base_dir / "running" / (id.ToString() + ".pid");
}

// Durable before the job's process may exec (RunChild waits for it).
Status ProcessExecutor::WritePidfile(const JobId& id, pid_t pid) {
  const auto start = ProcessStartTicks(pid);
  nlohmann::json record = {{"job_id", id.ToString()},
                           {"pid", pid},
                           {"start_ticks", start.value_or(0)},
                           {"boot_id", BootId()}};
  const std::string text = record.dump() + "\n";
  const auto path = PidfilePath(id);
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  {
    ::unlink(tmp.c_str());
    ONCE_ASSIGN_OR_RETURN(Fd fd, CreatePrivateFile(tmp));
    ONCE_RETURN_IF_ERROR(
        WriteAll(fd.get(), reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    if (::fsync(fd.get()) != 0) return std::unexpected(Errno("fsync " + tmp.string()));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return std::unexpected(Errno("rename " + path.string()));
  }
  Fd dir(::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.open() || ::fsync(dir.get()) != 0) {
    return std::unexpected(Errno("fsync " + path.parent_path().string()));
  }
  return Ok();
}

void ProcessExecutor::RemovePidfile(const JobId& id) { ::unlink(PidfilePath(id).c_str()); }

// A previous life's jobs that may still run: every pidfile names a process
// group; if its leader is the same process (same boot, same start time),
// the whole group is killed, and the server reports the job Interrupted
// through the boundary rules. Pidfiles of processes long gone are removed.
Status ProcessExecutor::EndOrphans() {
  std::error_code ec;
  const std::string boot = BootId();
  for (const auto& entry : std::filesystem::directory_iterator(config_.base_dir / "running", ec)) {
    const auto& path = entry.path();
    if (path.extension() != ".pid") {
      std::filesystem::remove(path, ec);  // a .tmp a crash left
      continue;
    }
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    nlohmann::json record = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.value("boot_id", std::string()) == boot &&
        record.contains("pid") && record["pid"].is_number_integer()) {
      const pid_t pid = record["pid"].get<pid_t>();
      const auto start = ProcessStartTicks(pid);
      const uint64_t recorded = record.value("start_ticks", uint64_t{0});
      if (pid > 1 && start && (recorded == 0 || *start == recorded)) {
        if (!KillGroup(pid, kOrphanKillWait)) {
          return MakeError(
              ErrorCode::kUnavailable,
              "job process group " + std::to_string(pid) + " of a previous life " + "would not die",
              path.string());
        }
        if (auto id = JobId::Parse(record.value("job_id", std::string())); id) {
          orphans_killed_.push_back(*id);
        }
      } else if (pid > 1 && !start) {
        // The leader is gone; members of its group may not be.
        (void)KillGroup(pid, kOrphanKillWait);
      }
    }
    std::filesystem::remove(path, ec);
  }
  if (ec)
    return MakeError(ErrorCode::kUnavailable, "list " + (config_.base_dir / "running").string());
  return Ok();
}

ProcessExecutor::ProcessExecutor(ExecutorConfig config) : config_(std::move(config)) {}

ProcessExecutor::~ProcessExecutor() {
  for (auto& [id, job] : jobs_) {
    ::kill(-job->pid, SIGKILL);
    if (!job->wait_status) {
      int status = 0;
      while (::waitpid(job->pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    RemovePidfile(id);
  }
}

std::filesystem::path ProcessExecutor::JobDir(const JobId& id) const {
  return config_.base_dir / "jobs" / id.ToString();
}

Status ProcessExecutor::Start(const JobSpec& spec) {
  if (spec.command.empty() || spec.command.front() == '-') {
    return MakeError(ErrorCode::kInvalidArgument, "command empty or starts with '-'");
  }
  if (spec.command.size() > kCommandBytesMax) {
    return LimitError("command_bytes_max", static_cast<int64_t>(spec.command.size()),
                      static_cast<int64_t>(kCommandBytesMax));
  }
  if (jobs_.size() >= config_.running_jobs_max) {
    return LimitError("running_jobs_max", static_cast<int64_t>(jobs_.size() + 1),
                      static_cast<int64_t>(config_.running_jobs_max));
  }
  auto job = std::make_unique<Job>();
  job->id = spec.job_id;
  const std::filesystem::path dir = JobDir(spec.job_id);
  ONCE_RETURN_IF_ERROR(MakePrivateDir(dir, /*must_be_new=*/true));
  ONCE_ASSIGN_OR_RETURN(job->files[0], CreatePrivateFile(dir / "stdout"));
  ONCE_ASSIGN_OR_RETURN(job->files[1], CreatePrivateFile(dir / "stderr"));
  {
    nlohmann::json record = {{"job_id", spec.job_id.ToString()},
                             {"session_id", spec.session_id.ToString()},
                             {"command", spec.command},
                             {"request_hex", HexEncode(spec.request)}};
    std::string text = record.dump(2) + "\n";
    ONCE_ASSIGN_OR_RETURN(Fd json, CreatePrivateFile(dir / "job.json"));
    ONCE_RETURN_IF_ERROR(
        WriteAll(json.get(), reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  for (auto& h : job->hashes) crypto_generichash_init(&h, nullptr, 0, 32);

  int out[2], err[2], fail[2], go[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::unexpected(Errno("pipe"));
  Fd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return std::unexpected(Errno("pipe"));
  Fd err_r(err[0]), err_w(err[1]);
  if (::pipe2(fail, O_CLOEXEC) != 0) return std::unexpected(Errno("pipe"));
  Fd fail_r(fail[0]), fail_w(fail[1]);
  if (::pipe2(go, O_CLOEXEC) != 0) return std::unexpected(Errno("pipe"));
  Fd go_r(go[0]), go_w(go[1]);

  std::vector<std::string> args = {"bash", "-c", spec.command};
  std::vector<std::string> env = {kPath,
                                  "HOME=" + config_.home,
                                  "USER=" + config_.user,
                                  "LOGNAME=" + config_.user,
                                  "SSH_CLIENT=sush",
                                  "SUSH_JOB_ID=" + spec.job_id.ToString(),
                                  "SUSH_COMMAND=" + spec.command,
                                  "SUSH_JOB_OUTPUT_DIR=" + dir.string()};
  std::vector<char*> argv = Pointers(args), envp = Pointers(env);
  ChildPlan plan{
      config_.shell.c_str(), argv.data(),  envp.data(), config_.home.c_str(), out_w.get(),
      err_w.get(),           fail_w.get(), go_r.get(),  go_w.get(),           config_.limits};

  pid_t pid = ::fork();
  if (pid < 0) return std::unexpected(Errno("fork"));
  if (pid == 0) RunChild(plan);
  out_w.Reset();
  err_w.Reset();
  fail_w.Reset();
  go_r.Reset();
  if (auto recorded = WritePidfile(spec.job_id, pid); !recorded) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return recorded;
  }
  const char one = 1;
  if (::write(go_w.get(), &one, 1) != 1) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    RemovePidfile(spec.job_id);
    return std::unexpected(Errno("start job"));
  }
  go_w.Reset();
  ChildFailure failure{};
  ssize_t n;
  while ((n = ::read(fail_r.get(), &failure, sizeof failure)) < 0 && errno == EINTR) {
  }
  if (n > 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    RemovePidfile(spec.job_id);
    errno = failure.error;
    return std::unexpected(
        Errno("job process setup failed at stage " + std::to_string(failure.stage)));
  }
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);
  job->pid = pid;
  job->pipes[0] = std::move(out_r);
  job->pipes[1] = std::move(err_r);
  jobs_.emplace(spec.job_id, std::move(job));
  return Ok();
}

Status ProcessExecutor::Stop(const JobId& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return MakeError(ErrorCode::kNotFound, "job not running", id.ToString());
  ::kill(-it->second->pid, SIGKILL);
  return Ok();
}

// Copies what the pipes hold into the files and hashes, enforcing the limit.
void ProcessExecutor::ReadAvailable(Job& job) {
  std::array<uint8_t, kReadChunkBytes> buffer;
  for (int s = 0; s < 2; ++s) {
    while (job.pipes[s].open()) {
      ssize_t n = ::read(job.pipes[s].get(), buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;  // EAGAIN: nothing more for now
      if (n == 0) {
        job.pipes[s].Reset();
        break;
      }
      uint64_t room = config_.output_bytes_max -
                      std::min(config_.output_bytes_max, job.bytes[0] + job.bytes[1]);
      size_t take = static_cast<size_t>(std::min<uint64_t>(room, static_cast<uint64_t>(n)));
      if (take > 0 && job.failure.empty()) {
        if (auto w = WriteAll(job.files[s].get(), buffer.data(), take); !w) {
          job.failure = w.error().message;
          job.failure_code = w.error().code;
          ::kill(-job.pid, SIGKILL);
        }
        crypto_generichash_update(&job.hashes[s], buffer.data(), take);
        job.bytes[s] += take;
      }
      if (take < static_cast<size_t>(n) && job.failure.empty()) {
        job.failure_code = ErrorCode::kLimitExceeded;
        job.failure = "output_bytes_max exceeded: more than " +
                      std::to_string(config_.output_bytes_max) + " bytes";
        ::kill(-job.pid, SIGKILL);
      }
    }
  }
}

// Reaps the leader; once it is gone, kills stragglers and drains the pipes.
bool ProcessExecutor::Finished(Job& job) {
  if (!job.wait_status) {
    int status = 0;
    pid_t r = ::waitpid(job.pid, &status, WNOHANG);
    if (r != job.pid) return false;
    job.wait_status = status;
    ::kill(-job.pid, SIGKILL);  // the job is over: so is its process group
  }
  ReadAvailable(job);
  job.pipes[0].Reset();
  job.pipes[1].Reset();
  return true;
}

std::vector<ProcessExited> ProcessExecutor::Poll(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  for (auto& [id, job] : jobs_) {
    for (auto& pipe : job->pipes) {
      if (pipe.open()) fds.push_back(pollfd{pipe.get(), POLLIN, 0});
    }
  }
  // A job whose pipes closed is waiting to be reaped: poll briefly.
  int wait_ms = static_cast<int>(timeout.count());
  if (fds.size() < 2 * jobs_.size()) wait_ms = std::min(wait_ms, 10);
  if (!jobs_.empty()) ::poll(fds.data(), fds.size(), wait_ms);

  std::vector<ProcessExited> ended;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Job& job = *it->second;
    ReadAvailable(job);
    if (!Finished(job)) {
      ++it;
      continue;
    }
    ExitReport report;
    int status = *job.wait_status;
    if (WIFEXITED(status)) {
      report.outcome = ExitOutcome{ExitOutcome::Kind::kExited, WEXITSTATUS(status), ""};
    } else {
      report.outcome = ExitOutcome{ExitOutcome::Kind::kSignaled, WTERMSIG(status), ""};
    }
    if (!job.failure.empty()) {
      report.outcome = ExitOutcome{ExitOutcome::Kind::kFailed,
                                   static_cast<int32_t>(job.failure_code), job.failure};
    }
    OutputSummary* summaries[2] = {&report.stdout_summary, &report.stderr_summary};
    for (int s = 0; s < 2; ++s) {
      summaries[s]->bytes = job.bytes[s];
      crypto_generichash_final(&job.hashes[s], summaries[s]->hash.data(), 32);
      ::fsync(job.files[s].get());
    }
    ended.push_back(ProcessExited{job.id, report});
    it = jobs_.erase(it);
  }
  return ended;
}

}  // namespace once::rack
