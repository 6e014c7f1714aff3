// File: bookmark.h
//
// The durable bookmark of a peer: its network, party and a version covering
// every own event that may have left. A Host saves it (through a
// BookmarkStore) before the first byte of a session leaves whenever its own
// events moved past the saved one; a restarted peer reclaims its identity
// from it with Replica::Reclaim instead of reusing a stale party.
//
//   FileBookmarkStore store("/var/lib/node/bookmark");
//   ONCE_ASSIGN_OR_RETURN(std::optional<Bookmark> saved, store.Load());
//   Replica replica = saved ? Replica::Reclaim(std::move(*saved)) : Replica::Seed(rng);
//   Host host(std::move(replica), &store);
//
// Format: "OGB1", network (16 bytes), flags, party and version (each
// length-prefixed, marker-padded itc encodings), then BLAKE2b-128 of all the
// preceding bytes. Decoding rejects any other length, a bad checksum or an
// invalid clock (kCorruption), and files over kBookmarkBytesMax
// (kLimitExceeded).

#pragma once

#include <optional>
#include <string>

#include "once/gossip/session.h"

namespace once::gossip {

Bytes EncodeBookmark(const Bookmark& bookmark);
Result<Bookmark> DecodeBookmark(std::span<const uint8_t> bytes);

// A bookmark in one file, replaced atomically: write a temporary file, fsync
// it, rename it over the old one, fsync the directory. Thread-compatible.
class FileBookmarkStore final : public BookmarkStore {
 public:
  explicit FileBookmarkStore(std::string path) : path_(std::move(path)) {}
  Status Save(const Bookmark& bookmark) override;
  // nullopt if there is no file; errors as DecodeBookmark, kUnavailable on I/O.
  Result<std::optional<Bookmark>> Load() const;

 private:
  std::string path_;
};

}  // namespace once::gossip
