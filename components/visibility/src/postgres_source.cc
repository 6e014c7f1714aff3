// The PostgreSQL backend: one read-only libpq connection to the schema.
#include <libpq-fe.h>

#include <memory>

#include "once/store_postgres/postgres_event_store.h"
#include "once/store_postgres/status_index.h"
#include "once/timers/timer_store.h"
#include "source.h"

namespace once::visibility::internal {
namespace {

// The schema version from which the run owners are the fences rows' owner
// and since_ms (docs/nodes.md), not loom_runs rows.
constexpr int64_t kOwnersInFencesVersion = 4;
// From version 6 a row holds a run of one append's events: a status event
// is its first (kind, time_ms, sequence) or its last (end_kind,
// end_time_ms, last_sequence). See components/store_postgres/src/packed_rows.h;
// store::PostgresStatusRanges says which index holds which (version 7 gave
// a paired row one entry).
constexpr int64_t kPackedRowsVersion = 6;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

std::string QuoteIdentifier(const std::string& name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  return out + "\"";
}

// A text[] literal of the ids.
std::string TextArray(const std::vector<std::string>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out.push_back(',');
    out.push_back('"');
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    out.push_back('"');
  }
  return out + "}";
}

int64_t IntAt(PGresult* r, int row, int col) {
  return PQgetisnull(r, row, col) ? 0 : std::stoll(PQgetvalue(r, row, col));
}
std::string TextAt(PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}

}  // namespace

std::string PostgresCandidatesSql(std::string_view kind, int64_t version) {
  // Each range of the kind's entries newest first, merged (status_index.h).
  std::string sql;
  for (const store::StatusRange& r : store::PostgresStatusRanges(kind, version)) {
    sql += std::string(sql.empty() ? "" : " UNION ALL ") + "(SELECT execution_id, " + r.time +
           ", " + r.sequence + " FROM events WHERE " + r.where + " AND (" + r.time +
           ", execution_id) <= ($1::int8, $2::text) AND (" + r.time + ", execution_id, " +
           r.sequence + ") < ($1::int8, $2::text, $3::int8) AND " + r.time +
           " >= $4::int8 ORDER BY " + r.time + " DESC, execution_id DESC, " + r.order_sequence +
           " DESC LIMIT $5::int8)";
  }
  return sql + " ORDER BY 2 DESC, 1 DESC, 3 DESC LIMIT $5::int8";
}

std::string PostgresCountKindSql(std::string_view kind, int64_t version) {
  // A sum of one count per condition, each of one index: an OR of the
  // ranges is planned as one scan of the whole table (on 1,000,000
  // executions, 210 ms against 8 for a rare kind; BENCHMARKS.md).
  std::string sql = "SELECT 0";
  for (const std::string& where : store::PostgresStatusCountConditions(kind, version)) {
    sql += " + (SELECT COUNT(*) FROM events WHERE " + where + ")";
  }
  return sql;
}

std::string PostgresCountOpenParksSql(int64_t version) {
  const std::string answering(AnsweringKindsSql());
  const std::string parks = store::AnyStatusRangeSql(store::PostgresStatusRanges(
      events::Info(events::KernelKind::kExecutionSuspended).name, version));
  // Version 6: a park ends its row, so the rows after it start after it.
  const std::string after =
      version >= kPackedRowsVersion
          ? "a.sequence > COALESCE(p.last_sequence, p.sequence) AND (a.kind IN " + answering +
                " OR a.end_kind IN " + answering + ")"
          : "a.sequence > p.sequence AND a.kind IN " + answering;
  return "SELECT COUNT(*) FROM events p WHERE " + parks +
         " AND NOT EXISTS (SELECT 1 FROM events a WHERE a.execution_id = p.execution_id AND " +
         after + ")";
}

namespace {

class PostgresSource final : public Source {
 public:
  PostgresSource(PGconn* conn, Target target) : conn_(conn), target_(std::move(target)) {}
  ~PostgresSource() override { PQfinish(conn_); }

  Status Check(const VisibilityLimits& limits) {
    ONCE_RETURN_IF_ERROR(Exec("SET search_path TO " + QuoteIdentifier(target_.postgres_schema) +
                              "; SET default_transaction_read_only = on; SET statement_timeout = " +
                              std::to_string(limits.statement_timeout_ms)));
    ONCE_ASSIGN_OR_RETURN(PgResult tables, Query("SELECT to_regclass('once_schema') IS NOT NULL, "
                                                 "to_regclass('events') IS NOT NULL, "
                                                 "to_regclass('timers') IS NOT NULL, "
                                                 "to_regclass('inbox_messages') IS NOT NULL, "
                                                 "to_regclass('loom_nodes') IS NOT NULL, "
                                                 "to_regclass('loom_runs') IS NOT NULL, "
                                                 "to_regclass('loom_queues') IS NOT NULL",
                                                 {}));
    auto yes = [&](int col) { return TextAt(tables.get(), 0, col) == "t"; };
    if (!yes(0) || !yes(1)) {
      return MakeError(ErrorCode::kNotFound,
                       "no Loom store in schema '" + target_.postgres_schema + "'");
    }
    has_timers_ = yes(2);
    has_inbox_ = yes(3);
    has_nodes_ = yes(4);
    has_runs_ = yes(5);
    has_queues_ = yes(6);
    ONCE_ASSIGN_OR_RETURN(PgResult version,
                          Query("SELECT value FROM once_schema WHERE name = 'version'", {}));
    version_ = PQntuples(version.get()) ? IntAt(version.get(), 0, 0) : 0;
    // Run owners: the fences rows' from version 4, loom_runs rows before.
    if (version_ >= kOwnersInFencesVersion) {
      runs_table_ = "fences";
    } else if (has_runs_) {
      runs_table_ = "loom_runs";
    }
    if (version_ > store::kPostgresSchemaVersion) {
      return MakeError(ErrorCode::kUnsupported,
                       "schema '" + target_.postgres_schema + "' has version " +
                           std::to_string(version_) + ", newer than this build's " +
                           std::to_string(store::kPostgresSchemaVersion) + ": use a newer loom");
    }
    return Ok();
  }

  Result<std::vector<Candidate>> Candidates(std::string_view kind, const IndexKey& before,
                                            int64_t min_ms, size_t limit) override {
    ONCE_ASSIGN_OR_RETURN(PgResult r, Query(PostgresCandidatesSql(kind, version_),
                                            {std::to_string(before.time_ms), before.execution_id,
                                             std::to_string(before.sequence),
                                             std::to_string(min_ms), std::to_string(limit)}));
    std::vector<Candidate> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      out.push_back(Candidate{.key = {.time_ms = IntAt(r.get(), i, 1),
                                      .execution_id = TextAt(r.get(), i, 0),
                                      .sequence = IntAt(r.get(), i, 2)}});
    }
    return out;
  }

  Result<std::vector<RawSummary>> Summarise(const std::vector<std::string>& ids) override {
    // One round trip for the whole chunk: every probe is a primary-key walk.
    static const std::string rows_sql =
        "SELECT x.id, h.sequence, h.time_ms, s.sequence, s.kind, s.payload, s.time_ms, "
        "st.sequence, st.kind, st.payload, st.time_ms, "
        "COALESCE((SELECT token FROM fences f WHERE f.execution_id = x.id), 0) "
        "FROM unnest($1::text[]) WITH ORDINALITY AS x(id, n) "
        "LEFT JOIN LATERAL (SELECT sequence, time_ms FROM events e WHERE e.execution_id = x.id "
        "  ORDER BY sequence DESC LIMIT 1) h ON true "
        "LEFT JOIN LATERAL (SELECT sequence, kind, payload, time_ms FROM events e "
        "  WHERE e.execution_id = x.id AND e.kind IN " +
        FoldKindsSql() +
        "  ORDER BY sequence DESC LIMIT 1) s ON true "
        "LEFT JOIN LATERAL (SELECT sequence, kind, payload, time_ms FROM events e "
        "  WHERE e.execution_id = x.id AND e.kind = 'EXECUTION_STARTED' "
        "  ORDER BY sequence LIMIT 1) st ON true "
        "ORDER BY x.n";
    // Version 6: a row's last event is the newer of its two; a status event
    // is either (FoldKindsSql()'s kinds are all first or last in their row).
    static const std::string packed_sql =
        "SELECT x.id, h.sequence, h.time_ms, s.sequence, s.kind, s.payload, s.time_ms, "
        "st.sequence, st.kind, st.payload, st.time_ms, "
        "COALESCE((SELECT token FROM fences f WHERE f.execution_id = x.id), 0) "
        "FROM unnest($1::text[]) WITH ORDINALITY AS x(id, n) "
        "LEFT JOIN LATERAL (SELECT COALESCE(e.last_sequence, e.sequence) AS sequence, "
        "  COALESCE(e.end_time_ms, e.time_ms) AS time_ms FROM events e "
        "  WHERE e.execution_id = x.id ORDER BY e.sequence DESC LIMIT 1) h ON true "
        "LEFT JOIN LATERAL (SELECT CASE WHEN f.at_end THEN e.last_sequence ELSE e.sequence END "
        "  AS sequence, CASE WHEN f.at_end THEN e.end_kind ELSE e.kind END AS kind, "
        "  CASE WHEN f.at_end THEN e.end_payload ELSE e.payload END AS payload, "
        "  CASE WHEN f.at_end THEN e.end_time_ms ELSE e.time_ms END AS time_ms FROM events e "
        "  CROSS JOIN LATERAL (SELECT COALESCE(e.end_kind IN " +
        FoldKindsSql() + ", false) AS at_end) f " +
        "  WHERE e.execution_id = x.id AND (e.kind IN " + FoldKindsSql() + "  OR e.end_kind IN " +
        FoldKindsSql() +
        ") ORDER BY e.sequence DESC LIMIT 1) s ON true "
        "LEFT JOIN LATERAL (SELECT CASE WHEN e.kind = 'EXECUTION_STARTED' THEN e.sequence "
        "  ELSE e.last_sequence END AS sequence, 'EXECUTION_STARTED' AS kind, "
        "  CASE WHEN e.kind = 'EXECUTION_STARTED' THEN e.payload ELSE e.end_payload END "
        "  AS payload, CASE WHEN e.kind = 'EXECUTION_STARTED' THEN e.time_ms "
        "  ELSE e.end_time_ms END AS time_ms FROM events e "
        "  WHERE e.execution_id = x.id AND (e.kind = 'EXECUTION_STARTED' "
        "  OR e.end_kind = 'EXECUTION_STARTED') ORDER BY e.sequence LIMIT 1) st ON true "
        "ORDER BY x.n";
    const std::string& sql = version_ >= kPackedRowsVersion ? packed_sql : rows_sql;
    ONCE_ASSIGN_OR_RETURN(PgResult r, Query(sql, {TextArray(ids)}));
    std::vector<RawSummary> out;
    PGresult* res = r.get();
    for (int i = 0; i < PQntuples(res); ++i) {
      RawSummary s{.execution_id = TextAt(res, i, 0)};
      s.head = IntAt(res, i, 1);
      s.updated_ms = IntAt(res, i, 2);
      if (!PQgetisnull(res, i, 3)) {
        s.last_status = RawEvent{.sequence = IntAt(res, i, 3),
                                 .kind = TextAt(res, i, 4),
                                 .payload = TextAt(res, i, 5),
                                 .time_ms = IntAt(res, i, 6)};
      }
      if (!PQgetisnull(res, i, 7)) {
        s.started = RawEvent{.sequence = IntAt(res, i, 7),
                             .kind = TextAt(res, i, 8),
                             .payload = TextAt(res, i, 9),
                             .time_ms = IntAt(res, i, 10)};
      }
      s.fence = IntAt(res, i, 11);
      out.push_back(std::move(s));
    }
    return out;
  }

  Result<int64_t> CountKind(std::string_view kind) override {
    ONCE_ASSIGN_OR_RETURN(PgResult r, Query(PostgresCountKindSql(kind, version_), {}));
    return IntAt(r.get(), 0, 0);
  }

  Result<int64_t> CountOpenParks() override {
    ONCE_ASSIGN_OR_RETURN(PgResult r, Query(PostgresCountOpenParksSql(version_), {}));
    return IntAt(r.get(), 0, 0);
  }

  Result<int64_t> CountPendingMessages() override {
    if (!has_inbox_) return 0;
    ONCE_ASSIGN_OR_RETURN(PgResult r, Query("SELECT COUNT(*) FROM inbox_messages", {}));
    return IntAt(r.get(), 0, 0);
  }

  Result<TimersPage> Timers(int64_t due_before_ms, size_t limit, const IndexKey& after) override {
    TimersPage page;
    if (!has_timers_) return page;
    ONCE_ASSIGN_OR_RETURN(
        PgResult r,
        Query("SELECT execution_id, wake_at_ms, redrive::text, lease_owner, lease_until_ms "
              "FROM timers WHERE (wake_at_ms, execution_id) > ($1::int8, $2::text) "
              "AND ($3::int8 <= 0 OR wake_at_ms <= $3::int8) "
              "ORDER BY wake_at_ms, execution_id LIMIT $4::int8",
              {std::to_string(after.time_ms), after.execution_id, std::to_string(due_before_ms),
               std::to_string(limit)}));
    page.timers = TimerRows(r.get());
    if (page.timers.size() == limit) {
      page.next_cursor = EncodeCursor({.time_ms = page.timers.back().wake_at_ms,
                                       .execution_id = page.timers.back().execution_id});
    }
    return page;
  }

  Result<std::vector<TimerInfo>> TimersOf(const std::string& id) override {
    if (!has_timers_) return std::vector<TimerInfo>{};
    ONCE_ASSIGN_OR_RETURN(
        PgResult r,
        Query("SELECT execution_id, wake_at_ms, redrive::text, lease_owner, lease_until_ms "
              "FROM timers WHERE execution_id = $1 ORDER BY wake_at_ms",
              {id}));
    return TimerRows(r.get());
  }

  Result<std::vector<PendingMessage>> Pending(const std::string& id, size_t limit) override {
    std::vector<PendingMessage> out;
    if (!has_inbox_) return out;
    ONCE_ASSIGN_OR_RETURN(PgResult r, Query("SELECT topic, seq, message FROM inbox_messages WHERE "
                                            "execution_id = $1 ORDER BY topic, seq LIMIT $2::int8",
                                            {id, std::to_string(limit)}));
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      auto message = events::ParseJson(TextAt(r.get(), i, 2));
      out.push_back({.topic = TextAt(r.get(), i, 0),
                     .seq = IntAt(r.get(), i, 1),
                     .message = message ? std::move(*message) : Json(TextAt(r.get(), i, 2))});
    }
    return out;
  }

  Result<std::vector<NodeRow>> Nodes(size_t limit) override {
    if (!has_nodes_) return NoNodes();
    // Alive by the database's clock, as the node registry judges it.
    ONCE_ASSIGN_OR_RETURN(
        PgResult r,
        Query(std::string("SELECT node_id, host, pid, version, started_at_ms, heartbeat_at_ms, "
                          "lease_ms, stopped, ") +
                  (runs_table_.empty() ? "0" : "COALESCE(r.runs, 0)") +
                  ", NOT stopped AND heartbeat_at_ms + lease_ms >= "
                  "(extract(epoch FROM clock_timestamp()) * 1000)::int8 "
                  "FROM loom_nodes n " +
                  // One pass over the run owners for every node (no index on
                  // them from version 4: a count per node would scan per node).
                  (runs_table_.empty() ? std::string()
                                       : "LEFT JOIN (SELECT f.owner, COUNT(*) AS runs FROM " +
                                             runs_table_ + " f WHERE " + RunningOwner() +
                                             " GROUP BY f.owner) r "
                                             "ON r.owner = n.node_id ") +
                  "ORDER BY node_id LIMIT $1::int8",
              {std::to_string(limit)}));
    std::vector<NodeRow> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      out.push_back(NodeRow{.node_id = TextAt(r.get(), i, 0),
                            .host = TextAt(r.get(), i, 1),
                            .pid = IntAt(r.get(), i, 2),
                            .version = TextAt(r.get(), i, 3),
                            .started_at_ms = IntAt(r.get(), i, 4),
                            .heartbeat_at_ms = IntAt(r.get(), i, 5),
                            .lease_ms = IntAt(r.get(), i, 6),
                            .stopped = TextAt(r.get(), i, 7) == "t",
                            .alive = TextAt(r.get(), i, 9) == "t",
                            .runs_owned = IntAt(r.get(), i, 8)});
    }
    return out;
  }

  Result<std::vector<QueueRow>> Queues(size_t limit) override {
    if (!has_queues_) return NoQueues();
    ONCE_ASSIGN_OR_RETURN(PgResult r,
                          Query(std::string(kQueuesSql) + "$1::int8", {std::to_string(limit)}));
    std::vector<QueueRow> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      out.push_back(QueueRow{.name = TextAt(r.get(), i, 0),
                             .concurrency_max = IntAt(r.get(), i, 1),
                             .per_node_concurrency_max = IntAt(r.get(), i, 2),
                             .rate_max = IntAt(r.get(), i, 3),
                             .rate_period_ms = IntAt(r.get(), i, 4),
                             .pending = IntAt(r.get(), i, 5),
                             .claimed = IntAt(r.get(), i, 6)});
    }
    return out;
  }

  Result<std::optional<Owner>> OwnerOf(const std::string& id) override {
    if (runs_table_.empty()) return std::optional<Owner>();
    ONCE_ASSIGN_OR_RETURN(PgResult r,
                          Query("SELECT f.owner, f.since_ms FROM " + runs_table_ +
                                    " f WHERE f.execution_id = $1 AND " + RunningOwner(),
                                {id}));
    if (PQntuples(r.get()) == 0) return std::optional<Owner>();
    return std::optional<Owner>(
        Owner{.node_id = TextAt(r.get(), 0, 0), .since_ms = IntAt(r.get(), 0, 1)});
  }

  std::string Description() const override {
    return "postgres schema '" + target_.postgres_schema + "' (version " +
           std::to_string(version_) + ")";
  }

 private:
  Status Failure(PGresult* r) {
    std::string state = r ? (PQresultErrorField(r, PG_DIAG_SQLSTATE) ?: "") : "";
    ErrorCode code = PQstatus(conn_) != CONNECTION_OK ? ErrorCode::kUnavailable
                     : state == "57014"               ? ErrorCode::kTimeout
                                                      : ErrorCode::kInternal;
    std::string message = PQerrorMessage(conn_);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
      message.pop_back();
    return MakeError(code, "postgres: " + message + (state.empty() ? "" : " (" + state + ")"));
  }

  Status Exec(const std::string& sql) {
    PgResult r(PQexec(conn_, sql.c_str()));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK && PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
      return Failure(r.get());
    }
    return Ok();
  }

  Result<PgResult> Query(const std::string& sql, const std::vector<std::string>& params) {
    std::vector<const char*> values;
    for (const auto& p : params) values.push_back(p.c_str());
    PgResult r(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                            values.data(), nullptr, nullptr, 0));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
      return std::unexpected(Failure(r.get()).error());
    }
    return r;
  }

  std::vector<TimerInfo> TimerRows(PGresult* r) {
    std::vector<TimerInfo> out;
    for (int i = 0; i < PQntuples(r); ++i) {
      TimerInfo t{.execution_id = TextAt(r, i, 0), .wake_at_ms = IntAt(r, i, 1)};
      if (!PQgetisnull(r, i, 2)) {
        // A cell of another shape shows no attempt (the view reads on).
        if (auto redrive = timers::ParseRedriveText(TextAt(r, i, 2))) {
          t.redrive_attempt = redrive->attempt;
        }
      }
      t.lease_owner = TextAt(r, i, 3);
      t.lease_until_ms = IntAt(r, i, 4);
      out.push_back(std::move(t));
    }
    return out;
  }

  PGconn* conn_;
  Target target_;
  int64_t version_ = 0;
  bool has_timers_ = false, has_inbox_ = false, has_nodes_ = false, has_runs_ = false,
       has_queues_ = false;
  std::string runs_table_;  // where the run owners are ("": none)

  // The condition under which the row `f` of runs_table_ names a running
  // owner: the store's own from the version where the log releases it.
  std::string RunningOwner() const {
    if (version_ >= store::kPostgresLazyReleaseVersion) return store::PostgresRunningOwnerSql("f");
    return "f.owner IS NOT NULL";
  }
};

}  // namespace

Result<std::unique_ptr<Source>> OpenPostgresSource(const Target& target,
                                                   const VisibilityLimits& limits) {
  // Parse first: a malformed URL is the caller's mistake, said in one line.
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(target.postgres_url.c_str(), &parse_error);
  if (parsed == nullptr) {
    std::string message = parse_error ? parse_error : "cannot parse";
    PQfreemem(parse_error);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return MakeError(ErrorCode::kInvalidArgument, "malformed PostgreSQL URL: " + message);
  }
  PQconninfoFree(parsed);
  PGconn* conn = PQconnectdb(target.postgres_url.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = PQerrorMessage(conn);
    PQfinish(conn);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
      message.pop_back();
    for (char& c : message) {
      if (c == '\n') c = ' ';
    }
    return MakeError(ErrorCode::kUnavailable, "cannot connect to PostgreSQL: " + message);
  }
  auto source = std::make_unique<PostgresSource>(conn, target);
  ONCE_RETURN_IF_ERROR(source->Check(limits));
  return std::unique_ptr<Source>(std::move(source));
}

}  // namespace once::visibility::internal
