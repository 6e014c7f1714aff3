// The sled's HTTP server and its request parser: every limit holds while a
// request is read (a chunked body past the limit is refused at the chunk
// that passes it, on every path and method), refusals and unknown endpoints
// are typed JSON errors, idle and half-open connections neither stall other
// clients nor hold slots for ever, and the operator socket keeps its slots
// when TCP is full. Servers on loopback, driven by raw sockets.

#include "once/sush_net/http_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "once/sush_net/api.h"

namespace once::sush_net {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

// ---- the parser ----

TEST(RequestParserTest, AContentLengthBodyIsReadAcrossFeeds) {
  RequestParser parser({});
  std::string in =
      "POST /v1/submit?x=1&y=a%20b+c HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nab";
  auto done = parser.Feed(in);
  ASSERT_TRUE(done);
  EXPECT_FALSE(*done);
  EXPECT_TRUE(parser.awaiting_body());
  in += "cdeGET";
  done = parser.Feed(in);
  ASSERT_TRUE(done && *done);
  EXPECT_EQ(in, "GET") << "the next request's bytes stay";
  HttpRequest request = parser.Take();
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.path, "/v1/submit");
  EXPECT_EQ(request.Param("x"), "1");
  EXPECT_EQ(request.Param("y"), "a b c");
  EXPECT_EQ(request.Param("z"), std::nullopt);
  EXPECT_EQ(request.body, "abcde");
  EXPECT_EQ(request.Header("host"), "h");
  EXPECT_TRUE(request.keep_alive);
}

TEST(RequestParserTest, AChunkedBodyIsDecodedWithExtensionsAndTrailers) {
  RequestParser parser({});
  std::string in =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n"
      "X-Trailer: t\r\n\r\n";
  auto done = parser.Feed(in);
  ASSERT_TRUE(done && *done) << (done ? "" : done.error().ToString());
  EXPECT_EQ(parser.Take().body, "abcde");
  EXPECT_TRUE(in.empty());
}

TEST(RequestParserTest, AChunkPastTheBodyLimitIsRefusedBeforeItsBytesAreRead) {
  HttpLimits limits;
  limits.request_body_bytes_max = 100;
  RequestParser parser(limits);
  std::string in = "POST /anything HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n" +
                   std::string(80, 'a') + "\r\n";
  auto done = parser.Feed(in);
  ASSERT_TRUE(done);
  EXPECT_FALSE(*done);
  in += "40\r\n";  // 80 + 64 > 100: refused on the size line, no data needed
  done = parser.Feed(in);
  ASSERT_FALSE(done);
  EXPECT_EQ(parser.failure_status(), 413);
  EXPECT_EQ(done.error().code, ErrorCode::kLimitExceeded);
  ASSERT_NE(done.error().As<LimitDetail>(), nullptr);
  EXPECT_EQ(done.error().As<LimitDetail>()->limit, "request_body_bytes_max");
  // A size that overflows 64 bits is refused the same way.
  RequestParser huge(limits);
  in = "PRI / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffffff\r\n";
  done = huge.Feed(in);
  ASSERT_FALSE(done);
  EXPECT_EQ(huge.failure_status(), 413);
}

// A chunk line of exactly chunk_line_bytes_max is taken whether its CR
// arrives with it or alone: the limit counts no CRLF (the fuzzer found one
// byte at a time refusing what the whole request was accepted for).
TEST(RequestParserTest, AChunkLineAtItsLimitIsTakenHoweverItsBytesArrive) {
  HttpLimits limits;
  limits.chunk_line_bytes_max = 32;
  const std::string line = "4;ext=" + std::string(26, 'x');  // 32 bytes
  const std::string request =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + line + "\r\nabcd\r\n0\r\n\r\n";
  for (size_t step : {request.size(), size_t{1}, size_t{7}}) {
    SCOPED_TRACE(step);
    RequestParser parser(limits);
    std::string in;
    Result<bool> done = false;
    for (size_t at = 0; at < request.size() && done && !*done; at += step) {
      in += request.substr(at, step);
      done = parser.Feed(in);
    }
    ASSERT_TRUE(done) << done.error().ToString();
    ASSERT_TRUE(*done);
    EXPECT_EQ(parser.Take().body, "abcd");
  }
  // One byte more is refused, also when its CR is still to come.
  RequestParser over(limits);
  std::string in = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + line + "x\r";
  Result<bool> done = over.Feed(in);
  ASSERT_FALSE(done);
  EXPECT_EQ(over.failure_status(), 400);
  EXPECT_EQ(done.error().As<LimitDetail>()->limit, "chunk_line_bytes_max");
}

TEST(RequestParserTest, HeadsAndLengthsPastTheirLimitsOrMalformedAreTypedRefusals) {
  HttpLimits limits;
  limits.request_head_bytes_max = 128;
  limits.request_body_bytes_max = 10;
  struct Case {
    std::string in;
    int status;
    ErrorCode code;
  };
  const std::vector<Case> cases{
      {"GET /" + std::string(200, 'a'), 431, ErrorCode::kLimitExceeded},
      {"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", 413, ErrorCode::kLimitExceeded},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413,
       ErrorCode::kLimitExceeded},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400,
       ErrorCode::kInvalidArgument},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
       ErrorCode::kInvalidArgument},
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, ErrorCode::kInvalidArgument},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, ErrorCode::kUnsupported},
      {"GET / HTTP/2.0\r\n\r\n", 505, ErrorCode::kUnsupported},
      {"GET nopath HTTP/1.1\r\n\r\n", 400, ErrorCode::kInvalidArgument},
      {"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400, ErrorCode::kInvalidArgument},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
       ErrorCode::kInvalidArgument},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXY", 400,
       ErrorCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    RequestParser parser(limits);
    std::string in = c.in;
    auto done = parser.Feed(in);
    ASSERT_FALSE(done) << c.in;
    EXPECT_EQ(parser.failure_status(), c.status) << c.in;
    EXPECT_EQ(done.error().code, c.code) << c.in;
  }
}

TEST(RequestParserTest, NoLengthMeansNoBodyAndHttp10ClosesUnlessAskedToKeepAlive) {
  RequestParser parser({});
  std::string in = "POST / HTTP/1.0\r\n\r\nrest";
  auto done = parser.Feed(in);
  ASSERT_TRUE(done && *done);
  HttpRequest request = parser.Take();
  EXPECT_EQ(request.body, "");
  EXPECT_FALSE(request.keep_alive);
  EXPECT_EQ(in, "rest");
  in = "\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n";
  done = parser.Feed(in);
  ASSERT_TRUE(done && *done);
  EXPECT_FALSE(parser.Take().keep_alive);
}

// ---- the server ----

int Connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int ConnectUnix(const std::filesystem::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

struct Answer {
  int status = 0;
  std::string head;
  std::string body;
};

// Reads one answer (Content-Length framed), within `timeout`.
// `rest`, if given, holds bytes read past the answer (the next answer's, on a
// kept connection) and is where this one starts.
std::optional<Answer> ReadAnswer(int fd, std::chrono::milliseconds timeout = 5000ms,
                                 std::string* rest = nullptr) {
  std::string in = rest ? std::exchange(*rest, std::string()) : std::string();
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const size_t head_end = in.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      Answer answer;
      answer.head = in.substr(0, head_end);
      answer.status = std::atoi(answer.head.c_str() + 9);
      const size_t cl = answer.head.find("Content-Length: ");
      const size_t length = cl == std::string::npos ? 0 : std::stoul(answer.head.substr(cl + 16));
      if (in.size() >= head_end + 4 + length) {
        answer.body = in.substr(head_end + 4, length);
        if (rest) *rest = in.substr(head_end + 4 + length);
        return answer;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
    char buffer[65536];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return std::nullopt;
    in.append(buffer, static_cast<size_t>(n));
  }
}

std::optional<Answer> Ask(int fd, const std::string& request) {
  if (!SendAll(fd, request)) return std::nullopt;
  return ReadAnswer(fd);
}

// True once the peer closed the connection (within `timeout`).
bool ClosedByPeer(int fd, std::chrono::milliseconds timeout = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return true;
  }
  return false;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpLimits limits = {}) {
    char pattern[] = "/tmp/sush-http-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    HttpServerOptions options;
    options.operator_socket = dir_ / "api.sock";
    options.limits = limits;
    options.on_refusal = on_refusal_;
    server_ = std::make_unique<HttpServer>(options);
    server_->Route("GET", "/v1/info", [this](const HttpRequest& request) {
      ++served_;
      return JsonResponse(200, json{{"ok", true}, {"operator", request.operator_socket}});
    });
    server_->Route("POST", "/v1/echo", [](const HttpRequest& request) {
      return JsonResponse(200, json{{"bytes", request.body.size()}});
    });
    server_->Route("GET", "/v1/jobs/([a-z]+)/file", [this](const HttpRequest& request) {
      HttpResponse response;
      response.content_type = "application/octet-stream";
      response.file = OwnedFd(::open((dir_ / request.matches[0]).c_str(), O_RDONLY | O_CLOEXEC));
      response.file_bytes = std::filesystem::file_size(dir_ / request.matches[0]);
      return response;
    });
    server_->Route("GET", "/v1/slow", [this](const HttpRequest&) {
      while (!release_) std::this_thread::sleep_for(5ms);
      return JsonResponse(200, json::object());
    });
    ASSERT_TRUE(server_->Start());
  }
  void TearDown() override {
    release_ = true;
    if (server_) server_->Stop();
    for (int fd : fds_) ::close(fd);
    std::filesystem::remove_all(dir_);
  }
  int Open() {
    const int fd = Connect(server_->port());
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  std::optional<Answer> Info() {
    const int fd = Open();
    if (fd < 0) return std::nullopt;
    return Ask(fd, "GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n");
  }

  std::filesystem::path dir_;
  std::function<void(std::string_view, std::string_view, const HttpResponse&)> on_refusal_;
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> served_{0};
  std::atomic<bool> release_{false};
  std::vector<int> fds_;
};

json ErrorOf(const Answer& answer) {
  json body = json::parse(answer.body, nullptr, false);
  return body.is_object() && body.contains("error") ? body["error"] : json();
}

TEST_F(HttpServerTest, AnswersAndKeepsTheConnectionAlive) {
  Start();
  const int fd = Open();
  for (int i = 0; i < 3; ++i) {
    auto answer = Ask(fd, "GET /v1/info HTTP/1.1\r\n\r\n");
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->status, 200);
    EXPECT_EQ(json::parse(answer->body)["operator"], false);
  }
  // Two requests in one write are answered in order.
  ASSERT_TRUE(SendAll(fd,
                      "POST /v1/echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                      "GET /v1/info HTTP/1.1\r\n\r\n"));
  // Both answers may arrive in one read.
  std::string rest;
  auto first = ReadAnswer(fd, 5000ms, &rest);
  auto second = ReadAnswer(fd, 5000ms, &rest);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(json::parse(first->body)["bytes"], 3);
  EXPECT_EQ(second->status, 200);
}

TEST_F(HttpServerTest, UnknownEndpointsAndMethodsAreTypedNotFound) {
  Start();
  for (const std::string request :
       {"GET /v2/nothing HTTP/1.1\r\n\r\n", "DELETE /v1/info HTTP/1.1\r\n\r\n",
        "POST /v1/info HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"}) {
    auto answer = Ask(Open(), request);
    ASSERT_TRUE(answer) << request;
    EXPECT_EQ(answer->status, 404) << request;
    EXPECT_EQ(ErrorOf(*answer)["code"], "NotFound") << answer->body;
    EXPECT_NE(answer->head.find("Content-Type: application/json"), std::string::npos);
  }
}

// Every refusal reaches on_refusal (sush-server logs each one), the server's
// own included; an answer of 200 does not. A path that is not UTF-8 is
// echoed in a 404 that is still JSON.
TEST_F(HttpServerTest, EveryRefusalIsReportedAndStaysJson) {
  std::mutex mu;
  std::vector<std::string> seen;
  on_refusal_ = [&](std::string_view method, std::string_view path, const HttpResponse& r) {
    std::lock_guard lock(mu);
    seen.push_back(std::string(method) + " " + std::string(path) + " " + std::to_string(r.status));
  };
  HttpLimits limits;
  limits.request_body_bytes_max = 1024;
  Start(limits);
  ASSERT_EQ(Info()->status, 200);
  auto not_found = Ask(Open(), "GET /v1/\xff\xfe HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(not_found);
  EXPECT_EQ(not_found->status, 404);
  EXPECT_EQ(ErrorOf(*not_found)["code"], "NotFound") << not_found->body;
  auto too_big = Ask(Open(), "POST /v1/echo HTTP/1.1\r\nContent-Length: 5000\r\n\r\n");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413);
  std::lock_guard lock(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"GET /v1/\xff\xfe 404", "  413"}));
}

// The 300 MB chunked POST: refused with a typed 413 once the chunks
// pass the limit, on a known and an unknown path and for a method without a
// route; the server stops reading long before the client stops sending.
TEST_F(HttpServerTest, AChunkedBodyPastTheLimitIsRefusedWhileItIsSentOnEveryPath) {
  HttpLimits limits;
  limits.request_body_bytes_max = 64 * 1024;
  Start(limits);
  const std::string chunk = "1000\r\n" + std::string(4096, 'x') + "\r\n";
  for (const std::string head :
       {"POST /v1/echo", "POST /not/a/route", "PUT /v1/info", "PRI /v1/info"}) {
    const int fd = Open();
    ASSERT_TRUE(SendAll(fd, head + " HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
    // Up to 300 MB, in 4 KiB chunks; the server's 413 and close end it early.
    size_t sent = 0;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (sent < (size_t{300} << 20) && std::chrono::steady_clock::now() < give_up) {
      // Whole chunks, however the socket takes them (the framing must hold).
      const size_t at = sent % chunk.size();
      const ssize_t n = ::send(fd, chunk.data() + at, chunk.size() - at, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (errno != EAGAIN) break;  // the server closed the connection
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    EXPECT_LT(sent, size_t{16} << 20) << head << ": the server kept reading";
    auto answer = ReadAnswer(fd);
    ASSERT_TRUE(answer) << head << " (sent " << sent << ")";
    EXPECT_EQ(answer->status, 413) << head;
    EXPECT_EQ(ErrorOf(*answer)["code"], "LimitExceeded") << answer->body;
    EXPECT_EQ(ErrorOf(*answer)["limit"]["name"], "request_body_bytes_max") << answer->body;
    EXPECT_NE(answer->head.find("Connection: close"), std::string::npos);
  }
  EXPECT_TRUE(Eventually([&] { return server_->stats().limit_refusals == 4; }));
  // And the server still serves.
  auto info = Info();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->status, 200);
}

TEST_F(HttpServerTest, AContentLengthPastTheLimitIsRefusedBeforeTheBody) {
  Start();
  auto answer = Ask(Open(), "POST /v1/echo HTTP/1.1\r\nContent-Length: 314572800\r\n\r\n");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 413);
  EXPECT_EQ(ErrorOf(*answer)["limit"]["max"], kRequestBodyBytesMax);
  // "Expect: 100-continue" is answered only for a body within the limit.
  const int fd = Open();
  ASSERT_TRUE(
      SendAll(fd, "POST /v1/echo HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"));
  char buffer[64] = {};
  ASSERT_GT(::recv(fd, buffer, sizeof(buffer) - 1, 0), 0);
  EXPECT_EQ(std::string(buffer), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(SendAll(fd, "{}"));
  auto echoed = ReadAnswer(fd);
  ASSERT_TRUE(echoed);
  EXPECT_EQ(json::parse(echoed->body)["bytes"], 2);
}

// The measurement: with 1,000 idle (and half-open) connections held,
// a new client is answered at once; past connections_max the idle ones make
// room for it.
TEST_F(HttpServerTest, AThousandIdleConnectionsDoNotStallANewClient) {
  HttpLimits limits;
  limits.connections_max = 1024;
  Start(limits);
  for (int i = 0; i < 1000; ++i) {
    const int fd = Open();
    ASSERT_GE(fd, 0) << i;
    if (i % 2 == 1) {
      ASSERT_TRUE(SendAll(fd, "GET /v1/in"));  // half a request line
    }
  }
  ASSERT_TRUE(Eventually([&] { return server_->stats().open == 1000; }));
  const auto asked = std::chrono::steady_clock::now();
  auto answer = Info();
  const auto took = std::chrono::steady_clock::now() - asked;
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  // Not a latency bound (machines are noisy; BENCHMARKS.md has the figure):
  // the old server needed a free thread, and had none for seconds.
  EXPECT_LT(took, 2s);
  RecordProperty(
      "info_ms_with_1000_idle",
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
}

TEST_F(HttpServerTest, PastConnectionsMaxTheLongestIdleIsEvictedAndBusyOnesAreNot) {
  HttpLimits limits;
  limits.connections_max = 8;
  Start(limits);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(Open());
  ASSERT_TRUE(Eventually([&] { return server_->stats().open == 8; }));
  auto answer = Info();  // the 9th evicts the first
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_TRUE(ClosedByPeer(idle[0]));
  EXPECT_TRUE(Eventually([&] { return server_->stats().evicted >= 1; }));

  // Connections in the middle of a request are never evicted: with all of
  // them busy, a new TCP client is closed at once, and the operator socket
  // still answers.
  std::vector<int> busy;
  for (int i = 0; i < 8; ++i) {
    const int fd = Open();
    ASSERT_TRUE(SendAll(fd, "GET /v1/info HTTP/1.1\r\nX-Slow:"));
    busy.push_back(fd);
  }
  ASSERT_TRUE(Eventually([&] { return server_->stats().evicted >= 8; }));
  // A connection whose first bytes the server has not read yet counts as
  // idle (and would be evicted instead): let it read them. (Without this
  // pause the test failed once in five runs on the loaded machine.)
  std::this_thread::sleep_for(300ms);
  const int refused = Open();
  EXPECT_TRUE(ClosedByPeer(refused));
  EXPECT_TRUE(Eventually([&] { return server_->stats().refused >= 1; }));
  const int op = ConnectUnix(dir_ / "api.sock");
  ASSERT_GE(op, 0);
  fds_.push_back(op);
  auto operator_answer = Ask(op, "GET /v1/info HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(operator_answer);
  EXPECT_EQ(json::parse(operator_answer->body)["operator"], true);
  EXPECT_EQ(std::filesystem::status(dir_ / "api.sock").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST_F(HttpServerTest, ASlowRequestIsCutWithATypedTimeoutAndAnIdleOneIsClosed) {
  HttpLimits limits;
  limits.request_read_ms_max = 300ms;
  limits.connection_idle_ms_max = 300ms;
  Start(limits);
  const int slow = Open();
  ASSERT_TRUE(SendAll(slow, "GET /v1/info HTTP/1.1\r\n"));
  auto answer = ReadAnswer(slow, 3000ms);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 408);
  EXPECT_EQ(ErrorOf(*answer)["code"], "Timeout");
  EXPECT_TRUE(ClosedByPeer(slow));
  // A byte at a time does not extend it (the time is from the first byte).
  const int drip = Open();
  const auto started = std::chrono::steady_clock::now();
  bool cut = false;
  for (int i = 0; i < 40 && !cut; ++i) {
    cut = !SendAll(drip, "X");
    std::this_thread::sleep_for(50ms);
    pollfd p{drip, POLLIN, 0};
    cut = cut || ::poll(&p, 1, 0) > 0;
  }
  EXPECT_TRUE(cut);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1900ms);
  const int idle = Open();
  EXPECT_TRUE(ClosedByPeer(idle, 3000ms));
  EXPECT_TRUE(Eventually([&] { return server_->stats().timed_out >= 3; }));
}

TEST_F(HttpServerTest, AFileIsStreamedAndAFullQueueIsBusy) {
  HttpLimits limits;
  limits.handler_threads = 1;
  limits.requests_queued_max = 1;
  Start(limits);
  const std::string content(3 << 20, 'z');
  std::ofstream(dir_ / "big") << content;
  auto file = Ask(Open(), "GET /v1/jobs/big/file HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(file);
  EXPECT_EQ(file->status, 200);
  EXPECT_EQ(file->body, content);

  const int a = Open(), b = Open(), c = Open();
  ASSERT_TRUE(SendAll(a, "GET /v1/slow HTTP/1.1\r\n\r\n"));  // holds the one thread
  ASSERT_TRUE(Eventually([&] { return server_->stats().requests >= 2; }));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(SendAll(b, "GET /v1/slow HTTP/1.1\r\n\r\n"));  // waits in the queue
  std::this_thread::sleep_for(50ms);
  auto busy = Ask(c, "GET /v1/info HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(ErrorOf(*busy)["limit"]["name"], "requests_queued_max");
  release_ = true;
  EXPECT_TRUE(ReadAnswer(a));
  EXPECT_TRUE(ReadAnswer(b));
}

TEST_F(HttpServerTest, TheClientReachesTheOperatorSocket) {
  Start();
  auto address = ParseAddress("unix:" + (dir_ / "api.sock").string());
  ASSERT_TRUE(address) << address.error().ToString();
  EXPECT_EQ(address->ToString(), "unix:" + (dir_ / "api.sock").string());
  SushClient client(*address);
  auto info = client.Get("/v1/info");
  ASSERT_TRUE(info) << info.error().ToString();
  EXPECT_EQ((*info)["operator"], true);
  auto missing = client.Get("/v1/none");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("no endpoint GET /v1/none"), std::string::npos);
}

}  // namespace
}  // namespace once::sush_net
