#include "connection.h"

namespace once::store::sqlite_internal {
namespace {

constexpr int kWalAttemptsMax = 100;
constexpr int kWalRetrySleepMs = 10;

}  // namespace

ErrorCode MapResultCode(int rc, std::string_view message) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return ErrorCode::kBusy;
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
    case SQLITE_NOLFS:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return ErrorCode::kUnavailable;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return ErrorCode::kCorruption;
    default:
      // json_type() over a stored row that is not JSON fails the statement.
      if (message.find("malformed JSON") != std::string_view::npos) return ErrorCode::kCorruption;
      return ErrorCode::kInternal;
  }
}

std::unexpected<Error> SqliteFailure(sqlite3* db, int rc, std::string_view what) {
  std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  ErrorCode code = MapResultCode(rc, message);
  return MakeError(
      code, "sqlite: " + std::string(what) + ": " + message + " (" + std::to_string(rc) + ")");
}

Statement::~Statement() {
  if (stmt_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

Status Statement::Bind(int index, std::string_view text) {
  int rc = sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_STATIC, SQLITE_UTF8);
  if (rc != SQLITE_OK) return SqliteFailure(db_, rc, "bind");
  return Ok();
}

Status Statement::BindNull(int index) {
  int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) return SqliteFailure(db_, rc, "bind");
  return Ok();
}

Status Statement::Bind(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) return SqliteFailure(db_, rc, "bind");
  return Ok();
}

Result<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteFailure(db_, rc, sqlite3_sql(stmt_));
}

Status Statement::Run() {
  while (true) {
    ONCE_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Ok();
  }
}

std::string_view Statement::Text(int column) const {
  const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  int bytes = sqlite3_column_bytes(stmt_, column);
  return data == nullptr ? std::string_view() : std::string_view(data, bytes);
}

Connection::Connection(sqlite3* db, std::span<const std::string> sql)
    : db_(db), sql_(sql), cache_(sql.size(), nullptr) {}

Connection::~Connection() {
  for (sqlite3_stmt* s : cache_) sqlite3_finalize(s);
  sqlite3_close_v2(db_);
}

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& path,
                                                     const ConnectionOptions& options,
                                                     std::span<const std::string> sql) {
  sqlite3* db = nullptr;
  // NOMUTEX: the owner serialises each connection itself.
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags,
                           options.vfs.empty() ? nullptr : options.vfs.c_str());
  if (rc != SQLITE_OK) {
    auto err = SqliteFailure(db, rc, "open " + path);
    sqlite3_close_v2(db);
    return err;
  }
  sqlite3_extended_result_codes(db, 1);
  std::unique_ptr<Connection> conn(new Connection(db, sql));
  ONCE_RETURN_IF_ERROR(conn->Configure(options));
  return conn;
}

Status Connection::Configure(const ConnectionOptions& options) {
  int rc = sqlite3_busy_timeout(db_, static_cast<int>(options.busy_timeout.count()));
  if (rc != SQLITE_OK) return SqliteFailure(db_, rc, "busy_timeout");
  ONCE_RETURN_IF_ERROR(Exec("PRAGMA synchronous=" + std::to_string(options.synchronous)));
  if (options.query_only) ONCE_RETURN_IF_ERROR(Exec("PRAGMA query_only=1"));
  return Ok();
}

Result<Statement> Connection::Prepare(size_t id) {
  ONCE_CHECK(id < cache_.size());
  if (cache_[id] == nullptr) {
    const std::string& text = sql_[id];
    int rc = sqlite3_prepare_v3(db_, text.c_str(), static_cast<int>(text.size()),
                                SQLITE_PREPARE_PERSISTENT, &cache_[id], nullptr);
    if (rc != SQLITE_OK) return SqliteFailure(db_, rc, "prepare " + text);
  }
  return Statement(db_, cache_[id]);
}

Status Connection::Exec(const std::string& sql) {
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteFailure(db_, rc, sql);
  return Ok();
}

Result<std::string> Connection::QueryText(const std::string& sql) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, nullptr);
  if (rc != SQLITE_OK) return SqliteFailure(db_, rc, sql);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  rc = sqlite3_step(raw);
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return SqliteFailure(db_, rc, sql);
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
  return std::string(text == nullptr ? "" : text);
}

Status EnableWal(Connection& c) {
  // Switching a fresh file to WAL needs a moment alone with it; another
  // process opening the same new file may hold it.
  for (int attempt = 1;; ++attempt) {
    Result<std::string> mode = c.QueryText("PRAGMA journal_mode=WAL");
    if (mode && *mode == "wal") return Ok();
    if (mode) {
      return MakeError(ErrorCode::kUnavailable, "sqlite: journal mode is " + *mode + ", not wal");
    }
    if (mode.error().code != ErrorCode::kBusy || attempt == kWalAttemptsMax) {
      return std::unexpected(mode.error());
    }
    sqlite3_sleep(kWalRetrySleepMs);
  }
}

Result<std::unique_ptr<Connection>> OpenFileInWal(std::string_view store, const std::string& path,
                                                  const ConnectionOptions& options,
                                                  std::span<const std::string> sql) {
  if (path.empty() || path == ":memory:" || path.starts_with("file::memory:")) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "sqlite: the " + std::string(store) +
                         " store needs a database file, not an in-memory database",
                     path);
  }
  ONCE_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(path, options, sql));
  ONCE_RETURN_IF_ERROR(EnableWal(*conn));
  return conn;
}

}  // namespace once::store::sqlite_internal
