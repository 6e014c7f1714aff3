// File: queue_conformance.h
//
// The QueueStore conformance kit: one parameterised suite every backend
// (memory, SQLite, PostgreSQL) runs, on the real clock (delays and rate
// windows are a few hundred milliseconds; the PostgreSQL store judges by the
// server's clock).
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, QueueStoreConformance,
//                            testing::Values(queues_testing::QueueBackend{"Sqlite", MakeSqlite}),
//                            queues_testing::QueueBackendName);
//
// Link once::queues_testing (an OBJECT library, so every case is kept).

#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "once/queues/queue_store.h"

namespace once::queues_testing {

struct QueueBackend {
  std::string name;
  // A fresh, empty store; kUnavailable skips the case. `another` (may be
  // null) opens a second handle (a second node's connection) on the same data.
  std::function<Result<std::shared_ptr<queues::QueueStore>>()> make;
};

inline std::string QueueBackendName(const testing::TestParamInfo<QueueBackend>& info) {
  return info.param.name;
}

class QueueStoreConformance : public testing::TestWithParam<QueueBackend> {
 protected:
  void SetUp() override;
  queues::QueueStore& store() { return *store_; }
  std::shared_ptr<queues::QueueStore> store_;
};

}  // namespace once::queues_testing
