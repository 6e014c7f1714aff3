#include "wire.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "once/base/result.h"
#include "once/base/varint.h"

namespace once::gossip::wire {
namespace {

constexpr size_t kDataOverheadBytes = 1 + 2 * kVarintBytesMax;

void PutBytes(Bytes& out, std::span<const uint8_t> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

void PutBlob(Bytes& out, std::span<const uint8_t> bytes) {
  AppendVarint(out, bytes.size());
  PutBytes(out, bytes);
}

size_t PrefixBytes(uint8_t depth) { return (depth + 1) / 2; }

// The bytes of a listing record of `count` fingerprints at `depth`.
size_t ListingBytes(uint8_t depth, size_t count) {
  return 1 + PrefixBytes(depth) + VarintBytes(count) + 8 * count;
}

// A message's bytes in a frame: its path, then its version and its payload,
// each after its length.
size_t MessageBytes(size_t version_bytes, size_t payload_bytes) {
  return sizeof(Path) + VarintBytes(version_bytes) + version_bytes + VarintBytes(payload_bytes) +
         payload_bytes;
}

// The high bits of a record's depth byte: the record is bounded, or a
// listing, or (both) a lacking listing.
constexpr uint8_t kRecordBounded = 0x80;
constexpr uint8_t kRecordListing = 0x40;
constexpr uint8_t kRecordLacking = kRecordBounded | kRecordListing;

uint16_t UnseenMask(const Record& record) {
  uint16_t mask = 0;
  for (int c = 0; c < internal::kFanout; ++c) {
    if (record.Has(c) && record.unseen[c].count > 0) mask |= static_cast<uint16_t>(1u << c);
  }
  return mask;
}

std::unexpected<Error> Malformed(const std::string& what) {
  return MakeError(ErrorCode::kInvalidArgument, "gossip frame: " + what);
}

// A cursor over untrusted bytes.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t left() const { return bytes_.size() - pos_; }

  Result<uint8_t> U8() {
    if (left() < 1) return Malformed("truncated");
    return bytes_[pos_++];
  }
  Result<std::span<const uint8_t>> Take(size_t n) {
    if (left() < n) return Malformed("truncated");
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  Result<uint64_t> Varint() {
    const VarintRead r = ReadVarint(bytes_.subspan(pos_));
    if (r.problem != nullptr) return Malformed(r.problem);
    pos_ += r.bytes;
    return r.value;
  }
  // A length-prefixed blob of at most `max` bytes.
  Result<std::span<const uint8_t>> Blob(const char* limit, size_t max) {
    ONCE_ASSIGN_OR_RETURN(uint64_t n, Varint());
    if (n > max) return LimitError(limit, static_cast<int64_t>(n), static_cast<int64_t>(max));
    return Take(static_cast<size_t>(n));
  }
  template <size_t N>
  Status Array(std::array<uint8_t, N>& out) {
    ONCE_ASSIGN_OR_RETURN(auto bytes, Take(N));
    std::memcpy(out.data(), bytes.data(), N);
    return Ok();
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

Result<Summary> ReadSummary(Reader& r) {
  Summary s;
  ONCE_RETURN_IF_ERROR(r.Array(s.digest));
  ONCE_ASSIGN_OR_RETURN(s.count, r.Varint());
  return s;
}

Status ReadListing(Reader& r, Record& rec, Data& data) {
  ONCE_ASSIGN_OR_RETURN(uint64_t count, r.Varint());
  if ((count == 0 && !rec.lacking) || count > kListingLeavesMax) {
    return Malformed("listing count out of bounds");
  }
  ONCE_ASSIGN_OR_RETURN(auto bytes, r.Take(static_cast<size_t>(count) * 8));
  // Every fingerprint in the frame takes 8 of its bytes: what is left (with
  // these) bounds them all.
  if (!data.pool) {
    data.pool = std::make_unique<std::pmr::monotonic_buffer_resource>(r.left() + bytes.size());
  }
  // A pmr vector keeps the resource it was made with (assigning one made
  // elsewhere would not move it into the pool), so the new record's empty
  // vector is made again on the pool.
  std::destroy_at(&rec.fingerprints);
  std::construct_at(&rec.fingerprints, data.pool.get());
  rec.fingerprints.resize(static_cast<size_t>(count));
  for (size_t i = 0; i < rec.fingerprints.size(); ++i) {
    const uint64_t fp = internal::LoadBig64(bytes.data() + i * 8);
    if (i > 0 && fp < rec.fingerprints[i - 1]) return Malformed("listing out of order");
    rec.fingerprints[i] = fp;
  }
  return Ok();
}

// Into `rec`, a new Record: a record is 800 bytes (two arrays of 16
// summaries), and returning one through a Result moved it twice.
Status ReadRecord(Reader& r, Record& rec, Data& data) {
  ONCE_ASSIGN_OR_RETURN(uint8_t depth_byte, r.U8());
  rec.bounded = (depth_byte & kRecordBounded) != 0;
  rec.listing = (depth_byte & kRecordListing) != 0;
  if (rec.bounded && rec.listing) {  // both bits: a lacking listing
    rec.bounded = false;
    rec.lacking = true;
  }
  rec.key.depth = depth_byte & ~(kRecordBounded | kRecordListing);
  if (rec.key.depth >= internal::kDepthMax) return Malformed("record deeper than a path");
  ONCE_ASSIGN_OR_RETURN(auto prefix, r.Take(PrefixBytes(rec.key.depth)));
  std::memcpy(rec.key.prefix.data(), prefix.data(), prefix.size());
  if (rec.key.depth % 2 == 1 && (rec.key.prefix[rec.key.depth / 2] & 0x0f) != 0) {
    return Malformed("record prefix has bits past its depth");
  }
  if (rec.listing) {
    ONCE_RETURN_IF_ERROR(ReadListing(r, rec, data));
    return Ok();
  }
  ONCE_ASSIGN_OR_RETURN(uint8_t hi, r.U8());
  ONCE_ASSIGN_OR_RETURN(uint8_t lo, r.U8());
  rec.present = static_cast<uint16_t>(hi << 8 | lo);
  for (int c = 0; c < internal::kFanout; ++c) {
    if (!rec.Has(c)) continue;
    ONCE_ASSIGN_OR_RETURN(rec.children[c], ReadSummary(r));
    if (rec.children[c].count == 0) return Malformed("record lists an empty child");
  }
  if (!rec.bounded) return Ok();
  ONCE_ASSIGN_OR_RETURN(uint8_t uhi, r.U8());
  ONCE_ASSIGN_OR_RETURN(uint8_t ulo, r.U8());
  const auto unseen = static_cast<uint16_t>(uhi << 8 | ulo);
  if ((unseen & ~rec.present) != 0) return Malformed("record has unseen parts of absent children");
  for (int c = 0; c < internal::kFanout; ++c) {
    if (!((unseen >> c) & 1)) continue;
    ONCE_ASSIGN_OR_RETURN(rec.unseen[c], ReadSummary(r));
    if (rec.unseen[c].count == 0 || rec.unseen[c].count > rec.children[c].count) {
      return Malformed("record has an unseen part outside its child");
    }
  }
  return Ok();
}

Result<internal::LeafRef> ReadMessage(Reader& r, std::vector<bool>& path_is_hash) {
  Path path{};
  ONCE_RETURN_IF_ERROR(r.Array(path));
  ONCE_ASSIGN_OR_RETURN(auto version_bytes, r.Blob("version_bytes_max", kVersionBytesMax));
  ONCE_ASSIGN_OR_RETURN(itc::Version version, itc::Version::Decode(version_bytes));
  path_is_hash.push_back(PathOfEncoded(version_bytes) == path);
  ONCE_ASSIGN_OR_RETURN(auto payload, r.Blob("payload_bytes_max", kPayloadBytesMax));
  return internal::MakeLeaf(path, std::move(version), payload);
}

Result<Data> ReadData(Reader& r) {
  Data data;
  ONCE_ASSIGN_OR_RETURN(uint8_t flags, r.U8());
  if (flags > 1) return Malformed("unknown data flags");
  data.idle = flags == 1;
  ONCE_ASSIGN_OR_RETURN(uint64_t records, r.Varint());
  // Each record takes at least 3 bytes: a larger count is a lie.
  if (records > r.left() / 3) return Malformed("more records declared than bytes");
  data.records.reserve(records);
  for (uint64_t i = 0; i < records; ++i) {
    ONCE_RETURN_IF_ERROR(ReadRecord(r, data.records.emplace_back(), data));
  }
  ONCE_ASSIGN_OR_RETURN(uint64_t messages, r.Varint());
  if (messages > r.left() / 19) return Malformed("more messages declared than bytes");
  data.messages.reserve(messages);
  data.path_is_hash.reserve(messages);
  for (uint64_t i = 0; i < messages; ++i) {
    ONCE_ASSIGN_OR_RETURN(auto leaf, ReadMessage(r, data.path_is_hash));
    data.messages.push_back(std::move(leaf));
  }
  if (data.idle && !data.records.empty()) return Malformed("idle frame carries records");
  return data;
}

Result<Hello> ReadHello(Reader& r) {
  Hello h;
  ONCE_ASSIGN_OR_RETURN(uint8_t mode, r.U8());
  if (mode < 1 || mode > 3) return Malformed("unknown mode");
  h.mode = static_cast<Mode>(mode);
  ONCE_ASSIGN_OR_RETURN(uint8_t flags, r.U8());
  if (flags > 3) return Malformed("unknown hello flags");
  h.converged = flags & 1;
  ONCE_RETURN_IF_ERROR(r.Array(h.network.bytes));
  ONCE_ASSIGN_OR_RETURN(auto ceiling, r.Blob("ceiling_bytes_max", kCeilingBytesMax));
  ONCE_ASSIGN_OR_RETURN(h.ceiling, itc::Version::Decode(ceiling));
  ONCE_ASSIGN_OR_RETURN(h.root, ReadSummary(r));
  if (flags & 2) {
    ONCE_ASSIGN_OR_RETURN(auto party, r.Blob("ceiling_bytes_max", kCeilingBytesMax));
    h.party = Bytes(party.begin(), party.end());
  }
  return h;
}

}  // namespace

NodeKey NodeKey::Child(int nibble) const {
  NodeKey child = *this;
  child.depth = static_cast<uint8_t>(depth + 1);
  uint8_t& byte = child.prefix[depth / 2];
  byte = depth % 2 == 0 ? static_cast<uint8_t>(nibble << 4) : static_cast<uint8_t>(byte | nibble);
  return child;
}

Summary Record::Seen(int c) const {
  Summary seen = children[c];
  internal::XorInto(seen.digest, unseen[c].digest);
  seen.count -= unseen[c].count;  // the decoder keeps unseen within the child
  return seen;
}

Summary Record::Total() const {
  Summary total;
  for (int c = 0; c < internal::kFanout; ++c) {
    if (!Has(c)) continue;
    internal::XorInto(total.digest, children[c].digest);
    total.count += children[c].count;  // each count was bounded by the decoder's varint
  }
  return total;
}

FrameBuilder::FrameBuilder(Kind kind, size_t budget)
    : budget_(budget), has_data_(kind == Kind::kHello || kind == Kind::kData) {
  // A greeting, an answer or a steady session's frame in one block, not grown
  // through every power of two up to it.
  constexpr size_t kFrameStartBytes = 512;
  frame_.reserve(kFrameStartBytes);
  frame_.resize(kFrameHeaderBytes);
  frame_.push_back(kProtocolVersion);
  frame_.push_back(static_cast<uint8_t>(kind));
}

void FrameBuilder::PutHello(const Hello& hello) {
  ONCE_CHECK_MSG(head_end_ == 0, "the head comes before the records");
  frame_.push_back(static_cast<uint8_t>(hello.mode));
  frame_.push_back(static_cast<uint8_t>((hello.converged ? 1 : 0) | (hello.party ? 2 : 0)));
  PutBytes(frame_, hello.network.bytes);
  PutBlob(frame_, hello.ceiling.Encode());
  PutBytes(frame_, hello.root.digest);
  AppendVarint(frame_, hello.root.count);
  if (hello.party) PutBlob(frame_, *hello.party);
}

void FrameBuilder::PutParty(const Bytes& party) {
  ONCE_CHECK_MSG(head_end_ == 0, "the head comes before the records");
  PutBlob(frame_, party);
}
void FrameBuilder::PutReason(const std::string& reason) {
  ONCE_CHECK_MSG(head_end_ == 0, "the head comes before the records");
  PutBlob(frame_, std::span(reinterpret_cast<const uint8_t*>(reason.data()), reason.size()));
}

size_t FrameBuilder::RecordBytes(const Record& record) const {
  if (record.listing) return ListingBytes(record.key.depth, record.fingerprints.size());
  size_t n = 1 + PrefixBytes(record.key.depth) + 2;
  for (int c = 0; c < internal::kFanout; ++c) {
    if (record.Has(c)) n += 16 + VarintBytes(record.children[c].count);
  }
  if (!record.bounded) return n;
  n += 2;
  for (int c = 0; c < internal::kFanout; ++c) {
    if (record.Has(c) && record.unseen[c].count > 0) n += 16 + VarintBytes(record.unseen[c].count);
  }
  return n;
}

size_t FrameBuilder::HeadBytes() const {
  return (head_end_ == 0 ? frame_.size() : head_end_) - kFrameHeaderBytes;
}

size_t FrameBuilder::CountBytes() const { return records_begin_ - head_end_ - 1; }

size_t FrameBuilder::RecordsBytes() const {
  return head_end_ == 0 ? 0 : frame_.size() - records_begin_;
}

size_t FrameBuilder::room() const {
  const size_t used = HeadBytes() + RecordsBytes() + messages_.size() + kDataOverheadBytes;
  return used >= budget_ ? 0 : budget_ - used;
}

void FrameBuilder::MakeRoom(size_t adding) {
  // Room for the messages so far, their count and a wider record count too,
  // so that Finish seldom moves the frame.
  const size_t needed = frame_.size() + messages_.size() + adding + kVarintBytesMax + 1;
  if (needed <= frame_.capacity()) return;
  // Past kGrowInPlaceBytes the frame takes its whole budget at once: a
  // listing frame of a megabyte grown by doubling was copied twice over.
  constexpr size_t kGrowInPlaceBytes = 64 << 10;
  frame_.reserve(needed <= kGrowInPlaceBytes ? std::max(needed, 2 * frame_.capacity())
                                             : std::max(needed, kFrameHeaderBytes + budget_ + 1));
}

void FrameBuilder::OpenRecords() {
  if (head_end_ != 0) return;
  ONCE_CHECK_MSG(has_data_, "only a greeting or a data frame has records or messages");
  head_end_ = frame_.size();
  frame_.resize(head_end_ + 1 + VarintBytes(0));  // the idle flag, the count
  records_begin_ = frame_.size();
}

void FrameBuilder::CountRecord() {
  ++record_count_;
  if (VarintBytes(record_count_) == CountBytes()) return;
  frame_.insert(frame_.begin() + static_cast<std::ptrdiff_t>(records_begin_), uint8_t{0});
  ++records_begin_;
}

void FrameBuilder::PutRecordHead(const NodeKey& key, uint8_t flag) {
  CountRecord();
  frame_.push_back(static_cast<uint8_t>(key.depth | flag));
  frame_.insert(frame_.end(), key.prefix.begin(), key.prefix.begin() + PrefixBytes(key.depth));
}

uint8_t* FrameBuilder::BeginListing(const NodeKey& key, bool lacking, size_t count) {
  const size_t bytes = ListingBytes(key.depth, count);
  if (bytes > room()) return nullptr;
  OpenRecords();
  MakeRoom(bytes);
  PutRecordHead(key, lacking ? kRecordLacking : kRecordListing);
  AppendVarint(frame_, count);
  const size_t at = frame_.size();
  frame_.resize(at + 8 * count);
  return frame_.data() + at;
}

bool FrameBuilder::AddRecord(const Record& record) {
  if (record.listing) return AddListing(record.key, record.lacking, record.fingerprints);
  const size_t bytes = RecordBytes(record);
  if (bytes > room()) return false;
  OpenRecords();
  MakeRoom(bytes);
  PutRecordHead(record.key, record.bounded ? kRecordBounded : 0);
  frame_.push_back(static_cast<uint8_t>(record.present >> 8));
  frame_.push_back(static_cast<uint8_t>(record.present));
  for (int c = 0; c < internal::kFanout; ++c) {
    if (!record.Has(c)) continue;
    PutBytes(frame_, record.children[c].digest);
    AppendVarint(frame_, record.children[c].count);
  }
  if (record.bounded) {
    const uint16_t mask = UnseenMask(record);
    frame_.push_back(static_cast<uint8_t>(mask >> 8));
    frame_.push_back(static_cast<uint8_t>(mask));
    for (int c = 0; c < internal::kFanout; ++c) {
      if (!((mask >> c) & 1)) continue;
      PutBytes(frame_, record.unseen[c].digest);
      AppendVarint(frame_, record.unseen[c].count);
    }
  }
  return true;
}

bool FrameBuilder::AddMessage(const internal::Leaf& leaf) {
  const Bytes version = leaf.version.Encode();
  const size_t n = MessageBytes(version.size(), leaf.payload_size);
  if (n > room()) return false;
  OpenRecords();
  PutBytes(messages_, leaf.path);
  PutBlob(messages_, version);
  PutBlob(messages_, leaf.payload());
  ++message_count_;
  return true;
}

Bytes FrameBuilder::Finish(bool idle) {
  if (has_data_) {
    OpenRecords();
    frame_[head_end_] = idle ? 1 : 0;
    Bytes count;
    AppendVarint(count, record_count_);
    ONCE_CHECK(count.size() == CountBytes());
    std::memcpy(frame_.data() + head_end_ + 1, count.data(), count.size());
    AppendVarint(frame_, message_count_);
    PutBytes(frame_, messages_);
  }
  const uint32_t body = static_cast<uint32_t>(frame_.size() - kFrameHeaderBytes);
  for (int i = 0; i < 4; ++i) frame_[i] = static_cast<uint8_t>(body >> (24 - 8 * i));
  return std::move(frame_);
}

Result<Frame> Decode(std::span<const uint8_t> body) {
  Reader r(body);
  ONCE_ASSIGN_OR_RETURN(uint8_t version, r.U8());
  if (version != kProtocolVersion) {
    return MakeError(ErrorCode::kUnsupported,
                     "gossip frame: protocol version " + std::to_string(version));
  }
  ONCE_ASSIGN_OR_RETURN(uint8_t kind, r.U8());
  Frame f;
  f.kind = static_cast<Kind>(kind);
  switch (f.kind) {
    case Kind::kHello: {
      ONCE_ASSIGN_OR_RETURN(f.hello, ReadHello(r));
      ONCE_ASSIGN_OR_RETURN(f.data, ReadData(r));
      break;
    }
    case Kind::kData: {
      ONCE_ASSIGN_OR_RETURN(f.data, ReadData(r));
      break;
    }
    case Kind::kDonate: {
      ONCE_ASSIGN_OR_RETURN(auto party, r.Blob("ceiling_bytes_max", kCeilingBytesMax));
      f.party.assign(party.begin(), party.end());
      break;
    }
    case Kind::kAck:
      break;
    case Kind::kRefuse: {
      ONCE_ASSIGN_OR_RETURN(auto reason, r.Blob("reason_bytes_max", 4096));
      f.reason.assign(reason.begin(), reason.end());
      break;
    }
    default:
      return Malformed("unknown frame kind " + std::to_string(kind));
  }
  if (r.left() != 0) return Malformed("trailing bytes");
  return f;
}

}  // namespace once::gossip::wire
