// Runtime resumers under the deterministic step scheduler (store_testing):
// real Runtime::Resume calls, each actor on its own thread through its own
// StepStore, one store call at a time in the order a schedule names, with
// crashes between any two calls. The design record's runtime cases (D2) and
// every interleaving of two resumers ({A,B}^n, n <= 7: 255 schedules), with
// the unconditional acquire as a negative control the same checker catches.
//
// Backends: memory (a fresh store per schedule) and SQLite (one file, a fresh
// execution id per schedule) in runtime_interleaving_test; PostgreSQL (one
// schema, a fresh execution id per schedule; ONCE_TEST_POSTGRES_URL) in
// runtime_interleaving_postgres_test (ONCE_RT_BACKEND_POSTGRES).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <memory>
#include <random>

#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "once/store_testing/step_scheduler.h"
#include "test_stores.h"

#if defined(ONCE_RT_BACKEND_POSTGRES)
#include "../../store_postgres/tests/test_database.h"
#else
#include "once/store_sqlite/sqlite_event_store.h"
#endif

namespace once::runtime {
namespace {

using store::EventStore;
using store_testing::AfterSchedule;
using store_testing::EnumerateSchedules;
using store_testing::RunActors;
using store_testing::Schedule;
using store_testing::StepOptions;
using store_testing::StepRun;

// What one resumer saw of its own appends.
struct ResumerOutcome {
  bool resumed = false;     // an append of its carrying EXECUTION_RESUMED landed
  bool fenced_out = false;  // a later append of its was refused with kStaleFence
  std::optional<Error> error;
  std::optional<RunOutcome> outcome;
};

bool CarriesResume(const store::AppendRequest& req) {
  for (const Envelope& e : req.events) {
    if (e.Is(events::KernelKind::kExecutionResumed)) return true;
  }
  return false;
}

// Records what happened to the appends of one resumer (the checker's eyes).
class RecordingStore final
    : public store::EventStoreWrapper<RecordingStore, store::ForwardEverything> {
 public:
  RecordingStore(EventStore& target, ResumerOutcome& out) : EventStoreWrapper(target), out_(out) {}
  Result<int64_t> Append(const store::AppendRequest& req) override {
    Result<int64_t> r = target().Append(req);
    if (r && CarriesResume(req)) out_.resumed = true;
    if (!r && r.error().code == ErrorCode::kStaleFence && out_.resumed) out_.fenced_out = true;
    return r;
  }

 private:
  ResumerOutcome& out_;
};

// sleep; step a; step b. On resume: {RESUMED, STEP a} is appended before
// step b runs, {STEP b, COMPLETED} at the end: the winner's body has an
// append after its EXECUTION_RESUMED landed, which a rival's acquire could
// fence out.
// "twice" parks, steps and parks again (so an answered park leaves the
// execution parked, not terminal).
Status RegisterSleeper(Runtime& rt) {
  ONCE_RETURN_IF_ERROR(rt.Register("sleeper", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    ONCE_ASSIGN_OR_RETURN(Json a, ctx.Step("a", [&]() -> Result<Json> { return 1; }));
    ONCE_ASSIGN_OR_RETURN(Json b, ctx.Step("b", [&]() -> Result<Json> { return 2; }));
    return a.get<int>() + b.get<int>();
  }));
  return rt.Register("twice", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    ONCE_RETURN_IF_ERROR(ctx.Step("a", [&]() -> Result<Json> { return 1; }));
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(1)));
    return 0;
  });
}

enum class Acquire { kConditional, kUnconditional };
// How the resumer's store gives the tail under the new token: with the
// acquire (AcquireFenceIfReadTail, one store call) or in a read of its own.
enum class Tail { kCombined, kSeparate };
const char* Name(Tail t) { return t == Tail::kCombined ? "combined tail" : "separate tail"; }

// A resumer actor: a Runtime of its own over its gated store.
store_testing::Actor Resumer(const Clock& clock, std::string id, int64_t park_seq, Acquire how,
                             ResumerOutcome* out, Tail tail = Tail::kCombined) {
  return [&clock, id, park_seq, how, out, tail](EventStore& gated) {
    testing::SeparateTailStore separate(gated);
    RecordingStore store(tail == Tail::kSeparate ? static_cast<EventStore&>(separate) : gated,
                         *out);
    Runtime rt(store, clock, {.group_commit = false});
    if (!RegisterSleeper(rt)) return;
    RunOptions options;
    if (how == Acquire::kConditional) {
      options.fence_if_parked_at = park_seq;
    } else {
      Result<int64_t> token = store.AcquireFence(id);
      if (!token) {
        out->error = token.error();
        return;
      }
      options.fence = *token;
    }
    Result<RunOutcome> r = rt.Resume(id, options);
    if (r) {
      out->outcome = std::move(*r);
    } else {
      out->error = r.error();
    }
  };
}

// ---- Backends ------------------------------------------------------------------

// Hands out a store and a fresh execution id per schedule.
class Backend {
 public:
  virtual ~Backend() = default;
  // Ok, or a reason to skip.
  virtual Status Open(const Clock& clock) = 0;
  virtual EventStore& Fresh() = 0;  // the store for the next schedule
  std::string NextId() { return "ex-" + std::to_string(++ids_); }

 private:
  int ids_ = 0;
};

class MemoryBackend final : public Backend {
 public:
  Status Open(const Clock& clock) override {
    clock_ = &clock;
    return Ok();
  }
  EventStore& Fresh() override {
    store_ = std::make_unique<store::MemoryEventStore>(store::Limits{}, *clock_);
    return *store_;
  }

 private:
  const Clock* clock_ = nullptr;
  std::unique_ptr<store::MemoryEventStore> store_;
};

#if defined(ONCE_RT_BACKEND_POSTGRES)
class PostgresBackend final : public Backend {
 public:
  ~PostgresBackend() override {
    store_.reset();
    schema_.reset();
  }
  Status Open(const Clock& clock) override {
    std::string url = store::testing::TestPostgresUrl();
    if (url.empty()) return MakeError(ErrorCode::kUnavailable, "ONCE_TEST_POSTGRES_URL is unset");
    schema_ = std::make_unique<store::testing::TestSchema>(url);
    ONCE_ASSIGN_OR_RETURN(store_, store::PostgresEventStore::Open(schema_->Options(), clock));
    return Ok();
  }
  EventStore& Fresh() override { return *store_; }

 private:
  std::unique_ptr<store::testing::TestSchema> schema_;
  std::unique_ptr<EventStore> store_;
};
#else
class SqliteBackend final : public Backend {
 public:
  ~SqliteBackend() override {
    store_.reset();
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::filesystem::remove(path_.string() + suffix, ec);
    }
  }
  Status Open(const Clock& clock) override {
    path_ = std::filesystem::temp_directory_path() /
            ("once_rt_interleave_" + std::to_string(std::random_device{}()) + ".db");
    store::SqliteOptions options;
    options.clock = &clock;
    options.durability = store::Durability::kNormal;  // crashes here are simulated
    ONCE_ASSIGN_OR_RETURN(store_, store::SqliteEventStore::Open(path_.string(), options));
    return Ok();
  }
  EventStore& Fresh() override { return *store_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<EventStore> store_;
};
#endif

using BackendMaker = std::function<std::unique_ptr<Backend>()>;

struct NamedBackend {
  std::string name;
  BackendMaker make;
};

class InterleavingTest : public ::testing::TestWithParam<NamedBackend> {
 public:
  void SetUp() override {
    backend_ = GetParam().make();
    Status s = backend_->Open(clock_);
    if (!s) {
#if defined(ONCE_RT_BACKEND_POSTGRES)
      if (store::testing::InCi()) FAIL() << s.error().ToString();
#endif
      GTEST_SKIP() << s.error().ToString();
    }
  }

  // Writes [STARTED, SUSPENDED] for a fresh id on a fresh store.
  struct Parked {
    EventStore* store;
    std::string id;
    int64_t park_seq;
  };
  Parked Park(std::string_view workflow = "sleeper") {
    EventStore& store = backend_->Fresh();
    std::string id = backend_->NextId();
    Runtime rt(store, clock_, {.group_commit = false});
    EXPECT_TRUE(RegisterSleeper(rt));
    Result<RunOutcome> out = rt.Start(workflow, id, Json::object());
    EXPECT_TRUE(out && out->park_seq) << (out ? "" : out.error().ToString());
    return Parked{&store, id, out && out->park_seq ? *out->park_seq : 0};
  }

  static std::vector<Envelope> Log(EventStore& s, const std::string& id) {
    Result<std::vector<Envelope>> log = s.ReadRange(id, 1, store::kToEnd);
    EXPECT_TRUE(log) << log.error().ToString();
    return log.value_or(std::vector<Envelope>{});
  }
  static int Count(std::span<const Envelope> log, events::KernelKind kind) {
    int n = 0;
    for (const Envelope& e : log) n += e.Is(kind);
    return n;
  }

  void RivalResumeCommitsBetweenReReadAndRetry(Tail tail, const char* schedule);

  ManualClock clock_;
  std::unique_ptr<Backend> backend_;
};

// ---- Every interleaving of two resumers --------------------------------------

struct RaceTotals {
  int schedules = 0;
  int violations = 0;         // schedules the checker flags
  int fenced_out_bodies = 0;  // winners whose later append was refused stale
  int max_resumes = 0;
  int no_winner = 0;  // schedules that ended with no EXECUTION_RESUMED
};

// The checker: at most one EXECUTION_RESUMED past the park, and the winner's
// body (its appends after its EXECUTION_RESUMED landed) never fenced out.
RaceTotals RaceTwoResumers(std::span<const Schedule> schedules, Acquire how, AfterSchedule after,
                           std::function<InterleavingTest::Parked()> park, const Clock& clock,
                           Tail tail = Tail::kCombined) {
  RaceTotals totals;
  for (const Schedule& schedule : schedules) {
    SCOPED_TRACE("schedule \"" + schedule.ToString() + "\"");
    InterleavingTest::Parked p = park();
    if (p.park_seq == 0) break;
    std::array<ResumerOutcome, 2> outcomes;
    std::vector<store_testing::Actor> actors = {
        Resumer(clock, p.id, p.park_seq, how, &outcomes[0], tail),
        Resumer(clock, p.id, p.park_seq, how, &outcomes[1], tail)};
    StepRun run = RunActors(*p.store, schedule, actors, StepOptions{.after = after});
    EXPECT_FALSE(run.timed_out) << run.TraceText();
    if (run.timed_out) break;
    std::vector<Envelope> log = InterleavingTest::Log(*p.store, p.id);
    int resumes = 0;
    for (const Envelope& e : log) {
      resumes += e.sequence > p.park_seq && e.Is(events::KernelKind::kExecutionResumed);
    }
    int fenced_out = outcomes[0].fenced_out + outcomes[1].fenced_out;
    int winners = outcomes[0].resumed + outcomes[1].resumed;
    ++totals.schedules;
    totals.max_resumes = std::max(totals.max_resumes, resumes);
    totals.fenced_out_bodies += fenced_out;
    totals.no_winner += resumes == 0;
    bool violation = resumes > 1 || fenced_out > 0;
    totals.violations += violation;
    if (how == Acquire::kConditional) {
      EXPECT_FALSE(violation) << resumes << " resumes, " << fenced_out
                              << " fenced-out bodies; trace: " << run.TraceText();
      EXPECT_EQ(winners, resumes) << run.TraceText();
      if (::testing::Test::HasFailure()) break;
    }
  }
  return totals;
}

TEST_P(InterleavingTest, TwoConditionalResumersEveryScheduleNeverFenceOutTheWinner) {
  std::vector<Schedule> all = EnumerateSchedules(2, 7);
  ASSERT_EQ(all.size(), 255u);  // "" + {A,B}^1..7
  for (Tail tail : {Tail::kCombined, Tail::kSeparate}) {
    for (AfterSchedule after : {AfterSchedule::kRunToCompletion, AfterSchedule::kCrashAll}) {
      SCOPED_TRACE(Name(tail));
      SCOPED_TRACE(after == AfterSchedule::kCrashAll ? "then crash all" : "then run to completion");
      RaceTotals t = RaceTwoResumers(
          all, Acquire::kConditional, after, [this] { return Park(); }, clock_, tail);
      EXPECT_EQ(t.schedules, 255);
      EXPECT_EQ(t.violations, 0);
      EXPECT_LE(t.max_resumes, 1);
      // Nobody crashed: one of the two always wins.
      if (after == AfterSchedule::kRunToCompletion) {
        EXPECT_EQ(t.no_winner, 0);
      }
    }
  }
}

TEST_P(InterleavingTest, TwoConditionalResumersWithCrashMarkers) {
  // Every schedule of up to 4 steps over {A, A!, B, B!}, then run to
  // completion: a crash between any two store calls of either resumer.
  std::vector<Schedule> all = EnumerateSchedules(2, 4, /*with_crashes=*/true);
  ASSERT_EQ(all.size(), 1u + 4 + 16 + 64 + 256);
  for (Tail tail : {Tail::kCombined, Tail::kSeparate}) {
    SCOPED_TRACE(Name(tail));
    RaceTotals t = RaceTwoResumers(
        all, Acquire::kConditional, AfterSchedule::kRunToCompletion, [this] { return Park(); },
        clock_, tail);
    EXPECT_EQ(t.schedules, static_cast<int>(all.size()));
    EXPECT_EQ(t.violations, 0);
  }
}

TEST_P(InterleavingTest, NegativeControlTheUnconditionalAcquireFencesOutTheWinner) {
  // The same race, each resumer taking AcquireFence up front and resuming
  // under it: the checker must catch a winner's body fenced out.
  std::vector<Schedule> all = EnumerateSchedules(2, 7);
  RaceTotals t = RaceTwoResumers(
      all, Acquire::kUnconditional, AfterSchedule::kRunToCompletion, [this] { return Park(); },
      clock_);
  EXPECT_EQ(t.schedules, 255);
  EXPECT_GT(t.fenced_out_bodies, 0);
  EXPECT_GT(t.violations, 0);
}

// ---- The design record's runtime cases, one schedule each ----------------------

store_testing::Actor DeadAcquirer(std::string id, int acquires) {
  return [id, acquires](EventStore& s) {
    for (int i = 0; i < acquires; ++i) {
      if (!s.AcquireFence(id)) return;
    }
  };
}

Schedule S(std::string_view text) { return Schedule::Parse(text).value(); }

TEST_P(InterleavingTest, DeadAcquirerThenResumeSucceedsThroughTheCurrentTokenRetry) {
  Parked p = Park();
  ResumerOutcome b;
  std::vector<store_testing::Actor> actors = {
      DeadAcquirer(p.id, 1), Resumer(clock_, p.id, p.park_seq, Acquire::kConditional, &b)};
  // B reads the park, A acquires and dies, B's {0, park} is stale, B
  // re-reads and retries with {1, park}.
  StepRun run = RunActors(*p.store, S("BA"), actors);
  ASSERT_TRUE(b.outcome) << b.error->ToString() << " " << run.TraceText();
  EXPECT_EQ(b.outcome->status, ExecutionStatus::kCompleted);
  EXPECT_EQ(p.store->ReadFence(p.id).value(), 2);
  EXPECT_EQ(Count(Log(*p.store, p.id), events::KernelKind::kExecutionResumed), 1);
}

TEST_P(InterleavingTest, ThreeDeadAcquirersGiveContendedAndLeaveTheLogUntouched) {
  // Before each of B's three conditional acquires, A acquires and dies. With
  // the combined tail B's re-read is its acquire's own; separately it is a
  // read after each stale answer.
  for (auto [tail, schedule] :
       {std::pair{Tail::kCombined, "BA BA BA B"}, std::pair{Tail::kSeparate, "BA B BA B BA B"}}) {
    SCOPED_TRACE(Name(tail));
    Parked p = Park();
    std::vector<Envelope> before = Log(*p.store, p.id);
    ResumerOutcome b;
    std::vector<store_testing::Actor> actors = {
        DeadAcquirer(p.id, 3), Resumer(clock_, p.id, p.park_seq, Acquire::kConditional, &b, tail)};
    StepRun run = RunActors(*p.store, S(schedule), actors);
    ASSERT_TRUE(b.error) << run.TraceText();
    EXPECT_EQ(b.error->code, ErrorCode::kResumeContended) << b.error->ToString();
    EXPECT_TRUE(b.error->retryable());
    EXPECT_EQ(Log(*p.store, p.id), before);
    EXPECT_EQ(p.store->ReadFence(p.id).value(), 3);
  }
}

TEST_P(InterleavingTest, ARivalResumeCommittingBetweenReReadAndRetryLeavesTheLoserNotSuspended) {
  // Separate tail: B: read, acquire-if {0} (stale, current 1), re-read
  // (unanswered). A: read, {0} stale, re-read, {1} -> 2, tail, {RESUMED, a}.
  // B: {1} again -> stale on the answer, re-read: not-suspended.
  // Combined: the same, each re-read and tail being the acquire's own.
  for (auto [tail, schedule] :
       {std::pair{Tail::kCombined, "BB AAAA B"}, std::pair{Tail::kSeparate, "BBB AAAAAA B"}}) {
    SCOPED_TRACE(Name(tail));
    RivalResumeCommitsBetweenReReadAndRetry(tail, schedule);
    if (HasFailure()) return;
  }
}

void InterleavingTest::RivalResumeCommitsBetweenReReadAndRetry(Tail tail, const char* schedule) {
  Parked p = Park();
  ASSERT_EQ(p.store->AcquireFence(p.id).value(), 1);  // a dead acquirer: B's first try is stale
  ResumerOutcome a, b;
  std::vector<store_testing::Actor> actors = {
      Resumer(clock_, p.id, p.park_seq, Acquire::kConditional, &a, tail),
      Resumer(clock_, p.id, p.park_seq, Acquire::kConditional, &b, tail)};
  StepRun run = RunActors(*p.store, S(schedule), actors);
  ASSERT_TRUE(a.outcome) << (a.error ? a.error->ToString() : "") << " " << run.TraceText();
  EXPECT_EQ(a.outcome->status, ExecutionStatus::kCompleted);
  ASSERT_TRUE(b.error) << run.TraceText();
  EXPECT_EQ(b.error->code, ErrorCode::kResumeRefused);
  EXPECT_EQ(b.error->As<ResumeRefusedDetail>()->reason, "not-suspended");
  EXPECT_FALSE(a.fenced_out);
  EXPECT_EQ(Count(Log(*p.store, p.id), events::KernelKind::kExecutionResumed), 1);
  EXPECT_EQ(p.store->ReadFence(p.id).value(), 2);  // B never acquired
}

TEST_P(InterleavingTest, AnUnfencedDenialOrAppEventAfterTheParkDoesNotRefuseTheResume) {
  for (bool denial : {true, false}) {
    SCOPED_TRACE(denial ? "EXECUTION_DENIED" : "app event");
    Parked p = Park();
    ResumerOutcome b;
    store_testing::Actor appender = [&, denial, id = p.id](EventStore& s) {
      if (denial) {
        Runtime rt(s, clock_, {.group_commit = false});
        (void)rt.RecordExecutionDenied(id, "eve", "between the read and the acquire");
        return;
      }
      Result<int64_t> head = s.Head(id);
      if (!head) return;
      (void)s.Append({.execution_id = id,
                      .expected_next = *head + 1,
                      .events = {events::AppEvent("sibling.output", Json(1))},
                      .fence = std::nullopt});
    };
    std::vector<store_testing::Actor> actors = {
        appender, Resumer(clock_, p.id, p.park_seq, Acquire::kConditional, &b)};
    // B reads the park; A appends (Head, Append); B acquires and runs.
    StepRun run = RunActors(*p.store, S("BAA"), actors);
    ASSERT_TRUE(b.outcome) << (b.error ? b.error->ToString() : "") << " " << run.TraceText();
    EXPECT_EQ(b.outcome->status, ExecutionStatus::kCompleted);
    std::vector<Envelope> log = Log(*p.store, p.id);
    for (size_t i = 0; i < log.size(); ++i) EXPECT_EQ(log[i].sequence, static_cast<int64_t>(i + 1));
    EXPECT_EQ(log[p.park_seq + 1].kind, "EXECUTION_RESUMED");
    EXPECT_EQ(p.store->ReadFence(p.id).value(), 1);
  }
}

TEST_P(InterleavingTest, AnAnsweredParkOrANonParkSequenceIsNotSuspendedAndTakesNoToken) {
  Parked p = Park("twice");
  ResumerOutcome first;
  RunActors(*p.store, S(""),
            std::vector<store_testing::Actor>{
                Resumer(clock_, p.id, p.park_seq, Acquire::kConditional, &first)});
  ASSERT_TRUE(first.outcome);
  std::vector<Envelope> before = Log(*p.store, p.id);
  int64_t token = p.store->ReadFence(p.id).value();
  for (int64_t seq : {p.park_seq, int64_t{1}, int64_t{999}}) {
    ResumerOutcome again;
    RunActors(*p.store, S(""),
              std::vector<store_testing::Actor>{
                  Resumer(clock_, p.id, seq, Acquire::kConditional, &again)});
    ASSERT_TRUE(again.error) << seq;
    EXPECT_EQ(again.error->code, ErrorCode::kResumeRefused) << seq;
    EXPECT_EQ(again.error->As<ResumeRefusedDetail>()->reason, "not-suspended");
    EXPECT_EQ(p.store->ReadFence(p.id).value(), token);
    EXPECT_EQ(Log(*p.store, p.id), before);
  }
}

TEST_P(InterleavingTest, WithoutTheMethodTheResumeFallsBackToAcquireFence) {
  Parked p = Park();
  ResumerOutcome b;
  store_testing::Actor fallback = [&, id = p.id, park = p.park_seq](EventStore& gated) {
    testing::NoFenceIfStore no_if(gated);
    RecordingStore store(no_if, b);
    Runtime rt(store, clock_, {.group_commit = false});
    if (!RegisterSleeper(rt)) return;
    Result<RunOutcome> r = rt.Resume(id, {.fence_if_parked_at = park});
    if (r) {
      b.outcome = *r;
    } else {
      b.error = r.error();
    }
  };
  std::vector<store_testing::Actor> actors = {DeadAcquirer(p.id, 1), fallback};
  StepRun run = RunActors(*p.store, S("BA"), actors);
  ASSERT_TRUE(b.outcome) << (b.error ? b.error->ToString() : "") << " " << run.TraceText();
  EXPECT_EQ(run.TraceText().find("AcquireFenceIf"), std::string::npos) << run.TraceText();
  EXPECT_EQ(p.store->ReadFence(p.id).value(), 2);
  EXPECT_EQ(Log(*p.store, p.id)[p.park_seq].fence(), 2);
}

#if defined(ONCE_RT_BACKEND_POSTGRES)
INSTANTIATE_TEST_SUITE_P(Backends, InterleavingTest,
                         ::testing::Values(NamedBackend{
                             "Postgres", [] { return std::make_unique<PostgresBackend>(); }}),
                         [](const auto& info) { return info.param.name; });
#else
INSTANTIATE_TEST_SUITE_P(
    Backends, InterleavingTest,
    ::testing::Values(NamedBackend{"Memory", [] { return std::make_unique<MemoryBackend>(); }},
                      NamedBackend{"Sqlite", [] { return std::make_unique<SqliteBackend>(); }}),
    [](const auto& info) { return info.param.name; });
#endif

}  // namespace
}  // namespace once::runtime
