// File: timer_conformance.h
//
// The TimerStore conformance kit: one parameterised suite every backend runs.
// Link once::timers_testing (an OBJECT library, so every case is kept) into a
// test binary and instantiate it with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(
//       Sqlite, TimerStoreConformance,
//       testing::Values(timers_testing::TimerBackend{
//           "sqlite", [] { return MakeSqliteTimers(); }}),
//       timers_testing::TimerBackendName);
//
// Backend-specific cases (the migration of an old-shape table) live beside
// each backend; this kit covers the contract in timer_store.h.

#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "once/timers/timer_store.h"

namespace once::timers_testing {

struct TimerBackend {
  std::string name;
  // A fresh, empty store. Called once per case.
  std::function<Result<std::shared_ptr<timers::TimerStore>>()> make;
};

inline std::string TimerBackendName(const testing::TestParamInfo<TimerBackend>& info) {
  return info.param.name;
}

class TimerStoreConformance : public testing::TestWithParam<TimerBackend> {
 protected:
  void SetUp() override;
  std::shared_ptr<timers::TimerStore> store_;
};

}  // namespace once::timers_testing
