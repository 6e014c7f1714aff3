// The SQLite backend: a read-only connection to the store's file.
#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "once/store_sqlite/sqlite_event_store.h"
#include "once/timers/timer_store.h"
#include "source.h"

namespace once::visibility::internal {
namespace {

using Clock = std::chrono::steady_clock;

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

std::string Column(sqlite3_stmt* s, int i) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  return text ? std::string(text, sqlite3_column_bytes(s, i)) : std::string();
}

class SqliteSource final : public Source {
 public:
  SqliteSource(sqlite3* db, std::string path, VisibilityLimits limits)
      : db_(db), path_(std::move(path)), limits_(limits) {
    // A query that runs past statement_timeout_ms is interrupted.
    sqlite3_progress_handler(db_, 10'000, &SqliteSource::Progress, this);
  }
  // close_v2: the cached statements (members) are finalized after this body
  // runs; the connection closes when the last of them is.
  ~SqliteSource() override { sqlite3_close_v2(db_); }

  Status Check() {
    ONCE_ASSIGN_OR_RETURN(Stmt s, Prepare("PRAGMA user_version"));
    ONCE_RETURN_IF_ERROR(Step(s.get()));
    version_ = sqlite3_column_int(s.get(), 0);
    if (version_ > store::kSqliteSchemaVersion) {
      return MakeError(ErrorCode::kUnsupported,
                       "the store at " + path_ + " has schema version " + std::to_string(version_) +
                           ", newer than this build's " +
                           std::to_string(store::kSqliteSchemaVersion) + ": use a newer loom");
    }
    ONCE_ASSIGN_OR_RETURN(bool events, HasTable("events"));
    if (!events) {
      return MakeError(ErrorCode::kNotFound, "no Loom store in " + path_ + " (no events table)");
    }
    ONCE_ASSIGN_OR_RETURN(has_timers_, HasTable("timers"));
    ONCE_ASSIGN_OR_RETURN(has_inbox_, HasTable("inbox_messages"));
    ONCE_ASSIGN_OR_RETURN(has_fences_, HasTable("fences"));
    ONCE_ASSIGN_OR_RETURN(has_nodes_, HasTable("loom_nodes"));
    ONCE_ASSIGN_OR_RETURN(has_runs_, HasTable("loom_runs"));
    ONCE_ASSIGN_OR_RETURN(has_queues_, HasTable("loom_queues"));
    return Ok();
  }

  Result<std::vector<Candidate>> Candidates(std::string_view kind, const IndexKey& before,
                                            int64_t min_ms, size_t limit) override {
    // The kind is a literal so that the partial index applies.
    std::string sql = "SELECT execution_id, time_ms, sequence FROM events WHERE kind = '" +
                      std::string(kind) +
                      "' AND (time_ms, execution_id, sequence) < (?1, ?2, ?3) AND time_ms >= ?4 "
                      "ORDER BY time_ms DESC, execution_id DESC, sequence DESC LIMIT ?5";
    ONCE_ASSIGN_OR_RETURN(Stmt s, Prepare(sql));
    sqlite3_bind_int64(s.get(), 1, before.time_ms);
    Bind(s.get(), 2, before.execution_id);
    sqlite3_bind_int64(s.get(), 3, before.sequence);
    sqlite3_bind_int64(s.get(), 4, min_ms);
    sqlite3_bind_int64(s.get(), 5, static_cast<int64_t>(limit));
    std::vector<Candidate> out;
    Start();
    while (true) {
      ONCE_ASSIGN_OR_RETURN(bool row, Step(s.get()));
      if (!row) return out;
      out.push_back(Candidate{.key = {.time_ms = sqlite3_column_int64(s.get(), 1),
                                      .execution_id = Column(s.get(), 0),
                                      .sequence = sqlite3_column_int64(s.get(), 2)}});
    }
  }

  Result<std::vector<RawSummary>> Summarise(const std::vector<std::string>& ids) override {
    if (!head_) {
      ONCE_ASSIGN_OR_RETURN(head_, Prepare("SELECT sequence, time_ms FROM events WHERE "
                                           "execution_id = ?1 ORDER BY sequence DESC LIMIT 1"));
      ONCE_ASSIGN_OR_RETURN(
          last_status_,
          Prepare("SELECT sequence, kind, payload, time_ms FROM events WHERE execution_id = ?1 "
                  "AND kind IN " +
                  FoldKindsSql() + " ORDER BY sequence DESC LIMIT 1"));
      ONCE_ASSIGN_OR_RETURN(started_,
                            Prepare("SELECT sequence, kind, payload, time_ms FROM events WHERE "
                                    "execution_id = ?1 AND kind = 'EXECUTION_STARTED' "
                                    "ORDER BY sequence LIMIT 1"));
      if (has_fences_) {
        ONCE_ASSIGN_OR_RETURN(fence_, Prepare("SELECT token FROM fences WHERE execution_id = ?1"));
      }
    }
    // A statement left on a row holds its read snapshot open: every later
    // read would see the store as it was then. Reset them all on the way out.
    struct ResetAll {
      SqliteSource* self;
      ~ResetAll() {
        for (Stmt* s : {&self->head_, &self->last_status_, &self->started_, &self->fence_}) {
          if (*s) sqlite3_reset(s->get());
        }
      }
    } reset_all{this};
    std::vector<RawSummary> out;
    out.reserve(ids.size());
    Start();
    for (const std::string& id : ids) {
      RawSummary r{.execution_id = id};
      ONCE_ASSIGN_OR_RETURN(bool any, Run(head_.get(), id));
      if (any) {
        r.head = sqlite3_column_int64(head_.get(), 0);
        r.updated_ms = sqlite3_column_int64(head_.get(), 1);
        ONCE_ASSIGN_OR_RETURN(r.last_status, EventRow(last_status_.get(), id));
        ONCE_ASSIGN_OR_RETURN(r.started, EventRow(started_.get(), id));
        if (fence_) {
          ONCE_ASSIGN_OR_RETURN(bool fenced, Run(fence_.get(), id));
          if (fenced) r.fence = sqlite3_column_int64(fence_.get(), 0);
        }
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  Result<int64_t> CountKind(std::string_view kind) override {
    return CountOf("SELECT COUNT(*) FROM events WHERE kind = '" + std::string(kind) + "'");
  }

  Result<int64_t> CountOpenParks() override {
    return CountOf(
        "SELECT COUNT(*) FROM events p WHERE p.kind = 'EXECUTION_SUSPENDED' AND NOT EXISTS "
        "(SELECT 1 FROM events a WHERE a.execution_id = p.execution_id AND a.sequence > "
        "p.sequence AND a.kind IN " +
        AnsweringKindsSql() + ")");
  }

  Result<int64_t> CountPendingMessages() override {
    if (!has_inbox_) return 0;
    return CountOf("SELECT COUNT(*) FROM inbox_messages");
  }

  Result<TimersPage> Timers(int64_t due_before_ms, size_t limit, const IndexKey& after) override {
    TimersPage page;
    if (!has_timers_) return page;
    ONCE_ASSIGN_OR_RETURN(
        Stmt s, Prepare("SELECT execution_id, wake_at_ms, redrive, lease_owner, lease_until_ms "
                        "FROM timers WHERE (wake_at_ms, execution_id) > (?1, ?2) "
                        "AND (?3 <= 0 OR wake_at_ms <= ?3) "
                        "ORDER BY wake_at_ms, execution_id LIMIT ?4"));
    sqlite3_bind_int64(s.get(), 1, after.time_ms);
    Bind(s.get(), 2, after.execution_id);
    sqlite3_bind_int64(s.get(), 3, due_before_ms);
    sqlite3_bind_int64(s.get(), 4, static_cast<int64_t>(limit));
    ONCE_ASSIGN_OR_RETURN(page.timers, TimerRows(s.get()));
    if (page.timers.size() == limit) {
      page.next_cursor = EncodeCursor({.time_ms = page.timers.back().wake_at_ms,
                                       .execution_id = page.timers.back().execution_id});
    }
    return page;
  }

  Result<std::vector<TimerInfo>> TimersOf(const std::string& id) override {
    if (!has_timers_) return std::vector<TimerInfo>{};
    ONCE_ASSIGN_OR_RETURN(
        Stmt s, Prepare("SELECT execution_id, wake_at_ms, redrive, lease_owner, lease_until_ms "
                        "FROM timers WHERE execution_id = ?1 ORDER BY wake_at_ms"));
    Bind(s.get(), 1, id);
    return TimerRows(s.get());
  }

  Result<std::vector<PendingMessage>> Pending(const std::string& id, size_t limit) override {
    std::vector<PendingMessage> out;
    if (!has_inbox_) return out;
    ONCE_ASSIGN_OR_RETURN(Stmt s, Prepare("SELECT topic, seq, message FROM inbox_messages WHERE "
                                          "execution_id = ?1 ORDER BY topic, seq LIMIT ?2"));
    Bind(s.get(), 1, id);
    sqlite3_bind_int64(s.get(), 2, static_cast<int64_t>(limit));
    Start();
    while (true) {
      ONCE_ASSIGN_OR_RETURN(bool row, Step(s.get()));
      if (!row) return out;
      auto message = events::ParseJson(Column(s.get(), 2));
      out.push_back({.topic = Column(s.get(), 0),
                     .seq = sqlite3_column_int64(s.get(), 1),
                     .message = message ? std::move(*message) : Json(Column(s.get(), 2))});
    }
  }

  Result<std::vector<NodeRow>> Nodes(size_t limit) override {
    if (!has_nodes_) return NoNodes();
    ONCE_ASSIGN_OR_RETURN(
        Stmt s,
        Prepare(std::string("SELECT node_id, host, pid, version, started_at_ms, "
                            "heartbeat_at_ms, lease_ms, stopped, ") +
                (has_runs_ ? "(SELECT COUNT(*) FROM loom_runs r WHERE r.owner = n.node_id)" : "0") +
                " FROM loom_nodes n ORDER BY node_id LIMIT ?1"));
    sqlite3_bind_int64(s.get(), 1, static_cast<int64_t>(limit));
    int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    std::vector<NodeRow> out;
    Start();
    while (true) {
      ONCE_ASSIGN_OR_RETURN(bool row, Step(s.get()));
      if (!row) return out;
      NodeRow n{.node_id = Column(s.get(), 0),
                .host = Column(s.get(), 1),
                .pid = sqlite3_column_int64(s.get(), 2),
                .version = Column(s.get(), 3),
                .started_at_ms = sqlite3_column_int64(s.get(), 4),
                .heartbeat_at_ms = sqlite3_column_int64(s.get(), 5),
                .lease_ms = sqlite3_column_int64(s.get(), 6),
                .stopped = sqlite3_column_int64(s.get(), 7) != 0,
                .runs_owned = sqlite3_column_int64(s.get(), 8)};
      n.alive = !n.stopped && n.heartbeat_at_ms + n.lease_ms >= now_ms;
      out.push_back(std::move(n));
    }
  }

  Result<std::vector<QueueRow>> Queues(size_t limit) override {
    if (!has_queues_) return NoQueues();
    ONCE_ASSIGN_OR_RETURN(Stmt s, Prepare(std::string(kQueuesSql) + "?1"));
    sqlite3_bind_int64(s.get(), 1, static_cast<int64_t>(limit));
    std::vector<QueueRow> out;
    Start();
    while (true) {
      ONCE_ASSIGN_OR_RETURN(bool row, Step(s.get()));
      if (!row) return out;
      out.push_back(QueueRow{.name = Column(s.get(), 0),
                             .concurrency_max = sqlite3_column_int64(s.get(), 1),
                             .per_node_concurrency_max = sqlite3_column_int64(s.get(), 2),
                             .rate_max = sqlite3_column_int64(s.get(), 3),
                             .rate_period_ms = sqlite3_column_int64(s.get(), 4),
                             .pending = sqlite3_column_int64(s.get(), 5),
                             .claimed = sqlite3_column_int64(s.get(), 6)});
    }
  }

  Result<std::optional<Owner>> OwnerOf(const std::string& id) override {
    if (!has_runs_) return std::optional<Owner>();
    ONCE_ASSIGN_OR_RETURN(Stmt s,
                          Prepare("SELECT owner, since_ms FROM loom_runs WHERE execution_id = ?1"));
    Bind(s.get(), 1, id);
    ONCE_ASSIGN_OR_RETURN(bool row, Step(s.get()));
    if (!row) return std::optional<Owner>();
    return std::optional<Owner>(
        Owner{.node_id = Column(s.get(), 0), .since_ms = sqlite3_column_int64(s.get(), 1)});
  }

  std::string Description() const override {
    return "sqlite " + path_ + " (user_version " + std::to_string(version_) + ")";
  }

 private:
  static int Progress(void* self) {
    auto* source = static_cast<SqliteSource*>(self);
    return Clock::now() > source->deadline_ ? 1 : 0;
  }
  void Start() {
    deadline_ = Clock::now() + std::chrono::milliseconds(limits_.statement_timeout_ms);
  }

  Status Failure(int rc, std::string_view what) {
    ErrorCode code = rc == SQLITE_INTERRUPT                        ? ErrorCode::kTimeout
                     : rc == SQLITE_BUSY                           ? ErrorCode::kBusy
                     : rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB ? ErrorCode::kCorruption
                                                                   : ErrorCode::kUnavailable;
    return MakeError(code, "sqlite: " + std::string(sqlite3_errmsg(db_)) + " (" +
                               std::string(what.substr(0, 60)) + ")");
  }

  Result<Stmt> Prepare(const std::string& sql) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &raw, nullptr);
    if (rc != SQLITE_OK) return std::unexpected(Failure(rc, sql).error());
    return Stmt(raw);
  }

  void Bind(sqlite3_stmt* s, int i, const std::string& text) {
    sqlite3_bind_text(s, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }

  Result<bool> Step(sqlite3_stmt* s) {
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return std::unexpected(Failure(rc, sqlite3_sql(s)).error());
  }

  // Resets a cached statement, binds the id and steps once.
  Result<bool> Run(sqlite3_stmt* s, const std::string& id) {
    sqlite3_reset(s);
    Bind(s, 1, id);
    return Step(s);
  }

  Result<std::optional<RawEvent>> EventRow(sqlite3_stmt* s, const std::string& id) {
    ONCE_ASSIGN_OR_RETURN(bool row, Run(s, id));
    if (!row) return std::optional<RawEvent>();
    return RawEvent{.sequence = sqlite3_column_int64(s, 0),
                    .kind = Column(s, 1),
                    .payload = Column(s, 2),
                    .time_ms = sqlite3_column_int64(s, 3)};
  }

  Result<int64_t> CountOf(const std::string& sql) {
    ONCE_ASSIGN_OR_RETURN(Stmt s, Prepare(sql));
    Start();
    ONCE_ASSIGN_OR_RETURN(bool row, Step(s.get()));
    return row ? sqlite3_column_int64(s.get(), 0) : 0;
  }

  Result<bool> HasTable(const std::string& name) {
    ONCE_ASSIGN_OR_RETURN(
        Stmt s, Prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1"));
    Bind(s.get(), 1, name);
    return Step(s.get());
  }

  Result<std::vector<TimerInfo>> TimerRows(sqlite3_stmt* s) {
    std::vector<TimerInfo> out;
    Start();
    while (true) {
      ONCE_ASSIGN_OR_RETURN(bool row, Step(s));
      if (!row) return out;
      TimerInfo t{.execution_id = Column(s, 0), .wake_at_ms = sqlite3_column_int64(s, 1)};
      if (sqlite3_column_type(s, 2) != SQLITE_NULL) {
        // A cell of another shape shows no attempt (the view reads on).
        if (auto redrive = timers::ParseRedriveText(Column(s, 2))) {
          t.redrive_attempt = redrive->attempt;
        }
      }
      t.lease_owner = Column(s, 3);
      t.lease_until_ms = sqlite3_column_int64(s, 4);
      out.push_back(std::move(t));
    }
  }

  sqlite3* db_;
  std::string path_;
  VisibilityLimits limits_;
  Clock::time_point deadline_ = Clock::time_point::max();
  int version_ = 0;
  bool has_timers_ = false, has_inbox_ = false, has_fences_ = false, has_nodes_ = false,
       has_runs_ = false, has_queues_ = false;
  Stmt head_, last_status_, started_, fence_;
};

}  // namespace

Result<std::unique_ptr<Source>> OpenSqliteSource(const std::string& path,
                                                 const VisibilityLimits& limits) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return MakeError(ErrorCode::kNotFound, "no SQLite store at " + path + " (no such file)");
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return MakeError(ErrorCode::kUnavailable, "cannot open " + path + ": " + message);
  }
  sqlite3_busy_timeout(db, 5'000);
  auto source = std::make_unique<SqliteSource>(db, path, limits);
  if (auto checked = source->Check(); !checked) {
    // Not a database at all reads as corruption: say what it is.
    if (checked.error().code == ErrorCode::kCorruption) {
      return MakeError(ErrorCode::kInvalidArgument,
                       path + " is not a SQLite database: " + checked.error().message);
    }
    return std::unexpected(checked.error());
  }
  return std::unique_ptr<Source>(std::move(source));
}

}  // namespace once::visibility::internal
