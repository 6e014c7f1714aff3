// Inbox: store, deliver on park, exactly once through crashes.
#include "once/orchestration/inbox.h"

#include <gtest/gtest.h>

#include "once/orchestration/runtime_waker.h"
#include "once/timers/memory_timer_store.h"
#include "test_support.h"

namespace once::orchestration {
namespace {

using events::Json;
using testing::Backend;
using testing::Count;
using testing::HookStore;

class InboxTest : public ::testing::TestWithParam<Backend> {
 protected:
  runtime::RuntimeOptions RtOptions() {
    return {.on_park = [this](const std::string& id, int64_t seq, const store::Envelope& park) {
      if (inbox_) inbox_->OnPark(id, seq, park);
    }};
  }
  void Make(bool redrive) {
    InboxOptions o{.on_error = [this](const Error& e) { errors_.push_back(e); }};
    if (redrive) o.redrive = RedriveWiring{&timers_, &service_};
    inbox_ = std::make_unique<Inbox>(rt_, *messages_, clock_, rng_, o);
  }
  void SetUp() override {
    if (std::string why = base_.SkipReason(); !why.empty()) GTEST_SKIP() << why;
    testing::RegisterWorkflows(rt_);
  }
  runtime::ExecutionState State(std::string_view id) { return rt_.Inspect(id).value(); }
  int Consumed() { return Count(base_.get(), "r", "MESSAGE_CONSUMED"); }
  int Resumed() { return Count(base_.get(), "r", "EXECUTION_RESUMED"); }
  void Poll(int times) {
    for (int i = 0; i < times; ++i) {
      clock_.Advance(std::chrono::milliseconds(250));
      ASSERT_TRUE(service_.PollOnce());
    }
  }

  ManualClock clock_;
  SeededRng rng_{11};
  testing::BaseStore base_{GetParam(), clock_};
  HookStore store_{base_.get()};
  timers::MemoryTimerStore timers_;
  std::unique_ptr<InboxStore> messages_ = base_.OpenInbox();  // the backend's
  std::vector<Error> errors_;
  std::unique_ptr<Inbox> inbox_;
  runtime::Runtime rt_{store_, clock_, RtOptions()};
  RuntimeWaker waker_{rt_};
  timers::TimerService service_{timers_, waker_, clock_, rng_, {.owner = "n1"}};
};

TEST_P(InboxTest, SendToAParkedExecutionDeliversInOneAtomicAppend) {
  Make(false);
  ASSERT_TRUE(rt_.Start("receiver", "r", Json()));
  SendResult sent = inbox_->Send("r", "approve", "yes").value();
  EXPECT_EQ(sent.delivery, Delivery::kDelivered);
  EXPECT_EQ(State("r").status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(State("r").result["value"], "yes");
  auto log = testing::Log(base_.get(), "r");
  // [..., park, MESSAGE_CONSUMED, EXECUTION_RESUMED, EXECUTION_COMPLETED]
  ASSERT_GE(log.size(), 4u);
  EXPECT_EQ(log[log.size() - 3].kind, "MESSAGE_CONSUMED");
  EXPECT_EQ(log[log.size() - 2].kind, "EXECUTION_RESUMED");
  EXPECT_EQ(log[log.size() - 3].fence(), log[log.size() - 2].fence());  // one fenced append
  EXPECT_GT(log[log.size() - 2].fence(), 0);
  EXPECT_EQ(Consumed(), 1);
  EXPECT_TRUE(errors_.empty());
}

TEST_P(InboxTest, AMessageOnAnotherTopicWaits) {
  Make(false);
  ASSERT_TRUE(rt_.Start("receiver", "r", Json()));
  EXPECT_EQ(inbox_->Send("r", "reject", "no").value().delivery, Delivery::kNoop);
  EXPECT_EQ(State("r").status, runtime::ExecutionStatus::kSuspended);
  EXPECT_EQ(Consumed(), 0);
}

TEST_P(InboxTest, MessagesThatArriveBeforeTheParkAreDeliveredWhenItHappensInOrder) {
  Make(false);
  EXPECT_EQ(inbox_->Send("r", "approve", "first").value().delivery, Delivery::kNoop);
  EXPECT_EQ(inbox_->Send("r", "approve", "second").value().delivery, Delivery::kNoop);
  ASSERT_TRUE(rt_.Start("receiver2", "r", Json()));
  EXPECT_EQ(State("r").status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(State("r").result["value"], Json::array({"first", "second"}));
  EXPECT_EQ(Consumed(), 2);
  EXPECT_EQ(Resumed(), 2);
}

// A crash between the fence acquire and the append: nothing lands, the
// token is stranded; the re-driver delivers exactly once.
TEST_P(InboxTest, CrashBetweenAcquireAndAppendIsDeliveredOnceByTheRedriver) {
  Make(true);
  ASSERT_TRUE(rt_.Start("receiver", "r", Json()));
  store_.crash_next = HookStore::Crash::kBeforeAppend;
  SendResult sent = inbox_->Send("r", "approve", "yes").value();
  EXPECT_EQ(store_.crashes, 1);
  EXPECT_EQ(sent.delivery, Delivery::kContended);
  EXPECT_TRUE(sent.redrive_scheduled);
  EXPECT_EQ(Consumed(), 0);
  EXPECT_EQ(Resumed(), 0);
  Poll(20);
  EXPECT_EQ(State("r").status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(Consumed(), 1);
  EXPECT_EQ(Resumed(), 1);
  EXPECT_TRUE(timers_.RowsOf("r").value().empty());
  EXPECT_TRUE(errors_.empty());
}

// A crash right after the append: both events landed; the re-driver counts
// the delivery from the log and delivers nothing again.
TEST_P(InboxTest, CrashAfterTheAppendIsNeverDeliveredTwice) {
  Make(true);
  ASSERT_TRUE(rt_.Start("receiver2", "r", Json()));
  store_.crash_next = HookStore::Crash::kAfterAppend;
  SendResult sent = inbox_->Send("r", "approve", "one").value();
  EXPECT_EQ(store_.crashes, 1);
  EXPECT_TRUE(sent.redrive_scheduled);
  EXPECT_EQ(Consumed(), 1);
  EXPECT_EQ(Resumed(), 1);
  Poll(20);
  EXPECT_EQ(Consumed(), 1);  // the re-driver answered noop
  EXPECT_EQ(Resumed(), 1);
  EXPECT_TRUE(timers_.RowsOf("r").value().empty());
  // The crash killed the run after its append; the body parked again on
  // its second Receive in that same append, so the next message goes in.
  EXPECT_EQ(inbox_->Send("r", "approve", "two").value().delivery, Delivery::kDelivered);
  EXPECT_EQ(State("r").result["value"], Json::array({"one", "two"}));
  EXPECT_EQ(Consumed(), 2);
}

TEST_P(InboxTest, FlagOffAContendedDeliveryGoesToOnErrorAndARetryDeliversOnce) {
  Make(false);
  ASSERT_TRUE(rt_.Start("receiver", "r", Json()));
  store_.crash_next = HookStore::Crash::kBeforeAppend;
  SendResult sent = inbox_->Send("r", "approve", "yes").value();
  EXPECT_FALSE(sent.redrive_scheduled);
  EXPECT_TRUE(timers_.RowsOf("r").value().empty());
  ASSERT_EQ(errors_.size(), 1u);
  EXPECT_EQ(errors_[0].code, ErrorCode::kResumeContended);
  EXPECT_EQ(inbox_->DeliverPending("r").value(), Delivery::kDelivered);
  // Finished: nothing is delivered again (its rows are gone).
  EXPECT_EQ(inbox_->DeliverPending("r").value(), Delivery::kDropped);
  EXPECT_EQ(Consumed(), 1);
  EXPECT_EQ(Resumed(), 1);
}

// Retention: a delivered message is deleted; a finished execution's rows go
// with it, and a message sent to it afterwards is dropped.
TEST_P(InboxTest, DeliveredMessagesAndFinishedExecutionsLeaveNoRows) {
  Make(false);
  ASSERT_TRUE(rt_.Start("receiver2", "r", Json()));
  ASSERT_EQ(inbox_->Send("r", "approve", "one").value().delivery, Delivery::kDelivered);
  EXPECT_TRUE(messages_->Pending("r").value().empty());
  EXPECT_EQ(messages_->Executions("", 10).value(), std::vector<std::string>{"r"});  // the counter
  ASSERT_EQ(inbox_->Send("r", "approve", "two").value().delivery, Delivery::kDelivered);
  EXPECT_EQ(State("r").status, runtime::ExecutionStatus::kCompleted);
  EXPECT_TRUE(messages_->Executions("", 10).value().empty());
  SendResult late = inbox_->Send("r", "approve", "late").value();
  EXPECT_EQ(late.delivery, Delivery::kDropped);
  EXPECT_TRUE(messages_->Executions("", 10).value().empty());
  EXPECT_EQ(Consumed(), 2);
  EXPECT_TRUE(errors_.empty());
}

// A message of exactly message_bytes_max is delivered whole (it fits in the
// event store's event limit twice over); one byte more is refused by Send
// and nothing is stored.
TEST_P(InboxTest, AMessageAtTheSizeLimitIsDeliveredWhole) {
  Make(false);
  ASSERT_TRUE(rt_.Start("receiver", "r", Json()));
  size_t max = messages_->limits().message_bytes_max;
  Json over(std::string(max - 1, 'x'));  // max + 1 bytes with the quotes
  Result<SendResult> refused = inbox_->Send("r", "approve", over);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(refused.error().As<LimitDetail>()->limit, "inbox_message_bytes_max");
  EXPECT_TRUE(messages_->Pending("r").value().empty());
  EXPECT_EQ(State("r").status, runtime::ExecutionStatus::kSuspended);
  Json at(std::string(max - 2, 'y'));
  ASSERT_EQ(inbox_->Send("r", "approve", at).value().delivery, Delivery::kDelivered);
  EXPECT_EQ(State("r").result["value"], at);
  EXPECT_EQ(Consumed(), 1);
}

// [[...[1]...]]: `depth` arrays, built without recursion.
Json Nested(size_t depth) {
  Json json = 1;
  for (size_t i = 0; i < depth; ++i) {
    Json outer = Json::array();
    outer.push_back(std::move(json));
    json = std::move(outer);
  }
  return json;
}

// A message nested message_depth_max deep is delivered, and the body that
// returns it completes (its events hold it one level down); one level more
// is refused by Send and nothing is stored. A hostile 300,000 levels (600 KB
// of JSON, under message_bytes_max) is refused the same way, not a crash.
TEST_P(InboxTest, AMessageAtTheDepthLimitIsDeliveredADeeperOneIsRefused) {
  Make(false);
  ASSERT_TRUE(rt_.Start("receiver", "r", Json()));
  size_t max = messages_->limits().message_depth_max;
  for (size_t depth : {max + 1, size_t{300'000}}) {
    Result<SendResult> refused = inbox_->Send("r", "approve", Nested(depth));
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kLimitExceeded);
    EXPECT_EQ(refused.error().As<LimitDetail>()->limit, "inbox_message_depth_max");
    EXPECT_TRUE(messages_->Pending("r").value().empty());
  }
  EXPECT_EQ(State("r").status, runtime::ExecutionStatus::kSuspended);
  ASSERT_EQ(inbox_->Send("r", "approve", Nested(max)).value().delivery, Delivery::kDelivered);
  EXPECT_EQ(State("r").status, runtime::ExecutionStatus::kCompleted);
  EXPECT_EQ(State("r").result["value"], Nested(max));
}

TEST_P(InboxTest, PendingMessagesPerExecutionAtTheLimitThroughSend) {
  messages_ = base_.OpenInbox({.pending_messages_per_execution_max = 2});
  Make(false);
  ASSERT_TRUE(inbox_->Send("r", "approve", "first"));
  ASSERT_TRUE(inbox_->Send("r", "approve", "second"));
  Result<SendResult> third = inbox_->Send("r", "approve", "third");
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(third.error().As<LimitDetail>()->limit, "inbox_pending_messages_per_execution_max");
  ASSERT_TRUE(rt_.Start("receiver2", "r", Json()));
  EXPECT_EQ(State("r").result["value"], Json::array({"first", "second"}));
  EXPECT_EQ(Consumed(), 2);
}

// Sweep: after a crash after the append, the delivered message is still
// stored (its delete never ran); Sweep deletes it and delivers nothing.
TEST_P(InboxTest, SweepDeletesWhatACrashLeftAndDeliversNothingTwice) {
  Make(false);
  ASSERT_TRUE(rt_.Start("receiver2", "r", Json()));
  store_.crash_next = HookStore::Crash::kAfterAppend;
  ASSERT_TRUE(inbox_->Send("r", "approve", "one"));
  EXPECT_EQ(messages_->Pending("r").value().size(), 1u);
  SweepReport swept = inbox_->Sweep().value();
  EXPECT_EQ(swept.executions, 1u);
  EXPECT_EQ(swept.delivered, 0u);
  EXPECT_TRUE(swept.errors.empty());
  EXPECT_TRUE(messages_->Pending("r").value().empty());
  EXPECT_EQ(Consumed(), 1);
  EXPECT_EQ(Resumed(), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, InboxTest, ::testing::ValuesIn(testing::InboxBackends()),
                         testing::BackendName);

}  // namespace
}  // namespace once::orchestration
