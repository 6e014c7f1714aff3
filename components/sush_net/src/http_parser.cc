#include "once/sush_net/http_parser.h"

#include <algorithm>
#include <charconv>

namespace once::sush_net {

namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// RFC 9110 token characters.
bool IsToken(std::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out.push_back(' ');
    } else if (text[i] == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
               HexValue(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

std::optional<std::string_view> HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return std::string_view(value);
  }
  return std::nullopt;
}

std::optional<std::string> HttpRequest::Param(std::string_view name) const {
  std::string_view rest = query;
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (PercentDecode(pair.substr(0, eq)) != name) continue;
    return eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1));
  }
  return std::nullopt;
}

Result<bool> RequestParser::Fail(int status, std::unexpected<Error> error) {
  failure_status_ = status;
  stage_ = Stage::kDone;
  return error;
}

HttpRequest RequestParser::Take() {
  HttpRequest out = std::move(request_);
  request_ = HttpRequest{};
  stage_ = Stage::kHead;
  started_ = false;
  expects_continue_ = false;
  body_remaining_ = 0;
  trailer_bytes_ = 0;
  return out;
}

Result<bool> RequestParser::Feed(std::string& in) {
  if (stage_ == Stage::kHead) {
    ONCE_ASSIGN_OR_RETURN(bool head, ParseHead(in));
    if (!head) return false;
  }
  if (stage_ == Stage::kBodyLength) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(body_remaining_, in.size()));
    request_.body.append(in, 0, n);
    in.erase(0, n);
    body_remaining_ -= n;
    if (body_remaining_ > 0) return false;
    stage_ = Stage::kDone;
  }
  if (stage_ >= Stage::kChunkLine && stage_ <= Stage::kTrailers) {
    ONCE_ASSIGN_OR_RETURN(bool done, ReadChunked(in));
    if (!done) return false;
  }
  return stage_ == Stage::kDone;
}

Result<bool> RequestParser::ParseHead(std::string& in) {
  // Robustness (RFC 9112 2.2): empty lines before a request line are skipped.
  if (!started_) {
    size_t skip = 0;
    while (skip < in.size() && (in[skip] == '\r' || in[skip] == '\n')) ++skip;
    in.erase(0, skip);
    if (in.empty()) return false;
    started_ = true;
  }
  const size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (in.size() > limits_.request_head_bytes_max) {
      return Fail(431, LimitError("request_head_bytes_max", static_cast<int64_t>(in.size()),
                                  static_cast<int64_t>(limits_.request_head_bytes_max)));
    }
    return false;
  }
  if (end + 4 > limits_.request_head_bytes_max) {
    return Fail(431, LimitError("request_head_bytes_max", static_cast<int64_t>(end + 4),
                                static_cast<int64_t>(limits_.request_head_bytes_max)));
  }
  const std::string head = in.substr(0, end + 2);  // every line ends in CRLF
  in.erase(0, end + 4);

  size_t pos = head.find("\r\n");
  const std::string_view line = std::string_view(head).substr(0, pos);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Fail(400, MakeError(ErrorCode::kInvalidArgument, "malformed request line"));
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(method) || target.empty() || target.front() != '/') {
    return Fail(400, MakeError(ErrorCode::kInvalidArgument, "malformed request line"));
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Fail(
        505, MakeError(ErrorCode::kUnsupported, "HTTP/1.0 or HTTP/1.1 only", std::string(version)));
  }
  request_.method = std::string(method);
  request_.target = std::string(target);
  const size_t q = target.find('?');
  request_.path = std::string(target.substr(0, q));
  request_.query = q == std::string_view::npos ? std::string() : std::string(target.substr(q + 1));
  request_.version_minor = version == "HTTP/1.1" ? 1 : 0;

  while (pos + 2 < head.size()) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string_view header = std::string_view(head).substr(pos + 2, next - pos - 2);
    pos = next;
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos || !IsToken(header.substr(0, colon))) {
      return Fail(400, MakeError(ErrorCode::kInvalidArgument, "malformed header line"));
    }
    if (request_.headers.size() >= limits_.request_headers_max) {
      return Fail(
          431, LimitError("request_headers_max", static_cast<int64_t>(request_.headers.size() + 1),
                          static_cast<int64_t>(limits_.request_headers_max)));
    }
    request_.headers.emplace_back(Lower(header.substr(0, colon)),
                                  std::string(Trim(header.substr(colon + 1))));
  }
  return ApplyHeaders();
}

// Framing and connection headers; sets the stage the body is read in.
Result<bool> RequestParser::ApplyHeaders() {
  std::optional<std::string_view> length;
  std::optional<std::string_view> coding;
  std::string connection;
  for (const auto& [name, value] : request_.headers) {
    if (name == "content-length") {
      if (length) {
        return Fail(400, MakeError(ErrorCode::kInvalidArgument, "more than one Content-Length"));
      }
      length = value;
    } else if (name == "transfer-encoding") {
      if (coding) {
        return Fail(400, MakeError(ErrorCode::kInvalidArgument, "more than one Transfer-Encoding"));
      }
      coding = value;
    } else if (name == "connection") {
      connection += Lower(value) + ",";
    } else if (name == "expect") {
      expects_continue_ = Lower(value) == "100-continue";
    }
  }
  request_.keep_alive = request_.version_minor == 1
                            ? connection.find("close") == std::string::npos
                            : connection.find("keep-alive") != std::string::npos;
  if (length && coding) {
    return Fail(
        400, MakeError(ErrorCode::kInvalidArgument, "both Content-Length and Transfer-Encoding"));
  }
  if (coding) {
    if (Lower(*coding) != "chunked") {
      return Fail(501, MakeError(ErrorCode::kUnsupported, "only the chunked transfer coding",
                                 std::string(*coding)));
    }
    stage_ = Stage::kChunkLine;
    return true;
  }
  if (!length) {
    stage_ = Stage::kDone;
    return true;
  }
  uint64_t bytes = 0;
  auto [end, ec] = std::from_chars(length->data(), length->data() + length->size(), bytes);
  if (ec == std::errc::result_out_of_range) bytes = UINT64_MAX;
  if ((ec != std::errc() && ec != std::errc::result_out_of_range) ||
      end != length->data() + length->size() || length->empty()) {
    return Fail(400, MakeError(ErrorCode::kInvalidArgument, "malformed Content-Length",
                               std::string(*length)));
  }
  if (bytes > limits_.request_body_bytes_max) {
    return Fail(413, LimitError("request_body_bytes_max",
                                static_cast<int64_t>(std::min<uint64_t>(bytes, INT64_MAX)),
                                static_cast<int64_t>(limits_.request_body_bytes_max)));
  }
  body_remaining_ = bytes;
  stage_ = bytes == 0 ? Stage::kDone : Stage::kBodyLength;
  return true;
}

// RFC 9112 7.1: chunk-size [; ext] CRLF, data CRLF, ..., 0 CRLF, trailers, CRLF.
Result<bool> RequestParser::ReadChunked(std::string& in) {
  while (true) {
    switch (stage_) {
      case Stage::kChunkLine: {
        const size_t eol = in.find("\r\n");
        if (eol == std::string::npos) {
          // The line so far, without a last CR that may begin its CRLF (the
          // limit counts no CRLF: a line of exactly the limit is taken
          // however the bytes arrive).
          const size_t line = in.size() - (!in.empty() && in.back() == '\r' ? 1 : 0);
          if (line > limits_.chunk_line_bytes_max) {
            return Fail(400, LimitError("chunk_line_bytes_max", static_cast<int64_t>(line),
                                        static_cast<int64_t>(limits_.chunk_line_bytes_max)));
          }
          return false;
        }
        if (eol > limits_.chunk_line_bytes_max) {
          return Fail(400, LimitError("chunk_line_bytes_max", static_cast<int64_t>(eol),
                                      static_cast<int64_t>(limits_.chunk_line_bytes_max)));
        }
        std::string_view size_text = std::string_view(in).substr(0, eol);
        size_text = Trim(size_text.substr(0, size_text.find(';')));
        uint64_t size = 0;
        auto [end, ec] =
            std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
        if (ec == std::errc::result_out_of_range) size = UINT64_MAX;
        if (size_text.empty() || (ec != std::errc() && ec != std::errc::result_out_of_range) ||
            end != size_text.data() + size_text.size()) {
          return Fail(400, MakeError(ErrorCode::kInvalidArgument, "malformed chunk size"));
        }
        in.erase(0, eol + 2);
        // The declared size is checked before any of its bytes is read.
        const uint64_t total = request_.body.size() + std::min<uint64_t>(size, UINT64_MAX / 2);
        if (total > limits_.request_body_bytes_max) {
          return Fail(413, LimitError("request_body_bytes_max",
                                      static_cast<int64_t>(std::min<uint64_t>(total, INT64_MAX)),
                                      static_cast<int64_t>(limits_.request_body_bytes_max)));
        }
        body_remaining_ = size;
        stage_ = size == 0 ? Stage::kTrailers : Stage::kChunkData;
        break;
      }
      case Stage::kChunkData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(body_remaining_, in.size()));
        request_.body.append(in, 0, n);
        in.erase(0, n);
        body_remaining_ -= n;
        if (body_remaining_ > 0) return false;
        stage_ = Stage::kChunkEnd;
        break;
      }
      case Stage::kChunkEnd:
        if (in.size() < 2) return false;
        if (in.compare(0, 2, "\r\n") != 0) {
          return Fail(400, MakeError(ErrorCode::kInvalidArgument, "chunk not followed by CRLF"));
        }
        in.erase(0, 2);
        stage_ = Stage::kChunkLine;
        break;
      case Stage::kTrailers: {
        const size_t eol = in.find("\r\n");
        if (eol == std::string::npos) {
          if (trailer_bytes_ + in.size() > limits_.request_head_bytes_max) {
            return Fail(431, LimitError("request_head_bytes_max",
                                        static_cast<int64_t>(trailer_bytes_ + in.size()),
                                        static_cast<int64_t>(limits_.request_head_bytes_max)));
          }
          return false;
        }
        trailer_bytes_ += eol + 2;
        if (trailer_bytes_ > limits_.request_head_bytes_max) {
          return Fail(431,
                      LimitError("request_head_bytes_max", static_cast<int64_t>(trailer_bytes_),
                                 static_cast<int64_t>(limits_.request_head_bytes_max)));
        }
        const bool last = eol == 0;
        in.erase(0, eol + 2);  // trailer fields are read and dropped
        if (last) {
          stage_ = Stage::kDone;
          return true;
        }
        break;
      }
      default:
        return stage_ == Stage::kDone;
    }
  }
}

}  // namespace once::sush_net
