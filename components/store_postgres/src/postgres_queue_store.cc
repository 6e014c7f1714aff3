#include "once/store_postgres/postgres_queue_store.h"

#include <algorithm>
#include <cstdlib>

#include "once/events/envelope.h"
#include "pg_conn.h"
#include "sql.h"

namespace once::store {

using pg::Conn;
using pg::IntAt;
using pg::Params;
using pg::PgResult;
using queues::ClaimRequest;
using queues::Enqueued;
using queues::EnqueueRequest;
using queues::QueueConfig;
using queues::QueueCounts;
using queues::QueueItem;
using queues::ScheduleRow;

namespace {

constexpr char kCols[] =
    "i.queue, i.workflow, i.execution_id, i.input, i.priority, COALESCE(i.dedup_key, ''), i.seq, "
    "i.enqueued_at_ms, i.visible_at_ms, COALESCE(i.claimed_by, ''), COALESCE(i.claimed_at_ms, 0)";
// Enqueues a request of the same execution id or dedup key may race:
// ON CONFLICT DO NOTHING lets one win, and the loser looks again.
constexpr int kEnqueueAttemptsMax = 3;

struct Statement {
  const char* name;
  std::string sql;
};

std::vector<Statement> Statements() {
  const std::string cols = kCols;
  const std::string now = "(SELECT " + std::string(sql::kDbNowMs) + ")";
  const std::string window = "(t.ms - t.ms % q.rate_period_ms)";
  const std::string used =
      "(CASE WHEN q.window_start_ms = " + window + " THEN q.window_count ELSE 0 END)";
  return {
      {"q_ensure",
       "INSERT INTO loom_queues (name) VALUES ($1::text) ON CONFLICT (name) DO NOTHING"},
      {"q_lock", "SELECT 1 FROM loom_queues WHERE name = $1::text FOR UPDATE"},
      {"q_configure",
       "INSERT INTO loom_queues (name, concurrency_max, per_node_concurrency_max, rate_max, "
       "rate_period_ms) VALUES ($1::text, $2::int8, $3::int8, $4::int8, $5::int8) ON CONFLICT "
       "(name) DO UPDATE SET concurrency_max = EXCLUDED.concurrency_max, per_node_concurrency_max "
       "= EXCLUDED.per_node_concurrency_max, rate_max = EXCLUDED.rate_max, rate_period_ms = "
       "EXCLUDED.rate_period_ms"},
      {"q_list",
       "SELECT name, concurrency_max, per_node_concurrency_max, rate_max, rate_period_ms FROM "
       "loom_queues ORDER BY name"},
      // $1 queue $2 workflow $3 id $4 input $5 priority $6 dedup ('' none) $7 delay_ms.
      {"q_enqueue",
       "WITH t AS (SELECT " + std::string(sql::kDbNowMs) +
           " AS ms), existing AS (SELECT seq FROM loom_queue_items WHERE execution_id = "
           "$3::text), holder AS (SELECT execution_id FROM loom_queue_items WHERE queue = "
           "$1::text AND dedup_key = NULLIF($6::text, '')), ensure AS (INSERT INTO loom_queues "
           "(name) SELECT $1::text WHERE NOT EXISTS (SELECT 1 FROM loom_queues WHERE name = "
           "$1::text) ON CONFLICT (name) DO NOTHING), ins AS (INSERT INTO loom_queue_items "
           "(execution_id, queue, workflow, input, priority, dedup_key, enqueued_at_ms, "
           "visible_at_ms) SELECT $3::text, $1::text, $2::text, $4::text, $5::int8, "
           "NULLIF($6::text, ''), t.ms, t.ms + $7::int8 FROM t WHERE NOT EXISTS (SELECT 1 FROM "
           "existing) AND NOT EXISTS (SELECT 1 FROM holder) ON CONFLICT DO NOTHING RETURNING "
           "seq) SELECT (SELECT seq FROM existing), (SELECT execution_id FROM holder), (SELECT "
           "seq FROM ins)"},
      // Requests without a dedup key, at once: the ids it returns landed.
      {"q_enqueue_many",
       "WITH t AS (SELECT " + std::string(sql::kDbNowMs) +
           " AS ms), ensure AS (INSERT INTO loom_queues (name) SELECT DISTINCT q FROM "
           "unnest($1::text[]) AS q ON CONFLICT (name) DO NOTHING) INSERT INTO loom_queue_items "
           "(execution_id, queue, workflow, input, priority, enqueued_at_ms, visible_at_ms) "
           "SELECT r.id, r.queue, r.workflow, r.input, r.priority, t.ms, t.ms + r.delay FROM t, "
           "unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[]) AS "
           "r(queue, workflow, id, input, priority, delay) ON CONFLICT DO NOTHING RETURNING "
           "execution_id, seq"},
      // After q_lock: a fresh snapshot that sees every claim committed before.
      {"q_claim",
       "WITH q AS (SELECT * FROM loom_queues WHERE name = $1::text), t AS (SELECT " +
           std::string(sql::kDbNowMs) +
           " AS ms), c AS (SELECT count(*) AS n, count(*) FILTER (WHERE claimed_by = $2::text) "
           "AS mine FROM loom_queue_items WHERE queue = $1::text AND claimed_by IS NOT NULL), "
           "room AS (SELECT LEAST($3::int8, CASE WHEN q.concurrency_max > 0 THEN "
           "GREATEST(q.concurrency_max - c.n, 0) ELSE $3::int8 END, CASE WHEN "
           "q.per_node_concurrency_max > 0 THEN GREATEST(q.per_node_concurrency_max - c.mine, 0) "
           "ELSE $3::int8 END, CASE WHEN q.rate_max > 0 THEN GREATEST(q.rate_max - " +
           used + ", 0) ELSE $3::int8 END) AS n, " + window + " AS window_start, " + used +
           " AS used FROM q, c, t), pick AS MATERIALIZED (SELECT i.seq FROM loom_queue_items i "
           "WHERE i.queue = $1::text AND i.claimed_by IS NULL AND i.visible_at_ms <= (SELECT ms "
           "FROM t) ORDER BY i.priority DESC, i.seq LIMIT (SELECT n FROM room) FOR UPDATE SKIP "
           "LOCKED), claimed AS (UPDATE loom_queue_items i SET claimed_by = $2::text, "
           "claimed_at_ms = (SELECT ms FROM t) FROM pick WHERE i.seq = pick.seq RETURNING i.*), "
           "win AS (UPDATE loom_queues SET window_start_ms = (SELECT window_start FROM room), "
           "window_count = (SELECT used FROM room) + (SELECT count(*) FROM claimed) WHERE name = "
           "$1::text AND rate_max > 0) SELECT " +
           cols + " FROM claimed i ORDER BY i.priority DESC, i.seq"},
      {"q_complete", "DELETE FROM loom_queue_items WHERE execution_id = ANY ($1::text[])"},
      {"q_release",
       "UPDATE loom_queue_items SET claimed_by = NULL, claimed_at_ms = NULL "
       "WHERE execution_id = ANY ($1::text[])"},
      {"q_claimed", "SELECT " + cols +
                        " FROM loom_queue_items i WHERE i.claimed_by IS NOT NULL AND "
                        "i.execution_id > $1::text ORDER BY i.execution_id LIMIT $2::int8"},
      {"q_items", "SELECT " + cols +
                      " FROM loom_queue_items i WHERE i.queue = $1::text AND i.execution_id > "
                      "$2::text ORDER BY i.execution_id LIMIT $3::int8"},
      {"q_counts",
       "SELECT count(*) FILTER (WHERE claimed_by IS NULL), count(claimed_by), count(*) FILTER "
       "(WHERE claimed_by = $2::text) FROM loom_queue_items WHERE queue = $1::text"},
      {"q_put_schedule",
       "INSERT INTO loom_schedules (name, cron, workflow, queue, input) VALUES ($1::text, "
       "$2::text, $3::text, $4::text, $5::text) ON CONFLICT (name) DO UPDATE SET cron = "
       "EXCLUDED.cron, workflow = EXCLUDED.workflow, queue = EXCLUDED.queue, input = "
       "EXCLUDED.input"},
      {"q_schedules",
       "SELECT name, cron, workflow, queue, input, last_tick_ms FROM loom_schedules ORDER BY "
       "name LIMIT $1::int8"},
      {"q_advance",
       "UPDATE loom_schedules SET last_tick_ms = $3::int8 WHERE name = $1::text AND "
       "last_tick_ms = $2::int8"},
      {"q_now", "SELECT " + std::string(sql::kDbNowMs)},
  };
}

Status PrepareAll(Conn& conn) {
  ONCE_RETURN_IF_ERROR(conn.Exec("SET default_transaction_isolation = 'read committed'"));
  for (const auto& s : Statements()) ONCE_RETURN_IF_ERROR(conn.Prepare(s.name, s.sql));
  return Ok();
}

Status Migrate(const PostgresQueueOptions& options) {
  return pg::MigrateUnderLock(
      options.conninfo, options.schema, kMigrationLockKey, options.migration_lock_timeout_ms,
      [&](Conn& conn) -> Status {
        ONCE_RETURN_IF_ERROR(
            conn.Exec("CREATE SCHEMA IF NOT EXISTS " + pg::QuoteIdentifier(options.schema)));
        ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kCreateQueueTables)));
        return Ok();
      });
}

Result<std::vector<QueueItem>> ItemsOf(const PGresult* r, int first_row = 0) {
  std::vector<QueueItem> out;
  out.reserve(PQntuples(r));
  for (int i = first_row; i < PQntuples(r); ++i) {
    QueueItem item;
    item.queue = PQgetvalue(r, i, 0);
    item.workflow = PQgetvalue(r, i, 1);
    item.execution_id = PQgetvalue(r, i, 2);
    ONCE_ASSIGN_OR_RETURN(item.input, events::ParseJson(PQgetvalue(r, i, 3)));
    item.priority = IntAt(r, i, 4);
    item.dedup_key = PQgetvalue(r, i, 5);
    item.seq = IntAt(r, i, 6);
    item.enqueued_at_ms = IntAt(r, i, 7);
    item.visible_at_ms = IntAt(r, i, 8);
    item.claimed_by = PQgetvalue(r, i, 9);
    item.claimed_at_ms = IntAt(r, i, 10);
    out.push_back(std::move(item));
  }
  return out;
}

std::string Ids(std::span<const std::string> ids) {
  std::vector<std::string_view> views(ids.begin(), ids.end());
  return pg::TextArrayBinary(views);
}

}  // namespace

PostgresQueueStore::PostgresQueueStore(PostgresQueueOptions options,
                                       std::unique_ptr<pg::ConnectionPool> pool)
    : options_(std::move(options)), pool_(std::move(pool)) {}

PostgresQueueStore::~PostgresQueueStore() = default;

Result<std::unique_ptr<PostgresQueueStore>> PostgresQueueStore::Open(
    const PostgresQueueOptions& options) {
  ONCE_ASSIGN_OR_RETURN(auto pool,
                        pg::OpenSidePool(options, "PostgresQueueOptions", Migrate, PrepareAll));
  return std::unique_ptr<PostgresQueueStore>(new PostgresQueueStore(options, std::move(pool)));
}

Status PostgresQueueStore::Configure(const QueueConfig& config) {
  ONCE_RETURN_IF_ERROR(queues::ValidateQueueConfig(config, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Text(config.name).Int(static_cast<int64_t>(config.concurrency_max));
  p.Int(static_cast<int64_t>(config.per_node_concurrency_max));
  p.Int(static_cast<int64_t>(config.rate_max)).Int(config.rate_period_ms);
  ONCE_RETURN_IF_ERROR(conn->Prepared("q_configure", p));
  return Ok();
}

Result<std::vector<QueueConfig>> PostgresQueueStore::Queues() {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("q_list", Params()));
  std::vector<QueueConfig> out;
  for (int i = 0; i < PQntuples(res.get()); ++i) {
    out.push_back(
        QueueConfig{.name = PQgetvalue(res.get(), i, 0),
                    .concurrency_max = static_cast<size_t>(IntAt(res.get(), i, 1)),
                    .per_node_concurrency_max = static_cast<size_t>(IntAt(res.get(), i, 2)),
                    .rate_max = static_cast<size_t>(IntAt(res.get(), i, 3)),
                    .rate_period_ms = IntAt(res.get(), i, 4)});
  }
  return out;
}

Result<Enqueued> PostgresQueueStore::Enqueue(const EnqueueRequest& r) {
  ONCE_ASSIGN_OR_RETURN(std::string input, queues::ValidateEnqueue(r, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Text(r.queue).Text(r.workflow).Text(r.execution_id).Text(std::move(input));
  p.Int(r.priority).Text(r.dedup_key).Int(r.delay_ms);
  for (int attempt = 0; attempt < kEnqueueAttemptsMax; ++attempt) {
    ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("q_enqueue", p));
    const PGresult* x = res.get();
    if (!PQgetisnull(x, 0, 0)) return Enqueued{.seq = IntAt(x, 0, 0), .existing = true};
    if (!PQgetisnull(x, 0, 1)) return queues::DedupTaken(r.queue, r.dedup_key, PQgetvalue(x, 0, 1));
    if (!PQgetisnull(x, 0, 2)) return Enqueued{.seq = IntAt(x, 0, 2)};
    // A concurrent enqueue of the id or the key won: look again.
  }
  return MakeError(ErrorCode::kBusy, "enqueue kept racing another enqueue", r.execution_id);
}

Result<std::vector<Result<Enqueued>>> PostgresQueueStore::EnqueueMany(
    std::span<const EnqueueRequest> requests) {
  ONCE_RETURN_IF_ERROR(queues::ValidateBatch(requests.size(), limits()));
  std::vector<Result<Enqueued>> out(requests.size(), Enqueued{});
  std::vector<size_t> fast;  // no dedup key: one statement for all of them
  std::vector<std::string> inputs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Result<std::string> input = queues::ValidateEnqueue(requests[i], limits());
    if (!input) {
      out[i] = std::unexpected(input.error());
      continue;
    }
    inputs[i] = std::move(*input);
    if (requests[i].dedup_key.empty()) fast.push_back(i);
  }
  std::vector<bool> landed(requests.size(), false);
  if (!fast.empty()) {
    std::vector<std::string_view> queue, workflow, id, input;
    std::vector<std::optional<int64_t>> priority, delay;
    for (size_t i : fast) {
      queue.push_back(requests[i].queue);
      workflow.push_back(requests[i].workflow);
      id.push_back(requests[i].execution_id);
      input.push_back(inputs[i]);
      priority.push_back(requests[i].priority);
      delay.push_back(requests[i].delay_ms);
    }
    Params p;
    p.Binary(pg::TextArrayBinary(queue)).Binary(pg::TextArrayBinary(workflow));
    p.Binary(pg::TextArrayBinary(id)).Binary(pg::TextArrayBinary(input));
    p.Binary(pg::IntArrayBinary(priority)).Binary(pg::IntArrayBinary(delay));
    ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
    ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("q_enqueue_many", p));
    std::map<std::string, int64_t> seqs;
    for (int row = 0; row < PQntuples(res.get()); ++row) {
      seqs.emplace(PQgetvalue(res.get(), row, 0), IntAt(res.get(), row, 1));
    }
    for (size_t i : fast) {
      if (auto it = seqs.find(requests[i].execution_id); it != seqs.end()) {
        out[i] = Enqueued{.seq = it->second};
        landed[i] = true;
      }
    }
  }
  // The rest (a dedup key, or an id already queued): one by one.
  for (size_t i = 0; i < requests.size(); ++i) {
    if (landed[i] || !out[i]) continue;
    out[i] = Enqueue(requests[i]);
  }
  return out;
}

Result<std::vector<QueueItem>> PostgresQueueStore::Claim(const ClaimRequest& req) {
  ONCE_RETURN_IF_ERROR(queues::ValidateClaim(req, limits()));
  const int64_t limit = static_cast<int64_t>(std::min(req.limit, limits().claim_items_max));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  std::vector<pg::PipelineStep> steps;
  steps.push_back({"q_ensure", "", Params().Text(req.queue)});
  steps.push_back({"q_lock", "", Params().Text(req.queue)});
  steps.push_back({"q_claim", "", Params().Text(req.queue).Text(req.node).Int(limit)});
  ONCE_ASSIGN_OR_RETURN(std::vector<PgResult> results, conn->Pipeline(steps));
  if (results.size() != 3) return MakeError(ErrorCode::kInternal, "claim: unexpected results");
  return ItemsOf(results[2].get());
}

Status PostgresQueueStore::Complete(std::span<const std::string> ids) {
  ONCE_RETURN_IF_ERROR(queues::ValidateBatch(ids.size(), limits()));
  if (ids.empty()) return Ok();
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_RETURN_IF_ERROR(conn->Prepared("q_complete", Params().Binary(Ids(ids))));
  return Ok();
}

Status PostgresQueueStore::Release(std::span<const std::string> ids) {
  ONCE_RETURN_IF_ERROR(queues::ValidateBatch(ids.size(), limits()));
  if (ids.empty()) return Ok();
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_RETURN_IF_ERROR(conn->Prepared("q_release", Params().Binary(Ids(ids))));
  return Ok();
}

Result<std::vector<QueueItem>> PostgresQueueStore::Claimed(std::string_view after, size_t limit) {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("q_claimed",
                     Params()
                         .Text(std::string(after))
                         .Int(static_cast<int64_t>(std::min(limit, limits().items_page_max)))));
  return ItemsOf(res.get());
}

Result<std::vector<QueueItem>> PostgresQueueStore::Items(std::string_view queue,
                                                         std::string_view after, size_t limit) {
  ONCE_RETURN_IF_ERROR(queues::ValidateQueueName(queue, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Text(std::string(queue)).Text(std::string(after));
  p.Int(static_cast<int64_t>(std::min(limit, limits().items_page_max)));
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("q_items", p));
  return ItemsOf(res.get());
}

Result<QueueCounts> PostgresQueueStore::Counts(std::string_view queue, std::string_view node) {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("q_counts", Params().Text(std::string(queue)).Text(std::string(node))));
  return QueueCounts{.pending = static_cast<size_t>(IntAt(res.get(), 0, 0)),
                     .claimed = static_cast<size_t>(IntAt(res.get(), 0, 1)),
                     .claimed_by_node = static_cast<size_t>(IntAt(res.get(), 0, 2))};
}

Status PostgresQueueStore::PutSchedule(const ScheduleRow& row) {
  ONCE_RETURN_IF_ERROR(queues::ValidateSchedule(row, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p;
  p.Text(row.name).Text(row.cron).Text(row.workflow).Text(row.queue).Text(row.input.dump());
  ONCE_RETURN_IF_ERROR(conn->Prepared("q_put_schedule", p));
  return Ok();
}

Result<std::vector<ScheduleRow>> PostgresQueueStore::Schedules() {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("q_schedules", Params().Int(static_cast<int64_t>(limits().schedules_max))));
  std::vector<ScheduleRow> out;
  for (int i = 0; i < PQntuples(res.get()); ++i) {
    ScheduleRow r{.name = PQgetvalue(res.get(), i, 0),
                  .cron = PQgetvalue(res.get(), i, 1),
                  .workflow = PQgetvalue(res.get(), i, 2),
                  .queue = PQgetvalue(res.get(), i, 3)};
    ONCE_ASSIGN_OR_RETURN(r.input, events::ParseJson(PQgetvalue(res.get(), i, 4)));
    r.last_tick_ms = IntAt(res.get(), i, 5);
    out.push_back(std::move(r));
  }
  return out;
}

Result<bool> PostgresQueueStore::AdvanceSchedule(std::string_view name, int64_t from_ms,
                                                 int64_t to_ms) {
  if (to_ms <= from_ms) return MakeError(ErrorCode::kInvalidArgument, "to_ms must be > from_ms");
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("q_advance", Params().Text(std::string(name)).Int(from_ms).Int(to_ms)));
  return std::strtoll(PQcmdTuples(res.get()), nullptr, 10) > 0;
}

Result<int64_t> PostgresQueueStore::NowMs() {
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("q_now", Params()));
  return IntAt(res.get(), 0, 0);
}

}  // namespace once::store
