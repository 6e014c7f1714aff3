// Private: one libpq connection with typed errors, and the bounded pool.

#pragma once

#include <libpq-fe.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"

namespace once::store::pg {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// Positional parameters; a null entry binds SQL NULL. Text() binds the
// text form; Binary() binds bytes in the type's binary (send/recv) form, as
// built by the *ArrayBinary helpers below, and skips the server's text parse.
class Params {
 public:
  Params& Text(std::string v);
  Params& Binary(std::string v);
  Params& Int(int64_t v) { return Text(std::to_string(v)); }
  Params& Bool(bool v) { return Text(v ? "t" : "f"); }
  Params& Null();
  std::vector<const char*> Pointers() const;
  std::vector<int> Lengths() const;
  std::vector<int> Formats() const;
  bool any_binary() const { return any_binary_; }
  int size() const { return static_cast<int>(values_.size()); }

 private:
  std::vector<std::string> values_;
  std::vector<bool> nulls_;
  std::vector<bool> binary_;
  bool any_binary_ = false;
};

// Array literals for text-format parameters.
std::string TextArray(const std::vector<std::string_view>& items);
std::string IntArray(const std::vector<std::optional<int64_t>>& items);
std::string BoolArray(const std::vector<bool>& items);

// One-dimensional arrays in the binary format (array_recv): text[], int8[]
// (a nullopt element is NULL) and bool[]. Elements are raw bytes, so text
// needs no escaping and the server no array literal parse.
std::string TextArrayBinary(const std::vector<std::string_view>& items);
std::string NullableTextArrayBinary(const std::vector<std::optional<std::string_view>>& items);
std::string IntArrayBinary(const std::vector<std::optional<int64_t>>& items);
std::string BoolArrayBinary(const std::vector<bool>& items);
// tid[] (block, offset) and xid[] (32-bit transaction ids); nullopt is NULL.
struct Tid {
  uint32_t block = 0;
  uint16_t offset = 0;
};
std::string TidArrayBinary(const std::vector<std::optional<Tid>>& items);
std::string XidArrayBinary(const std::vector<std::optional<uint32_t>>& items);

// The integer in text form at (row, col) of a result (0 when not a number).
int64_t IntAt(const PGresult* res, int row, int col);

// A quoted SQL identifier ("a""b").
std::string QuoteIdentifier(std::string_view name);

// One statement of a pipeline: a prepared statement by name, or (name null)
// an unnamed statement of `sql`.
struct PipelineStep {
  const char* name = nullptr;
  std::string sql;
  Params params;
};

// One connection. Not thread-safe: a Lease hands it to one thread at a time.
class Conn {
 public:
  explicit Conn(PGconn* raw) : raw_(raw) {}
  ~Conn() { PQfinish(raw_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // A simple-protocol query (may hold several statements); returns the last
  // statement's result.
  Result<PgResult> Exec(const std::string& sql);
  // Every statement's result of a multi-statement simple query.
  Result<std::vector<PgResult>> ExecAll(const std::string& sql);
  Result<PgResult> Prepare(const char* name, const std::string& sql);
  Result<PgResult> Prepared(const char* name, const Params& params);
  // The steps in libpq pipeline mode with one sync: one round trip, and one
  // implicit transaction (each statement still takes its own snapshot under
  // READ COMMITTED). Every step's result, or the first failure (the server
  // skips the steps after it and rolls the transaction back).
  Result<std::vector<PgResult>> Pipeline(std::span<const PipelineStep> steps);
  // Extended protocol with an unnamed statement.
  Result<PgResult> ExecParams(const std::string& sql, const Params& params);

  // The SQLSTATE of the last failed call, empty after a success.
  const std::string& last_sqlstate() const { return last_sqlstate_; }
  // True once the connection is unusable; the pool then discards it.
  bool broken() const { return broken_ || PQstatus(raw_) != CONNECTION_OK; }
  // Rolls back an open transaction; marks the connection broken if it fails.
  void ResetTransaction();
  PGconn* raw() const { return raw_; }

 private:
  Result<PgResult> Check(PGresult* res, std::string_view what);

  PGconn* raw_;
  bool broken_ = false;
  std::string last_sqlstate_;
};

// The typed error for a failed result (res may be null).
Error ToError(PGconn* conn, const PGresult* res, std::string_view what);

class ConnectionPool;

// A checked-out connection; returns it to the pool when destroyed.
class Lease {
 public:
  Lease(std::unique_ptr<Conn> conn, ConnectionPool* pool) : conn_(std::move(conn)), pool_(pool) {}
  Lease(Lease&&) = default;
  Lease& operator=(Lease&&) = delete;
  ~Lease();
  Conn* operator->() const { return conn_.get(); }
  Conn& operator*() const { return *conn_; }

 private:
  std::unique_ptr<Conn> conn_;
  ConnectionPool* pool_;
};

struct PoolOptions {
  std::string conninfo;
  std::string schema;
  size_t connections_max = 16;
  int64_t checkout_timeout_ms = 5'000;
  // Runs on every new connection (e.g. to prepare statements).
  std::function<Status(Conn&)> on_connect;
};

// Opens a connection outside any pool, search_path set to `schema` when not
// empty.
Result<std::unique_ptr<Conn>> Connect(const std::string& conninfo, const std::string& schema);

// For a connection whose every statement is index probes keyed by its
// parameters: plan_cache_mode = force_generic_plan and enable_seqscan = off.
// The default (custom plans until the generic one looks no worse) plans each
// of a connection's first five calls for its arrays' actual lengths: an
// unnest of 1,000 keys priced a sequential scan and a hash of the whole table
// (a timers retire of 1,000 keys on a 100,000-row table took 56-72 ms that
// way, 4-5 ms by the key index). A generic plan is made once per connection,
// from the statistics of that moment: a table that was small then (a new
// fences or timers table) would keep a sequential scan for as long as the
// connection lives, hence enable_seqscan = off. The SET statements, for a
// connection's setup (sent with the rest of it, in one round trip).
inline constexpr std::string_view kIndexPlanSettings =
    "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off";

// Runs `migrate` on a connection of its own, in one transaction that first
// takes the schema's migration lock (pg_advisory_xact_lock(lock_key),
// waiting at most lock_timeout_ms); commits, or rolls everything back on an
// error: nothing of a failed boot stays, and the next one retries.
Status MigrateUnderLock(const std::string& conninfo, const std::string& schema, int64_t lock_key,
                        int64_t lock_timeout_ms, const std::function<Status(Conn&)>& migrate);

class ConnectionPool {
 public:
  explicit ConnectionPool(PoolOptions options) : options_(std::move(options)) {}
  ~ConnectionPool();

  // An idle connection, a new one while fewer than connections_max are open,
  // or, after waiting checkout_timeout_ms, kBusy.
  Result<Lease> Checkout();

 private:
  friend class Lease;
  void Return(std::unique_ptr<Conn> conn);

  PoolOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Conn>> idle_;  // GUARDED_BY(mu_)
  size_t open_ = 0;                          // GUARDED_BY(mu_)
};

// What every side store's Open does (timers, inbox, nodes, queues): checks
// its options (`what` names the options type in the error), migrates its
// tables under the schema's lock, then opens a pool whose connections run
// `prepare` and checks one out, so a bad conninfo fails at Open.
template <class Options, class MigrateFn>
Result<std::unique_ptr<ConnectionPool>> OpenSidePool(const Options& options, std::string_view what,
                                                     MigrateFn migrate,
                                                     std::function<Status(Conn&)> prepare) {
  if (options.schema.empty() || options.connections_max == 0 || options.checkout_timeout_ms < 0 ||
      options.migration_lock_timeout_ms < 0) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        std::string(what) + ": schema must be set, connections_max > 0, timeouts >= 0");
  }
  ONCE_RETURN_IF_ERROR(migrate(options));
  auto pool = std::make_unique<ConnectionPool>(PoolOptions{
      .conninfo = options.conninfo,
      .schema = options.schema,
      .connections_max = options.connections_max,
      .checkout_timeout_ms = options.checkout_timeout_ms,
      .on_connect = std::move(prepare),
  });
  { ONCE_ASSIGN_OR_RETURN(Lease lease, pool->Checkout()); }
  return pool;
}

}  // namespace once::store::pg
