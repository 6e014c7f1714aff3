#include "preload.h"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "once/runtime/log_view.h"
#include "once/runtime/runtime.h"
#include "once/store_postgres/postgres_event_store.h"
#include "ops.h"

namespace once::loom_app {
namespace {

using runtime::Context;
using runtime::Json;
using Steady = std::chrono::steady_clock;

constexpr int kPlainSteps = 8;   // start + 8 steps + completion = 10 events
constexpr int kParkedSteps = 3;  // start + 3 + park + resume + 3 + completion = 10
constexpr char kPlainTemplate[] = "pre-template-plain";
constexpr char kParkedTemplate[] = "pre-template-parked";
constexpr int kVerifySamples = 20;

double SecondsSince(Steady::time_point t0) {
  return std::chrono::duration<double>(Steady::now() - t0).count();
}

// A step's result: a small object, like an id and a state a real step returns.
Json StepResult(int i) {
  return events::JsonObject("step", i, "ok", true, "ref", fmt::format("ref-{:08d}", i * 7919));
}

// The two templates, written by the runtime through the store itself.
Status WriteTemplates(store::EventStore& store, const Clock& clock) {
  runtime::Runtime rt(store, clock, {.workers = 0});
  (void)rt.Register("preload_plain", [](Context& ctx, const Json& in) -> Result<Json> {
    for (int i = 0; i < kPlainSteps; ++i) {
      ONCE_RETURN_IF_ERROR(
          ctx.Step(fmt::format("step-{}", i), [&]() -> Result<Json> { return StepResult(i); }));
    }
    return in;
  });
  (void)rt.Register("preload_parked", [](Context& ctx, const Json& in) -> Result<Json> {
    for (int i = 0; i < 2 * kParkedSteps; ++i) {
      if (i == kParkedSteps) ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::milliseconds(0)));
      ONCE_RETURN_IF_ERROR(
          ctx.Step(fmt::format("step-{}", i), [&]() -> Result<Json> { return StepResult(i); }));
    }
    return in;
  });
  Json input = events::JsonObject("order", "o-12345", "amount", 4200);
  ONCE_ASSIGN_OR_RETURN(auto plain, rt.Start("preload_plain", kPlainTemplate, input, {}));
  if (plain.status != runtime::ExecutionStatus::kCompleted) {
    return MakeError(ErrorCode::kInternal, "preload: the plain template did not complete");
  }
  ONCE_ASSIGN_OR_RETURN(auto parked, rt.Start("preload_parked", kParkedTemplate, input, {}));
  if (!parked.park_seq)
    return MakeError(ErrorCode::kInternal, "preload: the template did not park");
  runtime::RunOptions resume;
  resume.fence_if_parked_at = *parked.park_seq;
  ONCE_ASSIGN_OR_RETURN(auto done, rt.Resume(kParkedTemplate, resume));
  if (done.status != runtime::ExecutionStatus::kCompleted) {
    return MakeError(ErrorCode::kInternal, "preload: the parked template did not complete");
  }
  return Ok();
}

// One stored row of a template, as the store encoded it.
struct RawEvent {
  int64_t sequence = 0;
  std::string kind, payload, metadata;
  int64_t offset_ms = 0;  // from the log's first event
};
// PostgreSQL's stored row (schema 6, kPostgresEventRowColumns): a run of
// one append's events, the first and the last in columns, the ones between
// in `rest`.
struct RawRow {
  std::vector<RawEvent> events;
};
struct RawTemplate {
  std::vector<RawEvent> events;        // SQLite: one row each
  std::vector<RawRow> rows;            // PostgreSQL
  std::optional<int64_t> fence_token;  // its fences row, if it has one
};

int64_t EventCount(const RawTemplate& t) {
  int64_t n = int64_t(t.events.size());
  for (const RawRow& row : t.rows) n += int64_t(row.events.size());
  return n;
}

// The template's own id inside its payloads and metadata (none is expected;
// replaced all the same so a copy never names its template).
std::string Renamed(std::string text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

int64_t BaseTimeMs(int64_t i, int64_t n, int64_t now_ms) {
  return now_ms - kPreloadSpanMs + static_cast<int64_t>(double(i) * kPreloadSpanMs / double(n));
}

// ---- SQLite ----------------------------------------------------------------

struct SqliteCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StatementCloser {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using SqliteDb = std::unique_ptr<sqlite3, SqliteCloser>;
using SqliteStatement = std::unique_ptr<sqlite3_stmt, StatementCloser>;

std::unexpected<Error> SqliteError(sqlite3* db, std::string_view what) {
  return MakeError(ErrorCode::kUnavailable, fmt::format("preload sqlite: {}: {}", what,
                                                        db ? sqlite3_errmsg(db) : "no connection"));
}

Result<SqliteDb> OpenSqlite(const std::string& path) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
  SqliteDb db(raw);
  if (rc != SQLITE_OK) return SqliteError(raw, "open " + path);
  sqlite3_busy_timeout(raw, 30'000);
  return db;
}

Status SqliteExec(sqlite3* db, const std::string& sql) {
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    return SqliteError(db, sql);
  }
  return Ok();
}

Result<SqliteStatement> SqlitePrepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) != SQLITE_OK) return SqliteError(db, sql);
  return SqliteStatement(raw);
}

std::string ColumnText(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  return p ? std::string(p, sqlite3_column_bytes(s, i)) : std::string();
}

Result<RawTemplate> SqliteTemplate(sqlite3* db, const char* id) {
  RawTemplate t;
  ONCE_ASSIGN_OR_RETURN(SqliteStatement rows,
                        SqlitePrepare(db,
                                      "SELECT sequence, kind, payload, metadata, time_ms FROM "
                                      "events WHERE execution_id = ?1 ORDER BY sequence"));
  sqlite3_bind_text(rows.get(), 1, id, -1, SQLITE_STATIC);
  int64_t first_ms = 0;
  while (sqlite3_step(rows.get()) == SQLITE_ROW) {
    RawEvent e{.sequence = sqlite3_column_int64(rows.get(), 0),
               .kind = ColumnText(rows.get(), 1),
               .payload = Renamed(ColumnText(rows.get(), 2), id, "{id}"),
               .metadata = Renamed(ColumnText(rows.get(), 3), id, "{id}")};
    int64_t at = sqlite3_column_int64(rows.get(), 4);
    if (t.events.empty()) first_ms = at;
    e.offset_ms = at - first_ms;
    t.events.push_back(std::move(e));
  }
  ONCE_ASSIGN_OR_RETURN(SqliteStatement fence,
                        SqlitePrepare(db, "SELECT token FROM fences WHERE execution_id = ?1"));
  sqlite3_bind_text(fence.get(), 1, id, -1, SQLITE_STATIC);
  if (sqlite3_step(fence.get()) == SQLITE_ROW) t.fence_token = sqlite3_column_int64(fence.get(), 0);
  if (t.events.empty()) return MakeError(ErrorCode::kInternal, "preload: empty template", id);
  return t;
}

// Executions [first, last) in one transaction.
Status SqliteChunk(sqlite3* db, sqlite3_stmt* insert, sqlite3_stmt* fence,
                   const RawTemplate (&templates)[2], int64_t first, int64_t last, int64_t n,
                   int64_t now_ms) {
  ONCE_RETURN_IF_ERROR(SqliteExec(db, "BEGIN IMMEDIATE"));
  for (int64_t i = first; i < last; ++i) {
    const RawTemplate& t = templates[i % 2];
    const std::string id = PreloadId(i);
    const int64_t base = BaseTimeMs(i, n, now_ms);
    for (const RawEvent& e : t.events) {
      std::string payload = Renamed(e.payload, "{id}", id);
      std::string metadata = Renamed(e.metadata, "{id}", id);
      sqlite3_bind_text(insert, 1, id.data(), int(id.size()), SQLITE_STATIC);
      sqlite3_bind_int64(insert, 2, e.sequence);
      sqlite3_bind_text(insert, 3, e.kind.data(), int(e.kind.size()), SQLITE_STATIC);
      sqlite3_bind_text(insert, 4, payload.data(), int(payload.size()), SQLITE_STATIC);
      sqlite3_bind_text(insert, 5, metadata.data(), int(metadata.size()), SQLITE_STATIC);
      sqlite3_bind_int64(insert, 6, base + e.offset_ms);
      if (sqlite3_step(insert) != SQLITE_DONE) return SqliteError(db, "insert event");
      sqlite3_reset(insert);
    }
    if (t.fence_token) {
      sqlite3_bind_text(fence, 1, id.data(), int(id.size()), SQLITE_STATIC);
      sqlite3_bind_int64(fence, 2, *t.fence_token);
      if (sqlite3_step(fence) != SQLITE_DONE) return SqliteError(db, "insert fence");
      sqlite3_reset(fence);
    }
  }
  return SqliteExec(db, "COMMIT");
}

Status PreloadSqlite(const std::string& path, int64_t n, int64_t now_ms, PreloadFigures& f) {
  ONCE_ASSIGN_OR_RETURN(SqliteDb db, OpenSqlite(path));
  // A page cache large enough for the index's right edges: the default
  // (2 MB) re-reads index pages from the OS on every chunk.
  ONCE_RETURN_IF_ERROR(SqliteExec(db.get(), "PRAGMA cache_size = -262144"));
  RawTemplate templates[2];
  ONCE_ASSIGN_OR_RETURN(templates[0], SqliteTemplate(db.get(), kPlainTemplate));
  ONCE_ASSIGN_OR_RETURN(templates[1], SqliteTemplate(db.get(), kParkedTemplate));
  ONCE_ASSIGN_OR_RETURN(
      SqliteStatement insert,
      SqlitePrepare(db.get(),
                    "INSERT INTO events (execution_id, sequence, kind, payload, metadata, time_ms) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
  ONCE_ASSIGN_OR_RETURN(
      SqliteStatement fence,
      SqlitePrepare(db.get(), "INSERT INTO fences (execution_id, token) VALUES (?1, ?2)"));
  auto t0 = Steady::now();
  for (int64_t first = 0; first < n; first += kPreloadChunk) {
    int64_t last = std::min(n, first + kPreloadChunk);
    ONCE_RETURN_IF_ERROR(
        SqliteChunk(db.get(), insert.get(), fence.get(), templates, first, last, n, now_ms));
    f.events += (EventCount(templates[0]) + EventCount(templates[1])) * (last - first) / 2;
  }
  f.write_s = SecondsSince(t0);
  auto t1 = Steady::now();
  ONCE_RETURN_IF_ERROR(SqliteExec(db.get(), "PRAGMA wal_checkpoint(TRUNCATE)"));
  f.settle_s = SecondsSince(t1);
  return Ok();
}

// ---- PostgreSQL ------------------------------------------------------------

struct PgCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultCloser {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgConn = std::unique_ptr<PGconn, PgCloser>;
using PgRes = std::unique_ptr<PGresult, PgResultCloser>;

std::unexpected<Error> PgError(PGconn* c, std::string_view what) {
  return MakeError(ErrorCode::kUnavailable,
                   fmt::format("preload postgres: {}: {}", what, c ? PQerrorMessage(c) : ""));
}

// The schema name is ours (loom_<hex>) or the operator's; quoted either way.
std::string QuoteIdent(const std::string& name) {
  std::string out = "\"";
  for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

Result<PgConn> ConnectPg(const std::string& url, const std::string& schema) {
  PgConn c(PQconnectdb(url.c_str()));
  if (PQstatus(c.get()) != CONNECTION_OK) return PgError(c.get(), "connect");
  if (!schema.empty()) {
    PgRes r(PQexec(c.get(), ("SET search_path TO " + QuoteIdent(schema)).c_str()));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) return PgError(c.get(), "search_path");
  }
  return c;
}

Result<PgRes> PgQuery(PGconn* c, const std::string& sql, std::vector<std::string> params = {}) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  PgRes r(PQexecParams(c, sql.c_str(), int(values.size()), nullptr, values.data(), nullptr, nullptr,
                       0));
  auto st = PQresultStatus(r.get());
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) return PgError(c, sql);
  return r;
}

// The events between the first and the last of a stored row, from its
// `rest` text ([[kind, payload, metadata, time_ms], ...]).
Result<std::vector<RawEvent>> RestEvents(std::string_view rest, int64_t first_sequence,
                                         std::string_view id, int64_t first_ms) {
  store::Json between = store::Json::parse(rest, nullptr, false);
  if (!between.is_array())
    return MakeError(ErrorCode::kCorruption, "preload: bad rest", std::string(id));
  std::vector<RawEvent> out;
  for (const store::Json& item : between) {
    if (!item.is_array() || item.size() != 4 || !item[0].is_string() ||
        !item[3].is_number_integer()) {
      return MakeError(ErrorCode::kCorruption, "preload: bad rest event", std::string(id));
    }
    out.push_back(RawEvent{.sequence = first_sequence + 1 + int64_t(out.size()),
                           .kind = item[0].get<std::string>(),
                           .payload = Renamed(item[1].dump(), id, "{id}"),
                           .metadata = Renamed(item[2].dump(), id, "{id}"),
                           .offset_ms = item[3].get<int64_t>() - first_ms});
  }
  return out;
}

Result<RawTemplate> PgTemplate(PGconn* c, const char* id) {
  RawTemplate t;
  ONCE_ASSIGN_OR_RETURN(PgRes rows,
                        PgQuery(c,
                                "SELECT " + std::string(store::kPostgresEventRowColumns) +
                                    " FROM events WHERE execution_id = $1 ORDER BY sequence",
                                {id}));
  const PGresult* r = rows.get();
  auto text = [&](int row, int col) { return std::string(PQgetvalue(r, row, col)); };
  int64_t first_ms = PQntuples(r) > 0 ? std::stoll(text(0, 4)) : 0;
  for (int row = 0; row < PQntuples(r); ++row) {
    RawRow raw;
    raw.events.push_back(RawEvent{.sequence = std::stoll(text(row, 0)),
                                  .kind = text(row, 1),
                                  .payload = Renamed(text(row, 2), id, "{id}"),
                                  .metadata = Renamed(text(row, 3), id, "{id}"),
                                  .offset_ms = std::stoll(text(row, 4)) - first_ms});
    if (!PQgetisnull(r, row, 10)) {
      ONCE_ASSIGN_OR_RETURN(std::vector<RawEvent> between,
                            RestEvents(text(row, 10), raw.events[0].sequence, id, first_ms));
      for (RawEvent& e : between) raw.events.push_back(std::move(e));
    }
    if (!PQgetisnull(r, row, 5)) {
      raw.events.push_back(RawEvent{.sequence = std::stoll(text(row, 5)),
                                    .kind = text(row, 6),
                                    .payload = Renamed(text(row, 7), id, "{id}"),
                                    .metadata = Renamed(text(row, 8), id, "{id}"),
                                    .offset_ms = std::stoll(text(row, 9)) - first_ms});
    }
    t.rows.push_back(std::move(raw));
  }
  ONCE_ASSIGN_OR_RETURN(PgRes fence,
                        PgQuery(c, "SELECT token FROM fences WHERE execution_id = $1", {id}));
  if (PQntuples(fence.get()) > 0) t.fence_token = std::stoll(PQgetvalue(fence.get(), 0, 0));
  if (t.rows.empty()) return MakeError(ErrorCode::kInternal, "preload: empty template", id);
  return t;
}

// COPY's text format: backslash, tab, newline and carriage return escaped.
void AppendCopyText(std::string& out, std::string_view s) {
  for (char ch : s) {
    switch (ch) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += ch;
    }
  }
}

Status CopyRows(PGconn* c, const std::string& copy_sql, const std::string& rows) {
  PgRes start(PQexec(c, copy_sql.c_str()));
  if (PQresultStatus(start.get()) != PGRES_COPY_IN) return PgError(c, copy_sql);
  constexpr size_t kPiece = 1 << 20;
  for (size_t at = 0; at < rows.size(); at += kPiece) {
    size_t len = std::min(kPiece, rows.size() - at);
    if (PQputCopyData(c, rows.data() + at, int(len)) != 1) return PgError(c, "copy data");
  }
  if (PQputCopyEnd(c, nullptr) != 1) return PgError(c, "copy end");
  for (PgRes r(PQgetResult(c)); r; r.reset(PQgetResult(c))) {
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) return PgError(c, "copy");
  }
  return Ok();
}

// One COPY line of the events table: the row's events as execution `id`'s,
// their times from `base`.
void AppendPgRow(std::string& out, const RawRow& row, const std::string& id, int64_t base) {
  std::vector<store::EncodedEvent> events;
  events.reserve(row.events.size());
  for (const RawEvent& e : row.events) {
    events.push_back(store::EncodedEvent{.sequence = e.sequence,
                                         .kind = e.kind,
                                         .payload_json = Renamed(e.payload, "{id}", id),
                                         .metadata_json = Renamed(e.metadata, "{id}", id),
                                         .time_ms = base + e.offset_ms});
  }
  auto field = [&](std::string_view text) {
    out += '\t';
    AppendCopyText(out, text);
  };
  const store::EncodedEvent& head = events.front();
  out += id;
  out += fmt::format("\t{}", head.sequence);
  field(head.kind);
  field(head.payload_json);
  field(head.metadata_json);
  out += fmt::format("\t{}", head.time_ms);
  if (events.size() == 1) {
    out += "\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\n";
    return;
  }
  const store::EncodedEvent& tail = events.back();
  out += fmt::format("\t{}", tail.sequence);
  field(tail.kind);
  field(tail.payload_json);
  field(tail.metadata_json);
  out += fmt::format("\t{}", tail.time_ms);
  std::optional<std::string> rest = store::PostgresRestColumn(events);
  if (rest) {
    field(*rest);
  } else {
    out += "\t\\N";
  }
  out += '\n';
}

Status PgChunk(PGconn* c, const RawTemplate (&templates)[2], int64_t first, int64_t last, int64_t n,
               int64_t now_ms, std::string& events, std::string& fences) {
  events.clear();
  fences.clear();
  for (int64_t i = first; i < last; ++i) {
    const RawTemplate& t = templates[i % 2];
    const std::string id = PreloadId(i);
    const int64_t base = BaseTimeMs(i, n, now_ms);
    for (const RawRow& row : t.rows) AppendPgRow(events, row, id, base);
    if (t.fence_token) fences += fmt::format("{}\t{}\n", id, *t.fence_token);
  }
  ONCE_RETURN_IF_ERROR(CopyRows(
      c,
      "COPY events (execution_id, " + std::string(store::kPostgresEventRowColumns) + ") FROM STDIN",
      events));
  if (fences.empty()) return Ok();
  return CopyRows(c, "COPY fences (execution_id, token) FROM STDIN", fences);
}

Status PreloadPostgres(const BackendSpec& spec, int64_t n, int64_t now_ms, PreloadFigures& f) {
  ONCE_ASSIGN_OR_RETURN(PgConn c, ConnectPg(spec.url, spec.schema));
  // The preload's own commits need not wait for the disk: the bench waits
  // for all of them at the end (VACUUM), and a crash only loses the preload.
  ONCE_RETURN_IF_ERROR(PgQuery(c.get(), "SET synchronous_commit = off"));
  RawTemplate templates[2];
  ONCE_ASSIGN_OR_RETURN(templates[0], PgTemplate(c.get(), kPlainTemplate));
  ONCE_ASSIGN_OR_RETURN(templates[1], PgTemplate(c.get(), kParkedTemplate));
  std::string events, fences;
  auto t0 = Steady::now();
  for (int64_t first = 0; first < n; first += kPreloadChunk) {
    int64_t last = std::min(n, first + kPreloadChunk);
    ONCE_RETURN_IF_ERROR(PgChunk(c.get(), templates, first, last, n, now_ms, events, fences));
    f.events += (EventCount(templates[0]) + EventCount(templates[1])) * (last - first) / 2;
  }
  f.write_s = SecondsSince(t0);
  auto t1 = Steady::now();
  ONCE_RETURN_IF_ERROR(PgQuery(c.get(), "VACUUM ANALYZE events"));
  ONCE_RETURN_IF_ERROR(PgQuery(c.get(), "VACUUM ANALYZE fences"));
  ONCE_RETURN_IF_ERROR(PgQuery(c.get(), "CHECKPOINT"));
  f.settle_s = SecondsSince(t1);
  return Ok();
}

// ---- memory ----------------------------------------------------------------

Status PreloadMemory(store::EventStore& store, int64_t n, int64_t now_ms, PreloadFigures& f) {
  std::vector<store::Envelope> templates[2];
  ONCE_ASSIGN_OR_RETURN(templates[0], store.ReadRange(kPlainTemplate, 1));
  ONCE_ASSIGN_OR_RETURN(templates[1], store.ReadRange(kParkedTemplate, 1));
  auto t0 = Steady::now();
  for (int64_t i = 0; i < n; ++i) {
    const auto& t = templates[i % 2];
    store::AppendRequest req{.execution_id = PreloadId(i), .events = t, .fence = std::nullopt};
    const int64_t base = BaseTimeMs(i, n, now_ms);
    for (auto& e : req.events) {
      e.execution_id = req.execution_id;
      e.time_ms = base + (e.time_ms - t.front().time_ms);
    }
    ONCE_RETURN_IF_ERROR(store.Append(req));
    f.events += int64_t(t.size());
  }
  f.write_s = SecondsSince(t0);
  return Ok();
}

Percentiles PercentilesOf(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Percentiles p{.samples = int(ms.size())};
  if (ms.empty()) return p;
  p.p50_ms = ms[ms.size() / 2];
  p.p99_ms = ms[std::min(ms.size() - 1, size_t(double(ms.size()) * 0.99))];
  return p;
}

double MillisSince(Steady::time_point t0) {
  return std::chrono::duration<double, std::milli>(Steady::now() - t0).count();
}

visibility::Target TargetOf(const BackendSpec& spec) {
  if (spec.backend == "sqlite") return {.sqlite_path = spec.path};
  return {.postgres_url = spec.url, .postgres_schema = spec.schema};
}

// The memory store's inspect: the log and its fold.
Result<std::string> FoldedStatus(store::EventStore& store, const std::string& id) {
  ONCE_ASSIGN_OR_RETURN(std::vector<store::Envelope> log, store.ReadRange(id, 1));
  ONCE_ASSIGN_OR_RETURN(runtime::ExecutionState state, runtime::Fold(log));
  return std::string(runtime::StatusName(state.status)) + "/" + std::to_string(log.size());
}

}  // namespace

std::string PreloadId(int64_t i) { return fmt::format("pre-{:010d}", i); }

Result<PreloadFigures> Preload(const BackendSpec& spec, store::EventStore& store, int64_t n,
                               const Clock& clock) {
  PreloadFigures f{.executions = n};
  ONCE_RETURN_IF_ERROR(WriteTemplates(store, clock));
  const int64_t now_ms = clock.NowUnixMillis() - 60'000;  // older than anything the bench writes
  if (spec.backend == "sqlite") {
    ONCE_RETURN_IF_ERROR(PreloadSqlite(spec.path, n, now_ms, f));
  } else if (spec.backend == "postgres") {
    ONCE_RETURN_IF_ERROR(PreloadPostgres(spec, n, now_ms, f));
  } else {
    ONCE_RETURN_IF_ERROR(PreloadMemory(store, n, now_ms, f));
  }
  ONCE_ASSIGN_OR_RETURN(f.bytes, BytesOnDisk(spec));
  return f;
}

Result<int64_t> BytesOnDisk(const BackendSpec& spec) {
  if (spec.backend == "sqlite") {
    int64_t total = 0;
    for (auto suffix : {"", "-wal", "-shm"}) {
      std::error_code ec;
      auto size = std::filesystem::file_size(spec.path + suffix, ec);
      if (!ec) total += int64_t(size);
    }
    return total;
  }
  if (spec.backend != "postgres") return int64_t{0};
  ONCE_ASSIGN_OR_RETURN(PgConn c, ConnectPg(spec.url, ""));
  ONCE_ASSIGN_OR_RETURN(PgRes r,
                        PgQuery(c.get(),
                                "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::int8 FROM "
                                "pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE n.nspname = $1 AND c.relkind = 'r'",
                                {spec.schema}));
  return std::stoll(PQgetvalue(r.get(), 0, 0));
}

Status RemovePreloaded(const BackendSpec& spec) {
  if (spec.backend == "sqlite") {
    std::error_code ec;
    for (auto suffix : {"", "-wal", "-shm"}) std::filesystem::remove(spec.path + suffix, ec);
    return Ok();
  }
  if (spec.backend != "postgres") return Ok();
  ONCE_ASSIGN_OR_RETURN(PgConn c, ConnectPg(spec.url, ""));
  ONCE_RETURN_IF_ERROR(PgQuery(c.get(), "SET client_min_messages = warning"));  // no cascade list
  ONCE_RETURN_IF_ERROR(PgQuery(c.get(), "DROP SCHEMA " + QuoteIdent(spec.schema) + " CASCADE"));
  return Ok();
}

Result<int64_t> WalPositionBytes(const std::string& url) {
  ONCE_ASSIGN_OR_RETURN(PgConn c, ConnectPg(url, ""));
  ONCE_ASSIGN_OR_RETURN(
      PgRes r, PgQuery(c.get(), "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8"));
  return std::stoll(PQgetvalue(r.get(), 0, 0));
}

Status VerifyPreload(const BackendSpec& spec, store::EventStore& store, const PreloadFigures& f) {
  if (f.executions == 0) return Ok();
  SystemRng rng;
  std::vector<int64_t> picks = {0, f.executions - 1};
  for (int k = 0; k < kVerifySamples; ++k) picks.push_back(int64_t(rng.Next() % f.executions));
  if (spec.backend == "memory") {
    for (int64_t i : picks) {
      ONCE_ASSIGN_OR_RETURN(std::string got, FoldedStatus(store, PreloadId(i)));
      if (got != "completed/10") {
        return MakeError(ErrorCode::kInternal, "preload: inspect says " + got, PreloadId(i));
      }
    }
    return Ok();
  }
  ONCE_ASSIGN_OR_RETURN(auto ops, Ops::Open(TargetOf(spec)));
  for (int64_t i : picks) {
    ONCE_ASSIGN_OR_RETURN(Json shown, ops->Show(PreloadId(i), OpsLimits{}.show_events_max));
    const Json& row = shown["execution"];
    const std::string workflow = i % 2 == 0 ? "preload_plain" : "preload_parked";
    if (row.value("status", "") != "completed" || row.value("workflow", "") != workflow ||
        shown["events"].size() != 10) {
      return MakeError(ErrorCode::kInternal, "preload: show says " + row.dump(), PreloadId(i));
    }
  }
  // `loom list --status completed` finds the newest of them (the
  // templates' ids do not start "pre-0").
  ONCE_ASSIGN_OR_RETURN(
      visibility::ListPage newest,
      ops->view().List({.status = "completed", .id_prefix = "pre-0", .limit = 50}));
  if (newest.rows.size() != size_t(std::min<int64_t>(50, f.executions)) ||
      newest.rows.front().execution_id != PreloadId(f.executions - 1)) {
    return MakeError(ErrorCode::kInternal,
                     fmt::format("preload: list returned {} rows", newest.rows.size()));
  }
  return Ok();
}

Result<InspectFigures> TimeInspects(const BackendSpec& spec, store::EventStore& store,
                                    const PreloadFigures& f, int samples, Rng& rng) {
  if (f.executions == 0) return InspectFigures{};
  std::vector<double> log_ms, show_ms;
  if (spec.backend == "memory") {
    for (int k = 0; k < samples; ++k) {
      auto t0 = Steady::now();
      ONCE_RETURN_IF_ERROR(FoldedStatus(store, PreloadId(int64_t(rng.Next() % f.executions))));
      log_ms.push_back(MillisSince(t0));
    }
    Percentiles p = PercentilesOf(std::move(log_ms));
    return InspectFigures{.log = p, .show = p};
  }
  ONCE_ASSIGN_OR_RETURN(auto ops, Ops::Open(TargetOf(spec)));
  const size_t events_max = OpsLimits{}.show_events_max;
  ONCE_RETURN_IF_ERROR(ops->Show(PreloadId(0), events_max));  // opens the store
  for (int k = 0; k < samples; ++k) {
    const std::string id = PreloadId(int64_t(rng.Next() % f.executions));
    auto t0 = Steady::now();
    ONCE_RETURN_IF_ERROR(ops->ReadLog(id, events_max, nullptr));
    log_ms.push_back(MillisSince(t0));
    auto t1 = Steady::now();
    ONCE_RETURN_IF_ERROR(ops->Show(id, events_max));
    show_ms.push_back(MillisSince(t1));
  }
  return InspectFigures{.log = PercentilesOf(std::move(log_ms)),
                        .show = PercentilesOf(std::move(show_ms))};
}

Result<std::pair<Percentiles, Percentiles>> TimeLists(const BackendSpec& spec, int samples) {
  ONCE_ASSIGN_OR_RETURN(auto view, visibility::Visibility::Open(TargetOf(spec)));
  std::vector<double> any, completed;
  for (int k = 0; k < samples; ++k) {
    auto t0 = Steady::now();
    ONCE_RETURN_IF_ERROR(view->List({.limit = 50}));
    any.push_back(MillisSince(t0));
    auto t1 = Steady::now();
    ONCE_RETURN_IF_ERROR(view->List({.status = "completed", .limit = 50}));
    completed.push_back(MillisSince(t1));
  }
  return std::pair{PercentilesOf(std::move(any)), PercentilesOf(std::move(completed))};
}

Result<RetentionFigures> RunRetention(const BackendSpec& spec, int64_t age_ms, int64_t pause_ms) {
  ONCE_ASSIGN_OR_RETURN(auto ops, Ops::Open(TargetOf(spec)));
  auto t0 = Steady::now();
  RetentionPace pace;
  if (pause_ms >= 0) pace.batch_pause_ms = pause_ms;
  ONCE_ASSIGN_OR_RETURN(Json report, ops->Retention(age_ms, /*dry_run=*/false, nullptr, pace));
  return RetentionFigures{.examined = report.value("examined", int64_t{0}),
                          .deleted = report.value("deleted", int64_t{0}),
                          .seconds = SecondsSince(t0)};
}

}  // namespace once::loom_app
