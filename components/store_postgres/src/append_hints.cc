#include "append_hints.h"

#include <cstdint>

namespace once::store::pg {

std::optional<FenceVersion> ParseFenceVersion(std::string_view text) {
  auto number = [&](size_t& pos, char end) -> std::optional<uint64_t> {
    uint64_t v = 0;
    size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      v = v * 10 + static_cast<uint64_t>(text[pos] - '0');
      if (v > UINT32_MAX) return std::nullopt;
      ++pos;
    }
    if (pos == start || pos >= text.size() || text[pos] != end) return std::nullopt;
    ++pos;
    return v;
  };
  size_t pos = 0;
  auto xmin = number(pos, ' ');
  if (!xmin || pos >= text.size() || text[pos] != '(') return std::nullopt;
  ++pos;
  auto block = number(pos, ',');
  auto offset = block ? number(pos, ')') : std::nullopt;
  if (!offset || *offset > UINT16_MAX || pos != text.size()) return std::nullopt;
  return FenceVersion{static_cast<uint32_t>(*xmin), static_cast<uint32_t>(*block),
                      static_cast<uint16_t>(*offset)};
}

AppendHints::Ask AppendHints::Before(std::string_view id, int64_t expected_next) {
  if (executions_max_ == 0) return {};
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return Ask{.learn = true};
  if (it->second.head != expected_next - 1) return {};
  ++counts_.hinted;
  return Ask{.version = it->second.version};
}

void AppendHints::Landed(std::string_view id, int64_t head, std::optional<FenceVersion> learned) {
  if (executions_max_ == 0) return;
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (learned) {
    ++counts_.learned;
    if (it == entries_.end()) {
      if (entries_.size() >= executions_max_) {
        entries_.clear();
        ++counts_.clears;
      }
      it = entries_.emplace(std::string(id), Entry{}).first;
    }
    it->second.version = *learned;
  } else if (it == entries_.end()) {
    return;  // not known: nothing to advance
  }
  it->second.head = head;
}

void AppendHints::Forget(std::string_view id) {
  if (executions_max_ == 0) return;
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) entries_.erase(it);
}

void AppendHints::CountLone(bool landed) {
  (landed ? lone_landed_ : lone_refused_).fetch_add(1, std::memory_order_relaxed);
}

AppendHintCounts AppendHints::counts() const {
  std::lock_guard lock(mu_);
  AppendHintCounts out = counts_;
  out.entries = entries_.size();
  out.lone_landed = lone_landed_.load(std::memory_order_relaxed);
  out.lone_refused = lone_refused_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace once::store::pg
