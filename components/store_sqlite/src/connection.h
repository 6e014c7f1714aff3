// Internal: a SQLite connection with a per-connection cache of prepared
// statements, and the mapping of SQLite result codes to ErrorCode.
//
// A Connection is NOT thread-safe: its owner serialises every use (the
// store's writer mutex, or the reader pool's lease).

#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"
#include "once/store_sqlite/sqlite_event_store.h"

namespace once::store::sqlite_internal {

// SQLITE_BUSY/LOCKED -> kBusy; I/O, full disk, cannot open -> kUnavailable;
// corrupt file or malformed stored JSON -> kCorruption; else kInternal.
ErrorCode MapResultCode(int rc, std::string_view message);
std::unexpected<Error> SqliteFailure(sqlite3* db, int rc, std::string_view what);

// A leased cached statement: bound, stepped, then reset when it goes out of
// scope so it holds no read snapshot open.
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  // Bind parameters are 1-based, as in SQL (?1).
  Status Bind(int index, std::string_view text);
  Status Bind(int index, int64_t value);
  Status BindNull(int index);
  // True: a row is ready to read; false: done.
  Result<bool> Step();
  // Steps to completion, ignoring rows.
  Status Run();

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  bool IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  std::string_view Text(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

struct ConnectionOptions {
  std::chrono::milliseconds busy_timeout{5000};
  int synchronous = 2;  // PRAGMA synchronous: 2 FULL, 1 NORMAL
  std::string vfs;      // empty: the default VFS
  bool query_only = false;
};

// The connection settings a store's options name: every SQLite store's
// options have busy_timeout, durability and vfs.
template <class StoreOptions>
ConnectionOptions ConnectionOptionsOf(const StoreOptions& options) {
  return ConnectionOptions{.busy_timeout = options.busy_timeout,
                           .synchronous = options.durability == Durability::kFull ? 2 : 1,
                           .vfs = options.vfs};
}

class Connection {
 public:
  // `sql` lists the statements by id; it must outlive the connection.
  static Result<std::unique_ptr<Connection>> Open(const std::string& path,
                                                  const ConnectionOptions& options,
                                                  std::span<const std::string> sql);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The cached prepared statement number `id` of the list given to Open.
  Result<Statement> Prepare(size_t id);
  // Runs SQL text without parameters (pragmas, DDL).
  Status Exec(const std::string& sql);
  // The first column of the first row of `sql` as text ("" when no row).
  Result<std::string> QueryText(const std::string& sql);
  bool InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }
  sqlite3* db() const { return db_; }

 private:
  Connection(sqlite3* db, std::span<const std::string> sql);
  Status Configure(const ConnectionOptions& options);

  sqlite3* db_;
  std::span<const std::string> sql_;
  std::vector<sqlite3_stmt*> cache_;
};

// Switches the file to WAL journaling, retrying while another connection
// (another process opening the same new file) holds it.
Status EnableWal(Connection& c);

// The connection of a store that must live in a database file (the timer and
// inbox stores): kInvalidArgument naming `store` for an empty path or an
// in-memory database, else Connection::Open and EnableWal.
Result<std::unique_ptr<Connection>> OpenFileInWal(std::string_view store, const std::string& path,
                                                  const ConnectionOptions& options,
                                                  std::span<const std::string> sql);

// body() between the statements `begin` (BEGIN IMMEDIATE) and `commit` of
// the connection's list; an error of the body or of the COMMIT runs
// `rollback` (when a transaction is open) and is returned.
template <class F>
auto InTransaction(Connection& c, size_t begin, size_t commit, size_t rollback, F&& body)
    -> decltype(body()) {
  auto run = [&c](size_t id) -> Status {
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(id));
    return s.Run();
  };
  if (Status begun = run(begin); !begun) return std::unexpected(begun.error());
  auto result = body();
  if (result) {
    Status committed = run(commit);
    if (committed) return result;
    result = std::unexpected(committed.error());
  }
  // A failed COMMIT or an I/O error may already have ended the transaction.
  if (c.InTransaction()) (void)run(rollback);
  return result;
}

}  // namespace once::store::sqlite_internal
