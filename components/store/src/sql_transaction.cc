#include "once/store/sql_transaction.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "once/store/event_store.h"

namespace once::store {
namespace {

// Statements that would end or split the store's transaction, or change the
// store's connection beyond it.
constexpr std::array<std::string_view, 16> kRefusedKeywords = {
    "ABORT",   "ATTACH",  "BEGIN", "COMMIT",   "DETACH",    "DISCARD", "END",   "PRAGMA",
    "PREPARE", "RELEASE", "RESET", "ROLLBACK", "SAVEPOINT", "SET",     "START", "VACUUM",
};

// Index just past the comment starting at `i` (nested /* */ as PostgreSQL
// reads them), or `i` when none starts there.
size_t SkipComment(std::string_view s, size_t i) {
  if (s.substr(i, 2) == "--") {
    size_t end = s.find('\n', i);
    return end == std::string_view::npos ? s.size() : end + 1;
  }
  if (s.substr(i, 2) != "/*") return i;
  int depth = 0;
  while (i < s.size()) {
    if (s.substr(i, 2) == "/*") {
      ++depth;
      i += 2;
    } else if (s.substr(i, 2) == "*/") {
      i += 2;
      if (--depth == 0) return i;
    } else {
      ++i;
    }
  }
  return s.size();  // unterminated: nothing follows
}

}  // namespace

std::string FirstSqlKeyword(std::string_view sql) {
  size_t i = 0;
  while (i < sql.size()) {
    if (std::isspace(static_cast<unsigned char>(sql[i])) || sql[i] == '(' || sql[i] == ';') {
      ++i;
      continue;
    }
    size_t after = SkipComment(sql, i);
    if (after == i) break;
    i = after;
  }
  std::string word;
  while (i < sql.size() && std::isalpha(static_cast<unsigned char>(sql[i]))) {
    word += static_cast<char>(std::toupper(static_cast<unsigned char>(sql[i])));
    ++i;
  }
  return word;
}

Status CheckSqlStatement(std::string_view sql, std::span<const events::Json> params,
                         size_t statements_before, const Limits& limits) {
  if (statements_before >= limits.sql_statements_max) {
    return LimitError("sql_statements_max", static_cast<int64_t>(statements_before + 1),
                      static_cast<int64_t>(limits.sql_statements_max));
  }
  if (sql.size() > limits.sql_statement_bytes_max) {
    return LimitError("sql_statement_bytes_max", static_cast<int64_t>(sql.size()),
                      static_cast<int64_t>(limits.sql_statement_bytes_max));
  }
  if (params.size() > limits.sql_params_max) {
    return LimitError("sql_params_max", static_cast<int64_t>(params.size()),
                      static_cast<int64_t>(limits.sql_params_max));
  }
  if (sql.find('\0') != std::string_view::npos) {
    return MakeError(ErrorCode::kInvalidArgument, "sql: a statement holds a NUL byte");
  }
  std::string word = FirstSqlKeyword(sql);
  if (word.empty()) return MakeError(ErrorCode::kInvalidArgument, "sql: an empty statement");
  if (std::find(kRefusedKeywords.begin(), kRefusedKeywords.end(), word) != kRefusedKeywords.end()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "sql: " + word +
                         " is not allowed in a transactional step (the transaction and the "
                         "connection are the store's)");
  }
  for (const events::Json& p : params) {
    if (p.is_object() || p.is_array()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "sql: a parameter must be null, a boolean, a number or a string");
    }
  }
  return Ok();
}

Result<SqlRows> CheckedSqlTransaction::Exec(std::string_view sql,
                                            std::span<const events::Json> params) {
  if (spoiled_) return std::unexpected(*spoiled_);
  Status checked = CheckSqlStatement(sql, params, statements_++, limits_);
  Result<SqlRows> out = checked ? Run(sql, params) : std::unexpected(checked.error());
  if (!out) spoiled_ = out.error();
  return out;
}

SqlResultBudget::SqlResultBudget(const Limits& limits)
    : rows_max_(limits.sql_result_rows_max), bytes_max_(limits.sql_result_bytes_max) {}

Status SqlResultBudget::AddRow(size_t value_bytes) {
  ++rows_;
  bytes_ += value_bytes;
  if (rows_ > rows_max_) {
    return LimitError("sql_result_rows_max", static_cast<int64_t>(rows_),
                      static_cast<int64_t>(rows_max_));
  }
  if (bytes_ > bytes_max_) {
    return LimitError("sql_result_bytes_max", static_cast<int64_t>(bytes_),
                      static_cast<int64_t>(bytes_max_));
  }
  return Ok();
}

Result<std::optional<std::string>> SqlParamText(const events::Json& param) {
  if (param.is_null()) return std::optional<std::string>();
  if (param.is_string()) return std::optional<std::string>(param.get<std::string>());
  if (param.is_boolean()) return std::optional<std::string>(param.get<bool>() ? "true" : "false");
  if (param.is_number()) return std::optional<std::string>(param.dump());
  return MakeError(ErrorCode::kInvalidArgument,
                   "sql: a parameter must be null, a boolean, a number or a string");
}

}  // namespace once::store
