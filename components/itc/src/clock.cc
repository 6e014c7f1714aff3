#include "once/itc/clock.h"

#include <string>

namespace once::itc {

Clock Clock::Seed() { return Clock(Party::Seed(), Version()); }

Bytes Clock::Encode() const {
  Bytes out = party_.Encode();
  const Bytes v = version_.Encode();
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

Result<Clock> Clock::Decode(std::span<const uint8_t> bytes) {
  ONCE_ASSIGN_OR_RETURN(auto party, Party::DecodePrefix(bytes));
  ONCE_ASSIGN_OR_RETURN(Version version, Version::Decode(bytes.subspan(party.second)));
  return Clock(std::move(party.first), std::move(version));
}

Status Clock::Tick() {
  ONCE_ASSIGN_OR_RETURN(version_, itc::Tick(version_, party_));
  return Ok();
}

Status Clock::Ticks(uint64_t count) {
  ONCE_ASSIGN_OR_RETURN(version_, itc::Ticks(version_, party_, count));
  return Ok();
}

Result<Version> Clock::Send() {
  ONCE_RETURN_IF_ERROR(Tick());
  return version_;
}

Status Clock::Recv(const Version& received) {
  ONCE_ASSIGN_OR_RETURN(version_, itc::Tick(itc::Join(version_, received), party_));
  return Ok();
}

void Clock::Absorb(const Version& seen) { version_ = itc::Join(version_, seen); }

Result<Clock> Clock::Fork() {
  ONCE_ASSIGN_OR_RETURN(Party right, party_.Fork());
  return Clock(std::move(right), version_);
}

std::expected<void, Refused<Clock>> Clock::Join(Clock&& other) {
  auto joined = party_.Join(std::move(other.party_));
  if (!joined) {
    other.party_ = std::move(joined.error().operand);
    return std::unexpected(Refused<Clock>{std::move(other), std::move(joined.error().error)});
  }
  version_ = itc::Join(version_, other.version_);
  return {};
}

void Clock::Sync(Clock& other) {
  version_ = itc::Join(version_, other.version_);
  other.version_ = version_;
}

}  // namespace once::itc
