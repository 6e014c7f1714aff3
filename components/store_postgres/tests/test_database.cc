#include "test_database.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>

#include "nlohmann/json.hpp"
#include "once/base/hex.h"

namespace once::store::testing {

std::string TestPostgresUrl() {
  const char* url = std::getenv("ONCE_TEST_POSTGRES_URL");
  return url ? url : "";
}

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

namespace {
std::string RandomName() {
  std::random_device rd;
  uint8_t bytes[8];
  for (auto& b : bytes) b = static_cast<uint8_t>(rd());
  return "once_test_" + HexEncode(std::span<const uint8_t>(bytes, 8));
}

std::string WithAppName(const std::string& url, const std::string& name) {
  std::string sep = url.find('?') == std::string::npos ? "?" : "&";
  return url + sep + "application_name=" + name;
}
}  // namespace

TestSchema::TestSchema(std::string url) : url_(std::move(url)), name_(RandomName()) {
  side_ = PQconnectdb(url_.c_str());
  EXPECT_EQ(PQstatus(side_), CONNECTION_OK) << PQerrorMessage(side_);
  Sql("SET client_min_messages = warning; CREATE SCHEMA " + name_ + "; SET search_path TO " +
      name_);
}

TestSchema::~TestSchema() {
  if (PQstatus(side_) == CONNECTION_OK) Sql("DROP SCHEMA IF EXISTS " + name_ + " CASCADE");
  PQfinish(side_);
}

PostgresOptions TestSchema::Options() const {
  PostgresOptions o;
  o.conninfo = WithAppName(url_, name_);
  o.schema = name_;
  return o;
}

std::string TestSchema::Sql(const std::string& sql) {
  PGresult* res = PQexec(side_, sql.c_str());
  ExecStatusType st = PQresultStatus(res);
  EXPECT_TRUE(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
      << sql << ": " << PQresultErrorMessage(res);
  std::string out;
  if (st == PGRES_TUPLES_OK && PQntuples(res) > 0 && PQnfields(res) > 0) {
    out = PQgetvalue(res, 0, 0);
  }
  PQclear(res);
  return out;
}

TestSchema::PlanReads TestSchema::GenericPlanReads(const std::string& sql, bool seqscan_off) {
  int params = 0;  // the highest $N: EXECUTE needs as many (NULL) arguments
  for (size_t at = sql.find('$'); at != std::string::npos; at = sql.find('$', at + 1)) {
    params = std::max(params, std::atoi(sql.c_str() + at + 1));
  }
  std::string args;
  for (int i = 0; i < params; ++i) args += i == 0 ? "NULL" : ", NULL";
  Sql("SET plan_cache_mode = force_generic_plan");
  Sql(seqscan_off ? "SET enable_seqscan = off" : "RESET enable_seqscan");
  Sql("DEALLOCATE ALL");
  Sql("PREPARE plan_reads AS " + sql);
  std::string plan =
      Sql("EXPLAIN (FORMAT JSON) EXECUTE plan_reads" + (params ? "(" + args + ")" : std::string()));
  PlanReads out;
  if (plan.empty()) return out;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& node) {
    if (node.value("Relation Name", "") == "events" &&
        node.value("Node Type", "") != "ModifyTable") {
      out.node_types.push_back(node.value("Node Type", "?"));
    }
    if (node.contains("Index Name")) out.indexes.insert(node.value("Index Name", ""));
    const bool sort = node.value("Node Type", "") == "Sort";
    for (const nlohmann::json& child : node.value("Plans", nlohmann::json::array())) {
      if (sort && child.value("Relation Name", "") == "events") ++out.sorted_reads;
      walk(child);
    }
  };
  walk(nlohmann::json::parse(plan).at(0).at("Plan"));
  return out;
}

void PostgresTest::SetUp() {
  std::string url = TestPostgresUrl();
  if (url.empty()) {
    if (InCi()) GTEST_FAIL() << "CI=true but ONCE_TEST_POSTGRES_URL is unset";
    GTEST_SKIP() << "ONCE_TEST_POSTGRES_URL is unset";
  }
  schema_ = std::make_unique<TestSchema>(url);
}

void PostgresTest::TearDown() { schema_.reset(); }

std::unique_ptr<PostgresEventStore> PostgresTest::OpenStore() {
  return OpenStore(schema_->Options());
}

std::unique_ptr<PostgresEventStore> PostgresTest::OpenStore(const PostgresOptions& options) {
  auto store = PostgresEventStore::Open(options, clock_);
  EXPECT_TRUE(store.has_value()) << (store ? "" : store.error().ToString());
  return store ? std::move(*store) : nullptr;
}

}  // namespace once::store::testing
