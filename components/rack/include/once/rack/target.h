// File: target.h
//
// Which sleds a job is for: "*" (every sled) or a comma list whose items are
// cubby numbers 0-31, serial numbers, or full baseboard ids ("part:serial").
// Whitespace around items is ignored. Cubbies are resolved late: a sled
// matches by its own cubby when it runs the job.
//
//   ONCE_ASSIGN_OR_RETURN(Target t, Target::Parse("0,7,BRM23230010"));
//   if (t.Matches(SledIdentity{"913-0000019:BRM23230010", 3})) ...

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"

namespace once::rack {

struct SledIdentity {
  std::string baseboard;         // "part:serial"
  std::optional<uint8_t> cubby;  // 0..31 when known
  // The part after the last ':' (the whole id if there is none).
  std::string_view serial() const;
};

class Target {
 public:
  // kInvalidArgument: empty list or item, a number above 31; kLimitExceeded:
  // longer than kTargetBytesMax or more than kTargetItemsMax items.
  static Result<Target> Parse(std::string_view text);
  bool Matches(const SledIdentity& sled) const;
  bool all() const { return all_; }

 private:
  bool all_ = false;
  std::vector<uint8_t> cubbies_;
  std::vector<std::string> names_;  // serials and baseboard ids
};

}  // namespace once::rack
