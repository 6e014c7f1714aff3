#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "once/gossip/stream.h"

namespace once::gossip {
namespace {

int MillisUntil(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 1'000'000 ? 1'000'000 : static_cast<int>(left.count());
}

std::unexpected<Error> Errno(const char* what) {
  return MakeError(ErrorCode::kUnavailable, std::string(what) + ": " + std::strerror(errno));
}

void Configure(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

TcpStream::TcpStream(int fd) : fd_(fd) { Configure(fd_); }
TcpStream::~TcpStream() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStream::Close() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status TcpStream::Wait(short events, Deadline deadline) {
  for (;;) {
    pollfd pfd{fd_, events, 0};
    const int rc = ::poll(&pfd, 1, MillisUntil(deadline));
    if (rc > 0) return Ok();
    if (rc == 0) return MakeError(ErrorCode::kTimeout, "tcp deadline passed");
    if (errno != EINTR) return Errno("poll");
  }
}

Result<bool> TcpStream::WaitReadableOr(int wake_fd, Deadline deadline) {
  for (;;) {
    pollfd pfds[2] = {{fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int rc = ::poll(pfds, 2, MillisUntil(deadline));
    if (rc > 0) return (pfds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) != 0;
    if (rc == 0) return MakeError(ErrorCode::kTimeout, "tcp deadline passed");
    if (errno != EINTR) return Errno("poll");
  }
}

std::string TcpStream::PeerHost() const {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char text[INET_ADDRSTRLEN] = {};
  if (!::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text))) return "";
  return text;
}

Result<std::unique_ptr<TcpStream>> TcpStream::Connect(const std::string& host, uint16_t port,
                                                      Deadline deadline) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return MakeError(ErrorCode::kInvalidArgument, "not an IPv4 address: " + host);
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  auto stream = std::make_unique<TcpStream>(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) return Errno("connect");
    ONCE_RETURN_IF_ERROR(stream->Wait(POLLOUT, deadline));
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return Errno("connect");
    }
  }
  return stream;
}

Status TcpStream::Read(std::span<uint8_t> out, Deadline deadline) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::recv(fd_, out.data() + done, out.size() - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      bytes_read_ += static_cast<uint64_t>(n);
    } else if (n == 0) {
      return MakeError(ErrorCode::kUnavailable, "tcp peer closed");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ONCE_RETURN_IF_ERROR(Wait(POLLIN, deadline));
    } else if (errno != EINTR) {
      return Errno("recv");
    }
  }
  return Ok();
}

Status TcpStream::Write(std::span<const uint8_t> bytes, Deadline deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      bytes_written_ += static_cast<uint64_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ONCE_RETURN_IF_ERROR(Wait(POLLOUT, deadline));
    } else if (errno != EINTR) {
      return Errno("send");
    }
  }
  return Ok();
}

Result<std::unique_ptr<TcpListener>> TcpListener::Listen(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0) {
    auto err = Errno("bind/listen");
    ::close(fd);
    return err;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<TcpListener>(new TcpListener(fd, ntohs(addr.sin_port)));
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpListener::Close() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Result<std::unique_ptr<TcpStream>> TcpListener::Accept(Deadline deadline) {
  for (;;) {
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return std::make_unique<TcpStream>(fd);
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pfd{fd_, POLLIN, 0};
      const int rc = ::poll(&pfd, 1, MillisUntil(deadline));
      if (rc == 0) return MakeError(ErrorCode::kTimeout, "no connection before the deadline");
      if (rc < 0 && errno != EINTR) return Errno("poll");
      if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) {
        return MakeError(ErrorCode::kUnavailable, "listener closed");
      }
    } else if (errno != EINTR && errno != ECONNABORTED) {
      return Errno("accept");
    }
  }
}

}  // namespace once::gossip
