// File: inbox_conformance.h
//
// The InboxStore conformance kit: one parameterised suite every backend runs.
// Link once::inbox_testing (an OBJECT library, so every case is kept) into a
// test binary and instantiate it with a backend:
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, InboxStoreConformance,
//                            testing::Values(inbox_testing::InboxBackend{
//                                "sqlite", /*durable=*/true, MakeSqliteDatabase}),
//                            inbox_testing::InboxBackendName);
//
// Backend-specific cases (migrations, several processes) live beside each
// backend; this kit covers the contract in inbox_store.h.

#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "once/inbox/inbox_store.h"

namespace once::inbox_testing {

// Opens a store object on one database; each call is a new object, on the
// same data when the backend is durable.
using InboxOpener =
    std::function<Result<std::shared_ptr<inbox::InboxStore>>(const inbox::InboxLimits&)>;

struct InboxBackend {
  std::string name;
  bool durable = false;  // a reopened store sees what an earlier one stored
  // A fresh, empty database. Called once per case; an error skips the case.
  std::function<Result<InboxOpener>()> make_database;
};

inline std::string InboxBackendName(const testing::TestParamInfo<InboxBackend>& info) {
  return info.param.name;
}

class InboxStoreConformance : public testing::TestWithParam<InboxBackend> {
 protected:
  void SetUp() override;
  void TearDown() override;
  // A store object on this case's database.
  std::shared_ptr<inbox::InboxStore> Open(const inbox::InboxLimits& limits = {});

  InboxOpener open_;
  std::shared_ptr<inbox::InboxStore> store_;  // Open() with the default limits
};

}  // namespace once::inbox_testing
