// File: cron.h
//
// Cron expressions: five fields, minute hour day-of-month month day-of-week,
// in UTC. Each field is `*`, a number, a range `a-b`, a step `*/n` or
// `a-b/n`, or a comma-separated list of those. Days of the week are 0-6
// (0 = Sunday; 7 is also Sunday). When both day fields are restricted a day
// matches either (the classic rule); otherwise both must.
//
//   ONCE_ASSIGN_OR_RETURN(Cron every_five, Cron::Parse("*/5 * * * *"));
//   int64_t next = every_five.NextAfter(now_ms).value();  // a multiple of 5 minutes
//
// Threads: a Cron is an immutable value.

#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"

namespace once::queues {

class Cron {
 public:
  // kInvalidArgument naming the field for a malformed expression.
  static Result<Cron> Parse(std::string_view expression);

  // The first tick (a minute boundary, Unix ms) strictly after after_ms.
  // kNotFound when none comes within cron_search_years_max (e.g. "0 0 31 2 *").
  Result<int64_t> NextAfter(int64_t after_ms) const;

  // The ticks in (after_ms, until_ms], oldest first, the NEWEST max_ticks of
  // them when there are more (the older ones are skipped: catch-up is
  // bounded). `skipped` counts them.
  Result<std::vector<int64_t>> TicksBetween(int64_t after_ms, int64_t until_ms, size_t max_ticks,
                                            size_t* skipped = nullptr) const;

  const std::string& text() const { return text_; }

  static constexpr int kSearchYearsMax = 5;  // cron_search_years_max

 private:
  std::string text_;
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;    // 1..31
  std::bitset<13> months_;  // 1..12
  std::bitset<7> weekdays_;
  bool days_restricted_ = false;
  bool weekdays_restricted_ = false;
};

}  // namespace once::queues
