// PostgresEventStore behaviour against a real server (ONCE_TEST_POSTGRES_URL).
// Each test works in its own random schema.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <set>
#include <thread>

#include "../src/append_hints.h"
#include "../src/sql.h"
#include "once/events/envelope.h"
#include "once/store/validate.h"
#include "test_database.h"

namespace once::store {
namespace {

using events::AppEvent;
using events::KernelEvent;
using events::KernelKind;
using testing::PostgresTest;

AppendRequest Req(std::string id, int64_t next, std::vector<Envelope> events,
                  std::optional<int64_t> fence = 0) {
  return AppendRequest{.execution_id = std::move(id),
                       .expected_next = next,
                       .events = std::move(events),
                       .fence = fence};
}

Envelope Started() { return KernelEvent(KernelKind::kExecutionStarted, {{"input", 1}}); }
Envelope Parked(int64_t fence = 0) {
  return KernelEvent(KernelKind::kExecutionSuspended, {{"on", "timer"}}, fence);
}

class PostgresStoreTest : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    store_ = OpenStore();
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    PostgresTest::TearDown();
  }
  bool FenceRowExists(const std::string& id) {
    return schema_->Sql("SELECT count(*) FROM fences WHERE execution_id = '" + id + "'") == "1";
  }
  std::unique_ptr<PostgresEventStore> store_;
};

TEST_F(PostgresStoreTest, AppendReadsBackExactly) {
  Envelope app = AppEvent("order.placed", {{"name", "z\u00fcrich \u2603"},
                                           {"n", 12345678901234},
                                           {"f", 0.25},
                                           {"list", {1, "two", nullptr}}});
  app.metadata = events::Metadata::FromJson({{"trace", "abc"}, {"quote", "a\"b\\c"}});
  ASSERT_EQ(store_->Append(Req("ex-1", 1, {Started(), app})).value(), 2);
  auto events = store_->ReadRange("ex-1", 1, kToEnd).value();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, "EXECUTION_STARTED");
  EXPECT_EQ(events[0].payload, Started().payload);
  EXPECT_EQ(events[0].time_ms, clock_.NowUnixMillis());
  EXPECT_EQ(events[1].payload, app.payload);
  EXPECT_EQ(events[1].metadata, app.metadata);
  EXPECT_EQ(events[1].sequence, 2);
  EXPECT_EQ(store_->Head("ex-1").value(), 2);
  EXPECT_EQ(store_->Head("unknown").value(), 0);
  EXPECT_TRUE(store_->ReadRange("unknown", 1, kToEnd).value().empty());
  EXPECT_EQ(store_->ReadRange("ex-1", 2, 2).value().size(), 1u);
}

TEST_F(PostgresStoreTest, SequenceConflictsOnDuplicateAndGap) {
  ASSERT_TRUE(store_->Append(Req("ex", 1, {Started()})));
  auto dup = store_->Append(Req("ex", 1, {Started()}));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(dup.error().As<SequenceDetail>()->expected, 2);
  EXPECT_EQ(dup.error().As<SequenceDetail>()->given, 1);
  auto gap = store_->Append(Req("ex", 5, {AppEvent("x", 1)}));
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(gap.error().As<SequenceDetail>()->expected, 2);
  EXPECT_EQ(store_->Head("ex").value(), 1);
}

TEST_F(PostgresStoreTest, BadInputIsRefusedWithTheSharedCodes) {
  EXPECT_EQ(store_->Append(Req("", 1, {Started()})).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->Append(Req("ex", 1, {})).error().code, ErrorCode::kInvalidArgument);
  // Payload and metadata are stored as JSON text, so \u0000 round-trips in
  // both (jsonb, version 1's metadata column, refused it).
  Envelope nul = AppEvent("x", std::string("a\0b", 3));
  nul.metadata = events::Metadata::FromJson({{"k", std::string("a\0b", 3)}});
  ASSERT_TRUE(store_->Append(Req("ex", 1, {nul})));
  Envelope back = store_->ReadRange("ex", 1, 1).value()[0];
  EXPECT_EQ(back.payload, nul.payload);
  EXPECT_EQ(back.metadata, nul.metadata);
}

TEST_F(PostgresStoreTest, FenceGuardsAppends) {
  ASSERT_TRUE(store_->Append(Req("ex", 1, {Started()})));
  EXPECT_EQ(store_->ReadFence("ex").value(), 0);
  EXPECT_EQ(store_->AcquireFence("ex").value(), 1);
  EXPECT_EQ(store_->AcquireFence("ex").value(), 2);
  EXPECT_EQ(store_->ReadFence("ex").value(), 2);
  auto stale = store_->Append(Req("ex", 2, {AppEvent("x", 1)}, 1));
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(stale.error().As<StaleFenceDetail>()->presented, 1);
  EXPECT_EQ(stale.error().As<StaleFenceDetail>()->current, 2);
  // Stale wins over a wrong sequence, as in the reference store.
  EXPECT_EQ(store_->Append(Req("ex", 9, {AppEvent("x", 1)}, 1)).error().code,
            ErrorCode::kStaleFence);
  EXPECT_EQ(store_->Append(Req("ex", 2, {AppEvent("x", 1)}, 2)).value(), 2);
  auto denied = KernelEvent(KernelKind::kExecutionDenied, nlohmann::json::object());
  EXPECT_EQ(store_->Append(Req("ex", 3, {denied}, std::nullopt)).value(), 3);
  // An answering append under the current token takes the locking path.
  EXPECT_EQ(store_->Append(Req("ex", 4, {Parked(2)}, 2)).value(), 4);
}

TEST_F(PostgresStoreTest, BatchRefusesPerExecutionAndCommitsTheRest) {
  ASSERT_TRUE(store_->Append(Req("fenced", 1, {Started()})));
  ASSERT_EQ(store_->AcquireFence("fenced").value(), 1);
  ASSERT_TRUE(store_->Append(Req("busy", 1, {Started()})));
  std::vector<AppendRequest> batch = {
      Req("a", 1, {Started(), AppEvent("x", 1)}),
      Req("fenced", 2, {KernelEvent(KernelKind::kExecutionResumed, {})}, 0),  // stale
      Req("busy", 1, {AppEvent("x", 1)}),                                     // conflict
      Req("bad", 1, {}),                                                      // invalid
      Req("b", 1, {Started(), Parked()}),
  };
  auto out = store_->AppendBatch(batch).value();
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].value(), 2);
  EXPECT_EQ(out[1].error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(out[1].error().As<StaleFenceDetail>()->current, 1);
  EXPECT_EQ(out[2].error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(out[2].error().As<SequenceDetail>()->expected, 2);
  EXPECT_EQ(out[3].error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(out[4].value(), 2);
  EXPECT_EQ(store_->Head("a").value(), 2);
  EXPECT_EQ(store_->Head("fenced").value(), 1);
  EXPECT_EQ(store_->Head("busy").value(), 1);
  EXPECT_TRUE(FenceRowExists("b"));  // the park made its token-0 row
  EXPECT_FALSE(FenceRowExists("a"));
  std::vector<AppendRequest> twice = {Req("a", 3, {AppEvent("x", 1)}),
                                      Req("a", 4, {AppEvent("x", 1)})};
  EXPECT_EQ(store_->AppendBatch(twice).error().code, ErrorCode::kInvalidArgument);
}

// A batch of appends that neither answer, park nor compare exactly runs the
// lean statement, which leaves a row already at expected_next to the primary
// key: the batch is replayed request by request and only the duplicate
// fails. Every other refusal is a verdict of the one statement. A multi-event
// request lands whole or not at all.
TEST_F(PostgresStoreTest, LeanBatchRefusesPerExecutionAndCommitsTheRest) {
  for (std::string id : {"dup", "gap", "fenced"}) {
    ASSERT_TRUE(store_->Append(Req(id, 1, {Started(), AppEvent("x", 1), AppEvent("x", 2)})));
  }
  ASSERT_EQ(store_->AcquireFence("fenced").value(), 1);
  std::vector<AppendRequest> batch = {
      Req("new", 1, {Started(), AppEvent("x", 1)}),
      Req("dup", 2, {AppEvent("x", 1)}),        // rows 2 and 3 exist
      Req("gap", 5, {AppEvent("x", 1)}),        // head 3
      Req("fenced", 4, {AppEvent("x", 1)}, 0),  // token 1
      Req("unguarded", 1, {Started()}, std::nullopt),
      Req("dup-last", 1, {Started(), AppEvent("x", 1)}),
  };
  ASSERT_TRUE(store_->Append(Req("dup-last", 1, {Started()})));  // its first row exists
  auto out = store_->AppendBatch(batch).value();
  ASSERT_EQ(out.size(), batch.size());
  EXPECT_EQ(out[0].value(), 2);
  EXPECT_EQ(out[1].error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(out[1].error().As<SequenceDetail>()->expected, 4);
  EXPECT_EQ(out[2].error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(out[2].error().As<SequenceDetail>()->expected, 4);
  EXPECT_EQ(out[3].error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(out[3].error().As<StaleFenceDetail>()->current, 1);
  EXPECT_EQ(out[4].value(), 1);
  EXPECT_EQ(out[5].error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(out[5].error().As<SequenceDetail>()->expected, 2);
  EXPECT_EQ(store_->Head("new").value(), 2);
  EXPECT_EQ(store_->Head("dup").value(), 3);
  EXPECT_EQ(store_->Head("gap").value(), 3);
  EXPECT_EQ(store_->Head("fenced").value(), 3);
  EXPECT_EQ(store_->Head("unguarded").value(), 1);
  EXPECT_EQ(store_->Head("dup-last").value(), 1);
  // Without the duplicates the same shape commits in the one statement.
  std::vector<AppendRequest> next = {Req("new", 3, {AppEvent("x", 2)}),
                                     Req("dup", 4, {AppEvent("x", 3), AppEvent("x", 4)}),
                                     Req("fenced", 4, {AppEvent("x", 1)}, 1)};
  out = store_->AppendBatch(next).value();
  EXPECT_EQ(out[0].value(), 3);
  EXPECT_EQ(out[1].value(), 5);
  EXPECT_EQ(out[2].value(), 4);
}

TEST_F(PostgresStoreTest, BatchPrimaryKeyRaceFailsOnlyTheLoser) {
  // Many writers append the same sequence of one execution inside batches
  // with other executions: exactly one wins it, every other execution commits.
  constexpr int kWriters = 6;
  std::vector<std::thread> threads;
  std::vector<std::vector<Result<int64_t>>> results(kWriters);
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::vector<AppendRequest> batch = {Req("shared", 1, {Started()}),
                                          Req("own-" + std::to_string(w), 1, {Started()})};
      results[w] = store_->AppendBatch(batch).value();
    });
  }
  for (auto& t : threads) t.join();
  int winners = 0;
  for (int w = 0; w < kWriters; ++w) {
    winners += results[w][0].has_value();
    if (!results[w][0]) {
      EXPECT_EQ(results[w][0].error().code, ErrorCode::kSequenceConflict);
      EXPECT_EQ(results[w][0].error().As<SequenceDetail>()->expected, 2);
    }
    EXPECT_EQ(results[w][1].value(), 1);
  }
  EXPECT_EQ(winners, 1);
}

TEST_F(PostgresStoreTest, ParkCreatesTokenZeroRowAndDeleteRemovesOnlyThat) {
  ASSERT_TRUE(store_->Append(Req("p", 1, {Started(), Parked()})));
  EXPECT_TRUE(FenceRowExists("p"));
  EXPECT_EQ(store_->ReadFence("p").value(), 0);
  ASSERT_TRUE(store_->DeleteExecution("p"));
  EXPECT_FALSE(FenceRowExists("p"));
  EXPECT_EQ(store_->Head("p").value(), 0);

  ASSERT_TRUE(store_->Append(Req("q", 1, {Started()})));
  ASSERT_EQ(store_->AcquireFence("q").value(), 1);
  ASSERT_TRUE(store_->DeleteExecution("q"));
  EXPECT_EQ(store_->ReadFence("q").value(), 1);  // a zombie writer stays fenced out
  EXPECT_EQ(store_->Append(Req("q", 1, {Started()}, 0)).error().code, ErrorCode::kStaleFence);
  EXPECT_TRUE(store_->DeleteExecution("never-existed"));
}

TEST_F(PostgresStoreTest, AcquireFenceIfComparesTokenAndPark) {
  ASSERT_TRUE(store_->Append(Req("ex", 1, {Started(), Parked()})));
  auto won = store_->AcquireFenceIf("ex", {.fence = 0, .park_seq = 2}).value();
  EXPECT_FALSE(won.stale);
  EXPECT_EQ(won.fence, 1);
  auto moved = store_->AcquireFenceIf("ex", {.fence = 0, .park_seq = 2}).value();
  EXPECT_TRUE(moved.stale);
  EXPECT_EQ(moved.fence, 1);
  EXPECT_EQ(store_->ReadFence("ex").value(), 1);
  // Ignorable appends after the park leave it open.
  std::vector<Envelope> ignorable = {
      KernelEvent(KernelKind::kExecutionDenied, nlohmann::json::object()),
      KernelEvent(KernelKind::kOutcomeRecorded, nlohmann::json::object()),
      KernelEvent(KernelKind::kStepFailed, nlohmann::json{{"name", "s"}}),
      KernelEvent(KernelKind::kMessageConsumed, nlohmann::json{{"topic", "t"}}),
      AppEvent("sibling.emit", 1)};
  Envelope stamped_string = AppEvent("NEWER_KIND", {});
  stamped_string.metadata = events::Metadata::FromJson({{"kernel", "true"}});
  ignorable.push_back(stamped_string);
  ASSERT_TRUE(store_->Append(Req("ex", 3, ignorable, std::nullopt)));
  auto open = store_->AcquireFenceIf("ex", {.fence = 1, .park_seq = 2}).value();
  EXPECT_FALSE(open.stale);
  EXPECT_EQ(open.fence, 2);
  // An unknown kind stamped kernel: true answers (fail closed).
  Envelope newer = AppEvent("NEWER_KIND", {});
  newer.metadata = events::Metadata::FromJson({{"kernel", true}});
  ASSERT_TRUE(store_->Append(Req("ex", 9, {newer}, 2)));
  auto answered = store_->AcquireFenceIf("ex", {.fence = 2, .park_seq = 2}).value();
  EXPECT_TRUE(answered.stale);
  EXPECT_EQ(answered.fence, 2);
  // An answer at or before the park does not count.
  EXPECT_FALSE(store_->AcquireFenceIf("ex", {.fence = 2, .park_seq = 9}).value().stale);
  EXPECT_EQ(store_->AcquireFenceIf("ex", {.fence = -1, .park_seq = 2}).error().code,
            ErrorCode::kInvalidArgument);
}

TEST_F(PostgresStoreTest, AcquireFenceIfStaleForEachAnsweringKind) {
  for (auto kind : events::AnsweringKernelKindNames()) {
    std::string id = "ex-" + std::string(kind);
    ASSERT_TRUE(store_->Append(Req(id, 1, {Started(), Parked()})));
    // Each kind with a payload of its shape (null only a resume may have).
    Envelope answer = AppEvent(std::string(kind), nlohmann::json::object());
    answer.metadata = events::Metadata::FromJson({{"kernel", true}});
    ASSERT_TRUE(store_->Append(Req(id, 3, {answer})));
    auto r = store_->AcquireFenceIf(id, {.fence = 0, .park_seq = 2}).value();
    EXPECT_TRUE(r.stale) << kind;
    EXPECT_EQ(r.fence, 0) << kind;
  }
}

TEST_F(PostgresStoreTest, AcquireFenceIfHandlesAnyIdBytes) {
  std::string id = "it's \"quoted\" \\ \u00e9 ' OR 1=1 --";
  ASSERT_TRUE(store_->Append(Req(id, 1, {Started(), Parked()})));
  EXPECT_FALSE(store_->AcquireFenceIf(id, {.fence = 0, .park_seq = 2}).value().stale);
  EXPECT_EQ(store_->ReadFence(id).value(), 1);
}

TEST_F(PostgresStoreTest, AppendIfUnchangedComparesTheObservedToken) {
  ASSERT_TRUE(store_->Append(Req("ex", 1, {Started()})));
  EXPECT_EQ(store_->AppendIfUnchanged(Req("ex", 2, {AppEvent("x", 1)}), 0).value(), 2);
  ASSERT_EQ(store_->AcquireFence("ex").value(), 1);
  auto stale = store_->AppendIfUnchanged(Req("ex", 3, {AppEvent("x", 1)}), 0);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(stale.error().As<StaleFenceDetail>()->current, 1);
  // req.fence is ignored; a newer observed token than the store's is stale too.
  EXPECT_EQ(store_->AppendIfUnchanged(Req("ex", 3, {AppEvent("x", 1)}, 0), 1).value(), 3);
  EXPECT_EQ(store_->AppendIfUnchanged(Req("ex", 4, {AppEvent("x", 1)}), 2).error().code,
            ErrorCode::kStaleFence);
  EXPECT_EQ(store_->AppendIfUnchanged(Req("ex", 9, {AppEvent("x", 1)}), 1).error().code,
            ErrorCode::kSequenceConflict);
}

TEST_F(PostgresStoreTest, CopyPrefixAndTruncate) {
  ASSERT_TRUE(store_->Append(Req("src", 1, {Started(), AppEvent("a", 1), Parked()})));
  ASSERT_TRUE(store_->CopyPrefix("src", "dst", 3));
  auto copied = store_->ReadRange("dst", 1, kToEnd).value();
  ASSERT_EQ(copied.size(), 3u);
  EXPECT_EQ(copied[1].payload, 1);
  EXPECT_EQ(copied[2].execution_id, "dst");
  EXPECT_TRUE(FenceRowExists("dst"));  // a copied park has its row
  EXPECT_EQ(store_->CopyPrefix("src", "dst", 2).error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(store_->CopyPrefix("src", "other", 4).error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(store_->TruncatePrefixKeeping("src", 3));
  auto kept = store_->ReadRange("src", 1, kToEnd).value();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].sequence, 3);
  EXPECT_EQ(store_->Head("src").value(), 3);
  EXPECT_EQ(store_->CopyPrefix("src", "again", 3).error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(store_->TruncatePrefixKeeping("src", 100));
  EXPECT_EQ(store_->Head("src").value(), 3);  // the newest event is kept
}

// Appends `req` in a lean batch large enough to use hints
// (pg::kHintedRequestsMin), padded with first appends of new executions;
// returns req's outcome.
Result<int64_t> AppendHinted(PostgresEventStore& store, const AppendRequest& req, int& pads) {
  std::vector<AppendRequest> batch = {req};
  while (batch.size() < pg::kHintedRequestsMin) {
    batch.push_back(Req("pad-" + std::to_string(pads++), 1, {Started()}));
  }
  auto out = store.AppendBatch(batch);
  if (!out) return std::unexpected(out.error());
  for (size_t k = 1; k < out->size(); ++k) EXPECT_TRUE((*out)[k]);
  return std::move((*out)[0]);
}

// A lean append at head + 1 skips the probe of row head when the store
// appended row head itself and the fence row is the version it read then.
// Another store's DeleteExecution must defeat that: it writes a new version
// of the fence row. (With DeleteExecution only locking the row, as before,
// the third append lands at 3 on an empty log and this test fails.)
TEST_F(PostgresStoreTest, AppendHintsDoNotOutliveADeleteByAnotherStore) {
  auto other = OpenStore();
  ASSERT_NE(other, nullptr);
  int pads = 0;
  int64_t token = store_->AcquireFence("ex").value();
  auto append = [&](int64_t next) {
    return AppendHinted(*store_, Req("ex", next, {AppEvent("x", next)}, token), pads);
  };
  ASSERT_EQ(append(1).value(), 1);  // learns the fence row's version
  EXPECT_EQ(store_->AppendStats().hinted, 0u);
  ASSERT_EQ(append(2).value(), 2);  // skips the probe of row 1
  EXPECT_EQ(store_->AppendStats().hinted, 1u);
  ASSERT_TRUE(other->DeleteExecution("ex"));
  auto gap = append(3);
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(gap.error().As<SequenceDetail>()->expected, 1);
  EXPECT_EQ(store_->Head("ex").value(), 0);
  ASSERT_EQ(append(1).value(), 1);  // starts over
}

// A lone append that lands is one bare INSERT under the guard; one that the
// guard refuses is answered by the statement that reads the verdict, with
// the same errors as before: a stale token names the current one, a gap or
// a taken sequence names the next free one, and nothing is written.
TEST_F(PostgresStoreTest, ALoneAppendLandsWithTheBareInsertAndARefusalReadsItsVerdict) {
  int64_t token = store_->AcquireFence("lone").value();
  ASSERT_EQ(store_->Append(Req("lone", 1, {AppEvent("x", 1)}, token)).value(), 1);
  EXPECT_EQ(store_->AppendStats().lone_landed, 1u);
  EXPECT_EQ(store_->AppendStats().lone_refused, 0u);

  auto stale = store_->Append(Req("lone", 2, {AppEvent("x", 2)}, token - 1));
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(stale.error().As<StaleFenceDetail>()->current, token);
  auto gap = store_->Append(Req("lone", 5, {AppEvent("x", 5)}, token));
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(gap.error().As<SequenceDetail>()->expected, 2);
  auto fresh = store_->Append(Req("new", 2, {AppEvent("x", 2)}));
  ASSERT_FALSE(fresh);
  EXPECT_EQ(fresh.error().As<SequenceDetail>()->expected, 1);
  EXPECT_EQ(store_->AppendStats().lone_refused, 3u);

  ASSERT_EQ(store_->Append(Req("lone", 2, {AppEvent("x", 2)}, token)).value(), 2);
  ASSERT_EQ(store_->Append(Req("new", 1, {AppEvent("x", 1)})).value(), 1);
  EXPECT_EQ(store_->AppendStats().lone_landed, 3u);
  EXPECT_EQ(store_->Head("lone").value(), 2);
  EXPECT_EQ(store_->Head("new").value(), 1);

  // A sequence another writer took meets the primary key in the bare INSERT.
  auto taken = store_->Append(Req("lone", 2, {AppEvent("x", 2)}, token));
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(taken.error().As<SequenceDetail>()->expected, 3);
}

// The bare INSERT reads the log's newest row only within kLoneHeadRowEvents
// sequences below the append: after a longer row it refuses, and the
// statement with the verdict lands the append (a second statement, never a
// wrong answer); after a row that short it lands alone. Either way a head
// past the append, or short of it, refuses with the next free sequence.
TEST_F(PostgresStoreTest, ALoneAppendAfterALongRowLandsThroughTheExactHead) {
  constexpr int64_t kSpan = sql::kLoneHeadRowEvents;
  auto row_of = [](int64_t first, int64_t events) {
    std::vector<Envelope> out;
    for (int64_t i = 0; i < events; ++i) out.push_back(AppEvent("x", first + i));
    return out;
  };
  int64_t token = store_->AcquireFence("long").value();
  ASSERT_EQ(store_->Append(Req("long", 1, row_of(1, kSpan + 1), token)).value(), kSpan + 1);
  ASSERT_EQ(store_->Append(Req("long", kSpan + 2, row_of(kSpan + 2, 1), token)).value(), kSpan + 2);
  EXPECT_EQ(store_->AppendStats().lone_landed, 0u);
  EXPECT_EQ(store_->AppendStats().lone_refused, 1u);  // the row of kSpan + 1 was out of reach
  ASSERT_EQ(store_->Append(Req("long", kSpan + 3, row_of(kSpan + 3, 1), token)).value(), kSpan + 3);
  EXPECT_EQ(store_->AppendStats().lone_landed, 1u);  // the row before it is one event

  ASSERT_EQ(store_->Append(Req("short", 1, row_of(1, kSpan))).value(), kSpan);
  ASSERT_EQ(store_->Append(Req("short", kSpan + 1, row_of(kSpan + 1, 1))).value(), kSpan + 1);
  EXPECT_EQ(store_->AppendStats().lone_landed, 2u);  // a row of kSpan events is in reach
  EXPECT_EQ(store_->AppendStats().lone_refused, 1u);

  // Behind the head (inside a long row, and at the row before it), and past it.
  ASSERT_EQ(store_->Append(Req("wide", 1, row_of(1, 3 * kSpan))).value(), 3 * kSpan);
  for (int64_t next : {int64_t{2}, 2 * kSpan, 3 * kSpan, 3 * kSpan + 2, 5 * kSpan}) {
    SCOPED_TRACE(next);
    auto refused = store_->Append(Req("wide", next, row_of(next, 1)));
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::kSequenceConflict);
    EXPECT_EQ(refused.error().As<SequenceDetail>()->expected, 3 * kSpan + 1);
  }
  EXPECT_EQ(store_->Head("wide").value(), 3 * kSpan);
  EXPECT_EQ(store_->AppendStats().lone_landed, 2u);
  EXPECT_EQ(store_->AppendStats().lone_refused, 6u);
}

// A hint is a version and a head, not a verdict: a fence moved by another
// store refuses the stale holder, a duplicate still meets the primary key,
// and a truncated prefix keeps the hinted predecessor, so the skip lands
// exactly where the probe would. Lone appends neither use nor need hints.
TEST_F(PostgresStoreTest, AppendHintsFollowOtherStoresAcquiresAndTruncation) {
  auto other = OpenStore();
  ASSERT_NE(other, nullptr);
  int pads = 0;
  int64_t token = store_->AcquireFence("ex").value();
  auto append = [&](int64_t next, int64_t fence) {
    return AppendHinted(*store_, Req("ex", next, {AppEvent("x", next)}, fence), pads);
  };
  for (int64_t next = 1; next <= 5; ++next) ASSERT_EQ(append(next, token).value(), next);
  EXPECT_EQ(store_->AppendStats().hinted, 4u);
  ASSERT_TRUE(other->TruncatePrefixKeeping("ex", 100));  // keeps row 5
  ASSERT_EQ(append(6, token).value(), 6);
  EXPECT_EQ(store_->AppendStats().hinted, 5u);
  ASSERT_EQ(store_->Append(Req("ex", 7, {AppEvent("x", 7)}, token)).value(), 7);  // plain
  EXPECT_EQ(store_->AppendStats().hinted, 5u);
  ASSERT_EQ(append(8, token).value(), 8);  // probes (the hint says 6), then advances
  ASSERT_EQ(append(9, token).value(), 9);
  EXPECT_EQ(store_->AppendStats().hinted, 6u);
  int64_t moved = other->AcquireFence("ex").value();
  auto stale = append(10, token);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kStaleFence);
  ASSERT_EQ(append(10, moved).value(), 10);
  ASSERT_EQ(append(11, moved).value(), 11);
  auto dup = append(11, moved);
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(store_->Head("ex").value(), 11);
  EXPECT_EQ(store_->ReadRange("ex", 1, kToEnd).value().size(), 7u);  // 5..11
}

// append_hints_max bounds the executions remembered: a full table is
// cleared, and every append still lands where the probe says; 0 turns hints
// off.
TEST_F(PostgresStoreTest, AppendHintsStopAtTheLimit) {
  const size_t executions = pg::kHintedRequestsMin + 1;
  for (size_t max : {size_t{0}, size_t{2}}) {
    SCOPED_TRACE(max);
    PostgresOptions options = schema_->Options();
    options.append_hints_max = max;
    auto store = OpenStore(options);
    ASSERT_NE(store, nullptr);
    const std::string prefix = "max" + std::to_string(max) + "-";
    for (int64_t next = 1; next <= 4; ++next) {
      std::vector<AppendRequest> batch;
      for (size_t e = 0; e < executions; ++e) {
        batch.push_back(Req(prefix + std::to_string(e), next, {AppEvent("x", next)}));
      }
      auto out = store->AppendBatch(batch);
      ASSERT_TRUE(out);
      for (auto& r : *out) EXPECT_EQ(r.value(), next);
      EXPECT_LE(store->AppendStats().hint_entries, max);
    }
    PostgresAppendStats stats = store->AppendStats();
    if (max == 0) {
      EXPECT_EQ(stats.hinted + stats.learned + stats.hint_entries + stats.hint_clears, 0u);
    } else {
      EXPECT_GE(stats.hint_entries, 1u);
      EXPECT_GE(stats.hint_clears, 1u);
      EXPECT_GE(stats.hinted, 1u);
    }
    for (size_t e = 0; e < executions; ++e) {
      EXPECT_EQ(store->Head(prefix + std::to_string(e)).value(), 4);
    }
  }
}

TEST(AppendHintsTest, ParsesFenceVersionsAndRefusesAnythingElse) {
  EXPECT_EQ(pg::ParseFenceVersion("13515 (0,1)"), (pg::FenceVersion{13515, 0, 1}));
  EXPECT_EQ(pg::ParseFenceVersion("4294967295 (4294967295,65535)"),
            (pg::FenceVersion{4294967295u, 4294967295u, 65535}));
  for (std::string_view bad : {"", "1", "1 (2,3", "1 (2,3) ", "1 (2;3)", "4294967296 (0,1)",
                               "1 (0,65536)", "-1 (0,1)", "1  (0,1)", "x (0,1)"}) {
    EXPECT_EQ(pg::ParseFenceVersion(bad), std::nullopt) << bad;
  }
}

// The append's head check probes from expected_next - 1 and falls back to
// max(sequence) only for a request that does not fit: every verdict (fit,
// duplicate, gap, start over) must still report the true head, also after a
// truncated prefix (the predecessor is the kept newest event) and on a log
// long enough to span several index leaf pages.
TEST_F(PostgresStoreTest, HeadCheckReportsTheTrueHeadInEveryCase) {
  for (int64_t seq = 1; seq <= 600; ++seq) {
    ASSERT_TRUE(store_->Append(Req("long", seq, {AppEvent("a", seq)})));
  }
  auto expect_conflict = [&](std::string id, int64_t next, int64_t head) {
    auto res = store_->Append(Req(id, next, {AppEvent("a", 0)}));
    ASSERT_FALSE(res) << id << " " << next;
    EXPECT_EQ(res.error().code, ErrorCode::kSequenceConflict);
    EXPECT_EQ(store_->Head(id).value(), head);
    std::vector<AppendRequest> reqs = {Req(id, next, {AppEvent("a", 0)}), Req("other", 1, {})};
    auto batch = store_->AppendBatch(reqs);
    ASSERT_TRUE(batch);
    EXPECT_EQ((*batch)[0].error().code, ErrorCode::kSequenceConflict) << id << " " << next;
  };
  expect_conflict("long", 1, 600);    // start over
  expect_conflict("long", 300, 600);  // duplicate, deep in the log
  expect_conflict("long", 600, 600);  // duplicate of the head
  expect_conflict("long", 602, 600);  // gap
  expect_conflict("new", 2, 0);       // gap on an empty log
  ASSERT_TRUE(store_->TruncatePrefixKeeping("long", 1'000));
  EXPECT_EQ(store_->Head("long").value(), 600);
  expect_conflict("long", 1, 600);  // rows 1.. are gone, the head is not
  expect_conflict("long", 600, 600);
  std::vector<AppendRequest> reqs = {Req("long", 601, {AppEvent("a", 1), AppEvent("a", 2)}),
                                     Req("new", 1, {Started()})};
  auto batch = store_->AppendBatch(reqs);
  ASSERT_TRUE(batch);
  EXPECT_EQ((*batch)[0].value(), 602);
  EXPECT_EQ((*batch)[1].value(), 1);
  ASSERT_TRUE(store_->DeleteExecution("long"));
  EXPECT_EQ(store_->Append(Req("long", 1, {Started()})).value(), 1);
}

TEST_F(PostgresStoreTest, ListExecutionsPagesInByteOrder) {
  for (std::string id : {"b", "a", "B", "\u00e9", "c"}) {
    ASSERT_TRUE(store_->Append(Req(id, 1, {Started()})));
  }
  auto page = store_->ListExecutions("", 2).value();
  EXPECT_EQ(page.execution_ids, (std::vector<std::string>{"B", "a"}));
  EXPECT_EQ(page.next_after, "a");
  page = store_->ListExecutions(page.next_after, 2).value();
  EXPECT_EQ(page.execution_ids, (std::vector<std::string>{"b", "c"}));
  page = store_->ListExecutions(page.next_after, 2).value();
  EXPECT_EQ(page.execution_ids, (std::vector<std::string>{"\u00e9"}));
  EXPECT_EQ(page.next_after, "");
}

TEST_F(PostgresStoreTest, MigrationIsIdempotent) {
  auto again = OpenStore();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(kPostgresSchemaVersion));
  ASSERT_TRUE(again->Append(Req("ex", 1, {Started()})));
  EXPECT_EQ(store_->Head("ex").value(), 1);
}

TEST_F(PostgresStoreTest, MigrationLockTimeoutIsTimeout) {
  PGconn* holder = PQconnectdb(schema_->Options().conninfo.c_str());
  PQclear(PQexec(holder,
                 ("SELECT pg_advisory_lock(" + std::to_string(kMigrationLockKey) + ")").c_str()));
  PostgresOptions options = schema_->Options();
  options.migration_lock_timeout_ms = 200;
  auto blocked = PostgresEventStore::Open(options, clock_);
  PQfinish(holder);
  ASSERT_FALSE(blocked);
  EXPECT_EQ(blocked.error().code, ErrorCode::kTimeout) << blocked.error().ToString();
  // A retry boots (with the default lock timeout: the 200 ms one is for the
  // boot that must time out).
  EXPECT_TRUE(PostgresEventStore::Open(schema_->Options(), clock_));
}

TEST_F(PostgresStoreTest, PoolCheckoutTimesOutAsBusy) {
  PostgresOptions options = schema_->Options();
  options.connections_max = 1;
  options.checkout_timeout_ms = 200;
  auto store = OpenStore(options);
  ASSERT_TRUE(store->Append(Req("ex", 1, {Started(), Parked()})));
  // Hold the fence row so that the store's only connection waits on it.
  schema_->Sql("BEGIN; SELECT token FROM fences WHERE execution_id = 'ex' FOR UPDATE");
  std::thread waiter([&] { EXPECT_TRUE(store->AcquireFenceIf("ex", {0, 2})); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto busy = store->Head("ex");
  schema_->Sql("COMMIT");
  waiter.join();
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, ErrorCode::kBusy);
  EXPECT_EQ(store->Head("ex").value(), 2);
}

TEST_F(PostgresStoreTest, LostConnectionIsUnavailableThenReplaced) {
  ASSERT_TRUE(store_->Append(Req("ex", 1, {Started()})));
  schema_->Sql(
      "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
      "WHERE application_name = '" +
      schema_->name() + "' AND pid <> pg_backend_pid()");
  auto lost = store_->Head("ex");
  ASSERT_FALSE(lost);
  EXPECT_EQ(lost.error().code, ErrorCode::kUnavailable) << lost.error().ToString();
  EXPECT_EQ(store_->Head("ex").value(), 1);
}

TEST_F(PostgresStoreTest, AcquireFenceIfIsReadCommittedUnderAStricterDefault) {
  PostgresOptions options = schema_->Options();
  options.conninfo += "&options=-c%20default_transaction_isolation%3Dserializable";
  auto store = OpenStore(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Append(Req("ex", 1, {Started(), Parked()})));
  EXPECT_FALSE(store->AcquireFenceIf("ex", {0, 2}).value().stale);
  EXPECT_TRUE(store->AcquireFenceIf("ex", {0, 2}).value().stale);
}

// Runs fn(i) on n threads at once and joins them.
template <class Fn>
void OnThreads(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (auto& t : threads) t.join();
}

// Counts the pool connections of the test schema `of` waiting on a lock, seen
// from `observer`'s side connection (which must not be in a transaction:
// pg_stat_activity is read once per transaction).
std::string LockWaiters(testing::TestSchema& observer, const testing::TestSchema& of) {
  return observer.Sql(
      "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
      "application_name = '" +
      of.name() + "'");
}

// Holds the fence row of `id` FOR UPDATE on the side connection until Release.
class RowGate {
 public:
  RowGate(testing::TestSchema& schema, const std::string& id) : schema_(schema) {
    schema_.Sql("INSERT INTO fences VALUES ('" + id + "', 0) ON CONFLICT DO NOTHING");
    schema_.Sql("BEGIN");
    schema_.Sql("SELECT token FROM fences WHERE execution_id = '" + id + "' FOR UPDATE");
  }
  void Release() { schema_.Sql("COMMIT"); }

 private:
  testing::TestSchema& schema_;
};

// Only an append that can answer a park reads its fence row FOR SHARE and
// so waits for a conditional acquire's FOR UPDATE (LocksFenceRow). A first
// append cannot answer one, even when it ends its execution: it does not wait
// for the row's holder, alone or in a batch, and a newer token still refuses
// it. An answering append past a park waits for the holder, as before.
TEST_F(PostgresStoreTest, OnlyAnAppendThatCanAnswerAParkWaitsForItsFenceRowLock) {
  auto ended = [](std::string id, std::optional<int64_t> fence) {
    return Req(std::move(id), 1,
               {Started(), KernelEvent(KernelKind::kExecutionCompleted, {{"value", 1}})}, fence);
  };
  for (const char* id : {"one", "b1", "b2", "stale"})
    ASSERT_EQ(store_->AcquireFence(id).value(), 1);
  // Runs `append` on a thread while `id`'s row is held; true if it returned
  // before the holder committed.
  auto returns_while_held = [&](const std::string& id, auto append) {
    RowGate gate(*schema_, id);
    std::atomic<bool> returned{false};
    std::thread t([&] {
      append();
      returned = true;
    });
    for (int i = 0; i < 200 && !returned; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    bool early = returned.load();
    gate.Release();
    t.join();
    return early;
  };
  EXPECT_TRUE(
      returns_while_held("one", [&] { EXPECT_EQ(store_->Append(ended("one", 1)).value(), 2); }));
  EXPECT_TRUE(returns_while_held("b1", [&] {
    std::vector<AppendRequest> batch = {ended("b1", 1), ended("b2", 1)};
    auto out = store_->AppendBatch(batch);
    ASSERT_TRUE(out) << out.error().ToString();
    EXPECT_EQ((*out)[0].value(), 2);
    EXPECT_EQ((*out)[1].value(), 2);
  }));
  auto stale = store_->Append(ended("stale", 0));
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kStaleFence);
  EXPECT_EQ(store_->Head("stale").value(), 0);

  ASSERT_TRUE(store_->Append(Req("parked", 1, {Started(), Parked()})));
  EXPECT_FALSE(returns_while_held("parked", [&] {
    EXPECT_EQ(store_
                  ->Append(Req("parked", 3,
                               {KernelEvent(KernelKind::kExecutionResumed, Json::object()),
                                KernelEvent(KernelKind::kExecutionCompleted, {{"value", 1}})}))
                  .value(),
              4);
  }));
}

// The guard's statements probe the primary key under a generic plan made on
// an empty table, as a store's connections make theirs on a new schema. A
// first append's check used to be NOT EXISTS, which such a plan turns into a
// hashed subplan that reads all of events per statement, and kept as the
// table grew (BENCHMARKS.md, "Issue 20: first appends in the lean
// statement").
TEST_F(PostgresStoreTest, TheGuardsGenericPlansReadNoWholeTable) {
  const std::pair<const char*, std::string> statements[] = {
      {"lean", sql::LeanAppendSql(false)},
      {"lean_hinted", sql::LeanAppendSql(true)},
      {"lean_owned", sql::LeanAppendSql(false, true)},
      {"lone", sql::LoneInsertSql(sql::LoneHead::kNear)},
      {"lone_exact", sql::LoneInsertSql(sql::LoneHead::kExact)},
      {"full", sql::AppendSql("SHARE")}};
  for (const auto& [name, text] : statements) {
    SCOPED_TRACE(name);
    // Every read of events is a probe of an index (the INSERT is not a read).
    std::vector<std::string> reads = schema_->GenericPlanReads(text).node_types;
    EXPECT_FALSE(reads.empty());
    for (const std::string& read : reads) {
      EXPECT_TRUE(read == "Index Scan" || read == "Index Only Scan") << read << " of events";
    }
  }
}

// Every read of a status kind's entries proves a status index's predicate:
// with sequential scans off, a statement that did not would scan the table.
TEST_F(PostgresStoreTest, ListEndedReadsEveryStatusIndexAndNoWholeTable) {
  std::set<std::string> used;
  for (std::string_view kind : EndingKindNames()) {
    SCOPED_TRACE(kind);
    testing::TestSchema::PlanReads plan = schema_->GenericPlanReads(sql::ListEndedSql(kind), true);
    EXPECT_EQ(plan.node_types.size(), 3u);
    EXPECT_EQ(plan.sorted_reads, 0);  // each range is read in its index's order
    for (const std::string& read : plan.node_types) {
      EXPECT_TRUE(read == "Index Scan" || read == "Index Only Scan") << read << " of events";
    }
    used.insert(plan.indexes.begin(), plan.indexes.end());
  }
  EXPECT_EQ(used, (std::set<std::string>{std::string(sql::kStatusIndex),
                                         std::string(sql::kEndStatusIndex)}));
}

// Concurrent acquires share transactions: rows bumped in one transaction
// carry one xmin. Without the group every acquire is its own transaction
// (as many xmins as rows). The first round queues behind a group held on a
// locked row, so sharing does not depend on how fast threads start (under
// ThreadSanitizer they start slowly enough that unheld rounds rarely overlap).
TEST_F(PostgresStoreTest, ConcurrentAcquiresShareCommits) {
  constexpr int kThreads = 48;
  constexpr int kRounds = 8;
  testing::TestSchema observer(testing::TestPostgresUrl());
  RowGate gate(*schema_, "gate");
  std::thread first([&] { EXPECT_EQ(store_->AcquireFence("gate").value_or(0), 1); });
  while (LockWaiters(observer, *schema_) != "1") {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::atomic<int> wrong{0};
  std::thread others([&] {
    OnThreads(kThreads, [&](int t) {
      for (int r = 0; r < kRounds; ++r) {
        std::string id = "ex-" + std::to_string(t) + "-" + std::to_string(r);
        bool granted =
            (t + r) % 3 == 0 ? store_->AcquireFence(id).value_or(0) == 1
            : (t + r) % 3 == 1
                ? store_->AcquireFenceIf(id, {0, 0}).value_or(ConditionalAcquire{}).fence == 1
                : !store_->AcquireFenceIfReadTail(id, {0, 0}, 0)
                       .value_or(AcquireWithTail{{true, 0}, {}})
                       .acquire.stale;
        if (!granted) wrong.fetch_add(1);
      }
    });
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));  // let the first round queue
  gate.Release();
  first.join();
  others.join();
  EXPECT_EQ(wrong.load(), 0);
  constexpr int kAcquires = kThreads * kRounds;
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM fences WHERE token = 1"),
            std::to_string(kAcquires + 1));
  int transactions = std::stoi(schema_->Sql("SELECT count(DISTINCT xmin::text) FROM fences"));
  EXPECT_LT(transactions, kAcquires) << "acquires did not share transactions";
  PostgresAcquireStats stats = store_->AcquireStats();
  EXPECT_EQ(stats.acquires, static_cast<uint64_t>(kAcquires + 1));
  EXPECT_EQ(stats.commits, static_cast<uint64_t>(transactions));
  EXPECT_GE(stats.largest, static_cast<uint64_t>(kThreads / 2)) << "the queued round was split";
  EXPECT_LE(stats.largest, kAcquireGroupMax);
  EXPECT_EQ(stats.replays, 0u);
  // Conditional acquires naming no park (park_seq 0) make their rows first:
  // no second round for the rows they did not find.
  EXPECT_EQ(stats.ensure_rounds, 0u);
}

// The first group waits on a held row while the rest queue: the next groups
// are full (kAcquireGroupMax) and none is larger; two acquires of one
// execution in a group get serial tokens; of conditional acquires with one
// expectation in a group exactly one is granted.
TEST_F(PostgresStoreTest, QueuedAcquiresFillGroupsUpToTheLimitInSerialOrder) {
  PostgresOptions options = schema_->Options();
  options.acquire_groups_in_flight_max = 1;
  store_ = OpenStore(options);
  ASSERT_NE(store_, nullptr);
  testing::TestSchema observer(testing::TestPostgresUrl());
  RowGate gate(*schema_, "gate");
  std::thread first([&] { EXPECT_EQ(store_->AcquireFence("gate").value_or(0), 1); });
  while (LockWaiters(observer, *schema_) != "1") {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  constexpr int kOthers = 2 * static_cast<int>(kAcquireGroupMax) + 10;
  std::vector<int64_t> same(10);
  std::vector<ConditionalAcquire> conditional(10);
  std::atomic<int> distinct_ok{0};
  std::thread others([&] {
    OnThreads(kOthers, [&](int i) {
      if (i < 10) {
        same[i] = store_->AcquireFence("same").value_or(0);
      } else if (i < 20) {
        conditional[i - 10] =
            store_->AcquireFenceIf("cond", {0, 0}).value_or(ConditionalAcquire{true, -1});
      } else if (store_->AcquireFence("own-" + std::to_string(i)).value_or(0) == 1) {
        distinct_ok.fetch_add(1);
      }
    });
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));  // let them queue behind the gate
  gate.Release();
  first.join();
  others.join();
  std::sort(same.begin(), same.end());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(same[i], i + 1);
  int granted = 0;
  for (const auto& c : conditional) {
    if (!c.stale) {
      ++granted;
      EXPECT_EQ(c.fence, 1);
    } else {
      EXPECT_GE(c.fence, 1);
    }
  }
  EXPECT_EQ(granted, 1);
  EXPECT_EQ(distinct_ok.load(), kOthers - 20);
  PostgresAcquireStats stats = store_->AcquireStats();
  EXPECT_EQ(stats.largest, kAcquireGroupMax);
  EXPECT_EQ(stats.acquires, static_cast<uint64_t>(kOthers + 1));
  EXPECT_GE(stats.commits, 4u);  // the gate's, then at least 3 for 2 * 64 + 10
}

// A group of conditional acquires of distinct executions runs as group-wide
// statements and gives each the verdict a lone acquire would: a first-ever
// acquire of a park is granted; a moved token is stale with the current one;
// an answer past the park is stale with the unchanged token; ignorable
// events past the park leave it open and come back as the tail. Every row
// of a parked execution exists, so the group locks them without making
// them; an execution that never parked and never acquired has no row: its
// acquire finds none, and one more transaction makes the row and grants it.
TEST_F(PostgresStoreTest, GroupWideConditionalAcquiresGiveLoneVerdicts) {
  PostgresOptions options = schema_->Options();
  options.acquire_groups_in_flight_max = 1;
  store_ = OpenStore(options);
  ASSERT_NE(store_, nullptr);
  constexpr int kEach = 8;
  auto id = [](const char* what, int i) { return std::string(what) + "-" + std::to_string(i); };
  for (int i = 0; i < kEach; ++i) {
    ASSERT_TRUE(store_->Append(Req(id("fresh", i), 1, {Started(), Parked()})));
    ASSERT_TRUE(store_->Append(Req(id("moved", i), 1, {Started(), Parked()})));
    ASSERT_EQ(store_->AcquireFence(id("moved", i)).value(), 1);
    ASSERT_TRUE(store_->Append(Req(id("answered", i), 1, {Started(), Parked()})));
    ASSERT_TRUE(store_->Append(
        Req(id("answered", i), 3, {KernelEvent(KernelKind::kExecutionResumed, nullptr)})));
    ASSERT_TRUE(store_->Append(Req(id("ignored", i), 1, {Started(), Parked()})));
    ASSERT_TRUE(store_->Append(Req(
        id("ignored", i), 3,
        {KernelEvent(KernelKind::kExecutionDenied, nlohmann::json::object()), AppEvent("note", i)},
        std::nullopt)));
    ASSERT_TRUE(store_->Append(Req(id("rowless", i), 1, {Started(), AppEvent("note", i)})));
  }
  ASSERT_EQ(schema_->Sql("SELECT count(*) FROM fences WHERE execution_id LIKE 'rowless-%'"), "0");
  testing::TestSchema observer(testing::TestPostgresUrl());
  RowGate gate(*schema_, "gate");
  std::thread first([&] { EXPECT_EQ(store_->AcquireFence("gate").value_or(0), 1); });
  while (LockWaiters(observer, *schema_) != "1") {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const PostgresAcquireStats before = store_->AcquireStats();
  constexpr int kKinds = 5;
  std::vector<Result<AcquireWithTail>> got(kKinds * kEach, AcquireWithTail{});
  const char* kinds[] = {"fresh", "moved", "answered", "ignored", "rowless"};
  std::thread others([&] {
    OnThreads(kKinds * kEach, [&](int i) {
      got[i] = store_->AcquireFenceIfReadTail(id(kinds[i / kEach], i % kEach), {0, 2}, 2);
    });
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));  // let them queue behind the gate
  gate.Release();
  first.join();
  others.join();
  for (int i = 0; i < kKinds * kEach; ++i) {
    ASSERT_TRUE(got[i]) << i << ": " << got[i].error().ToString();
    const AcquireWithTail& r = *got[i];
    switch (i / kEach) {
      case 0:  // fresh: granted, nothing past the park
        EXPECT_FALSE(r.acquire.stale) << i;
        EXPECT_EQ(r.acquire.fence, 1) << i;
        EXPECT_TRUE(r.tail.empty()) << i;
        break;
      case 1:  // moved: stale, the current token
        EXPECT_TRUE(r.acquire.stale) << i;
        EXPECT_EQ(r.acquire.fence, 1) << i;
        break;
      case 2:  // answered: stale, the token unchanged
        EXPECT_TRUE(r.acquire.stale) << i;
        EXPECT_EQ(r.acquire.fence, 0) << i;
        ASSERT_EQ(r.tail.size(), 1u) << i;
        EXPECT_TRUE(r.tail[0].Is(KernelKind::kExecutionResumed)) << i;
        break;
      case 4:  // rowless: its row made, then granted; nothing past sequence 2
        EXPECT_FALSE(r.acquire.stale) << i;
        EXPECT_EQ(r.acquire.fence, 1) << i;
        EXPECT_TRUE(r.tail.empty()) << i;
        break;
      default:  // ignored: granted, the two ignorable events are the tail
        EXPECT_FALSE(r.acquire.stale) << i;
        EXPECT_EQ(r.acquire.fence, 1) << i;
        ASSERT_EQ(r.tail.size(), 2u) << i;
        EXPECT_EQ(r.tail[0].sequence, 3) << i;
        EXPECT_EQ(r.tail[1].payload, Json(i % kEach)) << i;
        EXPECT_EQ(r.tail[1].execution_id, id("ignored", i % kEach)) << i;
    }
  }
  for (int i = 0; i < kEach; ++i) {
    EXPECT_EQ(store_->ReadFence(id("fresh", i)).value(), 1);
    EXPECT_EQ(store_->ReadFence(id("moved", i)).value(), 1);
    EXPECT_EQ(store_->ReadFence(id("answered", i)).value(), 0);
    EXPECT_EQ(store_->ReadFence(id("ignored", i)).value(), 1);
    EXPECT_EQ(store_->ReadFence(id("rowless", i)).value(), 1);
  }
  const PostgresAcquireStats after = store_->AcquireStats();
  EXPECT_EQ(after.acquires - before.acquires, static_cast<uint64_t>(kKinds * kEach + 1));
  EXPECT_GE(after.group_wide - before.group_wide, 2u);  // the queued group and its ensure round
  // One group queued behind the gate: only its rowless acquires ran again.
  EXPECT_EQ(after.ensure_rounds - before.ensure_rounds, 1u);
  EXPECT_EQ(after.replays, before.replays);
}

// One acquire of a group fails (its row stays locked past lock_timeout): it
// fails alone with kTimeout and changes nothing; the rest of its group commit.
TEST_F(PostgresStoreTest, AFailingAcquireFailsAloneInItsGroup) {
  PostgresOptions options = schema_->Options();
  options.conninfo += "&options=-c%20lock_timeout%3D3000";
  options.acquire_groups_in_flight_max = 1;
  auto store = OpenStore(options);
  ASSERT_NE(store, nullptr);
  testing::TestSchema& side = *schema_;
  testing::TestSchema held_side(testing::TestPostgresUrl());
  // Two side connections: one gates the first group, one holds "held".
  held_side.Sql("SET search_path TO \"" + side.name() + "\"");
  RowGate held(held_side, "held");
  RowGate gate(side, "gate");
  std::thread first([&] { EXPECT_EQ(store->AcquireFence("gate").value_or(0), 1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::optional<Error> held_error;
  std::atomic<int> others_ok{0};
  std::thread rest([&] {
    OnThreads(11, [&](int i) {
      if (i == 0) {
        auto r = store->AcquireFenceIf("held", {0, 0});
        if (!r) held_error = r.error();
      } else if (store->AcquireFence("other-" + std::to_string(i)).value_or(0) == 1) {
        others_ok.fetch_add(1);
      }
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  gate.Release();
  first.join();
  rest.join();
  held.Release();
  ASSERT_TRUE(held_error.has_value());
  EXPECT_EQ(held_error->code, ErrorCode::kTimeout) << held_error->ToString();
  EXPECT_EQ(others_ok.load(), 10);
  EXPECT_EQ(store->ReadFence("held").value(), 0);
  PostgresAcquireStats stats = store->AcquireStats();
  EXPECT_EQ(stats.replays, 1u);
  EXPECT_EQ(stats.largest, 11u);
  EXPECT_EQ(stats.acquires, 12u);  // the failed one is counted in its committed group
}

// With acquire_groups_in_flight_max = 2 and both groups held on locked rows,
// a third group does not start: the acquires behind them wait in the queue.
TEST_F(PostgresStoreTest, AcquireGroupsInFlightStopAtTheLimit) {
  PostgresOptions options = schema_->Options();
  options.acquire_groups_in_flight_max = 2;
  auto store = OpenStore(options);
  ASSERT_NE(store, nullptr);
  testing::TestSchema second_side(testing::TestPostgresUrl());
  second_side.Sql("SET search_path TO \"" + schema_->name() + "\"");
  testing::TestSchema observer(testing::TestPostgresUrl());
  RowGate gate_a(*schema_, "gate-a");
  RowGate gate_b(second_side, "gate-b");
  auto wait_for_waiters = [&](const char* n) {
    while (LockWaiters(observer, *schema_) != n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  // One after the other, so that each is a group of its own.
  std::thread a([&] { EXPECT_EQ(store->AcquireFence("gate-a").value_or(0), 1); });
  wait_for_waiters("1");
  std::thread b([&] { EXPECT_EQ(store->AcquireFence("gate-b").value_or(0), 1); });
  wait_for_waiters("2");
  std::atomic<int> done{0};
  std::thread rest([&] {
    OnThreads(5, [&](int i) {
      if (store->AcquireFence("free-" + std::to_string(i)).value_or(0) == 1) done.fetch_add(1);
    });
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(done.load(), 0);  // free rows, but no third group ran
  EXPECT_EQ(store->AcquireStats().commits, 0u);
  gate_a.Release();
  a.join();
  rest.join();
  EXPECT_EQ(done.load(), 5);
  gate_b.Release();
  b.join();
  EXPECT_EQ(store->AcquireStats().acquires, 7u);
}

TEST_F(PostgresStoreTest, GroupsInFlightMustBePositive) {
  for (size_t PostgresOptions::*limit :
       {&PostgresOptions::acquire_groups_in_flight_max, &PostgresOptions::read_groups_in_flight_max,
        &PostgresOptions::append_batches_in_flight}) {
    PostgresOptions options = schema_->Options();
    options.*limit = 0;
    auto store = PostgresEventStore::Open(options, clock_);
    ASSERT_FALSE(store);
    EXPECT_EQ(store.error().code, ErrorCode::kInvalidArgument);
  }
}

// The group commit's default (two batches in flight) is the store's answer,
// and no more batches can be useful than the pool has connections.
TEST_F(PostgresStoreTest, AppendBatchesInFlightFitThePool) {
  EXPECT_EQ(store_->AppendBatchesInFlightUseful(), 2u);
  PostgresOptions options = schema_->Options();
  options.connections_max = 3;
  options.append_batches_in_flight = 3;
  auto three = PostgresEventStore::Open(options, clock_);
  ASSERT_TRUE(three) << three.error().ToString();
  EXPECT_EQ((*three)->AppendBatchesInFlightUseful(), 3u);
  options.connections_max = 1;
  auto one = PostgresEventStore::Open(options, clock_);
  ASSERT_TRUE(one) << one.error().ToString();
  EXPECT_EQ((*one)->AppendBatchesInFlightUseful(), 1u);
}

// The first read group waits on a locked table while the rest queue: the
// next groups are full (kReadGroupMax) and none is larger; every read gets
// exactly its own range of its own execution, each capped at
// read_events_max, whatever else its group read.
TEST_F(PostgresStoreTest, QueuedReadsFillGroupsUpToTheLimitEachGettingItsOwnRange) {
  PostgresOptions options = schema_->Options();
  options.read_groups_in_flight_max = 1;
  options.limits.read_events_max = 4;
  store_ = OpenStore(options);
  ASSERT_NE(store_, nullptr);
  constexpr int kLogs = 7;  // log i holds i + 1 events: 1..7
  for (int i = 0; i < kLogs; ++i) {
    std::vector<Envelope> events = {Started()};
    for (int k = 1; k <= i; ++k) events.push_back(AppEvent("e" + std::to_string(k), {{"k", k}}));
    ASSERT_TRUE(store_->Append(Req("log-" + std::to_string(i), 1, events)));
  }
  testing::TestSchema observer(testing::TestPostgresUrl());
  schema_->Sql("BEGIN");
  schema_->Sql("LOCK TABLE events IN ACCESS EXCLUSIVE MODE");
  std::thread first([&] { EXPECT_EQ(store_->ReadRange("log-0", 1, kToEnd).value().size(), 1u); });
  while (LockWaiters(observer, *schema_) != "1") {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Read i: log i % kLogs from i % 3 + 1 to that + i % 5, or an unknown id.
  constexpr int kOthers = 2 * static_cast<int>(kReadGroupMax) + 10;
  std::atomic<int> wrong{0};
  std::thread others([&] {
    OnThreads(kOthers, [&](int i) {
      if (i % 11 == 0) {
        if (!store_->ReadRange("none-" + std::to_string(i), 1, kToEnd).value().empty()) {
          wrong.fetch_add(1);
        }
        return;
      }
      int log = i % kLogs;
      int64_t first = i % 3 + 1, last = first + i % 5;
      int64_t want_last = std::min<int64_t>({last, log + 1, first + 3});
      auto got = store_->ReadRange("log-" + std::to_string(log), first, last);
      if (!got) {
        wrong.fetch_add(1);
        return;
      }
      size_t want = want_last >= first ? static_cast<size_t>(want_last - first + 1) : 0;
      bool right = got->size() == want;
      for (size_t k = 0; right && k < got->size(); ++k) {
        const Envelope& e = (*got)[k];
        right = e.execution_id == "log-" + std::to_string(log) &&
                e.sequence == first + static_cast<int64_t>(k) &&
                (e.sequence == 1 || e.kind == "e" + std::to_string(e.sequence - 1));
      }
      if (!right) wrong.fetch_add(1);
    });
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));  // let them queue behind the lock
  schema_->Sql("COMMIT");
  first.join();
  others.join();
  EXPECT_EQ(wrong.load(), 0);
  PostgresReadStats stats = store_->ReadStats();
  EXPECT_EQ(stats.largest, kReadGroupMax);
  EXPECT_EQ(stats.reads, static_cast<uint64_t>(kOthers + 1));
  EXPECT_GE(stats.groups, 4u);  // the first, then at least 3 for 2 * 64 + 10
}

// A database at version 2 (main before node leases: events, fences, the
// status index; no loom_runs or loom_nodes) is brought to 4 at Open: the
// node table and the owner columns appear, no loom_runs, and an append that
// names an owner records it.
TEST_F(PostgresStoreTest, MigrationFromV2CreatesTheNodeTables) {
  store_.reset();
  schema_->Sql(
      "DROP TABLE loom_nodes; ALTER TABLE fences DROP COLUMN owner, DROP COLUMN since_ms, "
      "DROP COLUMN run_from; "
      "UPDATE once_schema SET value = 2 WHERE name = 'version'");
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(kPostgresSchemaVersion));
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM information_schema.tables WHERE table_schema = '" +
                         schema_->name() + "' AND table_name IN ('loom_runs', 'loom_nodes')"),
            "1");
  AppendRequest req = Req("owned", 1, {Started()});
  req.owner = "node-a";
  ASSERT_TRUE(store_->Append(req));
  auto owner = store_->RunOwnerOf("owned");
  ASSERT_TRUE(owner && owner->has_value()) << (owner ? "none" : owner.error().ToString());
  EXPECT_EQ((*owner)->owner, "node-a");
}

// A database at version 3 (run rows in loom_runs, indexed by owner) is
// brought to 4 at Open: every loom_runs row is carried into its fences row
// (a row for an execution with a fence row keeps its token; one without
// gets a token-0 row), loom_runs is dropped, the nodes keep their rows and
// gain `swept`. The carried owners are what RunOwnerOf, the conditional
// acquire's expected owner and the next ending append see.
TEST_F(PostgresStoreTest, MigrationFromV3CarriesTheRunRowsIntoFences) {
  store_.reset();
  schema_->Sql(R"(
ALTER TABLE fences DROP COLUMN owner, DROP COLUMN since_ms, DROP COLUMN run_from;
ALTER TABLE loom_nodes DROP COLUMN swept;
CREATE TABLE loom_runs (execution_id text COLLATE "C" PRIMARY KEY,
  owner text COLLATE "C" NOT NULL, since_ms bigint NOT NULL);
CREATE INDEX loom_runs_by_owner ON loom_runs (owner, execution_id);
INSERT INTO loom_nodes VALUES ('node-a', 'h', 1, 'v', 1, 1, 10000, false);
INSERT INTO events VALUES
  ('fenced', 1, 'EXECUTION_STARTED', '{}', '{"kernel":true}', 5),
  ('fenced', 2, 'EXECUTION_SUSPENDED', '{}', '{"kernel":true}', 6),
  ('fenced', 3, 'EXECUTION_RESUMED', '{}', '{"kernel":true}', 7),
  ('started', 1, 'EXECUTION_STARTED', '{}', '{"kernel":true}', 8);
INSERT INTO fences VALUES ('fenced', 7);
INSERT INTO loom_runs VALUES ('fenced', 'node-a', 111), ('started', 'node-b', 222);
UPDATE once_schema SET value = 3 WHERE name = 'version';)");
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(kPostgresSchemaVersion));
  EXPECT_EQ(schema_->Sql("SELECT to_regclass('loom_runs') IS NULL"), "t");
  EXPECT_EQ(schema_->Sql("SELECT token || ' ' || owner || ' ' || since_ms FROM fences "
                         "WHERE execution_id = 'fenced'"),
            "7 node-a 111");
  EXPECT_EQ(schema_->Sql("SELECT token || ' ' || owner || ' ' || since_ms FROM fences "
                         "WHERE execution_id = 'started'"),
            "0 node-b 222");
  EXPECT_EQ(schema_->Sql("SELECT host || ' ' || swept FROM loom_nodes"), "h false");
  auto owner = store_->RunOwnerOf("started");
  ASSERT_TRUE(owner && owner->has_value());
  EXPECT_EQ((*owner)->owner, "node-b");
  EXPECT_EQ((*owner)->since_ms, 222);
  // The ending append of a carried run releases it.
  AppendRequest end =
      Req("fenced", 4, {KernelEvent(KernelKind::kExecutionCompleted, {{"value", 1}})}, 7);
  end.owner = "node-a";
  auto ended = store_->Append(end);
  ASSERT_TRUE(ended) << ended.error().ToString();
  owner = store_->RunOwnerOf("fenced");
  ASSERT_TRUE(owner);
  EXPECT_FALSE(owner->has_value());
  EXPECT_EQ(schema_->Sql("SELECT token FROM fences WHERE execution_id = 'fenced'"), "7");
}

// The cost of being a node on park/resume was the second write of the
// fences row that released the owner at every park and every end. The owner's
// own park and end now write no fences row version (the log releases it:
// sql::RunningPredicate), the resume's bump names the next owner in the one
// update it makes anyway, and a truncation that would cut the releasing park
// clears the owner first.
TEST_F(PostgresStoreTest, TheOwnersParkAndEndWriteNoFencesRow) {
  auto version = [&] {
    return schema_->Sql("SELECT xmin::text || ctid::text FROM fences WHERE execution_id = 'ex'");
  };
  AppendRequest start = Req("ex", 1, {Started()});
  start.owner = "node-a";
  ASSERT_TRUE(store_->Append(start));
  const std::string started = version();
  AppendRequest park = Req("ex", 2, {Parked(0)}, 0);
  park.owner = "node-a";
  ASSERT_TRUE(store_->Append(park));
  EXPECT_EQ(version(), started);
  auto owner = store_->RunOwnerOf("ex");
  ASSERT_TRUE(owner);
  EXPECT_FALSE(owner->has_value());
  auto bumped = store_->AcquireFenceIf("ex", {.fence = 0, .park_seq = 2, .owner = "node-b"});
  ASSERT_TRUE(bumped && !bumped->stale);
  EXPECT_EQ(schema_->Sql("SELECT owner || ' ' || run_from FROM fences WHERE execution_id = 'ex'"),
            "node-b 2");
  owner = store_->RunOwnerOf("ex");
  ASSERT_TRUE(owner && owner->has_value());
  EXPECT_EQ((*owner)->owner, "node-b");
  const std::string resumed = version();
  AppendRequest end =
      Req("ex", 3, {KernelEvent(KernelKind::kExecutionCompleted, {{"value", 1}})}, bumped->fence);
  end.owner = "node-b";
  ASSERT_TRUE(store_->Append(end));
  EXPECT_EQ(version(), resumed);
  owner = store_->RunOwnerOf("ex");
  ASSERT_TRUE(owner);
  EXPECT_FALSE(owner->has_value());
  // Cutting the log to its end keeps the end; the stale owner goes first.
  ASSERT_TRUE(store_->TruncatePrefixKeeping("ex", 99));
  EXPECT_EQ(schema_->Sql("SELECT owner IS NULL FROM fences WHERE execution_id = 'ex'"), "t");
}

// Version 4 -> 5: a version-4 row names an owner only while its run runs,
// so the migration starts each such run at its log's head; from then on the
// log releases it (a park or an end past run_from) with no write.
TEST_F(PostgresStoreTest, MigrationFromV4StartsEachRunAtItsHead) {
  store_.reset();
  schema_->Sql(R"(
ALTER TABLE fences DROP COLUMN run_from;
INSERT INTO events VALUES
  ('running', 1, 'EXECUTION_STARTED', '{}', '{"kernel":true}', 5),
  ('running', 2, 'STEP_COMPLETED', '{}', '{"kernel":true}', 6),
  ('parked', 1, 'EXECUTION_STARTED', '{}', '{"kernel":true}', 7),
  ('parked', 2, 'EXECUTION_SUSPENDED', '{}', '{"kernel":true}', 8);
INSERT INTO fences VALUES ('running', 3, 'node-a', 111), ('parked', 0, NULL, NULL);
UPDATE once_schema SET value = 4 WHERE name = 'version';)");
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(kPostgresSchemaVersion));
  EXPECT_EQ(schema_->Sql("SELECT owner || ' ' || run_from FROM fences "
                         "WHERE execution_id = 'running'"),
            "node-a 2");
  EXPECT_EQ(schema_->Sql("SELECT run_from IS NULL FROM fences WHERE execution_id = 'parked'"), "t");
  auto owner = store_->RunOwnerOf("running");
  ASSERT_TRUE(owner && owner->has_value());
  EXPECT_EQ((*owner)->owner, "node-a");
  // A park by any writer releases it, and writes no fences row.
  const std::string version_before =
      schema_->Sql("SELECT xmin::text FROM fences WHERE execution_id = 'running'");
  auto parked = store_->Append(Req("running", 3, {Parked(3)}, 3));
  ASSERT_TRUE(parked) << parked.error().ToString();
  owner = store_->RunOwnerOf("running");
  ASSERT_TRUE(owner);
  EXPECT_FALSE(owner->has_value());
  EXPECT_EQ(schema_->Sql("SELECT xmin::text FROM fences WHERE execution_id = 'running'"),
            version_before);
}

// A database written by schema version 1 (metadata jsonb), built by hand:
// Open() must migrate it to version 2 (metadata text) under the migration
// lock, keep every row's JSON, and the guard and AcquireFenceIf must work
// on the migrated rows. Without the migration the first append fails (text
// into a jsonb column) and the version stays 1.
class MigrationV1Test : public PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    schema_->Sql(R"(
CREATE TABLE once_schema (name text PRIMARY KEY, value bigint NOT NULL);
CREATE TABLE events (
  execution_id text COLLATE "C" NOT NULL, sequence bigint NOT NULL, kind text NOT NULL,
  payload text NOT NULL, metadata jsonb NOT NULL, time_ms bigint NOT NULL,
  PRIMARY KEY (execution_id, sequence));
CREATE TABLE fences (execution_id text COLLATE "C" PRIMARY KEY, token bigint NOT NULL);
INSERT INTO once_schema VALUES ('version', 1), ('park_fences_backfilled', 1);
INSERT INTO events VALUES
  ('parked', 1, 'EXECUTION_STARTED', '{"input":1}', '{"fence":0,"kernel":true}', 5),
  ('parked', 2, 'EXECUTION_SUSPENDED', '{"on":"timer"}', '{"fence":0,"kernel":true}', 6),
  ('parked', 3, 'order.placed', '{"n":1}', '{"trace":"a\"b","n":[1,2.5,null]}', 7),
  ('answered', 1, 'EXECUTION_SUSPENDED', '{}', '{"fence":0,"kernel":true}', 8),
  ('answered', 2, 'NEWER_KIND', '{}', '{"kernel":true}', 9);
INSERT INTO fences VALUES ('parked', 0), ('answered', 0);)");
  }
};

TEST_F(MigrationV1Test, OpenMigratesMetadataToTextAndKeepsEveryRow) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(kPostgresSchemaVersion));
  EXPECT_EQ(
      schema_->Sql("SELECT data_type FROM information_schema.columns WHERE table_schema = '" +
                   schema_->name() + "' AND table_name = 'events' AND column_name = 'metadata'"),
      "text");
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM pg_indexes WHERE schemaname = '" + schema_->name() +
                         "' AND indexname = 'fences_id_hash'"),
            "1");
  auto rows = store->ReadRange("parked", 1, kToEnd).value();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].kind, "EXECUTION_SUSPENDED");
  EXPECT_EQ(rows[1].metadata.ToJson(), (Json{{"fence", 0}, {"kernel", true}}));
  EXPECT_EQ(rows[2].payload, (Json{{"n", 1}}));
  EXPECT_EQ(rows[2].metadata.ToJson(), (Json{{"trace", "a\"b"}, {"n", {1, 2.5, nullptr}}}));
  EXPECT_EQ(rows[2].time_ms, 7);
  // The guard on migrated rows: the lean path and the FOR SHARE path.
  ASSERT_EQ(store->Append(Req("parked", 4, {AppEvent("more", 1)})).value(), 4);
  EXPECT_EQ(store->Append(Req("parked", 4, {AppEvent("more", 1)})).error().code,
            ErrorCode::kSequenceConflict);
  // The answering scan reads migrated metadata: a stamped unknown kind answers.
  EXPECT_TRUE(store->AcquireFenceIf("answered", {.fence = 0, .park_seq = 1}).value().stale);
  auto won = store->AcquireFenceIf("parked", {.fence = 0, .park_seq = 2}).value();
  EXPECT_FALSE(won.stale);
  EXPECT_EQ(won.fence, 1);
  ASSERT_EQ(
      store->Append(Req("parked", 5, {KernelEvent(KernelKind::kExecutionResumed, {})}, 1)).value(),
      5);
  // Opening again leaves the version alone.
  store.reset();
  ASSERT_NE(OpenStore(), nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(kPostgresSchemaVersion));
}

// Builds the pre-version state: parks without their fence rows, no marker.
class BackfillTest : public PostgresStoreTest {
 protected:
  void SetUp() override {
    PostgresStoreTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_TRUE(store_->Append(Req("parked", 1, {Started(), Parked()})));
    ASSERT_TRUE(store_->Append(
        Req("answered", 1, {Started(), Parked(), KernelEvent(KernelKind::kExecutionResumed, {})})));
    ASSERT_TRUE(store_->Append(Req("denied", 1, {Started(), Parked()})));
    ASSERT_TRUE(store_->Append(
        Req("denied", 3, {KernelEvent(KernelKind::kExecutionDenied, nlohmann::json::object())},
            std::nullopt)));
    ASSERT_TRUE(store_->Append(Req("running", 1, {Started()})));
    schema_->Sql(
        "DELETE FROM fences; DELETE FROM once_schema WHERE name = "
        "'park_fences_backfilled'");
  }
  std::string FenceIds() {
    return schema_->Sql(
        "SELECT coalesce(string_agg(execution_id, ',' ORDER BY execution_id), '') FROM fences");
  }
  std::string Marker() {
    return schema_->Sql("SELECT count(*) FROM once_schema WHERE name = 'park_fences_backfilled'");
  }
};

TEST_F(BackfillTest, BootBackfillsParkedUnansweredOnce) {
  PostgresOptions off = schema_->Options();
  off.backfill_park_fences = false;
  ASSERT_NE(OpenStore(off), nullptr);
  EXPECT_EQ(FenceIds(), "");
  EXPECT_EQ(Marker(), "0");
  ASSERT_NE(OpenStore(), nullptr);
  EXPECT_EQ(FenceIds(), "denied,parked");
  EXPECT_EQ(Marker(), "1");
  // The marker makes it run once: a row removed now is not re-created.
  schema_->Sql("DELETE FROM fences");
  ASSERT_NE(OpenStore(), nullptr);
  EXPECT_EQ(FenceIds(), "");
}

TEST_F(BackfillTest, OfflineBackfillWalksInBatches) {
  auto found = BackfillParkFences(schema_->Options(), /*batch_executions=*/1);
  ASSERT_TRUE(found) << found.error().ToString();
  EXPECT_EQ(*found, 2);
  EXPECT_EQ(FenceIds(), "denied,parked");
  EXPECT_EQ(Marker(), "1");
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM pg_indexes WHERE indexname = "
                         "'events_parks_backfill' AND schemaname = '" +
                         schema_->name() + "'"),
            "0");
  EXPECT_EQ(BackfillParkFences(schema_->Options(), 100).value(), 2);  // idempotent
  EXPECT_EQ(FenceIds(), "denied,parked");
}

}  // namespace
}  // namespace once::store

namespace once::store {
namespace {

// Not a benchmark (bench/ owns those): a design check that the group-commit
// statement stays near a raw batched INSERT of the same rows. Run with
// --gtest_also_run_disabled_tests (ONCE_GROUP_EXECUTIONS sets the batch size).
// Measured locally (2 shared cores, noisy): with fsync per commit (the
// default server) 64 executions per batch ran at 0.75-0.82 of the raw INSERT;
// with synchronous_commit off (below, CPU-bound) 0.41-0.69 at 64 and
// 0.27-0.52 at 512, where the per-execution head probe and the client-side
// encoding show.
// Schema version 6 (packed_rows.h): an append is stored as few rows as the
// statements that select on kinds allow.
class PackedRowsTest : public PostgresStoreTest {
 protected:
  // "first-last" of every row of `id`, in order ("3" for a row of one).
  std::string Rows(const std::string& id) {
    return schema_->Sql(
        "SELECT string_agg(sequence || COALESCE('-' || last_sequence, ''), ' ' ORDER BY "
        "sequence) FROM events WHERE execution_id = '" +
        id + "'");
  }
  std::vector<int64_t> Sequences(const std::string& id, int64_t first, int64_t last) {
    std::vector<int64_t> out;
    const std::vector<Envelope> events = store_->ReadRange(id, first, last).value();
    for (const Envelope& e : events) out.push_back(e.sequence);
    return out;
  }
  static Envelope Step(int n) {
    return KernelEvent(KernelKind::kStepCompleted, {{"name", "s"}, {"value", n}});
  }
  static Envelope Done() { return KernelEvent(KernelKind::kExecutionCompleted, {{"value", 1}}); }
  // Version 5's status index; version 6 added the end index beside it.
  static constexpr const char* kVersion5StatusIndex = R"(
CREATE INDEX events_by_status_kind ON events (kind, time_ms, execution_id, sequence)
  WHERE kind IN ('EXECUTION_STARTED', 'EXECUTION_SUSPENDED', 'EXECUTION_COMPLETED',
                 'EXECUTION_FAILED', 'EXECUTION_CANCELLED', 'EXECUTION_CONTINUED');)";
  static constexpr const char* kVersion6EndStatusIndex = R"(
CREATE INDEX events_by_end_status_kind ON events (end_kind, end_time_ms, execution_id, sequence)
  WHERE end_kind IN ('EXECUTION_STARTED', 'EXECUTION_SUSPENDED', 'EXECUTION_COMPLETED',
                     'EXECUTION_FAILED', 'EXECUTION_CANCELLED', 'EXECUTION_CONTINUED');)";
  // Closes the store and turns its schema back into version 6: version 7's
  // status indexes give way to version 6's (`with_end_index`: both of them).
  void BackToVersion6(bool with_end_index) {
    store_.reset();
    schema_->Sql(std::string("DROP INDEX events_by_first_status, events_by_last_status;") +
                 kVersion5StatusIndex + (with_end_index ? kVersion6EndStatusIndex : "") +
                 "UPDATE once_schema SET value = 6 WHERE name = 'version';");
  }
};

TEST_F(PackedRowsTest, AOneStepExecutionIsOneRowAndReadsBackExactly) {
  Envelope app = AppEvent("order.placed", {{"quote", "a\"b\\c\t"}, {"n", -3}});
  app.metadata = events::Metadata::FromJson({{"trace", "x"}});
  app.time_ms = 42;
  ASSERT_EQ(store_->Append(Req("ex", 1, {Started(), Step(1), app, Done()})).value(), 4);
  EXPECT_EQ(Rows("ex"), "1-4");
  auto back = store_->ReadRange("ex", 1, kToEnd).value();
  ASSERT_EQ(back.size(), 4u);
  EXPECT_EQ(back[0].kind, "EXECUTION_STARTED");
  EXPECT_EQ(back[1].payload, Step(1).payload);
  EXPECT_EQ(back[2].payload, app.payload);
  EXPECT_EQ(back[2].metadata, app.metadata);
  EXPECT_EQ(back[2].time_ms, 42);
  EXPECT_EQ(back[3].kind, "EXECUTION_COMPLETED");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i].sequence, i + 1);
  EXPECT_EQ(store_->Head("ex").value(), 4);
  // The end is found by the status index on the row's last event.
  auto ended = store_->ListEnded(clock_.NowUnixMillis(), {}, 10).value();
  ASSERT_EQ(ended.executions.size(), 1u);
  EXPECT_EQ(ended.executions[0].execution_id, "ex");
}

TEST_F(PackedRowsTest, AMarkedEventIsNeverBetweenAndAParkEndsItsRow) {
  // STARTED SUSPENDED | RESUMED STEP SUSPENDED | DENIED STEP STEP
  auto denied = KernelEvent(KernelKind::kExecutionDenied, nlohmann::json::object());
  ASSERT_TRUE(
      store_->Append(Req("ex", 1,
                         {Started(), Parked(), KernelEvent(KernelKind::kExecutionResumed, {}),
                          Step(1), Parked(), denied, Step(2), Step(3)})));
  EXPECT_EQ(Rows("ex"), "1-2 3-5 6-8");
  // Every range, from inside rows too.
  EXPECT_EQ(Sequences("ex", 4, 7), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(Sequences("ex", 2, 2), (std::vector<int64_t>{2}));
  EXPECT_EQ(Sequences("ex", 7, kToEnd), (std::vector<int64_t>{7, 8}));
  // The acquire reads answers inside rows: the park at 2 is answered at 3,
  // the one at 5 is open.
  EXPECT_TRUE(store_->AcquireFenceIf("ex", {.fence = 0, .park_seq = 2}).value().stale);
  EXPECT_TRUE(store_->AcquireFenceIf("ex", {.fence = 0, .park_seq = 4}).value().stale);
  auto open = store_->AcquireFenceIfReadTail("ex", {.fence = 0, .park_seq = 5}, 6).value();
  EXPECT_FALSE(open.acquire.stale);
  ASSERT_EQ(open.tail.size(), 2u);  // from inside the row 6-8
  EXPECT_EQ(open.tail[0].sequence, 7);
  EXPECT_EQ(open.tail[1].sequence, 8);
}

TEST_F(PackedRowsTest, AppendsAfterAPackedRowFitTheirPredecessorOnly) {
  ASSERT_TRUE(store_->Append(Req("ex", 1, {Started(), Step(1), Step(2)})));
  EXPECT_EQ(Rows("ex"), "1-3");
  // Inside the row, past the head, and at its first event: refused with the head.
  for (int64_t next : {2, 3, 5, 1}) {
    auto refused = store_->Append(Req("ex", next, {Step(9)}));
    ASSERT_FALSE(refused) << next;
    EXPECT_EQ(refused.error().code, ErrorCode::kSequenceConflict) << next;
    EXPECT_EQ(refused.error().As<SequenceDetail>()->expected, 4) << next;
  }
  // A batch takes the lean statement with rows of several events.
  std::vector<AppendRequest> batch = {Req("ex", 4, {Step(3), Step(4)}),
                                      Req("other", 1, {Started(), Step(1), Done()}),
                                      Req("ex2", 2, {Step(1)})};
  auto out = store_->AppendBatch(batch).value();
  EXPECT_EQ(out[0].value(), 5);
  EXPECT_EQ(out[1].value(), 3);
  EXPECT_EQ(out[2].error().code, ErrorCode::kSequenceConflict);
  EXPECT_EQ(Rows("ex"), "1-3 4-5");
  EXPECT_EQ(Rows("other"), "1-3");
  EXPECT_EQ(store_->Head("ex").value(), 5);
  // Batches large enough for hints (fenced executions: the first round
  // learns, the second sends them), rows of several events each.
  for (int i = 0; i < 10; ++i) ASSERT_EQ(store_->AcquireFence("w" + std::to_string(i)).value(), 1);
  for (int64_t round = 0; round < 2; ++round) {
    std::vector<AppendRequest> wide;
    for (int i = 0; i < 10; ++i) {
      const std::string id = "w" + std::to_string(i);
      wide.push_back(round == 0 ? Req(id, 1, {Started(), Step(1), Step(2)}, 1)
                                : Req(id, 4, {Step(3), AppEvent("x", 1)}, 1));
    }
    auto landed = store_->AppendBatch(wide).value();
    for (const auto& head : landed) EXPECT_EQ(head.value(), round == 0 ? 3 : 5);
  }
  EXPECT_EQ(Rows("w7"), "1-3 4-5");
  EXPECT_EQ(store_->AppendStats().hinted, 10u);
}

TEST_F(PackedRowsTest, TruncateAndCopyCutInsideARow) {
  ASSERT_TRUE(store_->Append(Req("ex", 1, {Started(), Step(1), Step(2), Step(3), Step(4)})));
  ASSERT_TRUE(store_->CopyPrefix("ex", "copy", 3));
  EXPECT_EQ(Sequences("copy", 1, kToEnd), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(store_->ReadRange("copy", 3, 3).value()[0].payload, Step(2).payload);
  ASSERT_TRUE(store_->TruncatePrefixKeeping("ex", 3));
  EXPECT_EQ(Sequences("ex", 1, kToEnd), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(Rows("ex"), "3-5");
  EXPECT_EQ(store_->Head("ex").value(), 5);
  ASSERT_TRUE(store_->TruncatePrefixKeeping("ex", 99));  // the head stays
  EXPECT_EQ(Sequences("ex", 1, kToEnd), (std::vector<int64_t>{5}));
  EXPECT_EQ(store_->Append(Req("ex", 6, {Step(5)})).value(), 6);
  EXPECT_EQ(store_->Append(Req("ex", 1, {Started()})).error().code, ErrorCode::kSequenceConflict);
}

TEST_F(PackedRowsTest, AMalformedRowIsCorruptionAndTheOthersAreServed) {
  ASSERT_TRUE(store_->Append(Req("bad", 1, {Started(), Step(1), Step(2)})));
  ASSERT_TRUE(store_->Append(Req("good", 1, {Started(), Step(1), Step(2)})));
  for (const char* damage :
       {"rest = 'not json'", "rest = '[[1,2,3,4]]'", "rest = '[]'", "last_sequence = 2",
        "rest = '[[\"STEP_COMPLETED\",{},{},1],[\"STEP_COMPLETED\",{},{},1]]'", "last_sequence = 0",
        "rest = '[[\"K\",{},[],1]]'", "end_payload = '{'"}) {
    schema_->Sql("UPDATE events SET " + std::string(damage) + " WHERE execution_id = 'bad'");
    auto read = store_->ReadRange("bad", 1, kToEnd);
    ASSERT_FALSE(read) << damage;
    EXPECT_EQ(read.error().code, ErrorCode::kCorruption) << damage;
    EXPECT_EQ(Sequences("good", 1, kToEnd), (std::vector<int64_t>{1, 2, 3})) << damage;
    schema_->Sql("DELETE FROM events WHERE execution_id = 'bad'");
    ASSERT_TRUE(store_->Append(Req("bad", 1, {Started(), Step(1), Step(2)})));
  }
}

TEST_F(PackedRowsTest, AVersion5StoreMigratesAndItsRowsStayReadable) {
  store_.reset();
  schema_->Sql(R"(
DROP INDEX events_by_first_status, events_by_last_status;
ALTER TABLE events DROP COLUMN last_sequence, DROP COLUMN end_kind, DROP COLUMN end_payload,
  DROP COLUMN end_metadata, DROP COLUMN end_time_ms, DROP COLUMN rest;)" +
               std::string(kVersion5StatusIndex) + R"(
INSERT INTO events VALUES
  ('old', 1, 'EXECUTION_STARTED', '{}', '{"kernel":true}', 5),
  ('old', 2, 'STEP_COMPLETED', '{"n":1}', '{"kernel":true}', 6),
  ('old', 3, 'EXECUTION_SUSPENDED', '{}', '{"kernel":true}', 7);
INSERT INTO fences VALUES ('old', 0, NULL, NULL, NULL);
UPDATE once_schema SET value = 5 WHERE name = 'version';)");
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(kPostgresSchemaVersion));
  EXPECT_EQ(Rows("old"), "1 2 3");
  EXPECT_EQ(Sequences("old", 2, kToEnd), (std::vector<int64_t>{2, 3}));
  auto resumed = store_->AcquireFenceIfReadTail("old", {.fence = 0, .park_seq = 3}, 1).value();
  EXPECT_FALSE(resumed.acquire.stale);
  EXPECT_EQ(resumed.tail.size(), 2u);
  ASSERT_TRUE(store_->Append(
      Req("old", 4, {KernelEvent(KernelKind::kExecutionResumed, {}), Step(2), Done()}, 1)));
  EXPECT_EQ(Rows("old"), "1 2 3 4-6");
  EXPECT_EQ(store_->Head("old").value(), 6);
}

// Version 7 gives a paired row one status entry (status_index.h). A version
// 6 store's two indexes, which hold every status event, are rebuilt at Open
// and every kind of row is still found by its ends.
TEST_F(PackedRowsTest, AVersion6StoreRebuildsItsStatusIndexes) {
  Envelope late_done = Done();
  late_done.time_ms = clock_.NowUnixMillis() + 5;  // a start and an end of different times
  ASSERT_TRUE(store_->Append(Req("paired", 1, {Started(), Step(1), Done()})));
  ASSERT_TRUE(store_->Append(Req("apart", 1, {Started(), Step(1), late_done})));
  ASSERT_TRUE(store_->Append(Req("lone", 1, {Started()})));
  ASSERT_TRUE(store_->Append(Req("lone", 2, {Step(1), Done()})));
  BackToVersion6(/*with_end_index=*/true);
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"), "7");
  EXPECT_EQ(schema_->Sql("SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes "
                         "WHERE schemaname = '" +
                         schema_->name() + "' AND tablename = 'events'"),
            "events_by_first_status events_by_last_status events_pkey");
  // The first events' index: apart's and lone's starts as themselves, and
  // paired's start carrying its end. The last events': apart's and lone's ends.
  EXPECT_EQ(schema_->Sql("SELECT string_agg(execution_id || ':' || " + sql::PairedEndSql() +
                         ", ' ' ORDER BY execution_id) FROM events WHERE kind IN (" +
                         sql::StatusKindList() + ")"),
            "apart: lone: paired:EXECUTION_COMPLETED");
  EXPECT_EQ(schema_->Sql("SELECT string_agg(execution_id, ' ' ORDER BY execution_id) FROM events "
                         "WHERE end_kind IN (" +
                         sql::StatusKindList() + ") AND " + sql::UnpairedEndSql()),
            "apart lone");
  auto definition = [&](std::string_view index) {
    return schema_->Sql("SELECT indexdef FROM pg_indexes WHERE schemaname = '" + schema_->name() +
                        "' AND indexname = '" + std::string(index) + "'");
  };
  EXPECT_NE(definition(sql::kStatusIndex).find("THEN end_kind"), std::string::npos);
  EXPECT_NE(definition(sql::kEndStatusIndex).find("IS DISTINCT FROM"), std::string::npos);
  auto ended = store_->ListEnded(clock_.NowUnixMillis() + 10, {}, 10).value();
  std::vector<std::string> ids;
  for (const auto& e : ended.executions) ids.push_back(e.execution_id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"apart", "lone", "paired"}));
}

// The path docs/operations.md gives a large installation: the two indexes
// built CONCURRENTLY beside version 6's while its build still writes; the
// next Open keeps them (the same relations) and drops only the old two.
TEST_F(PackedRowsTest, Version7IndexesBuiltBeforehandAreKept) {
  ASSERT_TRUE(store_->Append(Req("paired", 1, {Started(), Step(1), Done()})));
  BackToVersion6(/*with_end_index=*/false);
  for (const std::string& create : {sql::CreateStatusIndexSql(), sql::CreateEndStatusIndexSql()}) {
    const std::string plain = "CREATE INDEX IF NOT EXISTS ";
    ASSERT_EQ(create.find(plain), 0u);
    schema_->Sql("CREATE INDEX CONCURRENTLY " + create.substr(plain.size()));
  }
  const std::string oids =
      "SELECT to_regclass('events_by_first_status')::oid || ' ' || "
      "to_regclass('events_by_last_status')::oid";
  const std::string before = schema_->Sql(oids);
  ASSERT_FALSE(before.empty());
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"), "7");
  EXPECT_EQ(schema_->Sql(oids), before);  // the same two relations, not rebuilt
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM pg_index WHERE indrelid = 'events'::regclass"),
            "3");  // and the primary key
  EXPECT_EQ(schema_->Sql("SELECT to_regclass('events_by_status_kind') IS NULL"), "t");
  auto ended = store_->ListEnded(clock_.NowUnixMillis(), {}, 10).value();
  ASSERT_EQ(ended.executions.size(), 1u);
}

TEST_F(PostgresStoreTest, DISABLED_GroupCommitVsRawBatchedInsert) {
  constexpr int kBatches = 200;
  const char* env = std::getenv("ONCE_GROUP_EXECUTIONS");  // executions per batch
  const int kExecutions = env ? std::atoi(env) : 64;
  // Without the fsync per commit both sides are CPU-bound: the harder ratio.
  PostgresOptions options = schema_->Options();
  options.conninfo += "&options=-c%20synchronous_commit%3Doff";
  store_ = OpenStore(options);
  schema_->Sql("SET synchronous_commit = off");
  std::vector<std::vector<AppendRequest>> batches(kBatches);
  for (int b = 0; b < kBatches; ++b) {
    for (int x = 0; x < kExecutions; ++x) {
      batches[b].push_back(
          Req("g-" + std::to_string(x), b + 1,
              {KernelEvent(KernelKind::kStepCompleted, {{"name", "s"}, {"result", b}})}, 0));
    }
  }
  auto grouped_start = std::chrono::steady_clock::now();
  for (const auto& batch : batches) {
    auto out = store_->AppendBatch(batch).value();
    ASSERT_TRUE(out[0]) << out[0].error().ToString();
  }
  double grouped_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - grouped_start).count();
  std::string payload = Json{{"result", 1}}.dump();
  std::string metadata = KernelEvent(KernelKind::kStepCompleted, nlohmann::json{{"name", "s"}})
                             .metadata.ToJson()
                             .dump();
  auto raw_start = std::chrono::steady_clock::now();
  for (int b = 0; b < kBatches; ++b) {
    std::string ids = "{", seqs = "{", payloads = "{", metas = "{";
    for (int x = 0; x < kExecutions; ++x) {
      std::string sep = x ? "," : "";
      ids += sep + "\"r-" + std::to_string(x) + "\"";
      seqs += sep + std::to_string(b + 1);
      payloads += sep + "\"" + std::string("{\\\"result\\\":1}") + "\"";
      metas += sep + "\"{\\\"kernel\\\":true}\"";
    }
    ids += "}", seqs += "}", payloads += "}", metas += "}";
    const char* params[4] = {ids.c_str(), seqs.c_str(), payloads.c_str(), metas.c_str()};
    PGresult* res = PQexecParams(
        schema_->side(),
        "INSERT INTO events (execution_id, sequence, kind, payload, metadata, time_ms) "
        "SELECT i, s, 'STEP_COMPLETED', p, m, 1 FROM unnest($1::text[], $2::int8[], "
        "$3::text[], $4::text[]) AS x(i, s, p, m)",
        4, nullptr, params, nullptr, nullptr, 0);
    ASSERT_EQ(PQresultStatus(res), PGRES_COMMAND_OK) << PQresultErrorMessage(res);
    PQclear(res);
  }
  double raw_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - raw_start).count();
  double rows = kBatches * kExecutions;
  std::printf("grouped %.0f rows/s, raw batched INSERT %.0f rows/s, ratio %.2f\n", rows / grouped_s,
              rows / raw_s, raw_s / grouped_s);
}

}  // namespace
}  // namespace once::store
