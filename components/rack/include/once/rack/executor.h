// File: executor.h
//
// Runs the jobs the sled core starts, as real processes. JobRunner is the
// seam (a simulator supplies its own); ProcessExecutor is the real one:
//
//   - `bash -c COMMAND` (commands starting with '-' are refused), in its own
//     session and process group (setsid), every signal reset to its default
//     and the signal mask cleared, cwd = HOME, stdin /dev/null;
//   - the environment cleared except PATH=/usr/sbin:/usr/bin:/sbin:/bin, HOME,
//     USER, LOGNAME, SSH_CLIENT=sush (as the original sush), SUSH_JOB_ID
//     (codephrase), SUSH_COMMAND, SUSH_JOB_OUTPUT_DIR;
//   - rlimits: CPU seconds (SIGXCPU at the limit), address space, file size;
//   - output in {base}/jobs/{job id}/{stdout,stderr,job.json}, folders 0700,
//     files 0600; stdout and stderr are read through pipes, written and
//     hashed (BLAKE2b-256) as they arrive; past output_bytes_max the job is
//     killed and ends as kFailed. An existing job folder refuses the start:
//     a job never runs twice over the same base.
//   - Stop sends SIGKILL to the process group; the leader is reaped with
//     waitpid and its exit status or signal reported.
//   - A job outlives nothing it should not: before a job's process may exec,
//     its pidfile {base}/running/{job id}.pid (pid = process group, the
//     kernel's start time, the boot id) is durable (the child waits for the
//     parent's go; a parent that dies first leaves a child that exits without
//     running anything). Create kills the process group of every pidfile a
//     previous life left whose leader is still the same process (same boot,
//     same start time), waits until the group is gone, and lists those jobs
//     in orphans_killed(); the core reports them Interrupted once its replay
//     drains. So the next job never starts while an earlier one may run.
//
//   ONCE_ASSIGN_OR_RETURN(auto runner, ProcessExecutor::Create(config));
//   ONCE_RETURN_IF_ERROR(runner->Start(JobSpec{id, session, "uptime", request}));
//   for (const ProcessExited& ended : runner->Poll(std::chrono::milliseconds(100))) ...
//
// Single-threaded: the owner calls Start, Stop and Poll from one thread; Poll
// is where output is copied and processes are reaped. The destructor kills
// and reaps every job still running.

#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "once/base/result.h"
#include "once/rack/ids.h"
#include "once/rack/messages.h"
#include "once/rack/sled_core.h"

namespace once::rack {

struct ResourceLimits {
  uint64_t cpu_seconds = 3600;
  uint64_t memory_bytes = uint64_t{8} << 30;
  uint64_t file_bytes = uint64_t{10} << 30;
};
// The most a configuration may ask for.
inline constexpr ResourceLimits kResourceCeilings{7 * 24 * 3600, uint64_t{1} << 40,
                                                  uint64_t{1} << 40};
inline constexpr uint64_t kOutputBytesCeiling = uint64_t{10} << 30;

struct ExecutorConfig {
  std::filesystem::path base_dir;  // output goes to base_dir/jobs/{id}
  std::string home;                // HOME and cwd; empty: this user's home
  std::string user;                // USER and LOGNAME; empty: this user's name
  ResourceLimits limits;
  uint64_t output_bytes_max = uint64_t{1} << 30;  // stdout + stderr of one job
  size_t running_jobs_max = 256;
  std::string shell = "/bin/bash";
};

struct JobSpec {
  JobId job_id;
  SessionId session_id;
  std::string command;
  Bytes request;  // the encoded signed request, kept in job.json
};

class JobRunner {
 public:
  virtual ~JobRunner() = default;
  // Starts the job. kInvalidArgument: refused command; kPermissionDenied: its
  // output folder exists; kLimitExceeded: running_jobs_max; kUnavailable: the
  // files or the process could not be made (nothing is left running).
  virtual Status Start(const JobSpec& spec) = 0;
  // Kills the job's process group; its end is reported by Poll. kNotFound if
  // it is not running.
  virtual Status Stop(const JobId& id) = 0;
  // Waits up to `timeout` for output or exits; returns the jobs that ended.
  virtual std::vector<ProcessExited> Poll(std::chrono::milliseconds timeout) = 0;
  virtual size_t running() const = 0;
};

// Fills an empty home/user from the passwd entry of this process's user and
// checks limits against kResourceCeilings (kLimitExceeded) and that base_dir
// is set (kInvalidArgument).
Result<ExecutorConfig> CompleteExecutorConfig(ExecutorConfig config);

class ProcessExecutor final : public JobRunner {
 public:
  static Result<std::unique_ptr<ProcessExecutor>> Create(ExecutorConfig config);
  ~ProcessExecutor() override;

  Status Start(const JobSpec& spec) override;
  Status Stop(const JobId& id) override;
  std::vector<ProcessExited> Poll(std::chrono::milliseconds timeout) override;
  size_t running() const override { return jobs_.size(); }

  std::filesystem::path JobDir(const JobId& id) const;
  // Jobs of a previous life whose processes Create found running and killed.
  const std::vector<JobId>& orphans_killed() const { return orphans_killed_; }

  struct Job;  // a running process with its pipes, files and hashes

 private:
  explicit ProcessExecutor(ExecutorConfig config);
  void ReadAvailable(Job& job);
  bool Finished(Job& job);
  std::filesystem::path PidfilePath(const JobId& id) const;
  Status WritePidfile(const JobId& id, pid_t pid);
  void RemovePidfile(const JobId& id);
  Status EndOrphans();

  ExecutorConfig config_;
  std::map<JobId, std::unique_ptr<Job>> jobs_;
  std::vector<JobId> orphans_killed_;
};

// How long Create waits for a previous life's job process group to die.
inline constexpr auto kOrphanKillWait = std::chrono::milliseconds(5000);

}  // namespace once::rack
