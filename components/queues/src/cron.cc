#include "once/queues/cron.h"

#include <ctime>

#include "once/base/decimal.h"

namespace once::queues {
namespace {

constexpr int64_t kMinuteMs = 60'000;

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// Parses one field into the bits lo..hi; `restricted` is false for "*".
template <size_t N>
Status ParseField(std::string_view field, const char* name, int lo, int hi, std::bitset<N>& bits,
                  bool& restricted) {
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string("cron: bad ") + name + " field '" + std::string(field) + "'");
  };
  restricted = field != "*";
  for (std::string_view part : Split(field, ',')) {
    int step = 1;
    if (size_t slash = part.find('/'); slash != std::string_view::npos) {
      if (!ParseDecimal(part.substr(slash + 1), step) || step < 1) return bad();
      part = part.substr(0, slash);
    }
    int from = lo, to = hi;
    if (part != "*") {
      if (size_t dash = part.find('-'); dash != std::string_view::npos) {
        if (!ParseDecimal(part.substr(0, dash), from) || !ParseDecimal(part.substr(dash + 1), to)) {
          return bad();
        }
      } else {
        if (!ParseDecimal(part, from)) return bad();
        to = step > 1 ? hi : from;
      }
    }
    if (from < lo || to > hi || from > to) return bad();
    for (int v = from; v <= to; v += step) bits.set(static_cast<size_t>(v));
  }
  return Ok();
}

}  // namespace

Result<Cron> Cron::Parse(std::string_view expression) {
  std::vector<std::string_view> fields;
  for (std::string_view f : Split(expression, ' ')) {
    if (!f.empty()) fields.push_back(f);
  }
  if (fields.size() != 5) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "cron: five fields (minute hour day month weekday), got '" + std::string(expression) + "'");
  }
  Cron c;
  c.text_ = std::string(expression);
  bool ignored = false;
  ONCE_RETURN_IF_ERROR(ParseField(fields[0], "minute", 0, 59, c.minutes_, ignored));
  ONCE_RETURN_IF_ERROR(ParseField(fields[1], "hour", 0, 23, c.hours_, ignored));
  ONCE_RETURN_IF_ERROR(ParseField(fields[2], "day", 1, 31, c.days_, c.days_restricted_));
  ONCE_RETURN_IF_ERROR(ParseField(fields[3], "month", 1, 12, c.months_, ignored));
  std::bitset<8> weekdays;
  ONCE_RETURN_IF_ERROR(ParseField(fields[4], "weekday", 0, 7, weekdays, c.weekdays_restricted_));
  for (size_t d = 0; d < 7; ++d) c.weekdays_[d] = weekdays[d];
  if (weekdays[7]) c.weekdays_[0] = true;  // 7 is Sunday too
  return c;
}

Result<int64_t> Cron::NextAfter(int64_t after_ms) const {
  // The next minute boundary strictly after after_ms.
  int64_t t = (after_ms >= 0 ? after_ms / kMinuteMs + 1 : after_ms / kMinuteMs) * kMinuteMs;
  const int64_t horizon = after_ms + int64_t{kSearchYearsMax} * 366 * 24 * 60 * kMinuteMs;
  while (t <= horizon) {
    std::time_t secs = static_cast<std::time_t>(t / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    const int64_t day_start = t - (int64_t{tm.tm_hour} * 60 + tm.tm_min) * kMinuteMs;
    if (!months_[static_cast<size_t>(tm.tm_mon + 1)]) {
      // The first day of the next month.
      std::tm next{};
      next.tm_year = tm.tm_mon == 11 ? tm.tm_year + 1 : tm.tm_year;
      next.tm_mon = (tm.tm_mon + 1) % 12;
      next.tm_mday = 1;
      t = static_cast<int64_t>(timegm(&next)) * 1000;
      continue;
    }
    bool day_ok = days_[static_cast<size_t>(tm.tm_mday)];
    bool weekday_ok = weekdays_[static_cast<size_t>(tm.tm_wday)];
    bool date_ok =
        days_restricted_ && weekdays_restricted_ ? (day_ok || weekday_ok) : (day_ok && weekday_ok);
    if (!date_ok) {
      t = day_start + 24 * 60 * kMinuteMs;
      continue;
    }
    if (!hours_[static_cast<size_t>(tm.tm_hour)]) {
      t = day_start + (int64_t{tm.tm_hour} + 1) * 60 * kMinuteMs;
      continue;
    }
    if (!minutes_[static_cast<size_t>(tm.tm_min)]) {
      t += kMinuteMs;
      continue;
    }
    return t;
  }
  return MakeError(ErrorCode::kNotFound, "cron: '" + text_ + "' has no tick within " +
                                             std::to_string(kSearchYearsMax) + " years");
}

Result<std::vector<int64_t>> Cron::TicksBetween(int64_t after_ms, int64_t until_ms,
                                                size_t max_ticks, size_t* skipped) const {
  std::vector<int64_t> ticks;
  size_t dropped = 0;
  for (int64_t t = after_ms; max_ticks > 0;) {
    Result<int64_t> next = NextAfter(t);
    if (!next) {
      if (next.error().code == ErrorCode::kNotFound) break;
      return std::unexpected(next.error());
    }
    if (*next > until_ms) break;
    ticks.push_back(*next);
    if (ticks.size() > max_ticks) {
      ticks.erase(ticks.begin());
      ++dropped;
    }
    t = *next;
  }
  if (skipped) *skipped = dropped;
  return ticks;
}

}  // namespace once::queues
