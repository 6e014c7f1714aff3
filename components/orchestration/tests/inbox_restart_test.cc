// The durable inbox through App: a message outlives the process that
// stored it (and one that crashed mid-delivery) and is delivered exactly
// once after the restart; two nodes on one database sending to and
// delivering for one execution never deliver a message twice or lose one.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "once/orchestration/app.h"
#include "test_support.h"

namespace once::orchestration {
namespace {

using events::Json;
using testing::Backend;
using testing::Count;
using testing::HookStore;

// One process (or node): its own event store, inbox store and App on the
// database.
struct Node {
  Node(testing::BaseStore& db, const Clock& clock, Rng& rng, std::vector<Error>& errors,
       int64_t sweep_ms = 0)
      : events(db.OpenEventStore()), hook(*events), messages(db.OpenInbox()) {
    AppConfig config{.store = &hook, .clock = &clock, .rng = &rng, .inbox = messages.get()};
    config.inbox_sweep_interval_ms = sweep_ms;
    config.runtime.on_error = [&errors](const Error& e) {
      static std::mutex mu;  // the App's sweeper thread reports here too
      std::lock_guard lock(mu);
      errors.push_back(e);
    };
    auto made = App::Create(std::move(config));
    ONCE_CHECK_MSG(made.has_value(), "App::Create failed");
    app = std::move(*made);
    testing::RegisterWorkflows(app->runtime());
  }
  Inbox& inbox() { return *app->inbox(); }
  runtime::ExecutionState State(std::string_view id) { return app->runtime().Inspect(id).value(); }

  std::unique_ptr<store::EventStore> events;
  HookStore hook;
  std::unique_ptr<inbox::InboxStore> messages;
  std::unique_ptr<App> app;
};

class InboxRestartTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (std::string why = db_.SkipReason(); !why.empty()) GTEST_SKIP() << why;
  }
  std::unique_ptr<Node> Boot() { return std::make_unique<Node>(db_, clock_, rng_, errors_); }
  int Consumed(std::string_view id) { return Count(db_.get(), id, "MESSAGE_CONSUMED"); }
  int Resumed(std::string_view id) { return Count(db_.get(), id, "EXECUTION_RESUMED"); }

  ManualClock clock_;
  SeededRng rng_{17};
  testing::BaseStore db_{GetParam(), clock_};
  std::vector<Error> errors_;
};

TEST_P(InboxRestartTest, TheAppBuildsTheInboxStoreOnTheBackend) {
  auto node = Boot();
  ASSERT_NE(node->app->inbox(), nullptr);
  ASSERT_TRUE(node->inbox().Send("r", "approve", "kept"));
  // A second store object on the same database sees the row.
  auto other = db_.OpenInbox();
  EXPECT_EQ(other->Get("r", "approve", 1).value()->message, "kept");
}

// Sent before the execution exists; the process goes away; after the
// restart the execution parks and receives it exactly once.
TEST_P(InboxRestartTest, AMessageSentBeforeARestartIsDeliveredOnceAtThePark) {
  {
    auto before = Boot();
    EXPECT_EQ(before->inbox().Send("r", "approve", "yes").value().delivery, Delivery::kNoop);
  }
  auto after = Boot();
  ASSERT_TRUE(after->app->runtime().Start("receiver", "r", Json()));
  EXPECT_EQ(after->State("r").status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(after->State("r").result["value"], "yes");
  EXPECT_EQ(after->inbox().Sweep().value().delivered, 0u);
  EXPECT_EQ(Consumed("r"), 1);
  EXPECT_EQ(Resumed("r"), 1);
  EXPECT_TRUE(after->app->inbox_store()->Executions("", 10).value().empty());
  EXPECT_TRUE(errors_.empty());
}

// Parked, then the process dies between the acquire and the append of the
// delivery (re-drive off: nothing else will retry). The boot Sweep of the
// next process delivers it exactly once.
TEST_P(InboxRestartTest, ACrashBetweenAcquireAndAppendIsDeliveredOnceAfterTheRestart) {
  {
    auto before = Boot();
    ASSERT_TRUE(before->app->runtime().Start("receiver", "r", Json()));
    before->hook.crash_next = HookStore::Crash::kBeforeAppend;
    EXPECT_EQ(before->inbox().Send("r", "approve", "yes").value().delivery, Delivery::kContended);
    EXPECT_EQ(before->hook.crashes, 1);
  }
  EXPECT_EQ(Consumed("r"), 0);
  auto after = Boot();
  SweepReport swept = after->inbox().Sweep().value();
  EXPECT_EQ(swept.delivered, 1u);
  EXPECT_TRUE(swept.errors.empty());
  EXPECT_EQ(after->State("r").result["value"], "yes");
  EXPECT_EQ(after->inbox().Sweep().value().delivered, 0u);
  EXPECT_EQ(Consumed("r"), 1);
  EXPECT_EQ(Resumed("r"), 1);
}

// Dies right after the append: delivered, its delete never ran. The next
// process's Sweep deletes it and delivers nothing again.
TEST_P(InboxRestartTest, ACrashAfterTheAppendIsNeverDeliveredAgainAfterTheRestart) {
  {
    auto before = Boot();
    ASSERT_TRUE(before->app->runtime().Start("receiver2", "r", Json()));
    before->hook.crash_next = HookStore::Crash::kAfterAppend;
    ASSERT_TRUE(before->inbox().Send("r", "approve", "one"));
    EXPECT_EQ(before->hook.crashes, 1);
  }
  auto after = Boot();
  EXPECT_EQ(after->app->inbox_store()->Pending("r").value().size(), 1u);  // left by the crash
  SweepReport swept = after->inbox().Sweep().value();
  EXPECT_EQ(swept.delivered, 0u);
  EXPECT_TRUE(after->app->inbox_store()->Pending("r").value().empty());
  EXPECT_EQ(Consumed("r"), 1);
  EXPECT_EQ(after->inbox().Send("r", "approve", "two").value().delivery, Delivery::kDelivered);
  EXPECT_EQ(after->State("r").result["value"], Json::array({"one", "two"}));
  EXPECT_EQ(Consumed("r"), 2);
  EXPECT_EQ(Resumed("r"), 2);
}

// A sender stores a message and dies between the acquire and the append of
// its delivery; the other node, already running, delivers it on its own
// (its Start() sweeper), with no restart and no operator.
TEST_P(InboxRestartTest, ARunningNodeDeliversAMessageACrashedSenderStranded) {
  auto running = std::make_unique<Node>(db_, clock_, rng_, errors_, /*sweep_ms=*/20);
  ASSERT_TRUE(running->app->runtime().Start("receiver", "r", Json()));
  ASSERT_TRUE(running->app->Start());
  {
    auto sender = Boot();
    sender->hook.crash_next = HookStore::Crash::kBeforeAppend;
    // The sweeper may deliver before the sender's own acquire: the sender
    // never appends either way, so every delivery below is the sweeper's.
    EXPECT_NE(sender->inbox().Send("r", "approve", "yes").value().delivery, Delivery::kDelivered);
  }
  for (int i = 0; i < 500 && Consumed("r") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  running->app->Stop();
  EXPECT_EQ(Consumed("r"), 1);
  EXPECT_EQ(Resumed("r"), 1);
  EXPECT_EQ(running->State("r").result["value"], "yes");
}

// Two nodes, each with its own stores and App on one database, send 2 x 15
// messages to one execution at once and deliver whatever they can; then
// both sweep until it is done. Every message is delivered exactly once, in
// each sender's order.
TEST_P(InboxRestartTest, TwoNodesSendingAndDeliveringForOneExecutionNeverDoubleDeliver) {
  constexpr int kEach = 15;
  std::vector<Error> errors_b;
  auto a = Boot();
  auto b = std::make_unique<Node>(db_, clock_, rng_, errors_b);
  ASSERT_TRUE(a->app->runtime().Start("many", "m", 2 * kEach));
  std::vector<std::thread> senders;
  for (Node* node : {a.get(), b.get()}) {
    senders.emplace_back([node, tag = node == a.get() ? "a" : "b"] {
      for (int i = 0; i < kEach; ++i) {
        ASSERT_TRUE(node->inbox().Send("m", "t", Json{{"from", tag}, {"i", i}}));
        ASSERT_TRUE(node->inbox().DeliverPending("m"));
      }
    });
  }
  for (auto& t : senders) t.join();
  for (int round = 0; round < 100 && a->State("m").status != runtime::ExecutionStatus::kCompleted;
       ++round) {
    ASSERT_TRUE((round % 2 ? a : b)->inbox().Sweep());
  }
  ASSERT_EQ(a->State("m").status, runtime::ExecutionStatus::kCompleted);
  Json got = a->State("m").result["value"];
  ASSERT_EQ(got.size(), 2u * kEach);
  std::set<std::pair<std::string, int>> seen;
  std::map<std::string, int> last{{"a", -1}, {"b", -1}};
  for (const Json& m : got) {
    std::string from = m["from"];
    int i = m["i"];
    EXPECT_TRUE(seen.insert({from, i}).second) << m.dump() << " delivered twice";
    EXPECT_GT(i, last[from]) << "out of " << from << "'s order";
    last[from] = i;
  }
  EXPECT_EQ(Consumed("m"), 2 * kEach);
  EXPECT_EQ(Resumed("m"), 2 * kEach);
  EXPECT_TRUE(a->app->inbox_store()->Executions("", 10).value().empty());
}

INSTANTIATE_TEST_SUITE_P(Durable, InboxRestartTest,
                         ::testing::ValuesIn(testing::DurableInboxBackends()),
                         testing::BackendName);

}  // namespace
}  // namespace once::orchestration
