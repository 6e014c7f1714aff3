#include "pg_conn.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>

namespace once::store::pg {

Params& Params::Text(std::string v) {
  values_.push_back(std::move(v));
  nulls_.push_back(false);
  binary_.push_back(false);
  return *this;
}

Params& Params::Binary(std::string v) {
  values_.push_back(std::move(v));
  nulls_.push_back(false);
  binary_.push_back(true);
  any_binary_ = true;
  return *this;
}

Params& Params::Null() {
  values_.emplace_back();
  nulls_.push_back(true);
  binary_.push_back(false);
  return *this;
}

std::vector<int> Params::Lengths() const {
  std::vector<int> out;
  out.reserve(values_.size());
  for (const auto& v : values_) out.push_back(static_cast<int>(v.size()));
  return out;
}

std::vector<int> Params::Formats() const {
  std::vector<int> out;
  out.reserve(values_.size());
  for (bool b : binary_) out.push_back(b ? 1 : 0);
  return out;
}

std::vector<const char*> Params::Pointers() const {
  std::vector<const char*> out;
  out.reserve(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) {
    out.push_back(nulls_[i] ? nullptr : values_[i].c_str());
  }
  return out;
}

std::string TextArray(const std::vector<std::string_view>& items) {
  size_t size = 2;
  for (auto s : items) size += s.size() + 3;
  std::string out;
  out.reserve(size + size / 16);
  out.push_back('{');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.push_back('"');
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    out.push_back('"');
  }
  out.push_back('}');
  return out;
}

std::string IntArray(const std::vector<std::optional<int64_t>>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += items[i] ? std::to_string(*items[i]) : "NULL";
  }
  out.push_back('}');
  return out;
}

std::string BoolArray(const std::vector<bool>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.push_back(items[i] ? 't' : 'f');
  }
  out.push_back('}');
  return out;
}

namespace {

// Type oids (pg_type.h); array_recv checks the element type against them.
constexpr uint32_t kBoolOid = 16;
constexpr uint32_t kInt8Oid = 20;
constexpr uint32_t kTextOid = 25;
constexpr uint32_t kTidOid = 27;
constexpr uint32_t kXidOid = 28;

// Network byte order, one append each (not a push_back per byte).
void PutU32(std::string& out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(bytes, sizeof bytes);
}

void PutU64(std::string& out, uint64_t v) {
  char bytes[8];
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>(v >> (56 - 8 * k));
  out.append(bytes, sizeof bytes);
}

// ndim 1, the null flag, the element type, then (size, lower bound 1).
std::string ArrayHeader(size_t n, bool has_null, uint32_t element_oid, size_t body_bytes) {
  std::string out;
  out.reserve(20 + body_bytes);
  PutU32(out, 1);
  PutU32(out, has_null ? 1 : 0);
  PutU32(out, element_oid);
  PutU32(out, static_cast<uint32_t>(n));
  PutU32(out, 1);
  return out;
}

// An array of fixed-size elements: `put` appends one element's bytes.
template <class T, class Put>
std::string FixedArrayBinary(const std::vector<std::optional<T>>& items, uint32_t element_oid,
                             uint32_t element_bytes, Put put) {
  bool has_null = std::any_of(items.begin(), items.end(), [](auto& v) { return !v; });
  std::string out =
      ArrayHeader(items.size(), has_null, element_oid, items.size() * (4 + element_bytes));
  for (const auto& v : items) {
    if (!v) {
      PutU32(out, 0xffffffffu);  // length -1: NULL
      continue;
    }
    PutU32(out, element_bytes);
    put(out, *v);
  }
  return out;
}

}  // namespace

std::string TextArrayBinary(const std::vector<std::string_view>& items) {
  size_t body = 0;
  for (auto s : items) body += 4 + s.size();
  std::string out = ArrayHeader(items.size(), false, kTextOid, body);
  for (auto s : items) {
    PutU32(out, static_cast<uint32_t>(s.size()));
    out.append(s);
  }
  return out;
}

std::string NullableTextArrayBinary(const std::vector<std::optional<std::string_view>>& items) {
  size_t body = 0;
  bool has_null = false;
  for (const auto& s : items) {
    body += 4 + (s ? s->size() : 0);
    has_null = has_null || !s;
  }
  std::string out = ArrayHeader(items.size(), has_null, kTextOid, body);
  for (const auto& s : items) {
    if (!s) {
      PutU32(out, 0xffffffffu);  // length -1: NULL
      continue;
    }
    PutU32(out, static_cast<uint32_t>(s->size()));
    out.append(*s);
  }
  return out;
}

std::string IntArrayBinary(const std::vector<std::optional<int64_t>>& items) {
  return FixedArrayBinary(items, kInt8Oid, 8, [](std::string& out, int64_t v) {
    PutU64(out, static_cast<uint64_t>(v));
  });
}

std::string BoolArrayBinary(const std::vector<bool>& items) {
  std::string out = ArrayHeader(items.size(), false, kBoolOid, items.size() * 5);
  for (bool b : items) {
    PutU32(out, 1);
    out.push_back(b ? 1 : 0);
  }
  return out;
}

std::string TidArrayBinary(const std::vector<std::optional<Tid>>& items) {
  return FixedArrayBinary(items, kTidOid, 6, [](std::string& out, const Tid& t) {
    PutU32(out, t.block);
    const char offset[2] = {static_cast<char>(t.offset >> 8), static_cast<char>(t.offset)};
    out.append(offset, sizeof offset);
  });
}

std::string XidArrayBinary(const std::vector<std::optional<uint32_t>>& items) {
  return FixedArrayBinary(items, kXidOid, 4, [](std::string& out, uint32_t x) { PutU32(out, x); });
}

int64_t IntAt(const PGresult* res, int row, int col) {
  return std::strtoll(PQgetvalue(res, row, col), nullptr, 10);
}

std::string QuoteIdentifier(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

Error ToError(PGconn* conn, const PGresult* res, std::string_view what) {
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string sqlstate = state ? state : "";
  std::string text = res ? PQresultErrorMessage(res) : "";
  if (text.empty() && conn) text = PQerrorMessage(conn);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::string message = std::string(what) + ": " + (sqlstate.empty() ? "" : sqlstate + " ") + text;
  ErrorCode code = ErrorCode::kInternal;
  const bool live = !conn || PQstatus(conn) == CONNECTION_OK;
  if (sqlstate == "08P01" && live && res) {
    // The server refused a message it parsed (a statement given the wrong
    // number of parameters): the connection is fine.
    code = ErrorCode::kInvalidArgument;
  } else if (!live || sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" ||
             sqlstate == "57P03" || sqlstate.starts_with("53")) {
    code = ErrorCode::kUnavailable;
  } else if (sqlstate == "40001" || sqlstate == "40P01") {
    code = ErrorCode::kBusy;
  } else if (sqlstate == "55P03" || sqlstate == "57014") {
    code = ErrorCode::kTimeout;
  } else if (sqlstate.starts_with("22")) {
    code = ErrorCode::kInvalidArgument;  // data the server refuses (bad JSON, \u0000)
  } else if (sqlstate.empty() && !res) {
    code = ErrorCode::kUnavailable;  // no result at all: the connection went away
  }
  return Error{code, std::move(message), {}, {}};
}

Result<PgResult> Conn::Check(PGresult* raw_res, std::string_view what) {
  PgResult res(raw_res);
  ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY) {
    last_sqlstate_.clear();
    return res;
  }
  const char* state = res ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE) : nullptr;
  last_sqlstate_ = state ? state : "";
  Error err = ToError(raw_, res.get(), what);
  if (err.code == ErrorCode::kUnavailable) broken_ = true;
  return std::unexpected(std::move(err));
}

Result<PgResult> Conn::Exec(const std::string& sql) {
  return Check(PQexec(raw_, sql.c_str()), "query");
}

Result<std::vector<PgResult>> Conn::ExecAll(const std::string& sql) {
  if (!PQsendQuery(raw_, sql.c_str())) {
    broken_ = PQstatus(raw_) != CONNECTION_OK;
    return std::unexpected(ToError(raw_, nullptr, "send"));
  }
  std::vector<PgResult> out;
  std::optional<Error> first_error;
  while (PGresult* raw_res = PQgetResult(raw_)) {
    auto checked = Check(raw_res, "query");
    if (!checked) {
      if (!first_error) first_error = checked.error();
    } else {
      out.push_back(std::move(*checked));
    }
  }
  if (first_error) {
    if (PQstatus(raw_) != CONNECTION_OK) broken_ = true;
    return std::unexpected(std::move(*first_error));
  }
  if (PQstatus(raw_) != CONNECTION_OK) {
    broken_ = true;
    return std::unexpected(ToError(raw_, nullptr, "query"));
  }
  return out;
}

Result<PgResult> Conn::Prepare(const char* name, const std::string& sql) {
  return Check(PQprepare(raw_, name, sql.c_str(), 0, nullptr), name);
}

Result<PgResult> Conn::Prepared(const char* name, const Params& params) {
  auto ptrs = params.Pointers();
  if (!params.any_binary()) {
    return Check(PQexecPrepared(raw_, name, params.size(), ptrs.data(), nullptr, nullptr, 0), name);
  }
  auto lengths = params.Lengths();
  auto formats = params.Formats();
  return Check(
      PQexecPrepared(raw_, name, params.size(), ptrs.data(), lengths.data(), formats.data(), 0),
      name);
}

namespace {

bool SendStep(PGconn* raw, const PipelineStep& step) {
  auto ptrs = step.params.Pointers();
  auto lengths = step.params.Lengths();
  auto formats = step.params.Formats();
  int n = step.params.size();
  if (step.name) {
    return PQsendQueryPrepared(raw, step.name, n, ptrs.data(), lengths.data(), formats.data(), 0);
  }
  return PQsendQueryParams(raw, step.sql.c_str(), n, nullptr, ptrs.data(), lengths.data(),
                           formats.data(), 0);
}

}  // namespace

Result<std::vector<PgResult>> Conn::Pipeline(std::span<const PipelineStep> steps) {
  auto lost = [&](std::string_view what) -> std::unexpected<Error> {
    broken_ = true;  // the protocol state is unknown: the pool discards the connection
    return std::unexpected(ToError(raw_, nullptr, what));
  };
  if (!PQenterPipelineMode(raw_)) return lost("pipeline");
  for (const PipelineStep& step : steps) {
    if (!SendStep(raw_, step)) return lost("send");
  }
  if (!PQpipelineSync(raw_)) return lost("sync");
  std::vector<PgResult> out;
  std::optional<Error> first_error;
  for (const PipelineStep& step : steps) {
    PGresult* raw_res = PQgetResult(raw_);
    if (!raw_res) return lost("pipeline result");
    if (PQresultStatus(raw_res) == PGRES_PIPELINE_ABORTED) {
      PQclear(raw_res);  // skipped after an earlier failure
    } else if (auto checked = Check(raw_res, step.name ? step.name : "pipeline"); !checked) {
      if (!first_error) first_error = checked.error();
    } else {
      out.push_back(std::move(*checked));
    }
    if (PGresult* end = PQgetResult(raw_)) {  // each statement's results end with a null
      PQclear(end);
      return lost("pipeline: more than one result");
    }
  }
  PgResult sync(PQgetResult(raw_));
  if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) return lost("pipeline sync");
  if (!PQexitPipelineMode(raw_)) return lost("pipeline exit");
  if (first_error) return std::unexpected(std::move(*first_error));
  return out;
}

Result<PgResult> Conn::ExecParams(const std::string& sql, const Params& params) {
  auto ptrs = params.Pointers();
  return Check(
      PQexecParams(raw_, sql.c_str(), params.size(), nullptr, ptrs.data(), nullptr, nullptr, 0),
      "query");
}

void Conn::ResetTransaction() {
  if (broken()) return;
  if (PQtransactionStatus(raw_) == PQTRANS_IDLE) return;
  PgResult res(PQexec(raw_, "ROLLBACK"));
  if (PQtransactionStatus(raw_) != PQTRANS_IDLE) broken_ = true;
}

namespace {
void IgnoreNotice(void*, const char*) {}
}  // namespace

Result<std::unique_ptr<Conn>> Connect(const std::string& conninfo, const std::string& schema) {
  PGconn* raw = PQconnectdb(conninfo.c_str());
  if (!raw) return MakeError(ErrorCode::kUnavailable, "libpq could not allocate a connection");
  auto conn = std::make_unique<Conn>(raw);
  if (PQstatus(raw) != CONNECTION_OK) {
    return MakeError(ErrorCode::kUnavailable, std::string("connect: ") + PQerrorMessage(raw));
  }
  PQsetNoticeProcessor(raw, IgnoreNotice, nullptr);
  std::string setup = "SET client_min_messages = warning";
  if (!schema.empty()) setup += "; SET search_path TO " + QuoteIdentifier(schema);
  ONCE_RETURN_IF_ERROR(conn->Exec(setup));
  return conn;
}

Status MigrateUnderLock(const std::string& conninfo, const std::string& schema, int64_t lock_key,
                        int64_t lock_timeout_ms, const std::function<Status(Conn&)>& migrate) {
  ONCE_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Connect(conninfo, schema));
  ONCE_RETURN_IF_ERROR(conn->Exec("BEGIN"));
  Status st = [&]() -> Status {
    ONCE_RETURN_IF_ERROR(
        conn->Exec("SET LOCAL lock_timeout = '" + std::to_string(lock_timeout_ms) +
                   "ms'; SET LOCAL statement_timeout = 0; SELECT pg_advisory_xact_lock(" +
                   std::to_string(lock_key) + ")"));
    return migrate(*conn);
  }();
  if (!st) {
    conn->ResetTransaction();
    return st;
  }
  ONCE_RETURN_IF_ERROR(conn->Exec("COMMIT"));
  return Ok();
}

Lease::~Lease() {
  if (conn_ && pool_) pool_->Return(std::move(conn_));
}

ConnectionPool::~ConnectionPool() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.clear();
}

Result<Lease> ConnectionPool::Checkout() {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.checkout_timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  while (idle_.empty() && open_ >= options_.connections_max) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() &&
        open_ >= options_.connections_max) {
      return MakeError(ErrorCode::kBusy,
                       "no connection free within checkout_timeout_ms (connections_max = " +
                           std::to_string(options_.connections_max) + ")");
    }
  }
  if (!idle_.empty()) {
    auto conn = std::move(idle_.back());
    idle_.pop_back();
    return Lease(std::move(conn), this);
  }
  ++open_;  // reserve the slot, connect outside the lock
  lock.unlock();
  auto conn = Connect(options_.conninfo, options_.schema);
  Status setup = conn ? (options_.on_connect ? options_.on_connect(**conn) : Ok())
                      : Status(std::unexpected(conn.error()));
  if (!setup) {
    lock.lock();
    --open_;
    cv_.notify_one();
    return std::unexpected(setup.error());
  }
  return Lease(std::move(*conn), this);
}

void ConnectionPool::Return(std::unique_ptr<Conn> conn) {
  conn->ResetTransaction();
  std::lock_guard<std::mutex> lock(mu_);
  if (conn->broken()) {
    --open_;
    conn.reset();
  } else {
    idle_.push_back(std::move(conn));
  }
  cv_.notify_one();
}

}  // namespace once::store::pg
