// PostgresTimerStore cases beyond the conformance kit: the migration of an
// older timers table, a boot that times out on the table lock, and two
// stores (two pools, two connections) claiming from one table.

#include "once/store_postgres/postgres_timer_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <sstream>
#include <thread>

#include "test_database.h"

namespace once::store {
namespace {

using testing::PostgresTest;
using timers::ClaimRequest;
using timers::Redrive;
using timers::TimerPark;
using timers::TimerRow;

// The shape before re-drive rows and leases.
constexpr char kOldShape[] =
    "CREATE TABLE timers (execution_id text NOT NULL, wake_at_ms bigint NOT NULL, "
    "PRIMARY KEY (execution_id, wake_at_ms)); "
    "CREATE INDEX timers_wake_at_ms ON timers (wake_at_ms); "
    "INSERT INTO timers VALUES ('old', 10)";

class PostgresTimerTest : public PostgresTest {
 protected:
  PostgresTimerOptions Options() const {
    PostgresTimerOptions o;
    o.conninfo = schema_->Options().conninfo;
    o.schema = schema_->name();
    return o;
  }
  std::unique_ptr<PostgresTimerStore> Open(const PostgresTimerOptions& o) {
    auto store = PostgresTimerStore::Open(o);
    EXPECT_TRUE(store.has_value()) << (store ? "" : store.error().ToString());
    return store ? std::move(*store) : nullptr;
  }
  // The timers table's storage options, as the catalog holds them.
  std::string Reloptions() {
    return schema_->Sql(
        "SELECT COALESCE(array_to_string(c.reloptions, ','), '') FROM pg_class c JOIN "
        "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '" +
        schema_->name() + "' AND c.relname = 'timers'");
  }
  bool HasColumn(const std::string& column) {
    return schema_->Sql("SELECT count(*) FROM information_schema.columns WHERE table_schema = '" +
                        schema_->name() + "' AND table_name = 'timers' AND column_name = '" +
                        column + "'") == "1";
  }
};

TEST_F(PostgresTimerTest, OlderTableGainsTheColumnsAndKeepsItsRows) {
  schema_->Sql(kOldShape);
  ASSERT_FALSE(HasColumn("redrive"));
  auto timers = Open(Options());
  ASSERT_NE(timers, nullptr);
  for (const char* c : {"redrive", "lease_owner", "lease_until_ms", "park_seq", "park_fence"}) {
    EXPECT_TRUE(HasColumn(c)) << c;
  }
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM pg_indexes WHERE schemaname = '" + schema_->name() +
                         "' AND indexname = 'timers_by_wake'"),
            "1");
  // The one-column index the claim's order outgrew is dropped.
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM pg_indexes WHERE schemaname = '" + schema_->name() +
                         "' AND indexname = 'timers_wake_at_ms'"),
            "0");
  // Leases become HOT updates on the pages written from now on.
  EXPECT_EQ(Reloptions(), "fillfactor=50");
  // The old row reads as a plain wake and can be claimed.
  EXPECT_EQ(timers->RowsOf("old").value(), (std::vector<TimerRow>{{"old", 10, std::nullopt}}));
  ASSERT_TRUE(timers->Schedule({"r", 20, Redrive{3}}));
  ASSERT_TRUE(timers->Schedule({"r", 20, std::nullopt}));  // never downgraded
  EXPECT_EQ(timers->RowsOf("r").value(), (std::vector<TimerRow>{{"r", 20, Redrive{3}}}));
  auto claimed = timers->Claim({.now_ms = 100, .owner = "n1", .lease_ms = 1000}).value();
  EXPECT_EQ(claimed, (std::vector<TimerRow>{{"old", 10, std::nullopt}, {"r", 20, Redrive{3}}}));
  // The old row gains a park.
  ASSERT_TRUE(timers->Schedule({"old", 10, std::nullopt, TimerPark{2, 1}}));
  EXPECT_EQ(timers->RowsOf("old").value()[0].park, (TimerPark{2, 1}));
  // A second boot finds nothing to do.
  timers.reset();
  ASSERT_NE(Open(Options()), nullptr);
}

// A claim leases rows by rewriting their lease columns, which no index
// holds: with half of each page free, the new version stays in its page and
// no index entry is written (postgres_timer_store.cc, kTimersFillfactor).
TEST_F(PostgresTimerTest, ANewTableLeavesRoomOnEachPageForItsLeases) {
  auto timers = Open(Options());
  ASSERT_NE(timers, nullptr);
  EXPECT_EQ(Reloptions(), "fillfactor=50");
  // A fillfactor an operator chose is theirs: a boot sets one only where
  // none is set.
  schema_->Sql("ALTER TABLE timers SET (fillfactor = 80)");
  timers.reset();
  ASSERT_NE(Open(Options()), nullptr);
  EXPECT_EQ(Reloptions(), "fillfactor=80");
}

TEST_F(PostgresTimerTest, LockTimeoutFailsTheBootCleanlyAndTheNextBootMigrates) {
  schema_->Sql(kOldShape);
  // An open transaction that has read timers holds ACCESS SHARE: ALTER TABLE
  // has to wait for it.
  schema_->Sql("BEGIN; SELECT count(*) FROM timers");
  PostgresTimerOptions o = Options();
  o.migration_lock_timeout_ms = 200;
  auto failed = PostgresTimerStore::Open(o);
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, ErrorCode::kTimeout) << failed.error().ToString();
  schema_->Sql("COMMIT");
  EXPECT_FALSE(HasColumn("redrive"));  // the failed boot left nothing behind
  // The next boot migrates. It gets the default lock timeout: it may queue
  // briefly behind the failed boot's session (the server releases its locks
  // once it has processed that disconnect) or autovacuum of the table made a
  // moment ago. With 200 ms this step failed once in CI on a busy machine.
  PostgresTimerOptions retry = Options();
  auto timers = Open(retry);
  ASSERT_NE(timers, nullptr);
  EXPECT_TRUE(HasColumn("redrive"));
  // Migrated, a boot takes no table lock: an open transaction does not stop
  // it, even with the short timeout.
  schema_->Sql("BEGIN; SELECT count(*) FROM timers");
  EXPECT_NE(Open(o), nullptr);
  schema_->Sql("COMMIT");
}

// The claim and the retire find their rows through the indexes, whatever
// the size of their arrays: a connection's first calls, planned for 500 keys
// by default, read the whole table (a retire of 1,000 keys on a 100,000-row
// table took 56-72 ms that way, 4-5 ms by the key index).
TEST_F(PostgresTimerTest, ClaimsAndRetiresNeverScanTheWholeTable) {
  PostgresTimerOptions o = Options();
  o.connections_max = 1;
  ASSERT_NE(Open(o), nullptr);  // creates the table; its backend exits with it
  schema_->Sql(
      "INSERT INTO timers (execution_id, wake_at_ms) "
      "SELECT 'e' || lpad(g::text, 6, '0'), 10 FROM generate_series(1, 20000) g; "
      "ANALYZE timers");
  // The table's scan counters (sequential, index) as the backends reported
  // them: a backend reports at exit, so each count is read once it settles.
  auto scans = [&] {
    std::istringstream row(
        schema_->Sql("SELECT seq_scan || ' ' || COALESCE(idx_scan, 0) FROM pg_stat_user_tables "
                     "WHERE schemaname = current_schema() AND relname = 'timers'"));
    std::pair<int64_t, int64_t> out;
    row >> out.first >> out.second;
    return out;
  };
  auto settled = [&](auto done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto now = scans();
    while (!done(now) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      now = scans();
    }
    return now;
  };
  const auto before = settled([](auto c) { return c.first >= 1; });  // the index builds
  constexpr int kRounds = 6;  // more than the five custom plans a connection tries first
  {
    auto timers = Open(o);
    ASSERT_NE(timers, nullptr);
    for (int round = 0; round < kRounds; ++round) {
      auto rows = timers->Claim({.now_ms = 100, .limit = 500, .owner = "n", .lease_ms = 100'000});
      ASSERT_TRUE(rows.has_value()) << rows.error().ToString();
      ASSERT_EQ(rows->size(), 500u);
      std::vector<timers::TimerKey> keys;
      for (const TimerRow& r : *rows) keys.push_back(r.key());
      ASSERT_TRUE(timers->CompleteMany(keys));
    }
  }
  // Every claim and retire read an index (the retires once per key).
  const auto after = settled([&](auto c) { return c.second >= before.second + kRounds * 501; });
  EXPECT_GE(after.second, before.second + kRounds * 501);
  EXPECT_EQ(after.first, before.first) << "sequential scans of timers by the store's statements";
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM timers"), std::to_string(20000 - kRounds * 500));
}

TEST_F(PostgresTimerTest, TwoNodesClaimingOneTableNeverShareARow) {
  PostgresTimerOptions o = Options();
  o.connections_max = 1;
  auto a = Open(o);
  auto b = Open(o);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kRows = 300;
  for (int i = 0; i < kRows; ++i) ASSERT_TRUE(a->Schedule({"e" + std::to_string(i), i % 7, {}}));
  std::vector<TimerRow> got[2];
  auto claim = [&](PostgresTimerStore* store, std::string owner, std::vector<TimerRow>* out) {
    for (int empty = 0; empty < 3;) {
      auto rows = store->Claim({.now_ms = 100, .limit = 5, .owner = owner, .lease_ms = 100'000});
      ASSERT_TRUE(rows.has_value()) << rows.error().ToString();
      empty = rows->empty() ? empty + 1 : 0;
      out->insert(out->end(), rows->begin(), rows->end());
    }
  };
  std::thread ta(claim, a.get(), "node-a", &got[0]);
  std::thread tb(claim, b.get(), "node-b", &got[1]);
  ta.join();
  tb.join();
  std::set<std::string> seen;
  for (auto& rows : got) {
    for (auto& r : rows) EXPECT_TRUE(seen.insert(r.execution_id).second) << r.execution_id;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kRows));
  EXPECT_GT(got[0].size(), 0u);
  EXPECT_GT(got[1].size(), 0u);
  // Each row is leased to whoever returned it.
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM timers WHERE lease_owner NOT IN ('node-a', "
                         "'node-b') OR lease_until_ms <> 100100"),
            "0");
}

}  // namespace
}  // namespace once::store
