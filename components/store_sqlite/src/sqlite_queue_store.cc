#include "once/store_sqlite/sqlite_queue_store.h"

#include <algorithm>
#include <mutex>

#include "connection.h"
#include "once/events/envelope.h"
#include "once/events/json_text.h"
#include "sqlite_schema.h"

namespace once::store {
namespace {

using queues::ClaimRequest;
using queues::Enqueued;
using queues::EnqueueRequest;
using queues::QueueConfig;
using queues::QueueCounts;
using queues::QueueItem;
using queues::ScheduleRow;
using sqlite_internal::Connection;
using sqlite_internal::Statement;

enum QueueSql : size_t {
  kBegin,
  kCommit,
  kRollback,
  kEnsureQueue,
  kConfigure,
  kQueueRow,
  kQueues,
  kItemSeq,
  kDedupHolder,
  kInsertItem,
  kCounts,
  kPick,
  kClaimOne,
  kSetWindow,
  kComplete,
  kRelease,
  kClaimed,
  kItems,
  kPutSchedule,
  kSchedules,
  kAdvance,
  kQueueSqlCount,
};

constexpr const char* kItemColumns =
    "queue, workflow, execution_id, input, priority, COALESCE(dedup_key, ''), seq, "
    "enqueued_at_ms, visible_at_ms, COALESCE(claimed_by, ''), COALESCE(claimed_at_ms, 0)";

const std::vector<std::string>& QueueSqlText() {
  static const std::vector<std::string> sql = [] {
    const std::string cols = kItemColumns;
    std::vector<std::string> s(kQueueSqlCount);
    s[kBegin] = "BEGIN IMMEDIATE";
    s[kCommit] = "COMMIT";
    s[kRollback] = "ROLLBACK";
    s[kEnsureQueue] = "INSERT INTO loom_queues(name) VALUES (?1) ON CONFLICT(name) DO NOTHING";
    s[kConfigure] =
        "INSERT INTO loom_queues(name, concurrency_max, per_node_concurrency_max, rate_max, "
        "rate_period_ms) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(name) DO UPDATE SET "
        "concurrency_max = excluded.concurrency_max, per_node_concurrency_max = "
        "excluded.per_node_concurrency_max, rate_max = excluded.rate_max, rate_period_ms = "
        "excluded.rate_period_ms";
    s[kQueueRow] =
        "SELECT name, concurrency_max, per_node_concurrency_max, rate_max, rate_period_ms, "
        "window_start_ms, window_count FROM loom_queues WHERE name = ?1";
    s[kQueues] =
        "SELECT name, concurrency_max, per_node_concurrency_max, rate_max, rate_period_ms, "
        "window_start_ms, window_count FROM loom_queues ORDER BY name";
    s[kItemSeq] = "SELECT seq FROM loom_queue_items WHERE execution_id = ?1";
    s[kDedupHolder] =
        "SELECT execution_id FROM loom_queue_items WHERE queue = ?1 AND dedup_key = ?2";
    s[kInsertItem] =
        "INSERT INTO loom_queue_items(execution_id, queue, workflow, input, priority, dedup_key, "
        "enqueued_at_ms, visible_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, NULLIF(?6, ''), ?7, ?8) "
        "RETURNING seq";
    s[kCounts] =
        "SELECT COUNT(*) FILTER (WHERE claimed_by IS NULL), COUNT(claimed_by), "
        "COUNT(*) FILTER (WHERE claimed_by = ?2) FROM loom_queue_items WHERE queue = ?1";
    s[kPick] = "SELECT " + cols +
               " FROM loom_queue_items WHERE queue = ?1 AND claimed_by IS NULL "
               "AND visible_at_ms <= ?2 ORDER BY priority DESC, seq LIMIT ?3";
    s[kClaimOne] = "UPDATE loom_queue_items SET claimed_by = ?2, claimed_at_ms = ?3 WHERE seq = ?1";
    s[kSetWindow] =
        "UPDATE loom_queues SET window_start_ms = ?2, window_count = ?3 WHERE name = ?1";
    s[kComplete] = "DELETE FROM loom_queue_items WHERE execution_id = ?1";
    s[kRelease] =
        "UPDATE loom_queue_items SET claimed_by = NULL, claimed_at_ms = NULL "
        "WHERE execution_id = ?1";
    s[kClaimed] = "SELECT " + cols +
                  " FROM loom_queue_items WHERE claimed_by IS NOT NULL AND execution_id > ?1 "
                  "ORDER BY execution_id LIMIT ?2";
    s[kItems] = "SELECT " + cols +
                " FROM loom_queue_items WHERE queue = ?1 AND execution_id > ?2 "
                "ORDER BY execution_id LIMIT ?3";
    s[kPutSchedule] =
        "INSERT INTO loom_schedules(name, cron, workflow, queue, input) VALUES "
        "(?1, ?2, ?3, ?4, ?5) ON CONFLICT(name) DO UPDATE SET cron = excluded.cron, "
        "workflow = excluded.workflow, queue = excluded.queue, input = excluded.input";
    s[kSchedules] =
        "SELECT name, cron, workflow, queue, input, last_tick_ms FROM loom_schedules "
        "ORDER BY name LIMIT ?1";
    s[kAdvance] =
        "UPDATE loom_schedules SET last_tick_ms = ?3 WHERE name = ?1 AND last_tick_ms = ?2";
    return s;
  }();
  return sql;
}

template <class F>
auto Transaction(Connection& c, F&& body) -> decltype(body()) {
  return sqlite_internal::InTransaction(c, kBegin, kCommit, kRollback, std::forward<F>(body));
}

Result<QueueItem> ItemAt(Statement& s) {
  QueueItem i;
  i.queue = s.Text(0);
  i.workflow = s.Text(1);
  i.execution_id = s.Text(2);
  ONCE_ASSIGN_OR_RETURN(i.input, events::ParseJson(s.Text(3)));
  i.priority = s.Int(4);
  i.dedup_key = s.Text(5);
  i.seq = s.Int(6);
  i.enqueued_at_ms = s.Int(7);
  i.visible_at_ms = s.Int(8);
  i.claimed_by = s.Text(9);
  i.claimed_at_ms = s.Int(10);
  return i;
}

Result<std::vector<QueueItem>> ReadItems(Statement& s) {
  std::vector<QueueItem> out;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    ONCE_ASSIGN_OR_RETURN(QueueItem i, ItemAt(s));
    out.push_back(std::move(i));
  }
}

struct QueueRow {
  QueueConfig config;
  int64_t window_start_ms = 0;
  size_t window_count = 0;
};

QueueRow RowAt(Statement& s) {
  QueueRow r;
  r.config.name = s.Text(0);
  r.config.concurrency_max = static_cast<size_t>(s.Int(1));
  r.config.per_node_concurrency_max = static_cast<size_t>(s.Int(2));
  r.config.rate_max = static_cast<size_t>(s.Int(3));
  r.config.rate_period_ms = s.Int(4);
  r.window_start_ms = s.Int(5);
  r.window_count = static_cast<size_t>(s.Int(6));
  return r;
}

Status Exec1(Connection& c, QueueSql which, std::string_view text) {
  ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(which));
  ONCE_RETURN_IF_ERROR(s.Bind(1, text));
  return s.Run();
}

}  // namespace

struct SqliteQueueStore::Impl {
  SqliteQueueOptions options;
  SystemClock system_clock;
  const Clock* clock = nullptr;
  std::mutex mu;
  std::unique_ptr<Connection> conn;  // GUARDED_BY(mu)

  int64_t Now() const { return clock->NowUnixMillis(); }

  // Inside a transaction.
  Result<Enqueued> EnqueueOn(const EnqueueRequest& r, int64_t now_ms) {
    ONCE_ASSIGN_OR_RETURN(std::string input, queues::ValidateEnqueue(r, options.limits));
    Connection& c = *conn;
    {
      ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kItemSeq));
      ONCE_RETURN_IF_ERROR(s.Bind(1, r.execution_id));
      ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
      if (row) return Enqueued{.seq = s.Int(0), .existing = true};
    }
    if (!r.dedup_key.empty()) {
      ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kDedupHolder));
      ONCE_RETURN_IF_ERROR(s.Bind(1, r.queue));
      ONCE_RETURN_IF_ERROR(s.Bind(2, r.dedup_key));
      ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
      if (row) return queues::DedupTaken(r.queue, r.dedup_key, std::string(s.Text(0)));
    }
    ONCE_RETURN_IF_ERROR(Exec1(c, kEnsureQueue, r.queue));
    ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kInsertItem));
    ONCE_RETURN_IF_ERROR(s.Bind(1, r.execution_id));
    ONCE_RETURN_IF_ERROR(s.Bind(2, r.queue));
    ONCE_RETURN_IF_ERROR(s.Bind(3, r.workflow));
    ONCE_RETURN_IF_ERROR(s.Bind(4, input));
    ONCE_RETURN_IF_ERROR(s.Bind(5, r.priority));
    ONCE_RETURN_IF_ERROR(s.Bind(6, r.dedup_key));
    ONCE_RETURN_IF_ERROR(s.Bind(7, now_ms));
    ONCE_RETURN_IF_ERROR(s.Bind(8, now_ms + r.delay_ms));
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return MakeError(ErrorCode::kInternal, "sqlite: enqueue returned no seq");
    int64_t seq = s.Int(0);
    ONCE_RETURN_IF_ERROR(s.Run());
    return Enqueued{.seq = seq};
  }

  Result<QueueRow> QueueOn(std::string_view name) {
    ONCE_RETURN_IF_ERROR(Exec1(*conn, kEnsureQueue, name));
    ONCE_ASSIGN_OR_RETURN(Statement s, conn->Prepare(kQueueRow));
    ONCE_RETURN_IF_ERROR(s.Bind(1, name));
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return MakeError(ErrorCode::kInternal, "sqlite: queue row missing");
    return RowAt(s);
  }

  Result<QueueCounts> CountsOn(std::string_view queue, std::string_view node) {
    ONCE_ASSIGN_OR_RETURN(Statement s, conn->Prepare(kCounts));
    ONCE_RETURN_IF_ERROR(s.Bind(1, queue));
    ONCE_RETURN_IF_ERROR(s.Bind(2, node));
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return QueueCounts{};
    return QueueCounts{.pending = static_cast<size_t>(s.Int(0)),
                       .claimed = static_cast<size_t>(s.Int(1)),
                       .claimed_by_node = static_cast<size_t>(s.Int(2))};
  }

  // Every id through one statement, in one transaction.
  Status EachId(QueueSql which, std::span<const std::string> ids) {
    ONCE_RETURN_IF_ERROR(queues::ValidateBatch(ids.size(), options.limits));
    if (ids.empty()) return Ok();
    std::lock_guard lock(mu);
    return Transaction(*conn, [&]() -> Status {
      for (const std::string& id : ids) ONCE_RETURN_IF_ERROR(Exec1(*conn, which, id));
      return Ok();
    });
  }
};

SqliteQueueStore::SqliteQueueStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteQueueStore::~SqliteQueueStore() = default;

Result<std::unique_ptr<SqliteQueueStore>> SqliteQueueStore::Open(const std::string& path,
                                                                 SqliteQueueOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->clock = impl->options.clock ? impl->options.clock : &impl->system_clock;
  ONCE_ASSIGN_OR_RETURN(
      impl->conn,
      sqlite_internal::OpenFileInWal(
          "queue", path, sqlite_internal::ConnectionOptionsOf(impl->options), QueueSqlText()));
  Connection& c = *impl->conn;
  ONCE_RETURN_IF_ERROR(Transaction(c, [&] { return c.Exec(sqlite_internal::kCreateQueueTables); }));
  return std::unique_ptr<SqliteQueueStore>(new SqliteQueueStore(std::move(impl)));
}

const queues::QueueLimits& SqliteQueueStore::limits() const { return impl_->options.limits; }
Result<int64_t> SqliteQueueStore::NowMs() { return impl_->Now(); }

Status SqliteQueueStore::Configure(const QueueConfig& config) {
  ONCE_RETURN_IF_ERROR(queues::ValidateQueueConfig(config, limits()));
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kConfigure));
  ONCE_RETURN_IF_ERROR(s.Bind(1, config.name));
  ONCE_RETURN_IF_ERROR(s.Bind(2, static_cast<int64_t>(config.concurrency_max)));
  ONCE_RETURN_IF_ERROR(s.Bind(3, static_cast<int64_t>(config.per_node_concurrency_max)));
  ONCE_RETURN_IF_ERROR(s.Bind(4, static_cast<int64_t>(config.rate_max)));
  ONCE_RETURN_IF_ERROR(s.Bind(5, config.rate_period_ms));
  return s.Run();
}

Result<std::vector<QueueConfig>> SqliteQueueStore::Queues() {
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kQueues));
  std::vector<QueueConfig> out;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    out.push_back(RowAt(s).config);
  }
}

Result<Enqueued> SqliteQueueStore::Enqueue(const EnqueueRequest& request) {
  std::lock_guard lock(impl_->mu);
  int64_t now = impl_->Now();
  return Transaction(*impl_->conn, [&] { return impl_->EnqueueOn(request, now); });
}

Result<std::vector<Result<Enqueued>>> SqliteQueueStore::EnqueueMany(
    std::span<const EnqueueRequest> requests) {
  ONCE_RETURN_IF_ERROR(queues::ValidateBatch(requests.size(), limits()));
  std::lock_guard lock(impl_->mu);
  int64_t now = impl_->Now();
  using Out = std::vector<Result<Enqueued>>;
  return Transaction(*impl_->conn, [&]() -> Result<Out> {
    Out out;
    for (const EnqueueRequest& r : requests) {
      Result<Enqueued> one = impl_->EnqueueOn(r, now);
      // A request's own refusal fails it alone; a store failure fails all.
      if (!one && one.error().code != ErrorCode::kAlreadyExists &&
          one.error().code != ErrorCode::kInvalidArgument &&
          one.error().code != ErrorCode::kLimitExceeded) {
        return std::unexpected(one.error());
      }
      out.push_back(std::move(one));
    }
    return out;
  });
}

Result<std::vector<QueueItem>> SqliteQueueStore::Claim(const ClaimRequest& req) {
  ONCE_RETURN_IF_ERROR(queues::ValidateClaim(req, limits()));
  std::lock_guard lock(impl_->mu);
  int64_t now = impl_->Now();
  Connection& c = *impl_->conn;
  return Transaction(c, [&]() -> Result<std::vector<QueueItem>> {
    ONCE_ASSIGN_OR_RETURN(QueueRow q, impl_->QueueOn(req.queue));
    ONCE_ASSIGN_OR_RETURN(QueueCounts counts, impl_->CountsOn(req.queue, req.node));
    queues::RateRoom rate = queues::RateRoomAt(q.config, now, q.window_start_ms, q.window_count);
    size_t room = queues::ClaimRoom(q.config, std::min(req.limit, limits().claim_items_max),
                                    counts.claimed, counts.claimed_by_node, rate);
    std::vector<QueueItem> items;
    if (room > 0) {
      ONCE_ASSIGN_OR_RETURN(Statement pick, c.Prepare(kPick));
      ONCE_RETURN_IF_ERROR(pick.Bind(1, req.queue));
      ONCE_RETURN_IF_ERROR(pick.Bind(2, now));
      ONCE_RETURN_IF_ERROR(pick.Bind(3, static_cast<int64_t>(room)));
      ONCE_ASSIGN_OR_RETURN(items, ReadItems(pick));
    }
    for (QueueItem& item : items) {
      ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kClaimOne));
      ONCE_RETURN_IF_ERROR(s.Bind(1, item.seq));
      ONCE_RETURN_IF_ERROR(s.Bind(2, req.node));
      ONCE_RETURN_IF_ERROR(s.Bind(3, now));
      ONCE_RETURN_IF_ERROR(s.Run());
      item.claimed_by = req.node;
      item.claimed_at_ms = now;
    }
    if (q.config.rate_max > 0 && !items.empty()) {
      size_t used = q.window_start_ms == rate.window_start_ms ? q.window_count : 0;
      ONCE_ASSIGN_OR_RETURN(Statement s, c.Prepare(kSetWindow));
      ONCE_RETURN_IF_ERROR(s.Bind(1, req.queue));
      ONCE_RETURN_IF_ERROR(s.Bind(2, rate.window_start_ms));
      ONCE_RETURN_IF_ERROR(s.Bind(3, static_cast<int64_t>(used + items.size())));
      ONCE_RETURN_IF_ERROR(s.Run());
    }
    return items;
  });
}

Status SqliteQueueStore::Complete(std::span<const std::string> ids) {
  return impl_->EachId(kComplete, ids);
}

Status SqliteQueueStore::Release(std::span<const std::string> ids) {
  return impl_->EachId(kRelease, ids);
}

Result<std::vector<QueueItem>> SqliteQueueStore::Claimed(std::string_view after, size_t limit) {
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kClaimed));
  ONCE_RETURN_IF_ERROR(s.Bind(1, after));
  ONCE_RETURN_IF_ERROR(s.Bind(2, static_cast<int64_t>(std::min(limit, limits().items_page_max))));
  return ReadItems(s);
}

Result<std::vector<QueueItem>> SqliteQueueStore::Items(std::string_view queue,
                                                       std::string_view after, size_t limit) {
  ONCE_RETURN_IF_ERROR(queues::ValidateQueueName(queue, limits()));
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kItems));
  ONCE_RETURN_IF_ERROR(s.Bind(1, queue));
  ONCE_RETURN_IF_ERROR(s.Bind(2, after));
  ONCE_RETURN_IF_ERROR(s.Bind(3, static_cast<int64_t>(std::min(limit, limits().items_page_max))));
  return ReadItems(s);
}

Result<QueueCounts> SqliteQueueStore::Counts(std::string_view queue, std::string_view node) {
  std::lock_guard lock(impl_->mu);
  return impl_->CountsOn(queue, node);
}

Status SqliteQueueStore::PutSchedule(const ScheduleRow& row) {
  ONCE_RETURN_IF_ERROR(queues::ValidateSchedule(row, limits()));
  std::string input;
  (void)events::AppendJsonText(row.input, input);  // validated
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kPutSchedule));
  ONCE_RETURN_IF_ERROR(s.Bind(1, row.name));
  ONCE_RETURN_IF_ERROR(s.Bind(2, row.cron));
  ONCE_RETURN_IF_ERROR(s.Bind(3, row.workflow));
  ONCE_RETURN_IF_ERROR(s.Bind(4, row.queue));
  ONCE_RETURN_IF_ERROR(s.Bind(5, input));
  return s.Run();
}

Result<std::vector<ScheduleRow>> SqliteQueueStore::Schedules() {
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kSchedules));
  ONCE_RETURN_IF_ERROR(s.Bind(1, static_cast<int64_t>(limits().schedules_max)));
  std::vector<ScheduleRow> out;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    ScheduleRow r{.name = std::string(s.Text(0)),
                  .cron = std::string(s.Text(1)),
                  .workflow = std::string(s.Text(2)),
                  .queue = std::string(s.Text(3))};
    ONCE_ASSIGN_OR_RETURN(r.input, events::ParseJson(s.Text(4)));
    r.last_tick_ms = s.Int(5);
    out.push_back(std::move(r));
  }
}

Result<bool> SqliteQueueStore::AdvanceSchedule(std::string_view name, int64_t from_ms,
                                               int64_t to_ms) {
  if (to_ms <= from_ms) return MakeError(ErrorCode::kInvalidArgument, "to_ms must be > from_ms");
  std::lock_guard lock(impl_->mu);
  ONCE_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(kAdvance));
  ONCE_RETURN_IF_ERROR(s.Bind(1, name));
  ONCE_RETURN_IF_ERROR(s.Bind(2, from_ms));
  ONCE_RETURN_IF_ERROR(s.Bind(3, to_ms));
  ONCE_RETURN_IF_ERROR(s.Run());
  return sqlite3_changes(impl_->conn->db()) > 0;
}

}  // namespace once::store
