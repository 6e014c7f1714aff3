// Test support: a throwaway schema on the server named by
// ONCE_TEST_POSTGRES_URL. Unset, a PostgreSQL test skips, unless CI=true,
// where a missing server is a failure.
//
//   class MyTest : public PostgresTest {};
//   TEST_F(MyTest, Works) { auto store = OpenStore(); ... }

#pragma once

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "once/base/clock.h"
#include "once/store_postgres/postgres_event_store.h"

namespace once::store::testing {

// The URL, or empty when the variable is unset.
std::string TestPostgresUrl();
bool InCi();

// A random schema, created on construction and dropped with its tables on
// destruction. Its connections carry application_name = the schema's name.
class TestSchema {
 public:
  explicit TestSchema(std::string url);
  ~TestSchema();
  const std::string& name() const { return name_; }
  PostgresOptions Options() const;
  // Runs SQL on a side connection with search_path = the schema; returns the
  // first column of the first row ("" when none); fails the test on error.
  std::string Sql(const std::string& sql);
  PGconn* side() const { return side_; }

  // How a generic plan of `sql` (which may take $N parameters) reads the
  // events table: the node type of each read (Seq Scan, Index Scan, ...)
  // the indexes it walks and how many reads it sorts (a Sort right above a
  // read: the read did not use its index's order). With `seqscan_off` a Seq Scan means that no
  // index applies (a partial index whose predicate the query does not prove).
  struct PlanReads {
    std::vector<std::string> node_types;
    std::set<std::string> indexes;
    int sorted_reads = 0;
  };
  PlanReads GenericPlanReads(const std::string& sql, bool seqscan_off = false);

 private:
  std::string url_;
  std::string name_;
  PGconn* side_ = nullptr;
};

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Opens a store on this test's schema; fails the test on error.
  std::unique_ptr<PostgresEventStore> OpenStore();
  std::unique_ptr<PostgresEventStore> OpenStore(const PostgresOptions& options);

  std::unique_ptr<TestSchema> schema_;
  ManualClock clock_;
};

}  // namespace once::store::testing
