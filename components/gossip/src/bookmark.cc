#include "once/gossip/bookmark.h"

#include <fcntl.h>
#include <sodium.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace once::gossip {
namespace {

constexpr uint8_t kMagic[4] = {'O', 'G', 'B', '1'};
constexpr size_t kChecksumBytes = 16;

// Writes at `at` and returns where the next bytes go.
uint8_t* PutBytes(uint8_t* at, std::span<const uint8_t> bytes) {
  if (!bytes.empty()) std::memcpy(at, bytes.data(), bytes.size());
  return at + bytes.size();
}
uint8_t* PutU32(uint8_t* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) *at++ = static_cast<uint8_t>(v >> (24 - 8 * i));
  return at;
}

std::array<uint8_t, kChecksumBytes> Checksum(std::span<const uint8_t> bytes) {
  std::array<uint8_t, kChecksumBytes> sum{};
  crypto_generichash(sum.data(), sum.size(), bytes.data(), bytes.size(), nullptr, 0);
  return sum;
}

std::unexpected<Error> Corrupt(const std::string& what) {
  return MakeError(ErrorCode::kCorruption, "bookmark: " + what);
}

Result<std::span<const uint8_t>> TakeBlob(std::span<const uint8_t>& in) {
  if (in.size() < 4) return Corrupt("truncated");
  const uint32_t n = uint32_t{in[0]} << 24 | uint32_t{in[1]} << 16 | uint32_t{in[2]} << 8 | in[3];
  if (in.size() - 4 < n) return Corrupt("truncated");
  auto blob = in.subspan(4, n);
  in = in.subspan(4 + n);
  return blob;
}

std::unexpected<Error> Errno(const std::string& what) {
  return MakeError(ErrorCode::kUnavailable, what + ": " + std::strerror(errno));
}

Status WriteAllFd(int fd, const Bytes& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write");
    done += static_cast<size_t>(n);
  }
  return Ok();
}

}  // namespace

Bytes EncodeBookmark(const Bookmark& bookmark) {
  const Bytes party = bookmark.party ? bookmark.party->Encode() : Bytes{};
  const Bytes version = bookmark.version.Encode();
  // Written into a buffer of its final size: appended piece by piece after
  // the 4-byte magic, GCC 12 at -O3 took the magic's size for the buffer's
  // and warned (-Warray-bounds) on every append.
  Bytes out(sizeof(kMagic) + bookmark.network.bytes.size() + 1 + 4 + party.size() + 4 +
            version.size() + kChecksumBytes);
  uint8_t* at = out.data();
  at = PutBytes(at, kMagic);
  at = PutBytes(at, bookmark.network.bytes);
  *at++ = bookmark.party ? 1 : 0;
  at = PutU32(at, static_cast<uint32_t>(party.size()));
  at = PutBytes(at, party);
  at = PutU32(at, static_cast<uint32_t>(version.size()));
  at = PutBytes(at, version);
  const auto sum = Checksum(std::span(out.data(), at));
  PutBytes(at, sum);
  return out;
}

Result<Bookmark> DecodeBookmark(std::span<const uint8_t> bytes) {
  if (bytes.size() > kBookmarkBytesMax) {
    return LimitError("bookmark_bytes_max", static_cast<int64_t>(bytes.size()), kBookmarkBytesMax);
  }
  if (bytes.size() < sizeof(kMagic) + 16 + 1 + kChecksumBytes) return Corrupt("truncated");
  const auto body = bytes.first(bytes.size() - kChecksumBytes);
  const auto sum = Checksum(body);
  if (!std::equal(sum.begin(), sum.end(), bytes.end() - kChecksumBytes)) {
    return Corrupt("checksum mismatch");
  }
  if (!std::equal(std::begin(kMagic), std::end(kMagic), body.begin())) return Corrupt("magic");
  Bookmark b;
  std::copy_n(body.begin() + 4, 16, b.network.bytes.begin());
  const uint8_t flags = body[20];
  if (flags > 1) return Corrupt("flags");
  std::span<const uint8_t> rest = body.subspan(21);
  ONCE_ASSIGN_OR_RETURN(auto party, TakeBlob(rest));
  ONCE_ASSIGN_OR_RETURN(auto version, TakeBlob(rest));
  if (!rest.empty()) return Corrupt("trailing bytes");
  if (flags == 1) {
    auto p = itc::Party::Decode(party);
    if (!p) return Corrupt("party: " + p.error().message);
    b.party = std::move(*p);
  } else if (!party.empty()) {
    return Corrupt("a party without its flag");
  }
  auto v = itc::Version::Decode(version);
  if (!v) return Corrupt("version: " + v.error().message);
  b.version = std::move(*v);
  return b;
}

Status FileBookmarkStore::Save(const Bookmark& bookmark) {
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("open " + tmp);
  Status written = WriteAllFd(fd, EncodeBookmark(bookmark));
  if (written && ::fsync(fd) != 0) written = Errno("fsync");
  ::close(fd);
  ONCE_RETURN_IF_ERROR(written);
  if (::rename(tmp.c_str(), path_.c_str()) != 0) return Errno("rename");
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Errno("open " + dir);
  const int rc = ::fsync(dir_fd);
  ::close(dir_fd);
  if (rc != 0) return Errno("fsync dir");
  return Ok();
}

Result<std::optional<Bookmark>> FileBookmarkStore::Load() const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::optional<Bookmark>();
    return Errno("open " + path_);
  }
  Bytes bytes;
  char buf[4096];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    bytes.insert(bytes.end(), buf, buf + in.gcount());
    if (bytes.size() > kBookmarkBytesMax) {
      return LimitError("bookmark_bytes_max", static_cast<int64_t>(bytes.size()),
                        kBookmarkBytesMax);
    }
  }
  // Moved out of the result in place (not through a local Bookmark), which
  // keeps g++ 12 from a false maybe-uninitialized warning on the party.
  Result<Bookmark> decoded = DecodeBookmark(bytes);
  if (!decoded) return std::unexpected(std::move(decoded.error()));
  return std::optional<Bookmark>(std::move(*decoded));
}

}  // namespace once::gossip
