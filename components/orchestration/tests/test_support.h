// Test support: a hookable store decorator, backends, workflows.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>

#include "once/inbox/memory_inbox_store.h"
#include "once/orchestration/app.h"
#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "once/store/wrapper.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/store_sqlite/sqlite_inbox_store.h"
#if ONCE_TEST_POSTGRES_BACKEND
#include "once/store_postgres/postgres_inbox_store.h"
#include "test_database.h"  // components/store_postgres/tests
#endif

namespace once::orchestration::testing {

using events::Json;
using store::Decide;
using store::EventStore;

struct HookDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFenceIf = Decide::kCustom;
  // Refused so that every acquire passes the hooks (the runtime then reads
  // the tail on its own).
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kRefuse;
};

// Hooks around AcquireFenceIf, and a one-shot crash of the first append that
// follows a successful conditional acquire: kBeforeAppend fails it without
// writing (a crash between the acquire and the append), kAfterAppend writes
// it and then fails (a crash right after the append).
class HookStore final : public store::EventStoreWrapper<HookStore, HookDecisions> {
 public:
  enum class Crash { kNone, kBeforeAppend, kAfterAppend };
  explicit HookStore(EventStore& target) : EventStoreWrapper(target) {}

  std::function<void(int call)> before_acquire_if;
  std::function<void(int call, const store::ConditionalAcquire&)> after_acquire_if;
  std::atomic<int> acquire_if_calls{0};
  Crash crash_next = Crash::kNone;
  std::atomic<int> crashes{0};

  Result<int64_t> Append(const store::AppendRequest& req) override {
    Crash c = TakeCrash();
    if (c == Crash::kBeforeAppend) return Crashed();
    Result<int64_t> r = target().Append(req);
    if (c == Crash::kAfterAppend && r) return Crashed();
    return r;
  }
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const store::AppendRequest> requests) override {
    Crash c = TakeCrash();
    if (c == Crash::kBeforeAppend) return Crashed();
    auto r = target().AppendBatch(requests);
    if (c == Crash::kAfterAppend && r) return Crashed();
    return r;
  }
  Result<store::ConditionalAcquire> CustomAcquireFenceIf(std::string_view id,
                                                         store::FenceExpectation expect) {
    int call = ++acquire_if_calls;
    if (before_acquire_if) before_acquire_if(call);
    Result<store::ConditionalAcquire> r = target().AcquireFenceIf(id, expect);
    if (r && !r->stale) armed_ = true;
    if (r && after_acquire_if) after_acquire_if(call, *r);
    return r;
  }

 private:
  Crash TakeCrash() {
    if (!armed_ || crash_next == Crash::kNone) return Crash::kNone;
    Crash c = crash_next;
    crash_next = Crash::kNone;
    armed_ = false;
    ++crashes;
    return c;
  }
  static std::unexpected<Error> Crashed() {
    return MakeError(ErrorCode::kUnavailable, "injected crash");
  }
  bool armed_ = false;
};

struct NoFenceIfDecisions : store::ForwardEverything {
  static constexpr Decide kAcquireFenceIf = Decide::kRefuse;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kRefuse;
};
class NoFenceIfStore final : public store::EventStoreWrapper<NoFenceIfStore, NoFenceIfDecisions> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
};

// Reads of chosen executions fail with kUnavailable.
class FailingReadStore final
    : public store::EventStoreWrapper<FailingReadStore, store::ForwardEverything> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
  std::string fail_id;
  Result<std::vector<store::Envelope>> ReadRange(std::string_view id, int64_t first,
                                                 int64_t last) override {
    if (id == fail_id) return MakeError(ErrorCode::kUnavailable, "disk gone", std::string(id));
    return target().ReadRange(id, first, last);
  }
};

// kPostgres exists in the binaries built with ONCE_TEST_POSTGRES_BACKEND
// (label postgres); it needs ONCE_TEST_POSTGRES_URL.
enum class Backend { kMemory, kSqlite, kPostgres };

inline std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  switch (info.param) {
    case Backend::kMemory:
      return "Memory";
    case Backend::kSqlite:
      return "Sqlite";
    case Backend::kPostgres:
      return "Postgres";
  }
  return "Unknown";
}

// The backends a binary's inbox (and waker) cases run on: memory and SQLite
// in the unit binary, PostgreSQL in the postgres one.
inline std::vector<Backend> InboxBackends() {
#if ONCE_TEST_POSTGRES_BACKEND
  return {Backend::kPostgres};
#else
  return {Backend::kMemory, Backend::kSqlite};
#endif
}
inline std::vector<Backend> DurableInboxBackends() {
#if ONCE_TEST_POSTGRES_BACKEND
  return {Backend::kPostgres};
#else
  return {Backend::kSqlite};
#endif
}

// Counts range reads and the events they return; forwards everything else
// (the combined acquire included).
class ReadCountingStore final
    : public store::EventStoreWrapper<ReadCountingStore, store::ForwardEverything> {
 public:
  explicit ReadCountingStore(EventStore& target) : EventStoreWrapper(target) {}
  std::atomic<int> reads{0};
  std::atomic<int> events_read{0};

  Result<std::vector<store::Envelope>> ReadRange(std::string_view id, int64_t first,
                                                 int64_t last) override {
    ++reads;
    Result<std::vector<store::Envelope>> r = target().ReadRange(id, first, last);
    if (r) events_read += static_cast<int>(r->size());
    return r;
  }
};

// A database of the chosen backend (SQLite: a fresh temp file; PostgreSQL:
// a fresh schema) with one event store open on it, and more store objects
// on the same data on demand (another process or node).
class BaseStore {
 public:
  BaseStore(Backend backend, const Clock& clock) : backend_(backend), clock_(clock) {
    if (backend == Backend::kSqlite) {
      path_ = std::filesystem::temp_directory_path() /
              ("once_orch_" + std::to_string(std::random_device{}()) + ".db");
    }
#if ONCE_TEST_POSTGRES_BACKEND
    if (backend == Backend::kPostgres && !store::testing::TestPostgresUrl().empty()) {
      schema_ = std::make_unique<store::testing::TestSchema>(store::testing::TestPostgresUrl());
    }
#endif
    // Without a server, a memory store stands in; SetUp skips (SkipReason).
    store_ = available() ? OpenEventStore() : nullptr;
    if (!store_) store_ = std::make_unique<store::MemoryEventStore>(store::Limits{}, clock);
  }
  ~BaseStore() {
    store_.reset();
    if (!path_.empty()) {
      std::error_code ec;
      for (const char* suffix : {"", "-wal", "-shm"}) {
        std::filesystem::remove(path_.string() + suffix, ec);
      }
    }
  }
  EventStore& get() { return *store_; }
  bool durable() const { return backend_ != Backend::kMemory; }
  bool available() const { return backend_ != Backend::kPostgres || schema_ != nullptr; }
  // Why a case on this database cannot run, or empty. CI=true makes a
  // missing PostgreSQL a failure.
  std::string SkipReason() const {
    if (available()) return "";
#if ONCE_TEST_POSTGRES_BACKEND
    if (store::testing::InCi()) ADD_FAILURE() << "CI=true but ONCE_TEST_POSTGRES_URL is unset";
#endif
    return "ONCE_TEST_POSTGRES_URL is unset";
  }

  // Another event store object on the same data (memory: a new, empty one).
  std::unique_ptr<EventStore> OpenEventStore() {
    if (backend_ == Backend::kSqlite) {
      store::SqliteOptions options;
      options.clock = &clock_;
      options.durability = store::Durability::kNormal;
      auto opened = store::SqliteEventStore::Open(path_.string(), options);
      ONCE_CHECK_MSG(opened.has_value(), "cannot open the SQLite test store");
      return std::move(*opened);
    }
#if ONCE_TEST_POSTGRES_BACKEND
    if (backend_ == Backend::kPostgres) {
      auto opened = store::PostgresEventStore::Open(schema_->Options(), clock_);
      ONCE_CHECK_MSG(opened.has_value(), "cannot open the PostgreSQL test store");
      return std::move(*opened);
    }
#endif
    return std::make_unique<store::MemoryEventStore>(store::Limits{}, clock_);
  }

  // An inbox store object on the same data (memory: a new, empty one).
  std::unique_ptr<inbox::InboxStore> OpenInbox(inbox::InboxLimits limits = {}) {
    if (backend_ == Backend::kSqlite) {
      auto opened = store::SqliteInboxStore::Open(
          path_.string(), {.durability = store::Durability::kNormal, .limits = limits});
      ONCE_CHECK_MSG(opened.has_value(), "cannot open the SQLite inbox store");
      return std::move(*opened);
    }
#if ONCE_TEST_POSTGRES_BACKEND
    if (backend_ == Backend::kPostgres && schema_) {
      store::PostgresInboxOptions options;
      options.conninfo = schema_->Options().conninfo;
      options.schema = schema_->name();
      options.limits = limits;
      auto opened = store::PostgresInboxStore::Open(options);
      ONCE_CHECK_MSG(opened.has_value(), "cannot open the PostgreSQL inbox store");
      return std::move(*opened);
    }
#endif
    return std::make_unique<inbox::MemoryInboxStore>(limits);
  }

 private:
  Backend backend_;
  const Clock& clock_;
  std::filesystem::path path_;
#if ONCE_TEST_POSTGRES_BACKEND
  std::unique_ptr<store::testing::TestSchema> schema_;
#else
  std::unique_ptr<int> schema_;  // never set: no PostgreSQL in this binary
#endif
  std::unique_ptr<EventStore> store_;
};

inline std::vector<store::Envelope> Log(EventStore& s, std::string_view id) {
  return s.ReadRange(id, 1, store::kToEnd).value();
}

inline int Count(EventStore& s, std::string_view id, std::string_view kind) {
  int n = 0;
  for (const auto& e : Log(s, id)) n += e.kind == kind;
  return n;
}

// "child": sleeps 1 s, then returns its input. "parent": starts child "c1",
// awaits it, returns its value. "group": starts "c1" and "c2" in group "g",
// awaits both. "two": starts c1 and c2, awaits c2 first, then c1.
// "sleeper": sleeps 1 s twice. "receiver": receives "approve", returns it.
// "receiver2": receives two. "many": receives `input` messages on "t".
inline void RegisterWorkflows(runtime::Runtime& rt) {
  using runtime::Context;
  auto ok = [](Status s) { ONCE_CHECK(s.has_value()); };
  ok(rt.Register("child", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return in;
  }));
  ok(rt.Register("parent", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.StartChild("child", "c1", in));
    ONCE_ASSIGN_OR_RETURN(Json v, ctx.AwaitChild("c1"));
    return v;
  }));
  ok(rt.Register("group", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.StartChild("child", "c1", in, "g"));
    ONCE_RETURN_IF_ERROR(ctx.StartChild("child", "c2", in, "g"));
    return ctx.AwaitChildren("g");
  }));
  ok(rt.Register("two", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.StartChild("child", "c1", in));
    ONCE_RETURN_IF_ERROR(ctx.StartChild("child", "c2", in));
    ONCE_ASSIGN_OR_RETURN(Json b, ctx.AwaitChild("c2"));
    ONCE_ASSIGN_OR_RETURN(Json a, ctx.AwaitChild("c1"));
    return Json::array({a, b});
  }));
  ok(rt.Register("sleeper", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return "woke twice";
  }));
  ok(rt.Register("receiver", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json m, ctx.Receive("approve"));
    return m;
  }));
  ok(rt.Register("receiver2", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json a, ctx.Receive("approve"));
    ONCE_ASSIGN_OR_RETURN(Json b, ctx.Receive("approve"));
    return Json::array({a, b});
  }));
  ok(rt.Register("many", [](Context& ctx, const Json& in) -> Result<Json> {
    Json got = Json::array();
    for (int i = 0; i < in.get<int>(); ++i) {
      ONCE_ASSIGN_OR_RETURN(Json m, ctx.Receive("t"));
      got.push_back(std::move(m));
    }
    return got;
  }));
}

}  // namespace once::orchestration::testing
