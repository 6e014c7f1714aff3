// App::Await on PostgreSQL, woken by LISTEN/NOTIFY (PostgresEndListener):
// two Apps on one schema, each with its own event store (two nodes), the
// execution ends on A and B awaits it. Labelled postgres: skipped without
// ONCE_TEST_POSTGRES_URL (failed when CI=true).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "once/orchestration/app.h"
#include "once/store_decorators/profiling_store.h"
#include "once/store_postgres/postgres_end_listener.h"
#include "test_database.h"

namespace once::orchestration {
namespace {

using events::Json;
using Steady = std::chrono::steady_clock;

class AwaitPostgresTest : public store::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    store_a_ = OpenStore();
    store_b_ = OpenStore();
    counted_b_ = std::make_unique<store::ProfilingStore>(*store_b_, clock_);
  }

  store::PostgresEndListenerOptions ListenerOptions() const {
    store::PostgresEndListenerOptions o;
    o.conninfo = schema_->Options().conninfo;
    o.schema = schema_->name();
    return o;
  }

  // Node A runs "gate": one step that waits for release_.
  std::unique_ptr<App> NodeA() {
    AppConfig c{.store = store_a_.get(), .clock = &system_clock_, .rng = &rng_};
    auto app = App::Create(std::move(c)).value();
    ONCE_CHECK(app->runtime()
                   .Register("gate",
                             [this](runtime::Context& ctx, const Json&) -> Result<Json> {
                               return ctx.Step("wait", [&]() -> Result<Json> {
                                 while (!release_.load()) {
                                   std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                 }
                                 return Json(1);
                               });
                             })
                   .has_value());
    return app;
  }
  // Node B awaits; its store's calls are counted (its reads of the log).
  std::unique_ptr<App> NodeB(store::EndListener* listener, int64_t poll_ms) {
    AppConfig c{.store = counted_b_.get(), .clock = &system_clock_, .rng = &rng_};
    c.end_listener = listener;
    c.await_poll_interval_ms = poll_ms;
    return App::Create(std::move(c)).value();
  }
  int64_t ReadsOfB() const {
    int64_t n = 0;
    for (const auto& [method, s] : counted_b_->Snapshot()) n += s.calls;
    return n;
  }
  // Await on B in a thread, returned once it has read the log (it waits now).
  std::future<Result<runtime::ExecutionState>> AwaitOnB(App& b, std::string id,
                                                        int64_t timeout_ms) {
    const int64_t before = ReadsOfB();
    auto f =
        std::async(std::launch::async, [&b, id, timeout_ms] { return b.Await(id, timeout_ms); });
    for (int i = 0; i < 30'000 && ReadsOfB() == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return f;
  }
  static bool WaitUntil(const std::function<bool()>& done) {
    for (int i = 0; i < 30'000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  }
  // Ends `id` on A (the body started on a thread, released now).
  void EndOnA(App& a, const std::string& id) {
    release_ = false;
    auto started = std::async(std::launch::async,
                              [&a, id] { return a.runtime().Start("gate", id, Json::object()); });
    release_ = true;
    ASSERT_TRUE(started.get());
  }

  SystemClock system_clock_;
  SeededRng rng_{3};
  std::atomic<bool> release_{false};
  std::unique_ptr<store::PostgresEventStore> store_a_, store_b_;
  std::unique_ptr<store::ProfilingStore> counted_b_;
};

double SecondsSince(Steady::time_point t0) {
  return std::chrono::duration<double>(Steady::now() - t0).count();
}

// The poll interval is 60 s: B sees A's end only if the NOTIFY wakes it.
TEST_F(AwaitPostgresTest, AnEndOnAnotherNodeWakesTheAwaitWithoutPolling) {
  auto listener = store::PostgresEndListener::Open(ListenerOptions());
  ASSERT_TRUE(listener) << listener.error().ToString();
  auto a = NodeA();
  auto b = NodeB(listener->get(), /*poll_ms=*/60'000);
  ASSERT_TRUE(b->Start());
  ASSERT_TRUE(WaitUntil([&] { return (*listener)->up(); }));
  auto waiting = AwaitOnB(*b, "x", 30'000);
  auto t0 = Steady::now();
  EndOnA(*a, "x");
  Result<runtime::ExecutionState> st = waiting.get();
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_EQ(st->status, runtime::ExecutionStatus::kCompleted);
  EXPECT_LT(SecondsSince(t0), 10.0);  // a generous bound: the NOTIFY takes milliseconds
  b->Stop();
}

// The negative control: without a listener the same Await polls every 60 s
// sees the end only at its 3 s timeout (its last read), not when it happens.
TEST_F(AwaitPostgresTest, WithoutTheListenerTheSameAwaitWaitsForItsPoll) {
  auto a = NodeA();
  auto b = NodeB(nullptr, /*poll_ms=*/60'000);
  const auto t0 = Steady::now();
  auto waiting = AwaitOnB(*b, "x", 3'000);
  EndOnA(*a, "x");
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(1'500)), std::future_status::timeout);
  (void)waiting.get();
  EXPECT_GE(SecondsSince(t0), 3.0);
}

// The listener's connection killed (pg_terminate_backend) and not coming back
// for a minute: the waiter falls back to polling (100 ms) and sees the end.
TEST_F(AwaitPostgresTest, AKilledListenerFallsBackToPolling) {
  store::PostgresEndListenerOptions o = ListenerOptions();
  o.reconnect_interval_ms = 60'000;
  auto listener = store::PostgresEndListener::Open(o);
  ASSERT_TRUE(listener) << listener.error().ToString();
  auto a = NodeA();
  auto b = NodeB(listener->get(), /*poll_ms=*/100);
  ASSERT_TRUE(b->Start());
  ASSERT_TRUE(WaitUntil([&] { return (*listener)->up(); }));
  auto waiting = AwaitOnB(*b, "y", 30'000);
  const int pid = (*listener)->backend_pid();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(schema_->Sql("SELECT pg_terminate_backend(" + std::to_string(pid) + ")"), "t");
  ASSERT_TRUE(WaitUntil([&] { return !(*listener)->up(); }));
  auto t0 = Steady::now();
  EndOnA(*a, "y");
  Result<runtime::ExecutionState> st = waiting.get();
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_EQ(st->status, runtime::ExecutionStatus::kCompleted);
  EXPECT_LT(SecondsSince(t0), 10.0);  // not the 30 s timeout: it polled
  b->Stop();
}

// A killed listener reconnects and hears ends again (poll 60 s).
TEST_F(AwaitPostgresTest, AReconnectedListenerHearsEndsAgain) {
  store::PostgresEndListenerOptions o = ListenerOptions();
  o.reconnect_interval_ms = 20;
  auto listener = store::PostgresEndListener::Open(o);
  ASSERT_TRUE(listener) << listener.error().ToString();
  auto a = NodeA();
  auto b = NodeB(listener->get(), /*poll_ms=*/60'000);
  ASSERT_TRUE(b->Start());
  ASSERT_TRUE(WaitUntil([&] { return (*listener)->backend_pid() > 0; }));
  const int pid = (*listener)->backend_pid();
  EXPECT_EQ(schema_->Sql("SELECT pg_terminate_backend(" + std::to_string(pid) + ")"), "t");
  ASSERT_TRUE(WaitUntil([&] {
    int now = (*listener)->backend_pid();
    return now > 0 && now != pid && (*listener)->up();
  }));
  auto waiting = AwaitOnB(*b, "z", 30'000);
  auto t0 = Steady::now();
  EndOnA(*a, "z");
  Result<runtime::ExecutionState> st = waiting.get();
  ASSERT_TRUE(st) << st.error().ToString();
  EXPECT_EQ(st->status, runtime::ExecutionStatus::kCompleted);
  EXPECT_LT(SecondsSince(t0), 10.0);
  b->Stop();
}

// Open refuses bad options and a schema without the event store's tables.
TEST_F(AwaitPostgresTest, OpenRefusesBadOptions) {
  store::PostgresEndListenerOptions o = ListenerOptions();
  o.check_interval_ms = 0;
  EXPECT_EQ(store::PostgresEndListener::Open(o).error().code, ErrorCode::kInvalidArgument);
  o = ListenerOptions();
  o.schema = schema_->name() + "_missing";
  EXPECT_FALSE(store::PostgresEndListener::Open(o));
}

}  // namespace
}  // namespace once::orchestration
