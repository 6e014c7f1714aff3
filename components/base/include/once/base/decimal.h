// File: decimal.h
//
// Decimal integers read strictly, for text a user, a client or a file
// gives: the whole string and nothing else (no spaces, no '+', a '-' only
// for a signed type), in range. Everything else is nullopt, never an
// exception and never a wrapped or saturated value.
//
//   std::optional<int64_t> ms = ParseDecimal<int64_t>(text);
//   if (!ms) return MakeError(ErrorCode::kInvalidArgument, "not a number: " + text);
//   if (!ParseDecimal(text, options.seed)) return Usage("--seed takes a number");

#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <type_traits>

namespace once {

template <class T>
std::optional<T> ParseDecimal(std::string_view text) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The same into `out`: true when `text` is one (out is then set), false
// and out untouched when not.
template <class T>
bool ParseDecimal(std::string_view text, T& out) {
  std::optional<T> value = ParseDecimal<T>(text);
  if (value) out = *value;
  return value.has_value();
}

}  // namespace once
