// The runtime's core scenarios over a real backend: SQLite (a temp file) or
// PostgreSQL (ONCE_TEST_POSTGRES_URL; skipped when unset unless CI=true),
// chosen at compile time (ONCE_RT_BACKEND_SQLITE / ONCE_RT_BACKEND_POSTGRES).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "once/nodes/memory_node_registry.h"
#include "once/runtime/runtime.h"
#include "once/store/wrapper.h"
#include "test_stores.h"

#if defined(ONCE_RT_BACKEND_SQLITE)
#include <sqlite3.h>

#include "once/store_sqlite/sqlite_event_store.h"
#elif defined(ONCE_RT_BACKEND_POSTGRES)
#include "../../store_postgres/tests/test_database.h"
#endif

namespace once::runtime {
namespace {

using testing::HookStore;

std::vector<Envelope> Log(store::EventStore& s, std::string_view id) {
  return s.ReadRange(id, 1, store::kToEnd).value();
}

// A node on a registry of its own (the registry only judges the lease).
struct LiveNode {
  explicit LiveNode(const Clock& clock, nodes::NodeOptions options = {.info = {.node_id = "a"},
                                                                      .node_lease_ms = 10'000})
      : registry(registry_store, clock), node(registry, clock, std::move(options)) {}
  store::MemoryEventStore registry_store;
  nodes::MemoryNodeRegistry registry;
  nodes::Node node;
};

class BackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(ONCE_RT_BACKEND_SQLITE)
    path_ = std::filesystem::temp_directory_path() /
            ("once_rt_" + std::to_string(std::random_device{}()) + ".db");
    store::SqliteOptions options;
    options.clock = &clock_;
    auto opened = store::SqliteEventStore::Open(path_.string(), options);
    ASSERT_TRUE(opened) << opened.error().ToString();
    store_ = std::move(*opened);
#elif defined(ONCE_RT_BACKEND_POSTGRES)
    std::string url = store::testing::TestPostgresUrl();
    if (url.empty()) {
      if (store::testing::InCi()) FAIL() << "ONCE_TEST_POSTGRES_URL is unset under CI";
      GTEST_SKIP() << "ONCE_TEST_POSTGRES_URL is unset";
    }
    schema_ = std::make_unique<store::testing::TestSchema>(url);
    auto opened = store::PostgresEventStore::Open(schema_->Options(), clock_);
    ASSERT_TRUE(opened) << opened.error().ToString();
    store_ = std::move(*opened);
#endif
    hooked_ = std::make_unique<HookStore>(*store_);
  }
  void TearDown() override {
    hooked_.reset();
    store_.reset();
#if defined(ONCE_RT_BACKEND_SQLITE)
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::filesystem::remove(path_.string() + suffix, ec);
    }
#elif defined(ONCE_RT_BACKEND_POSTGRES)
    schema_.reset();
#endif
  }

  Status RegisterSleeper(Runtime& rt) {
    return rt.Register("sleeper", [this](Context& ctx, const Json&) -> Result<Json> {
      ONCE_ASSIGN_OR_RETURN(Json a, ctx.Step("a", [&]() -> Result<Json> { return ++steps_; }));
      ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
      ONCE_ASSIGN_OR_RETURN(Json b, ctx.Step("b", [&]() -> Result<Json> { return ++steps_; }));
      return a.get<int>() + b.get<int>();
    });
  }

  // Writes one event row by hand, around the store (as an operator, a bug
  // or an older build could): the store's own checks never see it.
  void InsertRow(const std::string& id, int64_t seq, const std::string& kind,
                 const std::string& payload, const std::string& metadata = R"({"kernel":true})") {
    std::string sql =
        "INSERT INTO events (execution_id, sequence, kind, payload, metadata, "
        "time_ms) VALUES ('" +
        id + "', " + std::to_string(seq) + ", '" + kind + "', '" + payload + "', '" + metadata +
        "', 1)";
#if defined(ONCE_RT_BACKEND_SQLITE)
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char* error = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
#elif defined(ONCE_RT_BACKEND_POSTGRES)
    schema_->Sql(sql);
#endif
  }

  ManualClock clock_;
  std::unique_ptr<store::EventStore> store_;
  std::unique_ptr<HookStore> hooked_;
  std::atomic<int> steps_{0};
#if defined(ONCE_RT_BACKEND_SQLITE)
  std::filesystem::path path_;
#elif defined(ONCE_RT_BACKEND_POSTGRES)
  std::unique_ptr<store::testing::TestSchema> schema_;
#endif
};

TEST_F(BackendTest, ParkResumeAfterADeadAcquirerAndAnIgnorableAppend) {
  Runtime rt(*hooked_, clock_);
  ASSERT_TRUE(RegisterSleeper(rt));
  Result<RunOutcome> out = rt.Start("sleeper", "ex", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
  ASSERT_TRUE(store_->AcquireFence("ex"));  // dead acquirer
  hooked_->before_acquire_if = [&](int call) {
    if (call == 1) {
      ASSERT_TRUE(rt.RecordExecutionDenied("ex", "eve", "between"));
    }
  };
  Result<RunOutcome> done = rt.Resume("ex", {.fence_if_parked_at = out->park_seq});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(done->value, 3);
  EXPECT_EQ(steps_, 2);
  auto log = Log(*store_, "ex");
  for (size_t i = 0; i < log.size(); ++i) EXPECT_EQ(log[i].sequence, static_cast<int64_t>(i + 1));
  EXPECT_EQ(log[*out->park_seq].kind, "EXECUTION_DENIED");
  EXPECT_EQ(log[*out->park_seq + 1].kind, "EXECUTION_RESUMED");
  EXPECT_EQ(store_->ReadFence("ex").value(), 2);
}

TEST_F(BackendTest, ThreeDeadAcquirersIsContended) {
  Runtime rt(*hooked_, clock_);
  ASSERT_TRUE(RegisterSleeper(rt));
  Result<RunOutcome> out = rt.Start("sleeper", "ex", Json::object());
  ASSERT_TRUE(out);
  auto before = Log(*store_, "ex");
  hooked_->before_acquire_if = [&](int) { ASSERT_TRUE(store_->AcquireFence("ex")); };
  Result<RunOutcome> r = rt.Resume("ex", {.fence_if_parked_at = out->park_seq});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kResumeContended);
  EXPECT_EQ(r.error().As<ResumeContendedDetail>()->attempts, 3);
  EXPECT_EQ(Log(*store_, "ex"), before);
}

// Resumers that answer first (RunOptions::park_fence) race on every park,
// each its own runtime (a process) on the one database; a quarter of the
// parks sit behind a dead acquirer (their answers are refused, then the
// conditional acquire takes over). Whatever the interleaving, a park is
// answered once and the step after it runs once; a resume that lost says
// so (refused, contended or fenced out) and a later one finishes the rest.
TEST_F(BackendTest, RacingResumersAnsweringFirstRunTheStepAfterTheParkOnce) {
  constexpr int kExecutions = 24;
  constexpr int kResumers = 4;
  std::mutex mu;
  std::map<std::string, int> after_runs;  // GUARDED_BY(mu)
  auto body = [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return ctx.Step("after", [&]() -> Result<Json> {
      std::lock_guard lock(mu);
      return ++after_runs[ctx.execution_id()];
    });
  };
  std::vector<std::unique_ptr<Runtime>> runtimes;
  for (int r = 0; r < kResumers; ++r) {
    runtimes.push_back(std::make_unique<Runtime>(*store_, clock_));
    ASSERT_TRUE(runtimes.back()->Register("nap", body));
  }
  std::vector<RunOutcome> parks;
  for (int i = 0; i < kExecutions; ++i) {
    Result<RunOutcome> out = runtimes[0]->Start("nap", "race-" + std::to_string(i), Json());
    ASSERT_TRUE(out) << out.error().ToString();
    ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
    if (i % 4 == 0) {
      ASSERT_TRUE(store_->AcquireFence(out->execution_id));  // a dead acquirer
    }
    parks.push_back(*out);
  }
  auto resume = [&](Runtime& rt, const RunOutcome& park) {
    return rt.Resume(park.execution_id,
                     {.fence_if_parked_at = park.park_seq, .park_fence = park.park_fence});
  };
  std::atomic<int> lost{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kResumers; ++r) {
    threads.emplace_back([&, r] {
      for (int k = 0; k < kExecutions; ++k) {
        Result<RunOutcome> got = resume(*runtimes[r], parks[(k + 7 * r) % kExecutions]);
        if (got) continue;
        const ErrorCode code = got.error().code;
        EXPECT_TRUE(code == ErrorCode::kResumeRefused || code == ErrorCode::kResumeContended ||
                    code == ErrorCode::kStaleFence || code == ErrorCode::kSequenceConflict)
            << got.error().ToString();
        ++lost;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GE(lost.load(), (kResumers - 1) * kExecutions);  // one resume of a park at most wins
  for (const RunOutcome& park : parks) {
    const std::string& id = park.execution_id;
    if (Log(*store_, id).back().kind != "EXECUTION_COMPLETED") {
      Result<RunOutcome> done = resume(*runtimes[0], park);  // every resumer of it lost
      ASSERT_TRUE(done) << id << ": " << done.error().ToString();
    }
    int answers = 0;
    for (const Envelope& e : Log(*store_, id)) answers += e.kind == "EXECUTION_RESUMED";
    EXPECT_EQ(answers, 1) << id;
    EXPECT_EQ(Log(*store_, id).back().kind, "EXECUTION_COMPLETED") << id;
    std::lock_guard lock(mu);
    EXPECT_EQ(after_runs[id], 1) << id;
  }
}

TEST_F(BackendTest, ChildrenAndRecover) {
  auto two_steps = [this](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return ++steps_; }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return 0;
  };
  // A crashed run whose start is recorded and nothing after it (a run
  // appends its start with its first boundary, so write the start alone).
  ASSERT_TRUE(store_->Append(
      {.execution_id = "crash",
       .events = {events::KernelEvent(events::KernelKind::kExecutionStarted,
                                      Json{{"workflow", "two"}, {"input", Json::object()}})}}));
  Runtime rt(*store_, clock_);
  ASSERT_TRUE(RegisterSleeper(rt));
  ASSERT_TRUE(rt.Register("two", two_steps));
  ASSERT_TRUE(rt.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.StartChild("sleeper", "k", Json::object()));
    ONCE_ASSIGN_OR_RETURN(Json v, ctx.AwaitChild("k"));
    return v;
  }));
  clock_.Advance(std::chrono::milliseconds(RuntimeOptions{}.ownerless_lease_ms + 1));
  Result<RecoverReport> report = rt.Recover();
  ASSERT_TRUE(report) << report.error().ToString();
  EXPECT_EQ(report->redriven, 1u);
  EXPECT_EQ(rt.Inspect("crash")->status, ExecutionStatus::kSuspended);
  ASSERT_TRUE(rt.Start("parent", "p", Json::object()));
  ASSERT_EQ(rt.Inspect("p/k")->status, ExecutionStatus::kSuspended);
  ASSERT_TRUE(rt.Resume("p/k", {.fence_if_parked_at = rt.ParkedAtSequence("p/k").value()}));
  ExecutionState parent = rt.Inspect("p").value();
  ASSERT_EQ(parent.status, ExecutionStatus::kCompleted);
}

// Issue 15: one row the kernel cannot read (written by hand: a start whose
// payload is not an object, a child's completion with a null payload, text
// that is not JSON) made Fold throw and std::terminate every process that
// called Recover, Inspect or Resume on it. Now each such execution is
// quarantined with a typed error and everything else is served.
TEST_F(BackendTest, AnUnreadableLogIsQuarantinedAndTheRestAreServed) {
  InsertRow("bad-start", 1, "EXECUTION_STARTED", R"("not an object")");
  InsertRow("bad-json", 1, "EXECUTION_STARTED", R"({"workflow": )");
  InsertRow("p", 1, "EXECUTION_STARTED", R"({"workflow":"parent","input":{}})");
  InsertRow("p", 2, "CHILD_STARTED", R"({"key":"k","workflow":"two","child_id":"p/k"})");
  InsertRow("p", 3, "EXECUTION_SUSPENDED",
            R"({"call":"await_child","waits":[{"type":"child","key":"k"}]})");
  InsertRow("p/k", 1, "EXECUTION_STARTED",
            R"({"workflow":"two","input":{},"parent":{"execution_id":"p","key":"k"}})");
  InsertRow("p/k", 2, "EXECUTION_COMPLETED", "null");
  // A crashed run the pass must still re-drive.
  ASSERT_TRUE(store_->Append(
      {.execution_id = "crash",
       .events = {events::KernelEvent(events::KernelKind::kExecutionStarted,
                                      Json{{"workflow", "two"}, {"input", Json::object()}})}}));
  std::vector<Error> reported;
  std::mutex mu;
  Runtime rt(*store_, clock_, {.on_error = [&](const Error& e) {
    std::lock_guard lock(mu);
    reported.push_back(e);
  }});
  ASSERT_TRUE(rt.Register("two", [this](Context& ctx, const Json&) -> Result<Json> {
    return ctx.Step("a", [&]() -> Result<Json> { return ++steps_; });
  }));
  ASSERT_TRUE(rt.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.StartChild("two", "k", Json::object()));
    return ctx.AwaitChild("k");
  }));

  clock_.Advance(std::chrono::milliseconds(RuntimeOptions{}.ownerless_lease_ms + 1));
  for (int pass = 0; pass < 2; ++pass) {
    Result<RecoverReport> report = rt.Recover();
    ASSERT_TRUE(report) << report.error().ToString();
    std::set<std::string> quarantined;
    for (const Error& e : report->quarantined) {
      EXPECT_EQ(e.code, ErrorCode::kCorruption) << e.ToString();
      quarantined.insert(e.subject);
    }
    EXPECT_EQ(quarantined, (std::set<std::string>{"bad-json", "bad-start", "p/k"}));
    // The parent of the unreadable child is not resumed; its error is typed.
    EXPECT_EQ(report->errors.size(), 1u);
    if (!report->errors.empty()) {
      EXPECT_EQ(report->errors[0].code, ErrorCode::kCorruption);
    }
  }
  EXPECT_EQ(rt.Inspect("crash")->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(steps_, 1);
  for (const char* id : {"bad-start", "bad-json", "p/k"}) {
    SCOPED_TRACE(id);
    Result<ExecutionState> st = rt.Inspect(id);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ErrorCode::kCorruption);
    Result<RunOutcome> resumed = rt.Resume(id);
    ASSERT_FALSE(resumed);
    EXPECT_EQ(resumed.error().code, ErrorCode::kCorruption);
  }
  EXPECT_EQ(rt.Inspect("p")->status, ExecutionStatus::kSuspended);
  // Each quarantined execution was reported once, over both passes.
  std::lock_guard lock(mu);
  EXPECT_EQ(std::count_if(reported.begin(), reported.end(),
                          [](const Error& e) { return e.subject == "bad-start"; }),
            1);
  // And the runtime goes on serving new work.
  Result<RunOutcome> fresh = rt.Start("two", "fresh", Json::object());
  ASSERT_TRUE(fresh) << fresh.error().ToString();
  EXPECT_EQ(fresh->status, ExecutionStatus::kCompleted);
}

TEST_F(BackendTest, GroupCommitWithManyConcurrentExecutions) {
  Runtime rt(*hooked_, clock_, {.workers = 64});
  ASSERT_TRUE(rt.Register("order", [](Context& ctx, const Json& in) -> Result<Json> {
    return ctx.Step("charge", [&]() -> Result<Json> { return in["n"]; });
  }));
  constexpr int kExecutions = 500;
  std::vector<std::future<Result<RunOutcome>>> futures;
  for (int i = 0; i < kExecutions; ++i) {
    futures.push_back(rt.StartAsync("order", "o-" + std::to_string(i), Json{{"n", i}}));
  }
  for (int i = 0; i < kExecutions; ++i) {
    Result<RunOutcome> out = futures[i].get();
    ASSERT_TRUE(out) << out.error().ToString();
    EXPECT_EQ(out->value, i);
  }
  CommitterStats stats = rt.commit_stats();
  EXPECT_EQ(stats.requests, 1u * kExecutions);  // start + step + complete: one append
  EXPECT_LT(stats.store_writes, stats.requests);
  EXPECT_EQ(Log(*store_, "o-7").back().kind, "EXECUTION_COMPLETED");
}

// As a node, a pipelined start's bookkeeping is the flusher's, once its
// last append is written: the run row the first append of a multi-step body
// wrote is deleted by the park, nothing stays marked as running here, and
// the parked execution resumes as usual.
TEST_F(BackendTest, APipelinedStartOfANodeReleasesItsRunRowAndItsMark) {
  LiveNode live(clock_);
  ASSERT_TRUE(live.node.Beat());
  RuntimeOptions options{.workers = 0, .node = &live.node};
  Runtime rt(*store_, clock_, options);
  std::optional<std::string> owner_in_step;  // the run row while the body ran
  ASSERT_TRUE(rt.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("one", [&]() -> Result<Json> { return 1; }));
    ONCE_RETURN_IF_ERROR(ctx.Step("two", [&]() -> Result<Json> {  // after one's append
      auto row = store_->RunOwnerOf(ctx.execution_id());
      if (row && *row) owner_in_step = (*row)->owner;
      return 2;
    }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return Json(3);
  }));
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<RunOutcome>> parked;  // GUARDED_BY(mu)
  rt.StartPipelined("w", "n-1", Json::object(), [&](Result<RunOutcome> out) {
    std::lock_guard lock(mu);
    parked = std::move(out);
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return parked.has_value(); });
  }
  ASSERT_TRUE(*parked) << parked->error().ToString();
  EXPECT_EQ((*parked)->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(owner_in_step, std::optional<std::string>("a"));
  EXPECT_EQ(rt.RunningCount(), 0u);
  Result<std::optional<store::RunOwner>> row = store_->RunOwnerOf("n-1");
  ASSERT_TRUE(row) << row.error().ToString();
  EXPECT_FALSE(row->has_value());  // the park released it
  clock_.Advance(std::chrono::seconds(1));
  Result<RunOutcome> done = rt.Resume(
      "n-1", {.fence_if_parked_at = (*parked)->park_seq, .park_fence = (*parked)->park_fence});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(done->value, 3);
}

// ---- ctx.Transaction: the exactly-once step --------------------------------

constexpr char kCreatePayments[] =
    "CREATE TABLE IF NOT EXISTS payments (execution_id TEXT PRIMARY KEY, cents INTEGER)";

// A transactional step's fn: records one payment of this execution in the
// same database as the log, counting its runs in `runs`.
auto Pay(Context& ctx, std::atomic<int>& runs) {
  return [&ctx, &runs](store::SqlTransaction& sql) -> Result<Json> {
    ++runs;
    ONCE_RETURN_IF_ERROR(sql.Exec(kCreatePayments));
    ONCE_RETURN_IF_ERROR(sql.Exec("INSERT INTO payments (execution_id, cents) VALUES ($1, $2)",
                                  {Json(ctx.execution_id()), Json(1999)}));
    return Json(1999);
  };
}

// Payments rows committed, read in a transaction that commits nothing
// (-1 when the table does not exist yet).
int64_t Payments(store::EventStore& s) {
  int64_t n = -1;
  auto work = [&](store::SqlTransaction& sql) -> Result<store::AppendRequest> {
    ONCE_RETURN_IF_ERROR(sql.Exec(kCreatePayments));
    ONCE_ASSIGN_OR_RETURN(store::SqlRows rows, sql.Exec("SELECT count(*) FROM payments"));
    n = std::stoll(rows.rows.at(0).at(0).value());
    return MakeError(ErrorCode::kCancelled, "read only");
  };
  EXPECT_EQ(s.AppendInTransaction("reader", work).error().code, ErrorCode::kCancelled);
  return n;
}

// The kinds and step names of a log: "STEP_COMPLETED pay".
std::vector<std::string> Kinds(const std::vector<Envelope>& log) {
  std::vector<std::string> out;
  for (const Envelope& e : log) {
    std::string k = e.kind.str();
    if (e.payload.is_object() && e.payload.contains("name")) {
      k += " " + e.payload["name"].get<std::string>();
    }
    out.push_back(std::move(k));
  }
  return out;
}

// ---- Pipelined starts (Runtime::StartPipelined) ------------------------------

// One thread starts every execution without waiting for any: each done gets
// what Start would have returned (completed with its value, a park with its
// sequence, a second start of a written id refused at its record), the
// group commit shares its writes, and the runtime's destructor returns only
// once every done has run.
TEST_F(BackendTest, PipelinedStartsFromOneThreadEachGetTheirOwnOutcome) {
  constexpr int kExecutions = 300;
  std::mutex mu;
  std::map<std::string, Result<RunOutcome>> outcomes;  // GUARDED_BY(mu)
  auto record = [&](std::string key) {
    return [&, key = std::move(key)](Result<RunOutcome> out) {
      std::lock_guard lock(mu);
      EXPECT_TRUE(outcomes.emplace(key, std::move(out)).second) << key << " answered twice";
    };
  };
  CommitterStats stats;
  {
    Runtime rt(*hooked_, clock_, {.workers = 0});
    ASSERT_TRUE(rt.Register("order", [](Context& ctx, const Json& in) -> Result<Json> {
      return ctx.Step("charge", [&]() -> Result<Json> { return in["n"]; });
    }));
    ASSERT_TRUE(RegisterSleeper(rt));
    for (int i = 0; i < kExecutions; ++i) {
      std::string id = "o-" + std::to_string(i);
      rt.StartPipelined("order", id, Json{{"n", i}}, record(id));
    }
    rt.StartPipelined("order", "o-7", Json{{"n", 7}}, record("o-7 again"));
    rt.StartPipelined("sleeper", "s-1", Json::object(), record("s-1"));
    stats = rt.commit_stats();
  }  // no wait but the destructor's
  std::lock_guard lock(mu);
  ASSERT_EQ(outcomes.size(), size_t{kExecutions + 2});
  for (int i = 0; i < kExecutions; ++i) {
    const Result<RunOutcome>& out = outcomes.at("o-" + std::to_string(i));
    ASSERT_TRUE(out) << out.error().ToString();
    EXPECT_EQ(out->status, ExecutionStatus::kCompleted);
    EXPECT_EQ(out->value, i);
    EXPECT_EQ(out->execution_id, "o-" + std::to_string(i));
  }
  ASSERT_FALSE(outcomes.at("o-7 again"));
  EXPECT_EQ(outcomes.at("o-7 again").error().code, ErrorCode::kSequenceConflict);
  const Result<RunOutcome>& parked = outcomes.at("s-1");
  ASSERT_TRUE(parked) << parked.error().ToString();
  EXPECT_EQ(parked->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(parked->park_seq, 3);
  EXPECT_EQ(Kinds(Log(*store_, "o-7")),
            (std::vector<std::string>{"EXECUTION_STARTED", "STEP_COMPLETED charge",
                                      "EXECUTION_COMPLETED"}));
  EXPECT_EQ(Log(*store_, "s-1").back().kind, "EXECUTION_SUSPENDED");
  EXPECT_EQ(stats.requests, 0u + kExecutions + 2);  // one append each
  EXPECT_LT(stats.store_writes, stats.requests);
}

// The same from one thread with a DoneQueue: every done runs on that thread
// as it drains the queue (the refused start's too), each with its own
// outcome, and the logs are as without the queue.
TEST_F(BackendTest, PipelinedStartsWithADoneQueueEndOnTheThreadThatDrainsIt) {
  constexpr int kExecutions = 200;
  std::map<std::string, Result<RunOutcome>> outcomes;  // this thread's only
  std::set<std::thread::id> threads;
  auto record = [&](std::string key) {
    return [&, key = std::move(key)](Result<RunOutcome> out) {
      threads.insert(std::this_thread::get_id());
      EXPECT_TRUE(outcomes.emplace(key, std::move(out)).second) << key << " answered twice";
    };
  };
  Runtime rt(*hooked_, clock_, {.workers = 0});
  ASSERT_TRUE(rt.Register("order", [](Context& ctx, const Json& in) -> Result<Json> {
    return ctx.Step("charge", [&]() -> Result<Json> { return in["n"]; });
  }));
  ASSERT_TRUE(RegisterSleeper(rt));
  DoneQueue dones;
  for (int i = 0; i < kExecutions; ++i) {
    std::string id = "q-" + std::to_string(i);
    rt.StartPipelined("order", id, Json{{"n", i}}, record(id), {}, &dones);
    if (i % 50 == 49) dones.Drain(/*wait=*/false);  // some now, the rest below
  }
  rt.StartPipelined("order", "q-7", Json{{"n", 7}}, record("q-7 again"), {}, &dones);
  rt.StartPipelined("sleeper", "z-1", Json::object(), record("z-1"), {}, &dones);
  while (dones.outstanding() > 0) dones.Drain(/*wait=*/true);
  ASSERT_EQ(outcomes.size(), size_t{kExecutions + 2});
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
  for (int i = 0; i < kExecutions; ++i) {
    const Result<RunOutcome>& out = outcomes.at("q-" + std::to_string(i));
    ASSERT_TRUE(out) << out.error().ToString();
    EXPECT_EQ(out->status, ExecutionStatus::kCompleted);
    EXPECT_EQ(out->value, i);
  }
  ASSERT_FALSE(outcomes.at("q-7 again"));
  EXPECT_EQ(outcomes.at("q-7 again").error().code, ErrorCode::kSequenceConflict);
  ASSERT_TRUE(outcomes.at("z-1"));
  EXPECT_EQ(outcomes.at("z-1")->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(Kinds(Log(*store_, "q-7")),
            (std::vector<std::string>{"EXECUTION_STARTED", "STEP_COMPLETED charge",
                                      "EXECUTION_COMPLETED"}));
}

TEST_F(BackendTest, TransactionCommitsItsEffectOnceWithItsRecordAndReplayDoesNotRerunIt) {
  Runtime rt(*hooked_, clock_);
  std::atomic<int> runs{0};
  ASSERT_TRUE(rt.Register("pay", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json a, ctx.Step("a", [&]() -> Result<Json> { return 1; }));
    ONCE_ASSIGN_OR_RETURN(Json paid, ctx.Transaction("pay", Pay(ctx, runs)));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return paid.get<int>() + a.get<int>();
  }));
  Result<RunOutcome> out = rt.Start("pay", "order-7", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(Payments(*store_), 1);
  // The buffered start and step "a" committed in the step's own transaction.
  EXPECT_EQ(Kinds(Log(*store_, "order-7")),
            (std::vector<std::string>{"EXECUTION_STARTED", "STEP_COMPLETED a", "STEP_COMPLETED pay",
                                      "EXECUTION_SUSPENDED"}));
  Result<RunOutcome> done = rt.Resume("order-7", {.fence_if_parked_at = out->park_seq});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(done->value, 2000);
  EXPECT_EQ(runs, 1);  // replayed from the log
  EXPECT_EQ(Payments(*store_), 1);
}

// A start's input is lent to its EXECUTION_STARTED (runtime.h): a
// transaction that commits that event as the body's first step leaves the
// body its input, and the event keeps a copy.
TEST_F(BackendTest, ABodyReadsItsInputAfterATransactionCommittedItsStart) {
  Runtime rt(*store_, clock_);
  const Json input = {{"n", 7}, {"text", std::string(40, 't')}};
  ASSERT_TRUE(rt.Register("tx_first", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(
        Json t, ctx.Transaction("t", [&](store::SqlTransaction&) -> Result<Json> { return 1; }));
    ONCE_ASSIGN_OR_RETURN(Json s, ctx.Step("s", [&]() -> Result<Json> { return in; }));
    return Json{{"t", t}, {"s", s}};
  }));
  Result<RunOutcome> out = rt.Start("tx_first", "tx-1", input);
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->value, (Json{{"t", 1}, {"s", input}}));
  std::vector<Envelope> log = Log(*store_, "tx-1");
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0].payload["input"], input);
  EXPECT_EQ(log[2].payload["value"], input);
}

TEST_F(BackendTest, TransactionOfAFencedOutRunnerRollsBackWithItsRecord) {
  Runtime rt(*hooked_, clock_);
  std::atomic<int> runs{0};
  int rivals = 0;
  ASSERT_TRUE(rt.Register("pay", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    // While this body runs (the first time), another runner takes the
    // execution's fence.
    ONCE_RETURN_IF_ERROR(ctx.Step("rival", [&]() -> Result<Json> {
      if (rivals++ > 0) return Json(nullptr);
      ONCE_ASSIGN_OR_RETURN(int64_t token, store_->AcquireFence(ctx.execution_id()));
      return token;
    }));
    return ctx.Transaction("pay", Pay(ctx, runs));
  }));
  Result<RunOutcome> out = rt.Start("pay", "order-7", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  const int64_t head = store_->Head("order-7").value();
  Result<RunOutcome> r = rt.Resume("order-7", {.fence_if_parked_at = out->park_seq});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kStaleFence) << r.error().ToString();
  EXPECT_EQ(runs, 1);               // fn ran...
  EXPECT_EQ(Payments(*store_), 0);  // ...and its write went with its refused record
  // The resume's answer was made durable before the body's first effect
  // (RunState::answer_unconfirmed); step "rival" and the transaction were not.
  EXPECT_EQ(store_->Head("order-7").value(), head + 1);
  // The run is now running with nobody at it: a re-drive (Recover, once the
  // ownerless lease passed) runs the step once, for good.
  clock_.Advance(std::chrono::milliseconds(RuntimeOptions{}.ownerless_lease_ms + 1));
  Result<RecoverReport> recovered = rt.Recover();
  ASSERT_TRUE(recovered) << recovered.error().ToString();
  EXPECT_EQ(recovered->redriven, 1u);
  EXPECT_EQ(rt.Inspect("order-7").value().status, ExecutionStatus::kCompleted);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(Payments(*store_), 1);
}

TEST_F(BackendTest, TransactionFnErrorRollsBackAndIsRecordedAsAStepFailure) {
  Runtime rt(*hooked_, clock_);
  std::atomic<int> runs{0};
  ASSERT_TRUE(rt.Register("pay", [&](Context& ctx, const Json&) -> Result<Json> {
    Result<Json> paid = ctx.Transaction("pay", [&](store::SqlTransaction& sql) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(Pay(ctx, runs)(sql));
      return MakeError(ErrorCode::kNotFound, "no such card");  // after the insert
    });
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    if (paid) return MakeError(ErrorCode::kInternal, "paid");
    return Json(paid.error().message);
  }));
  Result<RunOutcome> out = rt.Start("pay", "order-7", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(Payments(*store_), 0);
  EXPECT_EQ(
      Kinds(Log(*store_, "order-7")),
      (std::vector<std::string>{"EXECUTION_STARTED", "STEP_FAILED pay", "EXECUTION_SUSPENDED"}));
  Result<RunOutcome> done = rt.Resume("order-7", {.fence_if_parked_at = out->park_seq});
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->value, "no such card");  // the recorded failure, replayed
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(Payments(*store_), 0);
}

TEST_F(BackendTest, TransactionBadSqlIsATypedStepFailureAndTheRuntimeServesOn) {
  Runtime rt(*hooked_, clock_);
  std::atomic<int> runs{0};
  ASSERT_TRUE(rt.Register("bad", [&](Context& ctx, const Json& in) -> Result<Json> {
    const bool swallow = in.value("swallow", false);
    Result<Json> r = ctx.Transaction("bad", [&](store::SqlTransaction& sql) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(Pay(ctx, runs)(sql));
      Result<store::SqlRows> rows = sql.Exec("SELEC oops FROM payments");
      if (!rows && !swallow) return std::unexpected(rows.error());
      return Json("fine");  // swallowed: the step fails all the same
    });
    if (r) return MakeError(ErrorCode::kInternal, "bad SQL committed");
    return Json(std::string(ErrorCodeName(r.error().code)));
  }));
  ASSERT_TRUE(rt.Register("pay", [&](Context& ctx, const Json&) -> Result<Json> {
    return ctx.Transaction("pay", Pay(ctx, runs));
  }));
  for (bool swallow : {false, true}) {
    std::string id = swallow ? "swallowed" : "returned";
    Result<RunOutcome> out = rt.Start("bad", id, Json{{"swallow", swallow}});
    ASSERT_TRUE(out) << out.error().ToString();
    EXPECT_EQ(out->status, ExecutionStatus::kCompleted);
    EXPECT_EQ(out->value, "InvalidArgument");
    auto kinds = Kinds(Log(*store_, id));
    EXPECT_EQ(kinds.at(1), "STEP_FAILED bad");
  }
  EXPECT_EQ(Payments(*store_), 0);
  Result<RunOutcome> ok = rt.Start("pay", "order-8", Json::object());
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->value, 1999);
  EXPECT_EQ(Payments(*store_), 1);
}

// A node's run row on this backend, through the runtime and its group
// commit: named by the first append that leaves the run running, released
// by the park, named again by the resume's acquire and released by the end.
TEST_F(BackendTest, ANodesRunRowFollowsItsRunsThroughAParkAndAResume) {
  LiveNode live(clock_);
  nodes::Node& node = live.node;
  ASSERT_TRUE(node.Beat());
  RuntimeOptions options{.workers = 0, .node = &node};
  options.committer.flushes_in_flight_max = 2;
  Runtime rt(*store_, clock_, options);
  std::mutex seen_mu;
  std::vector<std::optional<std::string>> seen;  // GUARDED_BY(seen_mu)
  auto owner = [&](const std::string& id) -> std::optional<std::string> {
    auto row = store_->RunOwnerOf(id);
    if (!row || !*row) return std::nullopt;
    return (*row)->owner;
  };
  ASSERT_TRUE(rt.Register("w", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Step("one", [&]() -> Result<Json> { return 1; }));
    ONCE_RETURN_IF_ERROR(ctx.Step("two", [&]() -> Result<Json> {
      std::optional<std::string> o = owner(ctx.execution_id());
      std::lock_guard lock(seen_mu);
      seen.push_back(std::move(o));
      return 2;
    }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return ctx.Step("three", [&]() -> Result<Json> {
      std::optional<std::string> o = owner(ctx.execution_id());
      std::lock_guard lock(seen_mu);
      seen.push_back(std::move(o));
      return 3;
    });
  }));
  // The resume's first append is also its end: {EXECUTION_RESUMED,
  // EXECUTION_COMPLETED}, appended only if the token is still the acquire's.
  ASSERT_TRUE(rt.Register("park_once", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json v, ctx.Step("work", [&]() -> Result<Json> { return 1; }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::milliseconds(0)));
    return v;
  }));
  for (const char* id : {"once-1", "once-2"}) {
    Result<RunOutcome> out = rt.Start("park_once", id, Json::object());
    ASSERT_TRUE(out) << out.error().ToString();
    ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
    Result<RunOutcome> done = rt.Resume(id, {.fence_if_parked_at = out->park_seq});
    ASSERT_TRUE(done) << done.error().ToString();
    EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
    EXPECT_EQ(owner(id), std::nullopt) << id << ": the end released it";
  }
  for (const char* id : {"ex-1", "ex-2"}) {
    seen.clear();
    Result<RunOutcome> out = rt.Start("w", id, Json::object());
    ASSERT_TRUE(out) << out.error().ToString();
    ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
    EXPECT_EQ(owner(id), std::nullopt) << id << ": the park released it";
    Result<RunOutcome> done = rt.Resume(id, {.fence_if_parked_at = out->park_seq});
    ASSERT_TRUE(done) << done.error().ToString();
    EXPECT_EQ(done->status, ExecutionStatus::kCompleted);
    EXPECT_EQ(seen, (std::vector<std::optional<std::string>>{"a", "a"})) << id;
    EXPECT_EQ(owner(id), std::nullopt) << id << ": the end released it";
  }
  // The same from many threads at once, as a service runs it: starts, parks,
  // resumes and ends go to the store in grouped appends and grouped acquires.
  constexpr int kThreads = 8, kEach = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string id = "many-" + std::to_string(t) + "-" + std::to_string(i);
        Result<RunOutcome> out = rt.Start("w", id, Json::object());
        if (!out || !out->park_seq) {
          ++failures;
          continue;
        }
        Result<RunOutcome> done = rt.Resume(id, {.fence_if_parked_at = out->park_seq});
        if (!done || done->status != ExecutionStatus::kCompleted) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  int owned = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      if (owner("many-" + std::to_string(t) + "-" + std::to_string(i))) ++owned;
    }
  }
  EXPECT_EQ(owned, 0) << "completed executions whose run row still names the node";
}

// The batch's own store calls, counted (the backend's batch runs beneath).
class CountingStore final
    : public store::EventStoreWrapper<CountingStore, store::ForwardEverything> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
  std::string_view name() const override { return "counting"; }
  std::vector<Result<store::AcquireWithTail>> AcquireFencesIfReadTail(
      std::span<const store::AcquireIfRead> requests) override {
    ++acquire_batches;
    return EventStoreWrapper::AcquireFencesIfReadTail(requests);
  }
  Result<store::AcquireWithTail> AcquireFenceIfReadTail(std::string_view id,
                                                        store::FenceExpectation e,
                                                        int64_t read_after) override {
    ++acquires;
    return EventStoreWrapper::AcquireFenceIfReadTail(id, e, read_after);
  }
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const store::AppendRequest> requests) override {
    ++append_batches;
    return EventStoreWrapper::AppendBatch(requests);
  }
  Result<int64_t> Append(const store::AppendRequest& req) override {
    ++appends;
    return EventStoreWrapper::Append(req);
  }
  std::atomic<int> acquire_batches{0}, acquires{0}, append_batches{0}, appends{0};
};

// AnswerParks answers each park as AnswerPark would, with the batch's
// acquires in one store call and its ends in one write: plain parks resume;
// a park a rival answered first is a noop; one whose token a dead acquirer
// moved, and one whose run a rival fenced out mid-body, go on alone and
// resume; a body that parks again resumes into its next park. With a node,
// every run row the batch's acquires named is released by its end or park.
TEST_F(BackendTest, AParkBatchAnswersEachParkAsAnswerParkWould) {
  LiveNode live(clock_);
  nodes::Node& node = live.node;
  ASSERT_TRUE(node.Beat());
  CountingStore counted(*store_);
  Runtime rt(counted, clock_, RuntimeOptions{.workers = 0, .node = &node});
  std::atomic<int> bodies{0};
  std::atomic<bool> fence_out_once{false};
  ASSERT_TRUE(rt.Register("nap", [&](Context& ctx, const Json& input) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    ++bodies;
    if (input.value("rival", false) && !fence_out_once.exchange(true)) {
      EXPECT_TRUE(store_->AcquireFence(ctx.execution_id()));  // fences this run out
    }
    if (input.value("twice", false)) ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return input.value("n", 0);
  }));
  const std::vector<std::string> ids = {"plain-1",       "plain-2",         "answered",
                                        "dead-acquirer", "fenced-mid-body", "parks-again"};
  std::vector<ParkWake> wakes;
  for (size_t i = 0; i < ids.size(); ++i) {
    Json input{{"n", static_cast<int>(i)},
               {"rival", ids[i] == "fenced-mid-body"},
               {"twice", ids[i] == "parks-again"}};
    Result<RunOutcome> out = rt.Start("nap", ids[i], input);
    ASSERT_TRUE(out) << out.error().ToString();
    ASSERT_EQ(out->status, ExecutionStatus::kSuspended);
    wakes.push_back({.execution_id = ids[i], .park_seq = *out->park_seq, .park_fence = 0});
  }
  Result<ParkAnswered> first = rt.AnswerPark("answered", {.park_seq = wakes[2].park_seq});
  ASSERT_TRUE(first && first->verdict == ParkVerdict::kResumed);
  ASSERT_TRUE(store_->AcquireFence("dead-acquirer"));
  bodies = 0;
  counted.acquire_batches = 0;
  counted.acquires = 0;
  counted.append_batches = 0;
  counted.appends = 0;

  std::vector<Result<ParkAnswered>> got = rt.AnswerParks(wakes);

  ASSERT_EQ(got.size(), wakes.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(got[i]) << ids[i] << ": " << got[i].error().ToString();
  for (size_t i : {0u, 1u, 3u, 4u}) {
    SCOPED_TRACE(ids[i]);
    EXPECT_EQ(got[i]->verdict, ParkVerdict::kResumed);
    ASSERT_TRUE(got[i]->outcome);
    EXPECT_EQ(got[i]->outcome->status, ExecutionStatus::kCompleted);
    EXPECT_EQ(got[i]->outcome->value, static_cast<int>(i));
    std::vector<Envelope> log = Log(*store_, ids[i]);
    int resumes = 0;
    for (const Envelope& e : log) resumes += e.kind == "EXECUTION_RESUMED";
    EXPECT_EQ(resumes, 1);
    EXPECT_EQ(log.back().kind, "EXECUTION_COMPLETED");
  }
  EXPECT_EQ(got[0]->attempts, 1);
  EXPECT_EQ(got[2]->verdict, ParkVerdict::kNoop);
  EXPECT_EQ(got[3]->attempts, 2);  // the batch's stale acquire, then its own
  EXPECT_GE(got[4]->attempts, 2);
  EXPECT_EQ(got[5]->verdict, ParkVerdict::kResumed);
  ASSERT_TRUE(got[5]->outcome);
  EXPECT_EQ(got[5]->outcome->status, ExecutionStatus::kSuspended);
  EXPECT_EQ(Log(*store_, "parks-again").back().kind, "EXECUTION_SUSPENDED");
  // Four bodies ran in the batch, one again alone (the fenced one), one
  // alone (the dead acquirer's): six.
  EXPECT_EQ(bodies, 6);
  EXPECT_EQ(counted.acquire_batches, 1);
  EXPECT_EQ(counted.acquires, 2) << "only the two that went on alone acquired alone";
  for (const std::string& id : ids) {
    Result<std::optional<store::RunOwner>> row = store_->RunOwnerOf(id);
    ASSERT_TRUE(row) << row.error().ToString();
    EXPECT_FALSE(row->has_value()) << id << ": its end or park released its run row";
  }
  EXPECT_FALSE(rt.RunningHere("plain-1"));
  EXPECT_EQ(rt.RunningCount(), 0u);
}

// The ends of a batch are one write through the group commit.
TEST_F(BackendTest, AParkBatchWritesItsEndsTogether) {
  CountingStore counted(*store_);
  Runtime rt(counted, clock_, RuntimeOptions{.workers = 0});
  ASSERT_TRUE(rt.Register("nap", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return 1;
  }));
  constexpr int kParks = 40;
  std::vector<ParkWake> wakes;
  for (int i = 0; i < kParks; ++i) {
    std::string id = "nap-" + std::to_string(i);
    Result<RunOutcome> out = rt.Start("nap", id, Json::object());
    ASSERT_TRUE(out && out->park_seq);
    wakes.push_back({.execution_id = id, .park_seq = *out->park_seq});
  }
  counted.append_batches = 0;
  counted.appends = 0;
  std::vector<Result<ParkAnswered>> got = rt.AnswerParks(wakes);
  for (const Result<ParkAnswered>& r : got) {
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->verdict, ParkVerdict::kResumed);
  }
  EXPECT_EQ(counted.acquire_batches, 1);
  EXPECT_EQ(counted.acquires, 0);
  EXPECT_EQ(counted.append_batches, 1);
  EXPECT_EQ(counted.appends, 0);
  for (const ParkWake& w : wakes)
    EXPECT_EQ(Log(*store_, w.execution_id).back().kind, "EXECUTION_COMPLETED");
}

TEST_F(BackendTest, TransactionRespectsTheNodeStepGateAndItsRunRow) {
  LiveNode live(clock_, {.info = {.node_id = "a"},
                         .node_lease_ms = 10'000,
                         .step_margin_ms = 2'000,
                         .step_wait_ms_max = 200});
  nodes::Node& node = live.node;
  ASSERT_TRUE(node.Beat());
  Runtime rt(*hooked_, clock_, {.node = &node});
  std::atomic<int> runs{0};
  std::optional<std::string> owner_seen;
  ASSERT_TRUE(rt.Register("pay", [&](Context& ctx, const Json&) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json paid, ctx.Transaction("pay", Pay(ctx, runs)));
    // The step's append named this node as the run's owner.
    auto row = store_->RunOwnerOf(ctx.execution_id());
    if (row && *row) owner_seen = (*row)->owner;
    return paid;
  }));
  clock_.Advance(std::chrono::milliseconds(8'000));  // lease 10 s, margin 2 s: closed
  Result<RunOutcome> out = rt.Start("pay", "order-7", Json::object());
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::kUnavailable) << out.error().ToString();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(Payments(*store_), 0);
  EXPECT_EQ(store_->Head("order-7").value(), 0);
  ASSERT_TRUE(node.Beat());  // renewed: the step runs
  out = rt.Start("pay", "order-7", Json::object());
  ASSERT_TRUE(out) << out.error().ToString();
  EXPECT_EQ(out->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(Payments(*store_), 1);
  EXPECT_EQ(owner_seen, "a");
  EXPECT_FALSE(store_->RunOwnerOf("order-7").value());  // ended: the row is gone
}

}  // namespace
}  // namespace once::runtime
