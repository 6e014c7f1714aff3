// PostgreSQL specifics of PostgresInboxStore: the version row beside the
// event store's, a newer schema refused, nodes booting together, a
// migration lock held elsewhere. The contract is the conformance kit's job.

#include "once/store_postgres/postgres_inbox_store.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "once/store_postgres/postgres_event_store.h"
#include "test_database.h"

namespace once::store {
namespace {

using events::Json;

class PostgresInboxTest : public testing::PostgresTest {
 protected:
  PostgresInboxOptions InboxOptions() const {
    PostgresInboxOptions o;
    o.conninfo = schema_->Options().conninfo;
    o.schema = schema_->name();
    return o;
  }
};

TEST_F(PostgresInboxTest, SharesTheEventStoreSchemaWithItsOwnVersionRow) {
  auto events = OpenStore();
  ASSERT_NE(events, nullptr);
  auto inbox = PostgresInboxStore::Open(InboxOptions());
  ASSERT_TRUE(inbox.has_value()) << inbox.error().ToString();
  EXPECT_EQ((*inbox)->SchemaVersion().value(), kPostgresInboxSchemaVersion);
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'inbox_version'"), "1");
  EXPECT_EQ(schema_->Sql("SELECT value FROM once_schema WHERE name = 'version'"),
            std::to_string(kPostgresSchemaVersion));
  EXPECT_EQ((*inbox)->Put("x", "t", "hello").value(), 1);
  EXPECT_EQ(schema_->Sql("SELECT message FROM inbox_messages WHERE execution_id = 'x'"),
            "\"hello\"");
}

TEST_F(PostgresInboxTest, AnInboxFirstSchemaStillTakesTheEventStore) {
  // The inbox creates once_schema; the event store then finds no version
  // row of its own and creates its tables.
  auto inbox = PostgresInboxStore::Open(InboxOptions());
  ASSERT_TRUE(inbox.has_value()) << inbox.error().ToString();
  auto events = OpenStore();
  ASSERT_NE(events, nullptr);
  EXPECT_EQ(events->Head("x").value(), 0);
}

TEST_F(PostgresInboxTest, ASchemaFromANewerBuildIsRefused) {
  ASSERT_TRUE(PostgresInboxStore::Open(InboxOptions()));
  schema_->Sql("UPDATE once_schema SET value = 2 WHERE name = 'inbox_version'");
  auto refused = PostgresInboxStore::Open(InboxOptions());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnsupported);
}

TEST_F(PostgresInboxTest, NodesBootingTogetherMigrateOnce) {
  constexpr int kNodes = 4;
  std::vector<std::thread> nodes;
  std::vector<int> ok(kNodes, 0);
  for (int n = 0; n < kNodes; ++n) {
    nodes.emplace_back([&, n] {
      auto inbox = PostgresInboxStore::Open(InboxOptions());
      ok[n] = inbox && (*inbox)->Put("x", "t", n).has_value();
    });
  }
  for (auto& t : nodes) t.join();
  for (int n = 0; n < kNodes; ++n) EXPECT_EQ(ok[n], 1) << n;
  EXPECT_EQ(schema_->Sql("SELECT count(*) FROM inbox_messages"), "4");
  EXPECT_EQ(schema_->Sql("SELECT last_seq FROM inbox_topics"), "4");
}

TEST_F(PostgresInboxTest, AMigrationLockHeldElsewhereTimesTheBootOutCleanly) {
  // A session that holds the migration lock (an event store booting).
  schema_->Sql("BEGIN; SELECT pg_advisory_xact_lock(" + std::to_string(kMigrationLockKey) + ")");
  PostgresInboxOptions o = InboxOptions();
  o.migration_lock_timeout_ms = 200;
  auto timed_out = PostgresInboxStore::Open(o);
  ASSERT_FALSE(timed_out.has_value());
  EXPECT_EQ(timed_out.error().code, ErrorCode::kTimeout) << timed_out.error().ToString();
  schema_->Sql("ROLLBACK");
  // Nothing stayed; the next boot migrates (with the default lock timeout:
  // the 200 ms one is for the boot that must time out).
  EXPECT_EQ(schema_->Sql("SELECT to_regclass('inbox_messages')::text"), "");
  auto inbox = PostgresInboxStore::Open(InboxOptions());
  ASSERT_TRUE(inbox.has_value()) << inbox.error().ToString();
  EXPECT_EQ((*inbox)->Put("x", "t", Json{{"k", 1}}).value(), 1);
}

}  // namespace
}  // namespace once::store
