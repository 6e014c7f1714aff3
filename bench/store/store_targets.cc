// Targets over an EventStore: the backends under test.

#include <libpq-fe.h>

#include <filesystem>
#include <vector>

#include "bench.h"
#include "once/events/envelope.h"
#include "once/store/event_store.h"
#include "once/store/memory_store.h"
#ifdef ONCE_BENCH_HAVE_SQLITE_STORE
#include "once/store_sqlite/sqlite_event_store.h"
#endif
#ifdef ONCE_BENCH_HAVE_POSTGRES_STORE
#include "once/store_postgres/postgres_event_store.h"
#endif

namespace once::bench {
namespace {

using store::AppendRequest;
using store::EventStore;

// One client: its executions (1, or w.executions when grouped), each with
// the fence token acquired at setup and the next sequence it appends.
class StoreWriter final : public Writer {
 public:
  // rotate_events > 0: restart an execution (DeleteExecution) once its log
  // holds that many events, so that a memory store stays small.
  StoreWriter(EventStore& store, std::vector<AppendRequest> requests, int64_t rotate_events)
      : store_(store), requests_(std::move(requests)), rotate_events_(rotate_events) {}

  Result<int64_t> Commit() override {
    if (rotate_events_ > 0 && requests_.front().expected_next > rotate_events_) {
      for (auto& r : requests_) {
        ONCE_RETURN_IF_ERROR(store_.DeleteExecution(r.execution_id));
        r.expected_next = 1;
      }
    }
    if (requests_.size() == 1) {
      AppendRequest& r = requests_.front();
      ONCE_ASSIGN_OR_RETURN(int64_t head, store_.Append(r));
      ONCE_CHECK(head == r.expected_next);
      ++r.expected_next;
      return 1;
    }
    ONCE_ASSIGN_OR_RETURN(auto heads, store_.AppendBatch(requests_));
    ONCE_CHECK(heads.size() == requests_.size());
    for (size_t i = 0; i < heads.size(); ++i) {
      if (!heads[i]) return std::unexpected(heads[i].error());
      ONCE_CHECK(*heads[i] == requests_[i].expected_next);
      ++requests_[i].expected_next;
    }
    return static_cast<int64_t>(requests_.size());
  }

 private:
  EventStore& store_;
  std::vector<AppendRequest> requests_;
  int64_t rotate_events_;
};

class StoreTarget : public Target {
 public:
  StoreTarget(std::unique_ptr<EventStore> store, int64_t rotate_events)
      : store_(std::move(store)), rotate_events_(rotate_events) {}

  Result<std::unique_ptr<Writer>> NewWriter(const Workload& w, std::string_view tag,
                                            int client) override {
    Row row = MakeRow(w);
    ONCE_ASSIGN_OR_RETURN(events::Json payload, events::ParseJson(row.payload_json));
    std::vector<AppendRequest> requests;
    int n = w.mode == Mode::kGrouped ? w.executions : 1;
    for (int e = 0; e < n; ++e) {
      AppendRequest r;
      r.execution_id = ExecutionId(tag, client, e);
      int64_t token = 0;
      if (w.fenced) {
        ONCE_ASSIGN_OR_RETURN(token, store_->AcquireFence(r.execution_id));
      }
      r.fence = token;
      r.events.push_back(events::KernelEvent(events::KernelKind::kStepCompleted, payload, token));
      ONCE_CHECK_MSG(r.events.back().metadata.ToJson().dump() == row.metadata_json,
                     "the store's rows and the raw rows must be the same size");
      requests.push_back(std::move(r));
    }
    return std::make_unique<StoreWriter>(*store_, std::move(requests), rotate_events_);
  }

  Status Verify(const Workload& w, std::string_view tag, int client,
                int64_t transactions) override {
    if (rotate_events_ > 0) return Ok();
    std::string id = ExecutionId(tag, client, 0);
    ONCE_ASSIGN_OR_RETURN(int64_t head, store_->Head(id));
    if (head != transactions) {
      return MakeError(ErrorCode::kInternal,
                       "head " + std::to_string(head) + " after " + std::to_string(transactions) +
                           " committed appends",
                       id);
    }
    return Ok();
  }

 protected:
  std::unique_ptr<EventStore> store_;
  int64_t rotate_events_;
};

}  // namespace

Result<std::unique_ptr<Target>> NewMemoryStoreTarget() {
  return std::make_unique<StoreTarget>(std::make_unique<store::MemoryEventStore>(), 4096);
}

Result<std::unique_ptr<Target>> NewSqliteStoreTarget(const std::string& dir) {
#ifdef ONCE_BENCH_HAVE_SQLITE_STORE
  std::filesystem::create_directories(dir);
  std::string path = dir + "/store.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  store::SqliteOptions options;
  options.durability = store::Durability::kFull;
  ONCE_ASSIGN_OR_RETURN(auto s, store::SqliteEventStore::Open(path, options));
  ONCE_ASSIGN_OR_RETURN(store::SqliteSettings settings, s->Settings());
  if (settings.journal_mode != "wal" || settings.synchronous != 2) {
    return MakeError(ErrorCode::kInternal, "store is not journal_mode=WAL, synchronous=FULL");
  }
  return std::make_unique<StoreTarget>(std::move(s), 0);
#else
  return MakeError(ErrorCode::kUnsupported, "built without once::store_sqlite");
#endif
}

#ifdef ONCE_BENCH_HAVE_POSTGRES_STORE
namespace {
// Owns the schema: the store (and its pool) goes first, then the schema.
class PostgresStoreTarget final : public StoreTarget {
 public:
  PostgresStoreTarget(std::unique_ptr<EventStore> store, std::string url, std::string schema,
                      PostgresServerCpu server_cpu)
      : StoreTarget(std::move(store), 0),
        url_(std::move(url)),
        schema_(std::move(schema)),
        server_cpu_(server_cpu) {}
  ~PostgresStoreTarget() override {
    store_.reset();
    PGconn* conn = PQconnectdb(url_.c_str());
    PQsetNoticeProcessor(
        conn, [](void*, const char*) {}, nullptr);
    if (PQstatus(conn) == CONNECTION_OK) {
      PQclear(PQexec(conn, ("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE").c_str()));
    }
    PQfinish(conn);
  }

  std::optional<double> ServerCpuSeconds() override { return server_cpu_.Seconds(); }

 private:
  std::string url_;
  std::string schema_;
  PostgresServerCpu server_cpu_;
};
}  // namespace
#endif

Result<std::unique_ptr<Target>> NewPostgresStoreTarget(const std::string& url,
                                                       const std::string& schema, int clients) {
#ifdef ONCE_BENCH_HAVE_POSTGRES_STORE
  store::PostgresOptions options;
  options.conninfo = url;
  options.schema = schema;
  options.connections_max = std::max<size_t>(options.connections_max, clients + 2);
  static SystemClock clock;
  ONCE_ASSIGN_OR_RETURN(PostgresServerCpu server_cpu, PostgresServerCpu::Find(url));
  ONCE_ASSIGN_OR_RETURN(auto s, store::PostgresEventStore::Open(options, clock));
  return std::make_unique<PostgresStoreTarget>(std::move(s), url, schema, server_cpu);
#else
  return MakeError(ErrorCode::kUnsupported, "built without once::store_postgres");
#endif
}

}  // namespace once::bench
