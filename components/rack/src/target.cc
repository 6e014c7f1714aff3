#include "once/rack/target.h"

#include <algorithm>
#include <cctype>

#include "once/rack/limits.h"

namespace once::rack {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string_view SledIdentity::serial() const {
  std::string_view id(baseboard);
  size_t colon = id.rfind(':');
  return colon == std::string_view::npos ? id : id.substr(colon + 1);
}

Result<Target> Target::Parse(std::string_view text) {
  if (text.size() > kTargetBytesMax) {
    return LimitError("target_bytes_max", static_cast<int64_t>(text.size()),
                      static_cast<int64_t>(kTargetBytesMax));
  }
  Target target;
  if (Trim(text) == "*") {
    target.all_ = true;
    return target;
  }
  size_t items = 0;
  while (true) {
    size_t comma = text.find(',');
    std::string_view item = Trim(text.substr(0, comma));
    if (++items > kTargetItemsMax) {
      return LimitError("target_items_max", static_cast<int64_t>(items),
                        static_cast<int64_t>(kTargetItemsMax));
    }
    if (item.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty target item");
    if (AllDigits(item)) {
      if (item.size() > 2 || std::stoi(std::string(item)) > kCubbyMax) {
        return MakeError(ErrorCode::kInvalidArgument, "cubby out of range 0-31", std::string(item));
      }
      target.cubbies_.push_back(static_cast<uint8_t>(std::stoi(std::string(item))));
    } else {
      target.names_.emplace_back(item);
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return target;
}

bool Target::Matches(const SledIdentity& sled) const {
  if (all_) return true;
  if (sled.cubby && std::find(cubbies_.begin(), cubbies_.end(), *sled.cubby) != cubbies_.end()) {
    return true;
  }
  for (const auto& name : names_) {
    if (name == sled.baseboard || name == sled.serial()) return true;
  }
  return false;
}

}  // namespace once::rack
