// The raw limit of each storage: plain prepared INSERTs of rows shaped like
// the store's (execution_id, sequence, kind, payload, metadata, time_ms;
// primary key (execution_id, sequence)), with the same durability and the
// same batching as the store run they stand beside.

#include <libpq-fe.h>
#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "bench.h"

namespace once::bench {
namespace {

int64_t NowUnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The rows one client writes: an id per execution, the next sequence of each.
struct RowSource {
  RowSource(const Workload& w, std::string_view tag, int client) : row(MakeRow(w)) {
    int n = w.mode == Mode::kGrouped ? w.executions : 1;
    for (int e = 0; e < n; ++e) ids.push_back(ExecutionId(tag, client, e));
    next.assign(ids.size(), 1);
  }
  Row row;
  std::vector<std::string> ids;
  std::vector<int64_t> next;
};

// ---- SQLite -----------------------------------------------------------------

constexpr const char* kSqliteSchema =
    "CREATE TABLE IF NOT EXISTS raw_events (execution_id TEXT NOT NULL, sequence INTEGER NOT "
    "NULL, kind TEXT NOT NULL, payload TEXT NOT NULL, metadata TEXT NOT NULL, time_ms INTEGER "
    "NOT NULL, PRIMARY KEY (execution_id, sequence))";

std::unexpected<Error> SqliteError(sqlite3* db, std::string_view what) {
  return MakeError(ErrorCode::kUnavailable,
                   std::string(what) + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

Result<sqlite3*> OpenSqlite(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    auto err = SqliteError(db, "open " + path);
    sqlite3_close_v2(db);
    return err;
  }
  sqlite3_busy_timeout(db, 5000);
  // The store's durability: WAL, and an fsync of the WAL at every commit.
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", kSqliteSchema}) {
    if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
      auto err = SqliteError(db, sql);
      sqlite3_close_v2(db);
      return err;
    }
  }
  return db;
}

class SqliteRawWriter final : public Writer {
 public:
  SqliteRawWriter(sqlite3* db, RowSource rows) : db_(db), rows_(std::move(rows)) {}
  ~SqliteRawWriter() override {
    for (sqlite3_stmt* s : {insert_, begin_, commit_}) sqlite3_finalize(s);
    sqlite3_close_v2(db_);
  }

  Status Prepare() {
    if (sqlite3_prepare_v3(db_, "INSERT INTO raw_events VALUES (?, ?, ?, ?, ?, ?)", -1,
                           SQLITE_PREPARE_PERSISTENT, &insert_, nullptr) != SQLITE_OK ||
        sqlite3_prepare_v3(db_, "BEGIN IMMEDIATE", -1, SQLITE_PREPARE_PERSISTENT, &begin_,
                           nullptr) != SQLITE_OK ||
        sqlite3_prepare_v3(db_, "COMMIT", -1, SQLITE_PREPARE_PERSISTENT, &commit_, nullptr) !=
            SQLITE_OK) {
      return SqliteError(db_, "prepare");
    }
    return Ok();
  }

  Result<int64_t> Commit() override {
    // One row: an autocommit INSERT is its own transaction. A group: one
    // explicit transaction around the rows.
    bool grouped = rows_.ids.size() > 1;
    if (grouped) ONCE_RETURN_IF_ERROR(Step(begin_));
    int64_t time_ms = NowUnixMillis();
    for (size_t i = 0; i < rows_.ids.size(); ++i) {
      const Row& row = rows_.row;
      sqlite3_bind_text(insert_, 1, rows_.ids[i].data(), static_cast<int>(rows_.ids[i].size()),
                        SQLITE_STATIC);
      sqlite3_bind_int64(insert_, 2, rows_.next[i]);
      sqlite3_bind_text(insert_, 3, row.kind.data(), static_cast<int>(row.kind.size()),
                        SQLITE_STATIC);
      sqlite3_bind_text(insert_, 4, row.payload_json.data(),
                        static_cast<int>(row.payload_json.size()), SQLITE_STATIC);
      sqlite3_bind_text(insert_, 5, row.metadata_json.data(),
                        static_cast<int>(row.metadata_json.size()), SQLITE_STATIC);
      sqlite3_bind_int64(insert_, 6, time_ms);
      auto st = Step(insert_);
      if (!st) {
        if (grouped) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        return std::unexpected(st.error());
      }
    }
    if (grouped) ONCE_RETURN_IF_ERROR(Step(commit_));
    for (auto& n : rows_.next) ++n;
    return static_cast<int64_t>(rows_.ids.size());
  }

 private:
  Status Step(sqlite3_stmt* stmt) {
    int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    if (rc != SQLITE_DONE) return SqliteError(db_, sqlite3_sql(stmt));
    return Ok();
  }

  sqlite3* db_;
  RowSource rows_;
  sqlite3_stmt* insert_ = nullptr;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
};

class SqliteRawTarget final : public Target {
 public:
  explicit SqliteRawTarget(std::string path) : path_(std::move(path)) {}
  Result<std::unique_ptr<Writer>> NewWriter(const Workload& w, std::string_view tag,
                                            int client) override {
    ONCE_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqlite(path_));
    auto writer = std::make_unique<SqliteRawWriter>(db, RowSource(w, tag, client));
    ONCE_RETURN_IF_ERROR(writer->Prepare());
    return writer;
  }

 private:
  std::string path_;
};

// ---- PostgreSQL --------------------------------------------------------------

std::unexpected<Error> PgError(PGconn* conn, std::string_view what) {
  return MakeError(ErrorCode::kUnavailable, std::string(what) + ": " + PQerrorMessage(conn));
}

Status PgExec(PGconn* conn, const std::string& sql) {
  PGresult* res = PQexec(conn, sql.c_str());
  bool ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;
  PQclear(res);
  if (!ok) return PgError(conn, sql);
  return Ok();
}

Result<PGconn*> PgConnect(const std::string& url) {
  PGconn* conn = PQconnectdb(url.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    auto err = PgError(conn, "connect");
    PQfinish(conn);
    return err;
  }
  // NOTICEs (IF EXISTS, CASCADE) are not the benchmark's output.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  return conn;
}

class PostgresRawWriter final : public Writer {
 public:
  PostgresRawWriter(PGconn* conn, RowSource rows) : conn_(conn), rows_(std::move(rows)) {}
  ~PostgresRawWriter() override { PQfinish(conn_); }

  // One statement per transaction: a 1-row INSERT, or one INSERT of all the
  // group's rows (multi-VALUES), autocommitted: one round trip, one commit.
  Status Prepare(const std::string& table) {
    std::string sql = "INSERT INTO " + table + " VALUES ";
    for (size_t i = 0; i < rows_.ids.size(); ++i) {
      int p = static_cast<int>(i) * 6;
      sql += (i ? ", (" : "(");
      for (int k = 1; k <= 6; ++k) {
        sql += '$';
        sql += std::to_string(p + k);
        sql += k < 6 ? ", " : ")";
      }
    }
    PGresult* res = PQprepare(conn_, "raw_insert", sql.c_str(), 0, nullptr);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) return PgError(conn_, "prepare");
    return Ok();
  }

  Result<int64_t> Commit() override {
    size_t n = rows_.ids.size();
    std::string time_ms = std::to_string(NowUnixMillis());
    seq_text_.resize(n);
    values_.resize(n * 6);
    for (size_t i = 0; i < n; ++i) {
      seq_text_[i] = std::to_string(rows_.next[i]);
      const char** v = &values_[i * 6];
      v[0] = rows_.ids[i].c_str();
      v[1] = seq_text_[i].c_str();
      v[2] = rows_.row.kind.c_str();
      v[3] = rows_.row.payload_json.c_str();
      v[4] = rows_.row.metadata_json.c_str();
      v[5] = time_ms.c_str();
    }
    PGresult* res = PQexecPrepared(conn_, "raw_insert", static_cast<int>(values_.size()),
                                   values_.data(), nullptr, nullptr, 0);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) return PgError(conn_, "insert");
    for (auto& s : rows_.next) ++s;
    return static_cast<int64_t>(n);
  }

 private:
  PGconn* conn_;
  RowSource rows_;
  std::vector<std::string> seq_text_;
  std::vector<const char*> values_;
};

class PostgresRawTarget final : public Target {
 public:
  PostgresRawTarget(std::string url, std::string schema, PostgresServerCpu server_cpu)
      : url_(std::move(url)),
        schema_(std::move(schema)),
        table_(schema_ + ".raw_events"),
        server_cpu_(server_cpu) {}
  ~PostgresRawTarget() override {
    if (auto conn = PgConnect(url_)) {
      // The schema is this run's alone (the store target drops it too).
      (void)PgExec(*conn, "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
      PQfinish(*conn);
    }
  }

  Status Create() {
    ONCE_ASSIGN_OR_RETURN(PGconn * conn, PgConnect(url_));
    Status st = PgExec(conn, "CREATE SCHEMA IF NOT EXISTS " + schema_);
    if (st) st = PgExec(conn, "DROP TABLE IF EXISTS " + table_);
    if (st) {
      st = PgExec(conn, "CREATE TABLE " + table_ +
                            " (execution_id text NOT NULL, sequence bigint NOT NULL, kind text "
                            "NOT NULL, payload text NOT NULL, metadata text NOT NULL, time_ms "
                            "bigint NOT NULL, PRIMARY KEY (execution_id, sequence))");
    }
    PQfinish(conn);
    return st;
  }

  Result<std::unique_ptr<Writer>> NewWriter(const Workload& w, std::string_view tag,
                                            int client) override {
    ONCE_ASSIGN_OR_RETURN(PGconn * conn, PgConnect(url_));
    auto writer = std::make_unique<PostgresRawWriter>(conn, RowSource(w, tag, client));
    ONCE_RETURN_IF_ERROR(writer->Prepare(table_));
    return writer;
  }

  std::optional<double> ServerCpuSeconds() override { return server_cpu_.Seconds(); }

 private:
  std::string url_;
  std::string schema_;
  std::string table_;
  PostgresServerCpu server_cpu_;
};

}  // namespace

Result<std::unique_ptr<Target>> NewSqliteRawTarget(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::string path = dir + "/raw.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  // Create the file and the table once, before any writer.
  ONCE_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqlite(path));
  sqlite3_close_v2(db);
  return std::make_unique<SqliteRawTarget>(path);
}

Result<std::unique_ptr<Target>> NewPostgresRawTarget(const std::string& url,
                                                     const std::string& schema) {
  ONCE_ASSIGN_OR_RETURN(PostgresServerCpu server_cpu, PostgresServerCpu::Find(url));
  auto target = std::make_unique<PostgresRawTarget>(url, schema, server_cpu);
  ONCE_RETURN_IF_ERROR(target->Create());
  return target;
}

}  // namespace once::bench
