// File: http_server.h
//
// The HTTP/1.1 server of a sled's API: one event-loop thread (epoll) holds
// every connection and does all socket I/O; whole requests go to a few
// handler threads; answers come back to the loop to be written. A connection
// costs a descriptor and its buffers, not a thread, so a thousand idle or
// half-open connections do not delay anyone else's request.
//
//   HttpServer server({.host = "127.0.0.1", .port = 7100,
//                      .operator_socket = "/var/lib/sush/api.sock"});
//   server.Route("GET", "/v1/info", [&](const HttpRequest&) {
//     return JsonResponse(200, info);
//   });
//   ONCE_RETURN_IF_ERROR(server.Start());   // binds both, starts the threads
//   ...
//   server.Stop();                          // idempotent; joins every thread
//
// Limits (HttpLimits in http_parser.h, every one enforced while reading):
// the head and the body of a request (a body past request_body_bytes_max is
// answered 413 as soon as its Content-Length or its chunks say so, never
// after reading it); connections_max TCP connections (a new one past it
// evicts the connection idle longest, or is closed at once); the operator
// socket's own operator_connections_max (a Unix socket, mode 0600, for the
// operator on the sled: a flood of TCP connections never takes its slots);
// request_read_ms_max from a request's first byte to its last (408);
// connection_idle_ms_max between requests; response_write_ms_max for an
// answer to be taken; requests_queued_max whole requests waiting for a
// handler thread (503).
//
// Every refusal of the server itself (400, 404, 408, 413, 431, 501, 503, 505)
// is the same typed JSON error as the handlers' ({"error": {"code",
// "message", "limit"?}}, api.h ErrorToJson). After an error in the request's
// framing the connection is closed (its rest cannot be trusted); the server
// stops writing, then discards what the client still sends for at most
// kLingerMs and kLingerBytesMax before it closes, so that the client reads
// the answer.
//
// Handlers run on the handler threads, any number at once: they must be
// thread-safe. A handler that throws is answered 500 (Internal).

#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "once/base/result.h"
#include "once/sush_net/http_parser.h"

namespace once::sush_net {

// How long, and how much of it, a connection closed after an answer keeps
// discarding input (so that the client can read the answer first).
inline constexpr auto kLingerMs = std::chrono::milliseconds(1000);
inline constexpr size_t kLingerBytesMax = size_t{1} << 20;

// A descriptor owned by one value (closed by its destructor).
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd();
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // A file streamed after `body`, file_bytes long from offset 0 (the
  // server reads it as the client takes it, never whole).
  OwnedFd file;
  uint64_t file_bytes = 0;
  bool close = false;  // close the connection after this answer
};
HttpResponse JsonResponse(int status, const nlohmann::json& body);
// {"error": ...} with `status`, or HttpStatusOf(error.code) when 0.
HttpResponse ErrorResponse(const Error& error, int status = 0);

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see port())
  // The operator socket's path; empty: none. A stale socket file there is
  // replaced.
  std::filesystem::path operator_socket;
  HttpLimits limits;
  // If set, called with every answer of status 400 or more (on the loop
  // thread or a handler thread, so it must be thread-safe): the request's
  // method and path (both empty when the request could not be read).
  std::function<void(std::string_view method, std::string_view path, const HttpResponse&)>
      on_refusal;
};

struct HttpStats {
  uint64_t accepted = 0;        // connections accepted (both sockets)
  uint64_t refused = 0;         // closed at accept: full, and nothing idle to evict
  uint64_t evicted = 0;         // idle connections closed to make room
  uint64_t timed_out = 0;       // closed by request_read_ms_max, idle or write time
  uint64_t requests = 0;        // whole requests read
  uint64_t limit_refusals = 0;  // 413/431 answers
  uint64_t busy = 0;            // 503 answers (requests_queued_max)
  size_t open = 0;              // TCP connections now
  size_t open_operator = 0;     // operator socket connections now
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before Start: `pattern` (ECMAScript) must match the whole path; groups
  // are in HttpRequest::matches. The first route whose pattern and method
  // match serves; a path no route matches, or a method no route of a
  // matching path takes, is 404 (NotFound).
  void Route(std::string method, const std::string& pattern, HttpHandler handler);
  // Binds the TCP port (and the operator socket) and starts the threads.
  // kUnavailable if either cannot be bound; kInvalidArgument for limits of 0.
  Status Start();
  // Stops accepting, closes every connection, joins the threads. Idempotent.
  void Stop();

  uint16_t port() const { return port_; }
  HttpStats stats() const;

  struct Conn;

 private:
  struct RouteEntry {
    std::string method;
    std::regex pattern;
    HttpHandler handler;
  };
  struct Work {
    uint64_t conn = 0;
    const HttpHandler* handler = nullptr;
    HttpRequest request;
  };
  struct Done {
    uint64_t conn = 0;
    bool keep_alive = true;
    HttpResponse response;
  };
  using Steady = std::chrono::steady_clock;

  void Loop();
  void Worker();
  void Accept(int listener, bool operator_socket);
  bool MakeRoom(bool operator_socket);
  void OnEvent(uint64_t id, uint32_t events);
  void OnReadable(Conn& conn);
  void Parse(Conn& conn);
  void Dispatch(Conn& conn, HttpRequest request);
  void Respond(Conn& conn, HttpResponse response, bool keep_alive);
  void NoteRefusal(std::string_view method, std::string_view path, const HttpResponse& response);
  void OnWritable(Conn& conn);
  void Linger(Conn& conn);
  void Close(uint64_t id);
  void SetDeadline(Conn& conn, Steady::time_point at);
  void ClearDeadline(Conn& conn);
  void Watch(Conn& conn, uint32_t events);
  void ExpireTimers();
  void TakeDone();

  HttpServerOptions options_;
  std::vector<RouteEntry> routes_;
  uint16_t port_ = 0;
  int epoll_fd_ = -1;
  int tcp_fd_ = -1;
  int unix_fd_ = -1;
  int wake_fd_ = -1;
  int reserve_fd_ = -1;  // closed to accept-and-close when out of descriptors
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::thread loop_thread_;
  std::vector<std::thread> workers_;

  // The loop thread's own.
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::set<std::pair<Steady::time_point, uint64_t>> timers_;
  uint64_t next_id_ = 16;
  size_t open_ = 0;
  size_t open_operator_ = 0;

  std::mutex mu_;  // guards the queues below
  std::condition_variable work_ready_;
  std::deque<Work> work_;
  std::vector<Done> done_;

  mutable std::mutex stats_mu_;
  HttpStats stats_;
};

}  // namespace once::sush_net
