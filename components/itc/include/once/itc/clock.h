// File: clock.h
//
// A Clock is a Party and the Version it has seen: the state one replica keeps.
// Move-only, because its party is.
//
//   Clock a = Clock::Seed();
//   ONCE_ASSIGN_OR_RETURN(Clock b, a.Fork());          // b gets half of a's party
//   ONCE_ASSIGN_OR_RETURN(Version stamp, a.Send());    // an event; ship `stamp`
//   ONCE_RETURN_IF_ERROR(b.Recv(stamp));                // absorb, then an event
//   Bytes saved = b.Encode();                           // party bytes + version bytes
//
// Errors: kLimitExceeded when a height would pass 2^64-1 or a fork would pass
// kTreeDepthMax; on any error the clock is unchanged.

#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "once/base/hex.h"
#include "once/base/result.h"
#include "once/itc/party.h"
#include "once/itc/version.h"

namespace once::itc {

class Clock {
 public:
  // The seed party at the zero version.
  static Clock Seed();
  Clock(Party party, Version version) : party_(std::move(party)), version_(std::move(version)) {}

  // Party bytes then version bytes, each marker-padded.
  Bytes Encode() const;
  // Errors as Party::Decode / Version::Decode.
  static Result<Clock> Decode(std::span<const uint8_t> bytes);

  const Party& party() const { return party_; }
  const Version& version() const { return version_; }

  // One event of the own party.
  Status Tick();
  // Ticks `count` times (same bytes as `count` Tick calls).
  Status Ticks(uint64_t count);
  // An event, returning the new version to ship with a message.
  Result<Version> Send();
  // Absorbs a received version, then an event.
  Status Recv(const Version& received);
  // Joins a version in without an event (the paper's peek).
  void Absorb(const Version& seen);
  // Splits the party; this clock keeps the left half, the returned clock has
  // the right half; both keep the version.
  Result<Clock> Fork();
  // Takes `other` in: party union and version join. Refused, with `other`
  // handed back and this clock unchanged, if the parties overlap.
  std::expected<void, Refused<Clock>> Join(Clock&& other);
  // Both clocks absorb each other's version (both become the join); parties
  // are unchanged. This is what two gossiping replicas do; the paper's
  // identity-redistributing sync is Join followed by Fork.
  void Sync(Clock& other);

  friend bool operator==(const Clock& a, const Clock& b) {
    return a.party_ == b.party_ && a.version_ == b.version_;
  }

 private:
  Party party_;
  Version version_;
};

}  // namespace once::itc
