// File: stream.h
//
// The seam between a session and the network: one full-duplex, reliable,
// ordered byte stream. Production uses a TCP socket (TcpStream); tests use an
// in-memory pipe (MakePipe) that can cut the connection at a chosen byte.
//
//   auto [a, b] = MakePipe();
//   std::thread t([&] { (void)Respond(*b, host_b, {}, Deadline()); });
//   ONCE_ASSIGN_OR_RETURN(auto report, Initiate(*a, host_a, Mode::kSync, {}, DeadlineIn(5s)));
//
// Contract of every implementation: Read and Write either move all the
// bytes or fail. kTimeout when `deadline` passes first; kUnavailable when the
// stream is closed, cut or reset. After any failure the stream is unusable.
// One reader thread and one writer thread may use a stream at once; Close may
// be called from any thread and wakes both.

#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "once/base/result.h"

namespace once::gossip {

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline DeadlineIn(std::chrono::steady_clock::duration d) {
  return std::chrono::steady_clock::now() + d;
}

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Status Read(std::span<uint8_t> out, Deadline deadline) = 0;
  virtual Status Write(std::span<const uint8_t> bytes, Deadline deadline) = 0;
  virtual void Close() = 0;
};

// Faults for one direction of a pipe.
struct PipeFaults {
  // After this many bytes have been written in this direction, the pipe is
  // cut: the write that crosses it delivers only the bytes before the cut,
  // and every later read or write on either end fails with kUnavailable.
  uint64_t cut_after_bytes = UINT64_MAX;
};

// Two connected in-memory ends. a_to_b applies to bytes written by the first.
std::pair<std::unique_ptr<Stream>, std::unique_ptr<Stream>> MakePipe(PipeFaults a_to_b = {},
                                                                     PipeFaults b_to_a = {});

// A connected TCP socket (owned; closed on destruction).
class TcpStream final : public Stream {
 public:
  explicit TcpStream(int fd);
  ~TcpStream() override;
  TcpStream(const TcpStream&) = delete;
  TcpStream& operator=(const TcpStream&) = delete;

  // Connects to host:port (numeric IPv4) before `deadline`. kUnavailable on
  // refusal, kTimeout past the deadline.
  static Result<std::unique_ptr<TcpStream>> Connect(const std::string& host, uint16_t port,
                                                    Deadline deadline);
  Status Read(std::span<uint8_t> out, Deadline deadline) override;
  Status Write(std::span<const uint8_t> bytes, Deadline deadline) override;
  void Close() override;

  // Waits until this socket can be read (bytes, or the peer closed it) or
  // `wake_fd` can be read. True: the socket; false: the wake fd. kTimeout
  // past the deadline. For one thread that serves a link and must also
  // notice local requests.
  Result<bool> WaitReadableOr(int wake_fd, Deadline deadline);
  // The remote end's numeric IPv4 address ("" if unknown).
  std::string PeerHost() const;
  // Bytes this stream has read and written so far (for the node's stats;
  // read them on the thread that uses the stream).
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  Status Wait(short events, Deadline deadline);
  int fd_;
  uint64_t bytes_read_ = 0;
  uint64_t bytes_written_ = 0;
};

// A listening TCP socket on 127.0.0.1.
class TcpListener {
 public:
  // port 0 picks a free port (see port()).
  static Result<std::unique_ptr<TcpListener>> Listen(uint16_t port);
  ~TcpListener();
  uint16_t port() const { return port_; }
  // The next connection; kTimeout if none before `deadline`.
  Result<std::unique_ptr<TcpStream>> Accept(Deadline deadline);
  void Close();

 private:
  TcpListener(int fd, uint16_t port) : fd_(fd), port_(port) {}
  int fd_;
  uint16_t port_;
};

}  // namespace once::gossip
