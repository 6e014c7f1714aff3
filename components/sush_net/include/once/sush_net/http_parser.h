// File: http_parser.h
//
// One HTTP/1.x request, parsed from bytes as they arrive, with every limit
// enforced while reading: the head (request line and headers) is refused
// past request_head_bytes_max before its end is found, a Content-Length past
// request_body_bytes_max is refused before any body byte is read, and a
// chunked body is refused as soon as its declared chunks would pass the same
// limit (so a 300 MB chunked POST costs the server at most one limit's worth
// of memory). A request with neither Content-Length nor chunked coding has no
// body (it is never read "until the peer closes"). No sockets, no threads:
// HttpServer (http_server.h) feeds it.
//
//   RequestParser parser(limits);
//   std::string in = "POST /v1/submit HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
//   Result<bool> done = parser.Feed(in);       // true: a whole request was consumed
//   if (!done) reply(parser.failure_status(), done.error());   // and close the connection
//   if (*done) HttpRequest request = parser.Take();
//
// Errors (the connection must be closed after answering them, since the rest
// of the stream cannot be trusted): kLimitExceeded with LimitDetail
// (request_head_bytes_max 431, request_headers_max 431,
// request_body_bytes_max 413, chunk_line_bytes_max 400), kInvalidArgument
// (400: a malformed request line, header, length or chunk; both
// Content-Length and Transfer-Encoding; a second Content-Length),
// kUnsupported (501: a transfer coding other than chunked; 505: a version
// other than HTTP/1.0 or 1.1).

#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "once/base/result.h"

namespace once::sush_net {

// The limits of the HTTP face of a sled (see HttpServer for the connection ones).
struct HttpLimits {
  // Request line and headers, CRLFs included (and a chunked body's trailers).
  size_t request_head_bytes_max = 16 * 1024;
  size_t request_headers_max = 64;
  // The body once decoded (the same for every method and path).
  size_t request_body_bytes_max = 64 * 1024;
  // A chunk-size line (hex size and extensions), its CRLF not counted.
  size_t chunk_line_bytes_max = 1024;
  // TCP connections held at once. Past it a new connection evicts the one
  // idle longest (no request in progress), or is closed at once if none is.
  size_t connections_max = 1024;
  // Connections on the operator socket (a Unix socket in the sled's data
  // folder), counted apart: a flood of TCP connections never takes them.
  size_t operator_connections_max = 8;
  // From the first byte of a request to its last (a slow sender is cut).
  std::chrono::milliseconds request_read_ms_max{10000};
  // A connection with no request in progress is closed after this long.
  std::chrono::milliseconds connection_idle_ms_max{60000};
  // A response must be taken by the client within this long.
  std::chrono::milliseconds response_write_ms_max{60000};
  // Whole requests waiting for a handler thread; past it: 503 (Busy).
  size_t requests_queued_max = 256;
  // Threads running handlers.
  size_t handler_threads = 4;
};

struct HttpRequest {
  std::string method;
  std::string target;  // as sent: the path and the query
  std::string path;    // the target up to '?'
  std::string query;   // after '?', raw
  int version_minor = 1;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool keep_alive = true;
  // Set by the server: the request came over the operator socket.
  bool operator_socket = false;
  // Set by the server: the route's regex groups (1..n).
  std::vector<std::string> matches;

  // The first header of this (lower-case) name.
  std::optional<std::string_view> Header(std::string_view lower_name) const;
  // A query parameter, percent-decoded ('+' is a space); nullopt if absent.
  std::optional<std::string> Param(std::string_view name) const;
};

class RequestParser {
 public:
  explicit RequestParser(const HttpLimits& limits) : limits_(limits) {}

  // Consumes what it can of `in` (erasing it): true once a whole request was
  // read (the bytes after it stay in `in`), false if more bytes are needed.
  // An error is final (see the file comment).
  Result<bool> Feed(std::string& in);
  // The head is complete and a body is still to come.
  bool awaiting_body() const { return stage_ != Stage::kHead && stage_ != Stage::kDone; }
  // The head asked for "Expect: 100-continue" (answered once, by the server).
  bool expects_continue() const { return expects_continue_; }
  // Any byte of this request was consumed (a keep-alive connection between
  // requests has none).
  bool started() const { return started_; }
  // The HTTP status the last error is answered with.
  int failure_status() const { return failure_status_; }
  // The parsed request; the parser is ready for the next one.
  HttpRequest Take();

 private:
  enum class Stage : uint8_t {
    kHead,
    kBodyLength,
    kChunkLine,
    kChunkData,
    kChunkEnd,
    kTrailers,
    kDone,
  };
  Result<bool> Fail(int status, std::unexpected<Error> error);
  Result<bool> ParseHead(std::string& in);
  Result<bool> ApplyHeaders();
  Result<bool> ReadChunked(std::string& in);

  HttpLimits limits_;
  Stage stage_ = Stage::kHead;
  HttpRequest request_;
  bool started_ = false;
  bool expects_continue_ = false;
  uint64_t body_remaining_ = 0;  // kBodyLength, kChunkData
  size_t trailer_bytes_ = 0;
  int failure_status_ = 400;
};

}  // namespace once::sush_net
