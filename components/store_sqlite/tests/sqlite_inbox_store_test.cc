// SQLite specifics of SqliteInboxStore: the schema version row and a newer
// file refused, sharing the event store's file, processes opening one new
// file and sending together, a message that outlives its process. The
// InboxStore contract is the conformance kit's job.

#include "once/store_sqlite/sqlite_inbox_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "counting_vfs.h"
#include "test_support.h"

namespace once::store {
namespace {

using events::Json;
using testing::TempDir;

std::string RawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
        out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      }
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) out = "error: " + std::string(sqlite3_errmsg(db));
    } else {
      out = "error: " + std::string(sqlite3_errmsg(db));
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

std::unique_ptr<SqliteInboxStore> OpenOrDie(const std::string& path) {
  auto store = SqliteInboxStore::Open(path);
  EXPECT_TRUE(store.has_value()) << store.error().ToString();
  return store ? std::move(*store) : nullptr;
}

// Waits for every child; true when each exited 0.
bool AllExitedZero(const std::vector<pid_t>& children) {
  bool ok = true;
  for (pid_t child : children) {
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ADD_FAILURE() << "child " << child << " status " << status;
      ok = false;
    }
  }
  return ok;
}

TEST(SqliteInboxStore, ANewFileIsWalFullSyncAtTheCurrentVersion) {
  TempDir dir;
  std::string path = dir.File("inbox.db");
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->SchemaVersion().value(), kSqliteInboxSchemaVersion);
  EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawQuery(path, "SELECT value FROM once_schema WHERE name = 'inbox_version'"), "1");
  // Reopening changes nothing.
  ASSERT_TRUE(store->Put("x", "t", 1));
  store.reset();
  store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Put("x", "t", 2).value(), 2);
}

TEST(SqliteInboxStore, AFileFromANewerBuildIsRefusedUntouched) {
  TempDir dir;
  std::string path = dir.File("inbox.db");
  ASSERT_NE(OpenOrDie(path), nullptr);
  ASSERT_EQ(RawQuery(path, "UPDATE once_schema SET value = 2 WHERE name = 'inbox_version'"), "");
  auto refused = SqliteInboxStore::Open(path);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(RawQuery(path, "SELECT value FROM once_schema WHERE name = 'inbox_version'"), "2");
}

TEST(SqliteInboxStore, SharesTheEventStoreFileWithoutTouchingItsVersion) {
  TempDir dir;
  std::string path = dir.File("loom.db");
  auto events = SqliteEventStore::Open(path);
  ASSERT_TRUE(events.has_value()) << events.error().ToString();
  auto inbox = OpenOrDie(path);
  ASSERT_NE(inbox, nullptr);
  ASSERT_TRUE((*events)->Append(
      {.execution_id = "x",
       .expected_next = 1,
       .events = {events::KernelEvent(events::KernelKind::kExecutionStarted, Json::object())}}));
  EXPECT_EQ(inbox->Put("x", "t", "hello").value(), 1);
  EXPECT_EQ((*events)->Settings().value().schema_version, kSqliteSchemaVersion);
  EXPECT_EQ(inbox->Get("x", "t", 1).value()->message, "hello");
}

// Put waits for the disk (one WAL fsync); Trim does not by default (a lost
// Trim is redone: delivery is derived from the log), and does with
// trim_waits_for_disk. The connection is back at synchronous=FULL after it.
TEST(SqliteInboxStore, PutSyncsAndTrimDoesNotUnlessAsked) {
  testing::RegisterCountingVfs();
  TempDir dir;
  for (bool waits : {false, true}) {
    SCOPED_TRACE(waits);
    auto store =
        SqliteInboxStore::Open(dir.File(waits ? "w.db" : "n.db"),
                               {.trim_waits_for_disk = waits, .vfs = testing::kCountingVfsName});
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    uint64_t before = testing::WalSyncs();
    ASSERT_TRUE((*store)->Put("x", "t", 1));
    EXPECT_EQ(testing::WalSyncs() - before, 1u);
    before = testing::WalSyncs();
    ASSERT_TRUE((*store)->Trim("x", "t", 1));
    EXPECT_EQ(testing::WalSyncs() - before, waits ? 1u : 0u);
    EXPECT_TRUE((*store)->Pending("x").value().empty());
    before = testing::WalSyncs();
    ASSERT_TRUE((*store)->Put("x", "t", 2));
    EXPECT_EQ(testing::WalSyncs() - before, 1u);  // FULL again
  }
}

// Processes that open one new file at the same moment all migrate it and
// send; the numbering has no gap and no repeat.
TEST(SqliteInboxStore, ProcessesOpeningAndSendingTogetherNumberOnce) {
  constexpr int kProcesses = 4;
  constexpr int kEach = 20;
  TempDir dir;
  std::string path = dir.File("inbox.db");
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto store = SqliteInboxStore::Open(path);
      if (!store) {
        std::fprintf(stderr, "open: %s\n", store.error().ToString().c_str());
        _exit(4);
      }
      for (int i = 0; i < kEach; ++i) {
        if (!(*store)->Put("x", "t", Json{{"p", p}, {"i", i}})) _exit(5);
      }
      _exit(0);  // no destructor: the process just ends
    }
    children.push_back(pid);
  }
  ASSERT_TRUE(AllExitedZero(children));
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  auto pending = store->Pending("x").value();
  ASSERT_EQ(pending.size(), static_cast<size_t>(kProcesses * kEach));
  std::set<std::pair<int, int>> seen;
  for (size_t k = 0; k < pending.size(); ++k) {
    EXPECT_EQ(pending[k].seq, static_cast<int64_t>(k) + 1);
    seen.insert({pending[k].message["p"].get<int>(), pending[k].message["i"].get<int>()});
  }
  EXPECT_EQ(seen.size(), pending.size());
}

}  // namespace
}  // namespace once::store
