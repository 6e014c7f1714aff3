#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "errno_error.h"
#include "once/locker/fs.h"

namespace once::locker {
namespace {

std::unexpected<Error> Errno(const char* op, const std::filesystem::path& path) {
  return ErrnoError(errno, op, path.string());
}

// Closes the descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Status WriteAll(int fd, std::span<const uint8_t> bytes, const std::filesystem::path& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write", path);
    done += static_cast<size_t>(n);
  }
  return Ok();
}

class PosixLock final : public FsLock {
 public:
  explicit PosixLock(int fd) : fd_(fd) {}
  ~PosixLock() override { ::close(fd_); }  // closing the description releases the flock

 private:
  int fd_;
};

}  // namespace

Status PosixFs::WriteSynced(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                            uint32_t mode) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (fd.get() < 0) return Errno("open", path);
  // open's mode applies only to a new file, through the umask.
  if (::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) return Errno("fchmod", path);
  ONCE_RETURN_IF_ERROR(WriteAll(fd.get(), bytes, path));
  if (::fsync(fd.get()) != 0) return Errno("fsync", path);
  // close can report a deferred write error (NFS and friends).
  if (::close(fd.Release()) != 0) return Errno("close", path);
  return Ok();
}

Status PosixFs::Rename(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return Errno("rename", from);
  return Ok();
}

Status PosixFs::SyncDir(const std::filesystem::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Errno("open", dir);
  if (::fsync(fd.get()) != 0) return Errno("fsync", dir);
  return Ok();
}

Result<std::optional<Bytes>> PosixFs::Read(const std::filesystem::path& path, size_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::optional<Bytes>();
    return Errno("open", path);
  }
  Bytes out;
  uint8_t buf[16 * 1024];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("read", path);
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
    if (out.size() > max_bytes) {
      return LimitError("file_bytes_max", static_cast<int64_t>(out.size()),
                        static_cast<int64_t>(max_bytes), path.string());
    }
  }
  return std::optional<Bytes>(std::move(out));
}

Status PosixFs::Remove(const std::filesystem::path& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("unlink", path);
  return Ok();
}

Result<bool> PosixFs::IsDir(const std::filesystem::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return Errno("stat", path);
  }
  return S_ISDIR(st.st_mode);
}

Result<std::unique_ptr<FsLock>> PosixFs::LockExclusive(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) return Errno("open", path);
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return MakeError(ErrorCode::kPermissionDenied,
                       "lock " + path.string() +
                           ": held by another process (is another server using this drive?)",
                       path.string());
    }
    return Errno("flock", path);
  }
  return std::unique_ptr<FsLock>(std::make_unique<PosixLock>(fd.Release()));
}

}  // namespace once::locker
