#include "once/sush_net/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "once/sush_net/api.h"

namespace once::sush_net {

namespace {

constexpr uint64_t kTcpListener = 1;
constexpr uint64_t kUnixListener = 2;
constexpr uint64_t kWake = 3;
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr size_t kFileChunkBytes = 64 * 1024;
constexpr int kEventsPerWait = 256;

std::string_view Reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Status";
  }
}

}  // namespace

// ---- values ----

OwnedFd& OwnedFd::operator=(OwnedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

HttpResponse JsonResponse(int status, const nlohmann::json& body) {
  HttpResponse response;
  response.status = status;
  response.body = JsonText(body);  // non-UTF-8 text as U+FFFD, never a throw
  return response;
}

HttpResponse ErrorResponse(const Error& error, int status) {
  return JsonResponse(status != 0 ? status : HttpStatusOf(error.code), ErrorToJson(error));
}

// ---- one connection ----

struct HttpServer::Conn {
  enum class State : uint8_t { kReading, kHandling, kWriting, kLingering };
  Conn(uint64_t id, int fd, bool op, const HttpLimits& limits)
      : id(id), fd(fd), operator_socket(op), parser(limits) {}
  ~Conn() { ::close(fd); }

  uint64_t id;
  int fd;
  bool operator_socket;
  State state = State::kReading;
  uint32_t watched = 0;  // the epoll events registered (0: not registered)
  std::string in;
  RequestParser parser;
  bool continue_sent = false;
  std::string out;
  size_t out_sent = 0;
  OwnedFd file;
  uint64_t file_left = 0;
  uint64_t file_offset = 0;
  bool close_after = false;
  size_t lingered = 0;  // bytes discarded while lingering
  std::optional<Steady::time_point> deadline;
  Steady::time_point idle_since = Steady::now();

  bool idle() const { return state == State::kReading && !parser.started() && in.empty(); }
};

HttpServer::HttpServer(HttpServerOptions options) : options_(std::move(options)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Route(std::string method, const std::string& pattern, HttpHandler handler) {
  ONCE_CHECK(!started_);
  routes_.push_back(RouteEntry{std::move(method), std::regex(pattern), std::move(handler)});
}

HttpStats HttpServer::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

Status HttpServer::Start() {
  const HttpLimits& l = options_.limits;
  if (l.connections_max == 0 || l.handler_threads == 0 || l.requests_queued_max == 0 ||
      l.request_body_bytes_max == 0 || l.request_head_bytes_max == 0) {
    return MakeError(ErrorCode::kInvalidArgument, "HTTP limits must not be 0");
  }
  // The TCP listener.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(options_.port);
  if (::getaddrinfo(options_.host.c_str(), port_text.c_str(), &hints, &found) != 0 || !found) {
    return MakeError(ErrorCode::kUnavailable, "cannot resolve " + options_.host);
  }
  tcp_fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (tcp_fd_ >= 0) ::setsockopt(tcp_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = tcp_fd_ >= 0 && ::bind(tcp_fd_, found->ai_addr, found->ai_addrlen) == 0 &&
                     ::listen(tcp_fd_, SOMAXCONN) == 0;
  ::freeaddrinfo(found);
  if (!bound) {
    Stop();
    return MakeError(ErrorCode::kUnavailable, "cannot bind HTTP " + options_.host + ":" +
                                                  port_text + ": " + std::strerror(errno));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(tcp_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  // The operator socket.
  if (!options_.operator_socket.empty()) {
    const std::string path = options_.operator_socket.string();
    sockaddr_un un{};
    if (path.size() >= sizeof(un.sun_path)) {
      Stop();
      return MakeError(ErrorCode::kInvalidArgument, "operator socket path too long", path);
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
    un.sun_family = AF_UNIX;
    std::memcpy(un.sun_path, path.c_str(), path.size() + 1);
    unix_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const mode_t old = ::umask(0177);
    const bool ok = unix_fd_ >= 0 &&
                    ::bind(unix_fd_, reinterpret_cast<sockaddr*>(&un), sizeof(un)) == 0 &&
                    ::listen(unix_fd_, SOMAXCONN) == 0;
    ::umask(old);
    if (!ok) {
      Stop();
      return MakeError(ErrorCode::kUnavailable,
                       "cannot bind the operator socket " + path + ": " + std::strerror(errno));
    }
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    Stop();
    return MakeError(ErrorCode::kUnavailable, "epoll: " + std::string(std::strerror(errno)));
  }
  for (auto [fd, id] :
       {std::pair{tcp_fd_, kTcpListener}, {unix_fd_, kUnixListener}, {wake_fd_, kWake}}) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  started_ = true;
  for (size_t i = 0; i < options_.limits.handler_threads; ++i) {
    workers_.emplace_back([this] { Worker(); });
  }
  loop_thread_ = std::thread([this] { Loop(); });
  return Ok();
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  {
    std::lock_guard lock(mu_);
    work_ready_.notify_all();
  }
  if (loop_thread_.joinable()) loop_thread_.join();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  conns_.clear();
  timers_.clear();
  for (int* fd : {&tcp_fd_, &unix_fd_, &wake_fd_, &epoll_fd_, &reserve_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (started_ && !options_.operator_socket.empty()) {
    ::unlink(options_.operator_socket.c_str());
  }
}

// ---- handler threads ----

void HttpServer::Worker() {
  while (true) {
    Work work;
    {
      std::unique_lock lock(mu_);
      work_ready_.wait(lock, [&] { return stopping_.load() || !work_.empty(); });
      if (stopping_) return;
      work = std::move(work_.front());
      work_.pop_front();
    }
    const bool keep_alive = work.request.keep_alive;
    HttpResponse response;
    try {
      response = (*work.handler)(work.request);
    } catch (const std::exception& e) {
      response = ErrorResponse(Error{ErrorCode::kInternal, e.what(), "", {}});
    }
    NoteRefusal(work.request.method, work.request.path, response);
    {
      std::lock_guard lock(mu_);
      done_.push_back(Done{work.conn, keep_alive, std::move(response)});
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

// ---- the event loop ----

void HttpServer::Loop() {
  epoll_event events[kEventsPerWait];
  while (!stopping_) {
    int timeout_ms = -1;
    if (!timers_.empty()) {
      const auto wait = timers_.begin()->first - Steady::now();
      timeout_ms = static_cast<int>(
          std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
    }
    const int n = ::epoll_wait(epoll_fd_, events, kEventsPerWait, timeout_ms);
    for (int i = 0; i < n && !stopping_; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kTcpListener) {
        Accept(tcp_fd_, false);
      } else if (id == kUnixListener) {
        Accept(unix_fd_, true);
      } else if (id == kWake) {
        uint64_t count;
        (void)!::read(wake_fd_, &count, sizeof(count));
        TakeDone();
      } else {
        OnEvent(id, events[i].events);
      }
    }
    ExpireTimers();
  }
}

void HttpServer::Accept(int listener, bool operator_socket) {
  while (true) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if ((errno == EMFILE || errno == ENFILE) && reserve_fd_ >= 0) {
        // Out of descriptors: take the connection off the queue and close it,
        // so the listener does not stay readable for ever.
        ::close(reserve_fd_);
        const int dropped = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (dropped >= 0) ::close(dropped);
        reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        std::lock_guard lock(stats_mu_);
        ++stats_.refused;
        continue;
      }
      return;  // EAGAIN, or an error of that one connection
    }
    if (!MakeRoom(operator_socket)) {
      ::close(fd);
      std::lock_guard lock(stats_mu_);
      ++stats_.refused;
      continue;
    }
    if (!operator_socket) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    const uint64_t id = next_id_++;
    auto conn = std::make_unique<Conn>(id, fd, operator_socket, options_.limits);
    Conn& c = *conn;
    conns_.emplace(id, std::move(conn));
    ++(operator_socket ? open_operator_ : open_);
    SetDeadline(c, c.idle_since + options_.limits.connection_idle_ms_max);
    Watch(c, EPOLLIN);
    std::lock_guard lock(stats_mu_);
    ++stats_.accepted;
    stats_.open = open_;
    stats_.open_operator = open_operator_;
  }
}

// Room for one more connection of this kind: evicts the one idle longest
// when full. False if every connection is busy with a request.
bool HttpServer::MakeRoom(bool operator_socket) {
  const size_t open = operator_socket ? open_operator_ : open_;
  const size_t max =
      operator_socket ? options_.limits.operator_connections_max : options_.limits.connections_max;
  if (open < max) return true;
  Conn* victim = nullptr;
  for (auto& [id, conn] : conns_) {
    if (conn->operator_socket != operator_socket || !conn->idle()) continue;
    if (victim == nullptr || conn->idle_since < victim->idle_since) victim = conn.get();
  }
  if (victim == nullptr) return false;
  Close(victim->id);
  std::lock_guard lock(stats_mu_);
  ++stats_.evicted;
  return true;
}

void HttpServer::OnEvent(uint64_t id, uint32_t events) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& conn = *it->second;
  if (conn.state == Conn::State::kWriting && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    OnWritable(conn);
  } else if (conn.state == Conn::State::kLingering) {
    Linger(conn);
  } else if (conn.state == Conn::State::kReading) {
    OnReadable(conn);
  }
}

void HttpServer::OnReadable(Conn& conn) {
  char buffer[kReadChunkBytes];
  const uint64_t id = conn.id;
  // Reads until the socket is empty or a request is complete; the parser
  // consumes as it goes, so what is held stays within the limits.
  while (conn.state == Conn::State::kReading) {
    const ssize_t n = ::recv(conn.fd, buffer, sizeof(buffer), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      Close(id);
      return;
    }
    if (n < 0) return;
    conn.in.append(buffer, static_cast<size_t>(n));
    Parse(conn);
    if (!conns_.contains(id)) return;
  }
}

void HttpServer::Parse(Conn& conn) {
  const bool was_started = conn.parser.started();
  Result<bool> done = conn.parser.Feed(conn.in);
  if (!was_started && conn.parser.started()) {
    SetDeadline(conn, Steady::now() + options_.limits.request_read_ms_max);
  }
  if (!done) {
    if (conn.parser.failure_status() == 413 || conn.parser.failure_status() == 431) {
      std::lock_guard lock(stats_mu_);
      ++stats_.limit_refusals;
    }
    HttpResponse refusal = ErrorResponse(done.error(), conn.parser.failure_status());
    refusal.close = true;
    NoteRefusal("", "", refusal);
    conn.in.clear();
    return Respond(conn, std::move(refusal), false);
  }
  if (!*done) {
    if (conn.parser.awaiting_body() && conn.parser.expects_continue() && !conn.continue_sent) {
      conn.continue_sent = true;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      if (::send(conn.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(kContinue.size())) {
        Close(conn.id);
      }
    }
    return;
  }
  conn.continue_sent = false;
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.requests;
  }
  Dispatch(conn, conn.parser.Take());
}

void HttpServer::Dispatch(Conn& conn, HttpRequest request) {
  request.operator_socket = conn.operator_socket;
  const bool keep_alive = request.keep_alive;
  const HttpHandler* handler = nullptr;
  for (const RouteEntry& route : routes_) {
    std::smatch match;
    if (route.method != request.method || !std::regex_match(request.path, match, route.pattern)) {
      continue;
    }
    for (size_t i = 1; i < match.size(); ++i) request.matches.push_back(match[i].str());
    handler = &route.handler;
    break;
  }
  if (handler == nullptr) {
    HttpResponse refusal = ErrorResponse(
        Error{ErrorCode::kNotFound, "no endpoint " + request.method + " " + request.path, "", {}});
    NoteRefusal(request.method, request.path, refusal);
    return Respond(conn, std::move(refusal), keep_alive);
  }
  {
    std::lock_guard lock(mu_);
    if (work_.size() < options_.limits.requests_queued_max) {
      conn.state = Conn::State::kHandling;
      ClearDeadline(conn);
      Watch(conn, 0);
      work_.push_back(Work{conn.id, handler, std::move(request)});
      work_ready_.notify_one();
      return;
    }
  }
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.busy;
  }
  HttpResponse busy =
      ErrorResponse(LimitError("requests_queued_max",
                               static_cast<int64_t>(options_.limits.requests_queued_max + 1),
                               static_cast<int64_t>(options_.limits.requests_queued_max))
                        .error(),
                    503);
  NoteRefusal(request.method, request.path, busy);
  Respond(conn, std::move(busy), keep_alive);
}

void HttpServer::NoteRefusal(std::string_view method, std::string_view path,
                             const HttpResponse& response) {
  if (options_.on_refusal && response.status >= 400) options_.on_refusal(method, path, response);
}

void HttpServer::TakeDone() {
  std::vector<Done> done;
  {
    std::lock_guard lock(mu_);
    done.swap(done_);
  }
  for (Done& d : done) {
    auto it = conns_.find(d.conn);
    if (it == conns_.end()) continue;  // closed meanwhile: the file closes with d
    Respond(*it->second, std::move(d.response), d.keep_alive);
  }
}

void HttpServer::Respond(Conn& conn, HttpResponse response, bool keep_alive) {
  conn.close_after = response.close || !keep_alive || stopping_;
  std::string head =
      "HTTP/1.1 " + std::to_string(response.status) + " " + std::string(Reason(response.status)) +
      "\r\nContent-Type: " + response.content_type +
      "\r\nContent-Length: " + std::to_string(response.body.size() + response.file_bytes) + "\r\n";
  for (const auto& [name, value] : response.headers) head += name + ": " + value + "\r\n";
  head += conn.close_after ? "Connection: close\r\n\r\n" : "\r\n";
  conn.out = std::move(head);
  conn.out += response.body;
  conn.out_sent = 0;
  conn.file = std::move(response.file);
  conn.file_left = conn.file ? response.file_bytes : 0;
  conn.file_offset = 0;
  conn.state = Conn::State::kWriting;
  SetDeadline(conn, Steady::now() + options_.limits.response_write_ms_max);
  Watch(conn, EPOLLOUT);
  OnWritable(conn);
}

void HttpServer::OnWritable(Conn& conn) {
  while (true) {
    if (conn.out_sent == conn.out.size() && conn.file_left > 0) {
      conn.out.resize(static_cast<size_t>(std::min<uint64_t>(conn.file_left, kFileChunkBytes)));
      const ssize_t n = ::pread(conn.file.get(), conn.out.data(), conn.out.size(),
                                static_cast<off_t>(conn.file_offset));
      if (n <= 0) {  // the file shrank or failed: the answer cannot be completed
        Close(conn.id);
        return;
      }
      conn.out.resize(static_cast<size_t>(n));
      conn.out_sent = 0;
      conn.file_offset += static_cast<uint64_t>(n);
      conn.file_left -= static_cast<uint64_t>(n);
    }
    if (conn.out_sent == conn.out.size()) break;
    const ssize_t n = ::send(conn.fd, conn.out.data() + conn.out_sent,
                             conn.out.size() - conn.out_sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {
      Close(conn.id);
      return;
    }
    conn.out_sent += static_cast<size_t>(n);
  }
  conn.out.clear();
  conn.out_sent = 0;
  conn.file = OwnedFd();
  if (conn.close_after) {
    // Stop writing, then discard what the client still sends for a while,
    // so that its unread input does not reset the connection before it has
    // read the answer.
    ::shutdown(conn.fd, SHUT_WR);
    conn.state = Conn::State::kLingering;
    SetDeadline(conn, Steady::now() + kLingerMs);
    Watch(conn, EPOLLIN);
    return Linger(conn);
  }
  conn.state = Conn::State::kReading;
  conn.idle_since = Steady::now();
  SetDeadline(conn, conn.idle_since + options_.limits.connection_idle_ms_max);
  Watch(conn, EPOLLIN);
  if (!conn.in.empty()) Parse(conn);  // a request sent before this answer was taken
}

void HttpServer::Linger(Conn& conn) {
  char buffer[kReadChunkBytes];
  while (true) {
    const ssize_t n = ::recv(conn.fd, buffer, sizeof(buffer), 0);
    if (n > 0 && (conn.lingered += static_cast<size_t>(n)) <= kLingerBytesMax) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    Close(conn.id);
    return;
  }
}

void HttpServer::Close(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& conn = *it->second;
  ClearDeadline(conn);
  if (conn.watched != 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn.fd, nullptr);
  --(conn.operator_socket ? open_operator_ : open_);
  conns_.erase(it);  // closes the descriptor
  std::lock_guard lock(stats_mu_);
  stats_.open = open_;
  stats_.open_operator = open_operator_;
}

void HttpServer::SetDeadline(Conn& conn, Steady::time_point at) {
  ClearDeadline(conn);
  conn.deadline = at;
  timers_.emplace(at, conn.id);
}

void HttpServer::ClearDeadline(Conn& conn) {
  if (conn.deadline) timers_.erase({*conn.deadline, conn.id});
  conn.deadline.reset();
}

// Registers the connection for `events` (0: not at all, e.g. while a handler
// runs: a peer that hangs up then is found out when the answer is written).
void HttpServer::Watch(Conn& conn, uint32_t events) {
  if (events == conn.watched) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = conn.id;
  if (events == 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn.fd, nullptr);
  } else {
    ::epoll_ctl(epoll_fd_, conn.watched == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, conn.fd, &ev);
  }
  conn.watched = events;
}

void HttpServer::ExpireTimers() {
  const auto now = Steady::now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    const uint64_t id = timers_.begin()->second;
    auto it = conns_.find(id);
    if (it == conns_.end()) {
      timers_.erase(timers_.begin());
      continue;
    }
    Conn& conn = *it->second;
    ClearDeadline(conn);
    {
      std::lock_guard lock(stats_mu_);
      ++stats_.timed_out;
    }
    if (conn.state == Conn::State::kReading && conn.parser.started()) {
      // A request that did not arrive in time: say so, then close.
      HttpResponse late = ErrorResponse(
          Error{ErrorCode::kTimeout,
                "request not received within request_read_ms_max (" +
                    std::to_string(options_.limits.request_read_ms_max.count()) + " ms)",
                "",
                {}},
          408);
      late.close = true;
      conn.in.clear();
      Respond(conn, std::move(late), false);
    } else {
      Close(id);
    }
  }
}

}  // namespace once::sush_net
