// The checks both SQL backends apply to a transactional step's statements
// (sql_transaction.h): the first keyword after comments, the refused words,
// parameter kinds and the named limits.
#include "once/store/sql_transaction.h"

#include <gtest/gtest.h>

#include "once/store/event_store.h"

namespace once::store {
namespace {

using events::Json;

TEST(SqlTransaction, FirstKeywordSkipsSpaceCommentsAndParentheses) {
  EXPECT_EQ(FirstSqlKeyword("select 1"), "SELECT");
  EXPECT_EQ(FirstSqlKeyword("  -- a comment\n  commit"), "COMMIT");
  EXPECT_EQ(FirstSqlKeyword("/* outer /* nested */ still a comment */ Rollback"), "ROLLBACK");
  EXPECT_EQ(FirstSqlKeyword("((SELECT 1))"), "SELECT");
  EXPECT_EQ(FirstSqlKeyword(";; begin"), "BEGIN");
  EXPECT_EQ(FirstSqlKeyword("/* unterminated commit"), "");
  EXPECT_EQ(FirstSqlKeyword("   "), "");
}

TEST(SqlTransaction, StatementsThatOwnTheTransactionOrSessionAreRefused) {
  Limits limits;
  for (const char* sql :
       {"COMMIT", "begin", "END", "ROLLBACK TO s", "SAVEPOINT s", "RELEASE s", "START TRANSACTION",
        "ABORT", "PREPARE TRANSACTION 'x'", "SET search_path TO x", "RESET ALL", "DISCARD ALL",
        "PRAGMA foo", "ATTACH 'x' AS y", "DETACH y", "VACUUM", "/* hidden */ commit", ""}) {
    SCOPED_TRACE(sql);
    Status s = CheckSqlStatement(sql, {}, 0, limits);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  }
  for (const char* sql : {"SELECT 1", "INSERT INTO t VALUES ($1)", "WITH x AS (SELECT 1) SELECT *",
                          "UPDATE t SET begin_at = 1", "CREATE TABLE t (a INT)"}) {
    EXPECT_TRUE(CheckSqlStatement(sql, {}, 0, limits)) << sql;
  }
}

TEST(SqlTransaction, ParametersAreScalars) {
  Limits limits;
  std::vector<Json> ok = {Json(nullptr), Json(true), Json(-3), Json(2.5), Json("s")};
  EXPECT_TRUE(CheckSqlStatement("SELECT 1", ok, 0, limits));
  for (const Json& bad : {Json::object(), Json::array()}) {
    std::vector<Json> params = {bad};
    Status s = CheckSqlStatement("SELECT $1", params, 0, limits);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_FALSE(SqlParamText(bad));
  }
  EXPECT_EQ(SqlParamText(Json(nullptr)).value(), std::nullopt);
  EXPECT_EQ(SqlParamText(Json(false)).value(), "false");
  EXPECT_EQ(SqlParamText(Json(42)).value(), "42");
  EXPECT_EQ(SqlParamText(Json("it's")).value(), "it's");
}

TEST(SqlTransaction, NamedLimits) {
  Limits limits;
  limits.sql_statement_bytes_max = 10;
  limits.sql_params_max = 1;
  limits.sql_statements_max = 2;
  auto limit_of = [](const Status& s) {
    const auto* d = s ? nullptr : s.error().As<LimitDetail>();
    return d ? d->limit : std::string("none");
  };
  EXPECT_EQ(limit_of(CheckSqlStatement("SELECT 12345", {}, 0, limits)), "sql_statement_bytes_max");
  std::vector<Json> two = {Json(1), Json(2)};
  EXPECT_EQ(limit_of(CheckSqlStatement("SELECT 1", two, 0, limits)), "sql_params_max");
  EXPECT_EQ(limit_of(CheckSqlStatement("SELECT 1", {}, 2, limits)), "sql_statements_max");
  EXPECT_TRUE(CheckSqlStatement("SELECT 1", {}, 1, limits));  // at the limits

  limits.sql_result_rows_max = 2;
  limits.sql_result_bytes_max = 5;
  SqlResultBudget rows(limits);
  EXPECT_TRUE(rows.AddRow(1));
  EXPECT_TRUE(rows.AddRow(1));
  EXPECT_EQ(limit_of(rows.AddRow(0)), "sql_result_rows_max");
  SqlResultBudget bytes(limits);
  EXPECT_TRUE(bytes.AddRow(5));
  EXPECT_EQ(limit_of(bytes.AddRow(1)), "sql_result_bytes_max");
}

}  // namespace
}  // namespace once::store
