// Visibility against real stores: executions made by the runtime on a SQLite
// file and a PostgreSQL schema, every query checked against an oracle that
// folds every log (ListExecutions + ReadRange + runtime::Fold).
#include "once/visibility/visibility.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "../../store_postgres/tests/test_database.h"
#include "../src/source.h"
#include "once/runtime/runtime.h"
#include "once/store_postgres/postgres_timer_store.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/store_sqlite/sqlite_inbox_store.h"
#include "once/store_sqlite/sqlite_node_registry.h"
#include "once/store_sqlite/sqlite_timer_store.h"

namespace once::visibility {
namespace {

using runtime::Context;
using runtime::Runtime;

struct Expected {
  std::string id;
  std::string workflow;
  std::string status;
  int64_t started_ms = 0;
  int64_t updated_ms = 0;
  std::vector<std::string> parked_on;
};

// Runs a mix of workflows through the runtime, one start per simulated
// second: completed, failed, parked on a timer, on a message, on a child,
// cancelled, and a crashed start (running).
void Populate(store::EventStore& store, ManualClock& clock, int executions) {
  Runtime rt(store, clock);
  ASSERT_TRUE(rt.Register("pay", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json v, ctx.Step("charge", [&]() -> Result<Json> { return in; }));
    if (in.value("fail", false)) return MakeError(ErrorCode::kInvalidArgument, "card declined");
    return v;
  }));
  ASSERT_TRUE(rt.Register("nap", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::hours(1)));
    return Json("woke");
  }));
  ASSERT_TRUE(rt.Register("ask", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json answer, ctx.Receive("approve"));
    return answer;
  }));
  ASSERT_TRUE(rt.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.StartChild("ask", "kid", Json::object()));
    return ctx.AwaitChild("kid");
  }));
  for (int i = 0; i < executions; ++i) {
    clock.Advance(std::chrono::seconds(1));
    std::string id = "ex-" + std::to_string(1000 + i);
    switch (i % 8) {
      case 0:
        ASSERT_TRUE(rt.Start("pay", id, Json{{"n", i}}));
        break;
      case 1:
        ASSERT_TRUE(rt.Start("pay", id, Json{{"fail", true}}));
        break;
      case 2:
        ASSERT_TRUE(rt.Start("nap", id, Json::object()));
        break;
      case 3:
        ASSERT_TRUE(rt.Start("ask", id, Json::object()));
        break;
      case 4:
        ASSERT_TRUE(rt.Start("parent", id, Json::object()));
        break;
      case 5: {
        ASSERT_TRUE(rt.Start("nap", id, Json::object()));
        clock.Advance(std::chrono::milliseconds(10));
        ASSERT_TRUE(rt.Cancel(id, "operator", {.fence = store.AcquireFence(id).value()}));
        break;
      }
      case 6: {
        // A run that crashed after its start was recorded.
        store::AppendRequest req{
            .execution_id = id,
            .events = {events::KernelEvent(events::KernelKind::kExecutionStarted,
                                           Json{{"workflow", "pay"}, {"input", Json::object()}})}};
        ASSERT_TRUE(store.Append(req));
        break;
      }
      case 7: {
        // A start and an end in one append, of different times (an import
        // or a copied log): on PostgreSQL the row's two ends are two entries.
        events::Envelope end =
            events::KernelEvent(events::KernelKind::kExecutionCompleted, Json{{"result", 7}});
        end.time_ms = clock.NowUnixMillis() + 300;
        store::AppendRequest req{
            .execution_id = id,
            .events = {events::KernelEvent(events::KernelKind::kExecutionStarted,
                                           Json{{"workflow", "pay"}, {"input", Json::object()}}),
                       std::move(end)}};
        auto appended = store.Append(req);
        ASSERT_TRUE(appended) << appended.error().ToString();
        break;
      }
    }
  }
}

// Every execution's state, folded from its whole log.
std::vector<Expected> Oracle(store::EventStore& store) {
  std::vector<Expected> out;
  std::string after;
  do {
    auto page = store.ListExecutions(after, 100);
    EXPECT_TRUE(page);
    if (!page) return out;
    for (const auto& id : page->execution_ids) {
      auto log = store.ReadRange(id, 1);
      EXPECT_TRUE(log);
      auto folded = runtime::Fold(*log);
      EXPECT_TRUE(folded) << id;
      if (!folded) continue;
      const runtime::ExecutionState& st = *folded;
      Expected e{.id = id,
                 .workflow = st.workflow,
                 .status = std::string(runtime::StatusName(st.status)),
                 .started_ms = log->front().time_ms,
                 .updated_ms = log->back().time_ms};
      if (auto* park = runtime::FindOpenPark(*log)) {
        for (const auto& w : park->payload["waits"]) e.parked_on.push_back(w["type"]);
      }
      out.push_back(std::move(e));
    }
    after = page->next_after;
  } while (!after.empty());
  std::sort(out.begin(), out.end(), [](const Expected& a, const Expected& b) {
    return std::tie(a.started_ms, a.id) > std::tie(b.started_ms, b.id);
  });
  return out;
}

// Pages through a query with `limit` rows a page; every id at most once.
std::vector<ExecutionRow> ListAll(Visibility& v, ListQuery q) {
  std::vector<ExecutionRow> all;
  for (int pages = 0; pages < 1000; ++pages) {
    auto page = v.List(q);
    EXPECT_TRUE(page) << page.error().ToString();
    if (!page) break;
    EXPECT_LE(page->rows.size(), q.limit);
    all.insert(all.end(), page->rows.begin(), page->rows.end());
    if (page->next_cursor.empty()) break;
    q.cursor = page->next_cursor;
  }
  return all;
}

std::vector<std::string> Ids(const std::vector<ExecutionRow>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.execution_id);
  return out;
}

template <class Pred>
std::vector<std::string> ExpectedIds(const std::vector<Expected>& all, Pred keep) {
  std::vector<std::string> out;
  for (const auto& e : all) {
    if (keep(e)) out.push_back(e.id);
  }
  return out;
}

std::vector<std::string> ByTime(std::vector<std::string> ids, const std::vector<Expected>& all,
                                bool by_update) {
  std::map<std::string, int64_t> t;
  for (const auto& e : all) t[e.id] = by_update ? e.updated_ms : e.started_ms;
  std::sort(ids.begin(), ids.end(), [&](const std::string& a, const std::string& b) {
    return std::tie(t[a], a) > std::tie(t[b], b);
  });
  return ids;
}

// The queries of docs/operations.md against the oracle.
void CheckQueries(Visibility& v, store::EventStore& store) {
  std::vector<Expected> all = Oracle(store);
  ASSERT_GT(all.size(), 20u);

  // No filter: newest start first, paged by 4.
  auto every = ListAll(v, {.limit = 4});
  EXPECT_EQ(Ids(every), ExpectedIds(all, [](auto&) { return true; }));
  std::map<std::string, const Expected*> by_id;
  for (const auto& e : all) by_id[e.id] = &e;
  for (const auto& r : every) {
    const Expected& e = *by_id[r.execution_id];
    EXPECT_EQ(r.status, e.status) << r.execution_id;
    EXPECT_EQ(r.workflow, e.workflow) << r.execution_id;
    EXPECT_EQ(r.started_ms, e.started_ms);
    EXPECT_EQ(r.updated_ms, e.updated_ms);
    EXPECT_EQ(r.parked_on, e.parked_on) << r.execution_id;
  }

  // Each status. Terminal statuses and parks come newest event first.
  for (std::string status : {"running", "suspended", "completed", "failed", "cancelled"}) {
    auto got = ListAll(v, {.status = status, .limit = 3});
    auto want = ExpectedIds(all, [&](const Expected& e) { return e.status == status; });
    ASSERT_FALSE(want.empty()) << status;
    bool by_update = status != "running";
    EXPECT_EQ(Ids(got), ByTime(want, all, by_update)) << status;
  }
  for (std::string wait : {"timer", "message", "child"}) {
    auto got = ListAll(v, {.parked_on = wait, .limit = 5});
    auto want = ExpectedIds(all, [&](const Expected& e) {
      return std::find(e.parked_on.begin(), e.parked_on.end(), wait) != e.parked_on.end();
    });
    ASSERT_FALSE(want.empty()) << wait;
    EXPECT_EQ(Ids(got), ByTime(want, all, true)) << wait;
  }
  EXPECT_EQ(Ids(ListAll(v, {.workflow = "nap", .limit = 50})),
            ExpectedIds(all, [](const Expected& e) { return e.workflow == "nap"; }));
  EXPECT_EQ(Ids(ListAll(v, {.id_prefix = "ex-101", .limit = 50})),
            ExpectedIds(all, [](const Expected& e) { return e.id.starts_with("ex-101"); }));
  int64_t lo = all[all.size() - 5].started_ms, hi = all[3].started_ms;
  EXPECT_EQ(Ids(ListAll(v, {.started_after_ms = lo, .started_before_ms = hi, .limit = 2})),
            ExpectedIds(
                all, [&](const Expected& e) { return e.started_ms >= lo && e.started_ms <= hi; }));
  EXPECT_EQ(Ids(ListAll(v, {.status = "completed", .workflow = "ask", .limit = 2})),
            ByTime(ExpectedIds(all,
                               [](const Expected& e) {
                                 return e.status == "completed" && e.workflow == "ask";
                               }),
                   all, true));

  // Counts per status.
  auto counts = v.Counts();
  ASSERT_TRUE(counts) << counts.error().ToString();
  std::map<std::string, int64_t> want_counts;
  for (const auto& e : all) ++want_counts[e.status];
  EXPECT_EQ(counts->total, static_cast<int64_t>(all.size()));
  EXPECT_EQ(counts->running, want_counts["running"]);
  EXPECT_EQ(counts->suspended, want_counts["suspended"]);
  EXPECT_EQ(counts->completed, want_counts["completed"]);
  EXPECT_EQ(counts->failed, want_counts["failed"]);
  EXPECT_EQ(counts->cancelled, want_counts["cancelled"]);

  // One row; an unknown id.
  auto one = v.Summary(all[0].id);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, all[0].status);
  auto unknown = v.Summary("no-such-execution");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);

  // Bad queries.
  EXPECT_EQ(v.List({.status = "sleeping"}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(v.List({.parked_on = "email"}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(v.List({.limit = 0}).error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(v.List({.limit = 5, .cursor = "garbage"}).error().code, ErrorCode::kInvalidArgument);
}

// A page never examines more than scan_rows_max candidates.
void CheckScanBound(const Target& target) {
  auto v = Visibility::Open(target, {.scan_rows_max = 5});
  ASSERT_TRUE(v) << v.error().ToString();
  ListQuery q{.workflow = "no-such-workflow", .limit = 10};
  auto page = (*v)->List(q);
  ASSERT_TRUE(page);
  EXPECT_TRUE(page->rows.empty());
  EXPECT_EQ(page->scanned, 5u);
  EXPECT_FALSE(page->next_cursor.empty());  // more to look at: the caller decides
}

class SqliteVisibilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("visibility-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "loom.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
  ManualClock clock_;
};

TEST_F(SqliteVisibilityTest, QueriesMatchTheFoldOfEveryLog) {
  auto store = store::SqliteEventStore::Open(path_, store::SqliteOptions{.clock = &clock_});
  ASSERT_TRUE(store);
  Populate(**store, clock_, 40);
  auto v = Visibility::Open({.sqlite_path = path_});
  ASSERT_TRUE(v) << v.error().ToString();
  CheckQueries(**v, **store);
  CheckScanBound({.sqlite_path = path_});
}

// One Visibility kept open (as loom serve keeps it) sees every later write.
TEST_F(SqliteVisibilityTest, AnOpenVisibilitySeesLaterWrites) {
  auto store = store::SqliteEventStore::Open(path_, store::SqliteOptions{.clock = &clock_});
  ASSERT_TRUE(store);
  Populate(**store, clock_, 3);  // ex-1002 parks on a timer
  auto v = Visibility::Open({.sqlite_path = path_});
  ASSERT_TRUE(v);
  auto before = (*v)->Summary("ex-1002");
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, "suspended");
  ASSERT_TRUE((*v)->List({.limit = 2}));
  runtime::Runtime rt(**store, clock_);
  ASSERT_TRUE(rt.Cancel("ex-1002", "test", {.fence = (*store)->AcquireFence("ex-1002").value()}));
  auto after = (*v)->Summary("ex-1002");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, "cancelled");
  EXPECT_EQ(after->head, before->head + 1);
  auto page = (*v)->List({.status = "cancelled", .limit = 5});
  ASSERT_TRUE(page);
  ASSERT_EQ(page->rows.size(), 1u);
  EXPECT_EQ(page->rows[0].execution_id, "ex-1002");
}

// Nodes and owners read the node registry's and the event store's tables
// (loom_nodes, loom_runs: docs/nodes.md), written here by those stores.
TEST_F(SqliteVisibilityTest, NodesAndOwners) {
  auto events = store::SqliteEventStore::Open(path_, {});
  ASSERT_TRUE(events);
  auto v = Visibility::Open({.sqlite_path = path_});
  ASSERT_TRUE(v);
  auto empty = (*v)->Nodes(10);  // the tables exist (schema 3), no node ran here yet
  ASSERT_TRUE(empty) << empty.error().ToString();
  EXPECT_TRUE(empty->empty());
  auto none = (*v)->OwnerOf("x");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  auto registry = store::SqliteNodeRegistry::Open(path_, {});
  ASSERT_TRUE(registry);
  ASSERT_TRUE((*registry)->Heartbeat(
      {.node_id = "node-a", .host = "h1", .pid = 10, .version = "v1"}, 60'000));
  ASSERT_TRUE(
      (*registry)->Heartbeat({.node_id = "node-b", .host = "h2", .pid = 11, .version = "v1"}, 1));
  ASSERT_TRUE((*registry)->Heartbeat(
      {.node_id = "node-c", .host = "h3", .pid = 12, .version = "v1"}, 60'000));
  ASSERT_TRUE((*registry)->Stop("node-c"));
  for (auto [id, owner] : {std::pair{"ex-1", "node-a"}, {"ex-2", "node-a"}, {"ex-3", "node-b"}}) {
    store::AppendRequest req{
        .execution_id = id,
        .events = {events::KernelEvent(events::KernelKind::kExecutionStarted,
                                       Json{{"workflow", "order"}, {"input", Json::object()}})},
        .owner = owner};
    ASSERT_TRUE((*events)->Append(req));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // node-b's 1 ms lease lapses
  auto nodes = (*v)->Nodes(10);
  ASSERT_TRUE(nodes) << nodes.error().ToString();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_TRUE((*nodes)[0].alive);
  EXPECT_EQ((*nodes)[0].runs_owned, 2);
  EXPECT_FALSE((*nodes)[1].alive);  // its lease passed
  EXPECT_EQ((*nodes)[1].runs_owned, 1);
  EXPECT_FALSE((*nodes)[2].alive);  // stopped
  auto owner = (*v)->OwnerOf("ex-3");
  ASSERT_TRUE(owner && owner->has_value());
  EXPECT_EQ((*owner)->node_id, "node-b");
  EXPECT_GT((*owner)->since_ms, 0);
}

TEST_F(SqliteVisibilityTest, PagesWalkTheStatusIndex) {
  { ASSERT_TRUE(store::SqliteEventStore::Open(path_, {})); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  std::string plan;
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "EXPLAIN QUERY PLAN SELECT execution_id, time_ms, sequence FROM "
                               "events WHERE kind = 'EXECUTION_FAILED' AND (time_ms, "
                               "execution_id, sequence) < (?1, ?2, ?3) AND time_ms >= ?4 ORDER BY "
                               "time_ms DESC, execution_id DESC, sequence DESC LIMIT ?5",
                               -1, &s, nullptr),
            SQLITE_OK);
  while (sqlite3_step(s) == SQLITE_ROW) {
    plan += reinterpret_cast<const char*>(sqlite3_column_text(s, 3));
    plan += "\n";
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  EXPECT_NE(plan.find("events_by_status_kind"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("TEMP B-TREE"), std::string::npos) << plan;  // no sort: the index's order
}

TEST_F(SqliteVisibilityTest, BadTargetsAreOneClearErrorAndWriteNothing) {
  std::string missing = (dir_ / "typo.db").string();
  auto v = Visibility::Open({.sqlite_path = missing});
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(missing));  // not created

  std::string text = (dir_ / "notes.txt").string();
  std::ofstream(text) << "these are not the droids you are looking for, not a database at all";
  v = Visibility::Open({.sqlite_path = text});
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument) << v.error().ToString();

  { ASSERT_TRUE(store::SqliteEventStore::Open(path_, {})); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto before = std::filesystem::last_write_time(path_);
  v = Visibility::Open({.sqlite_path = path_});
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(v.error().message.find("newer"), std::string::npos);
  EXPECT_EQ(std::filesystem::last_write_time(path_), before);

  v = Visibility::Open({});
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(SqliteVisibilityTest, TimersAndPendingMessages) {
  auto store = store::SqliteEventStore::Open(path_, store::SqliteOptions{.clock = &clock_});
  auto timers = store::SqliteTimerStore::Open(path_);
  auto inbox = store::SqliteInboxStore::Open(path_);
  ASSERT_TRUE(store && timers && inbox);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE((*timers)->Schedule(
        {.execution_id = "t-" + std::to_string(i), .wake_at_ms = 1000 + i * 100}));
  }
  ASSERT_TRUE((*timers)->Schedule(
      {.execution_id = "t-0", .wake_at_ms = 5000, .redrive = timers::Redrive{.attempt = 2}}));
  ASSERT_TRUE((*inbox)->Put("t-0", "approve", Json{{"by", "ann"}}));
  ASSERT_TRUE((*inbox)->Put("t-0", "approve", Json{{"by", "bob"}}));
  auto v = Visibility::Open({.sqlite_path = path_});
  ASSERT_TRUE(v);
  auto due = (*v)->Timers(1200, 2, "");
  ASSERT_TRUE(due);
  ASSERT_EQ(due->timers.size(), 2u);
  EXPECT_EQ(due->timers[0].execution_id, "t-0");
  auto rest = (*v)->Timers(1200, 2, due->next_cursor);
  ASSERT_TRUE(rest);
  ASSERT_EQ(rest->timers.size(), 1u);
  EXPECT_EQ(rest->timers[0].wake_at_ms, 1200);
  auto of = (*v)->TimersOf("t-0");
  ASSERT_TRUE(of);
  ASSERT_EQ(of->size(), 2u);
  EXPECT_EQ((*of)[1].redrive_attempt, 2);
  auto pending = (*v)->Pending("t-0", 10);
  ASSERT_TRUE(pending);
  ASSERT_EQ(pending->size(), 2u);
  EXPECT_EQ((*pending)[1].seq, 2);
  EXPECT_EQ((*pending)[1].message["by"], "bob");
  EXPECT_EQ((*v)->Pending("t-0", 0).error().code, ErrorCode::kLimitExceeded);
}

class PostgresVisibilityTest : public store::testing::PostgresTest {};

TEST_F(PostgresVisibilityTest, QueriesMatchTheFoldOfEveryLog) {
  auto options = schema_->Options();
  auto store = store::PostgresEventStore::Open(options, clock_);
  ASSERT_TRUE(store) << store.error().ToString();
  Populate(**store, clock_, 40);
  Target target{.postgres_url = store::testing::TestPostgresUrl(),
                .postgres_schema = schema_->name()};
  auto v = Visibility::Open(target);
  ASSERT_TRUE(v) << v.error().ToString();
  CheckQueries(**v, **store);
  CheckScanBound(target);
}

// Each status read proves a status index's predicate: with sequential scans
// off, one that did not would scan the whole table.
TEST_F(PostgresVisibilityTest, StatusReadsUseTheStatusIndexesAndNoWholeTable) {
  ASSERT_TRUE(store::PostgresEventStore::Open(schema_->Options(), clock_));
  auto index_reads_only = [](const store::testing::TestSchema::PlanReads& plan) {
    for (const std::string& read : plan.node_types) {
      if (read != "Index Scan" && read != "Index Only Scan" && read != "Bitmap Heap Scan") {
        return false;
      }
    }
    return !plan.node_types.empty();
  };
  std::set<std::string> used;
  for (std::string_view kind : events::StatusKernelKindNames()) {
    SCOPED_TRACE(kind);
    for (const std::string& sql :
         {internal::PostgresCandidatesSql(kind, store::kPostgresSchemaVersion),
          internal::PostgresCountKindSql(kind, store::kPostgresSchemaVersion)}) {
      auto plan = schema_->GenericPlanReads(sql, true);
      EXPECT_TRUE(index_reads_only(plan)) << sql;
      EXPECT_EQ(plan.sorted_reads, 0) << sql;  // each range in its index's order
      used.insert(plan.indexes.begin(), plan.indexes.end());
    }
  }
  auto parks = schema_->GenericPlanReads(
      internal::PostgresCountOpenParksSql(store::kPostgresSchemaVersion), true);
  EXPECT_TRUE(index_reads_only(parks));
  EXPECT_TRUE(used.contains("events_by_first_status"));
  EXPECT_TRUE(used.contains("events_by_last_status"));
}

TEST_F(PostgresVisibilityTest, BadTargetsAreOneClearError) {
  auto v = Visibility::Open({.postgres_url = "postgresql://[::1:5432/x"});
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument) << v.error().ToString();
  v = Visibility::Open({.postgres_url = "host=127.0.0.1 bogus_option=1"});
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument) << v.error().ToString();

  Target target{.postgres_url = store::testing::TestPostgresUrl(),
                .postgres_schema = schema_->name()};
  v = Visibility::Open(target);  // an empty schema
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kNotFound) << v.error().ToString();
  EXPECT_EQ(
      schema_->Sql("SELECT count(*) FROM pg_tables WHERE schemaname = '" + schema_->name() + "'"),
      "0");  // nothing created

  ASSERT_TRUE(store::PostgresEventStore::Open(schema_->Options(), clock_));
  schema_->Sql("UPDATE once_schema SET value = 99 WHERE name = 'version'");
  v = Visibility::Open(target);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kUnsupported) << v.error().ToString();
}

}  // namespace
}  // namespace once::visibility
