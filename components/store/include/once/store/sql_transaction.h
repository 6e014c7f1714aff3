// File: sql_transaction.h
//
// SqlTransaction: the handle a transactional step's function gets
// (EventStore::AppendInTransaction, kTransaction; runtime's
// Context::Transaction). Its statements run inside the store's own write
// transaction on the store's own database (the SQLite file, the PostgreSQL
// connection and schema), so they commit or roll back together with the
// events appended after them.
//
//   Result<AppendRequest> Work(SqlTransaction& sql) {
//     ONCE_ASSIGN_OR_RETURN(SqlRows rows,
//                           sql.Exec("INSERT INTO payments(id, cents) VALUES ($1, $2)",
//                                    {Json("order-7"), Json(1999)}));
//     // rows.changed == 1
//     return AppendRequest{.execution_id = "order-7", .expected_next = 4, .events = ...};
//   }
//   ONCE_ASSIGN_OR_RETURN(int64_t head, store.AppendInTransaction("order-7", Work));
//
// Statements. One statement per Exec. Parameters are bound, never spliced:
// write $1, $2, ... on both backends (SQLite's ?N works there too). A
// parameter is a JSON scalar: null, a boolean, an integer, a real or a
// string (objects and arrays are kInvalidArgument; bind their text).
// Values come back in their text form (the number 5 as "5"), NULL as
// nullopt; `changed` counts the rows an INSERT, UPDATE or DELETE touched.
//
// What a statement may not do (kInvalidArgument, nothing run): control the
// transaction (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, END, ABORT,
// START, PREPARE) or change the connection's session (SET, RESET, DISCARD,
// and on SQLite ATTACH, DETACH, PRAGMA): the connection is the store's and
// outlives the step. It must not write the store's own tables either
// (events, fences, loom_runs, ...): on SQLite that is refused
// (kPermissionDenied); on PostgreSQL it is the caller's duty.
//
// Errors. SQL the database refuses (syntax, a missing table, a type) is
// kInvalidArgument; a unique or primary key taken is kAlreadyExists; a
// connection lost is kUnavailable; lock waits as the store's own
// (kBusy / kTimeout). A statement over sql_statement_bytes_max, more
// parameters than sql_params_max, more Exec calls than
// sql_statements_max in one transaction, or a result over
// sql_result_rows_max / sql_result_bytes_max is kLimitExceeded (Limits).
// After any failed Exec the transaction is spoiled: later Execs return the
// same error and the transaction rolls back whatever its work returns.
//
// Threads: a handle belongs to the transaction that made it, on the thread
// that called AppendInTransaction; it is invalid once that call returns.

#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"
#include "once/events/envelope.h"

namespace once::store {

struct Limits;

// What a statement returned.
struct SqlRows {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;  // text form; nullopt: NULL
  int64_t changed = 0;                                        // rows inserted, updated or deleted
};

class SqlTransaction {
 public:
  virtual Result<SqlRows> Exec(std::string_view sql, std::span<const events::Json> params) = 0;
  Result<SqlRows> Exec(std::string_view sql, std::initializer_list<events::Json> params = {}) {
    return Exec(sql, std::span<const events::Json>(params.begin(), params.size()));
  }

 protected:
  ~SqlTransaction() = default;
};

// ---- Shared by the SQL backends (one rule, one place) ----------------------

// What every backend's handle does around a statement: CheckSqlStatement
// before it runs (counting the statements), and after a failure the
// spoiled state (every later Exec returns that error). A backend derives
// from it and runs the checked statement in Run.
class CheckedSqlTransaction : public SqlTransaction {
 public:
  // `limits` must outlive the handle.
  explicit CheckedSqlTransaction(const Limits& limits) : limits_(limits) {}
  using SqlTransaction::Exec;
  Result<SqlRows> Exec(std::string_view sql, std::span<const events::Json> params) final;
  // The first failure, if any: the transaction must not commit.
  const std::optional<Error>& spoiled() const { return spoiled_; }

 protected:
  ~CheckedSqlTransaction() = default;
  virtual Result<SqlRows> Run(std::string_view sql, std::span<const events::Json> params) = 0;
  const Limits& limits() const { return limits_; }

 private:
  const Limits& limits_;
  size_t statements_ = 0;
  std::optional<Error> spoiled_;
};

// The checks every backend applies before it runs a statement: its size, the
// number and kinds of its parameters, the transaction's count of statements
// (`statements_before`: Execs already run in it) and the words it may not
// start with (see above). kLimitExceeded / kInvalidArgument.
Status CheckSqlStatement(std::string_view sql, std::span<const events::Json> params,
                         size_t statements_before, const Limits& limits);

// The first keyword of a statement, upper-cased, after white space and
// comments (-- and nested /* */); empty when there is none.
std::string FirstSqlKeyword(std::string_view sql);

// Counts a result as it is read: kLimitExceeded once it holds more than
// sql_result_rows_max rows or sql_result_bytes_max bytes of values.
class SqlResultBudget {
 public:
  explicit SqlResultBudget(const Limits& limits);
  Status AddRow(size_t value_bytes);

 private:
  size_t rows_max_;
  size_t bytes_max_;
  size_t rows_ = 0;
  size_t bytes_ = 0;
};

// The text a parameter binds as, for backends that bind text (null:
// nullopt). kInvalidArgument for an object or an array.
Result<std::optional<std::string>> SqlParamText(const events::Json& param);

}  // namespace once::store
