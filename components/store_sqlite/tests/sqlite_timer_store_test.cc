// SQLite specifics of SqliteTimerStore: the migration of an old-shape table
// (also by several processes at once), processes claiming together, sharing
// the event store's file. The TimerStore contract is the conformance kit's job.

#include "once/store_sqlite/sqlite_timer_store.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "counting_vfs.h"
#include "test_support.h"

namespace once::store {
namespace {

using testing::TempDir;
using timers::Redrive;
using timers::TimerPark;
using timers::TimerRow;

int RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open(path.c_str(), &db);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
  return rc;
}

// The table as the first release wrote it: no redrive, no lease columns.
void CreateOldShape(const std::string& path, bool wal) {
  ASSERT_EQ(
      RawExec(path, std::string(wal ? "PRAGMA journal_mode=WAL;" : "") +
                        "CREATE TABLE timers (execution_id TEXT NOT NULL,"
                        " wake_at_ms INTEGER NOT NULL, PRIMARY KEY (execution_id, wake_at_ms));"
                        "CREATE INDEX timers_wake ON timers(wake_at_ms);"
                        "INSERT INTO timers VALUES ('old', 5), ('old', 7);"),
      SQLITE_OK);
}

std::unique_ptr<SqliteTimerStore> OpenOrDie(const std::string& path) {
  auto store = SqliteTimerStore::Open(path);
  EXPECT_TRUE(store.has_value()) << store.error().ToString();
  return store ? std::move(*store) : nullptr;
}

// Spins until `count` processes arrived (false after a minute).
bool Barrier(std::atomic<int>& arrived, int count) {
  arrived.fetch_add(1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (arrived.load() < count) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    sched_yield();
  }
  return true;
}

// Shared memory that survives fork (MAP_SHARED).
template <class T>
T* SharedNew() {
  void* mem = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(mem, MAP_FAILED);
  return new (mem) T{};
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

TEST(SqliteTimerStore, OldShapeTableIsMigratedAndRedriveRoundTrips) {
  TempDir dir;
  std::string path = dir.File("old.db");
  CreateOldShape(path, /*wal=*/false);
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  // Old rows read as plain and unleased.
  auto old = store->RowsOf("old").value();
  ASSERT_EQ(old.size(), 2u);
  EXPECT_EQ(old[0], (TimerRow{"old", 5, std::nullopt}));
  ASSERT_TRUE(store->Schedule({"old", 5, Redrive{3}}));  // upgrades the old row
  ASSERT_TRUE(store->Schedule({"new", 6, Redrive{0}}));
  EXPECT_EQ(store->RowsOf("old").value()[0].redrive, Redrive{3});
  auto claimed = store->Claim({.now_ms = 10, .limit = 10, .owner = "n1", .lease_ms = 100}).value();
  EXPECT_EQ(claimed.size(), 3u);
  store.reset();
  // Reopening a migrated file changes nothing.
  store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  auto rows = store->Due(10, 10, true).value();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (TimerRow{"old", 5, Redrive{3}}));
  EXPECT_EQ(rows[1], (TimerRow{"new", 6, Redrive{0}}));
  EXPECT_EQ(rows[2], (TimerRow{"old", 7, std::nullopt}));
  EXPECT_TRUE(store->Claim({.now_ms = 50, .owner = "n2"}).value().empty());  // leases survived
  // The park columns were added too: an old row gains a park.
  ASSERT_TRUE(store->Schedule({"old", 7, std::nullopt, TimerPark{2, 1}}));
  EXPECT_EQ(store->RowsOf("old").value()[1], (TimerRow{"old", 7, std::nullopt, TimerPark{2, 1}}));
}

TEST(SqliteTimerStore, ProcessesOpeningAnOldFileTogetherAllBoot) {
  constexpr int kProcesses = 4;
  constexpr int kTrials = 6;
  struct Shared {
    std::atomic<int> arrived[kTrials];
  };
  Shared* shared = SharedNew<Shared>();
  for (int trial = 0; trial < kTrials; ++trial) {
    SCOPED_TRACE(trial);
    TempDir dir;
    std::string path = dir.File("old.db");
    CreateOldShape(path, /*wal=*/trial % 2 == 1);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
      pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        if (!Barrier(shared->arrived[trial], kProcesses)) _exit(3);
        auto store = SqliteTimerStore::Open(path);
        if (!store) {
          std::fprintf(stderr, "open: %s\n", store.error().ToString().c_str());
          _exit(4);
        }
        std::string id = "child-" + std::to_string(p);
        if (!(*store)->Schedule({id, 100, Redrive{p}})) _exit(5);
        auto rows = (*store)->RowsOf(id);
        if (!rows || rows->size() != 1 || (*rows)[0].redrive != Redrive{p}) _exit(6);
        store->reset();
        _exit(0);
      }
      children.push_back(pid);
    }
    ASSERT_TRUE(AllExitedZero(children));
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->RowsOf("old").value().size(), 2u);
    for (int p = 0; p < kProcesses; ++p) {
      auto rows = store->RowsOf("child-" + std::to_string(p)).value();
      ASSERT_EQ(rows.size(), 1u);
      EXPECT_EQ(rows[0].redrive, Redrive{p});
    }
  }
  munmap(shared, sizeof(Shared));
}

TEST(SqliteTimerStore, ProcessesClaimingTogetherNeverShareARow) {
  constexpr int kProcesses = 3;
  constexpr int kRows = 300;
  constexpr int kLimit = 7;
  struct Shared {
    std::atomic<int> arrived;
    std::atomic<int> claims[kRows];
    std::atomic<int> by_process[kProcesses];
  };
  // Process p has claimed more than a claim's worth beyond the process that
  // has claimed least, and rows are left.
  auto AheadOfTheSlowest = [](const Shared& s, int p) {
    int total = 0, least = kRows;
    for (int q = 0; q < kProcesses; ++q) {
      const int n = s.by_process[q].load();
      total += n;
      least = std::min(least, n);
    }
    return total < kRows && s.by_process[p].load() > least + kLimit;
  };
  TempDir dir;
  std::string path = dir.File("timers.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < kRows; ++i) ASSERT_TRUE(store->Schedule({std::to_string(i), i % 50}));
  }  // closed before fork: a connection must not cross it
  Shared* shared = SharedNew<Shared>();
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto store = SqliteTimerStore::Open(path);
      if (!store) _exit(4);
      if (!Barrier(shared->arrived, kProcesses)) _exit(3);
      // Until nothing due is left unleased.
      while (true) {
        auto rows = (*store)->Claim({.now_ms = 1000,
                                     .limit = kLimit,
                                     .owner = "p" + std::to_string(p),
                                     .lease_ms = 1'000'000});
        if (!rows) {
          std::fprintf(stderr, "claim: %s\n", rows.error().ToString().c_str());
          _exit(5);
        }
        if (rows->empty()) break;
        for (const TimerRow& r : *rows) {
          shared->claims[std::stoi(r.execution_id)].fetch_add(1);
          shared->by_process[p].fetch_add(1);
        }
        // SQLite's busy handler backs off ever longer (up to 100 ms a
        // sleep); a pause between claims lets the others in, so the
        // processes really interleave. A process ahead of the slowest
        // waits for it a little longer (at most 200 ms a claim): under
        // ASan one process once took every row while the others slept.
        usleep(static_cast<useconds_t>(300 + (p * 7919 + shared->claims[0].load()) % 1200));
        for (int waited_ms = 0; waited_ms < 200 && AheadOfTheSlowest(*shared, p); waited_ms += 5) {
          usleep(5000);
        }
      }
      store->reset();
      _exit(0);
    }
    children.push_back(pid);
  }
  ASSERT_TRUE(AllExitedZero(children));
  for (int i = 0; i < kRows; ++i) EXPECT_EQ(shared->claims[i].load(), 1) << "row " << i;
  int claimers = 0;
  std::printf("claimed per process:");
  for (int p = 0; p < kProcesses; ++p) {
    std::printf(" %d", shared->by_process[p].load());
    claimers += shared->by_process[p].load() > 0 ? 1 : 0;
  }
  std::printf("\n");
  EXPECT_GE(claimers, 2);  // it was a race
  munmap(shared, sizeof(Shared));
}

TEST(SqliteTimerStore, ScheduleKeepsALiveLease) {
  TempDir dir;
  auto store = OpenOrDie(dir.File("t.db"));
  ASSERT_TRUE(store->Schedule({"a", 10}));
  ASSERT_EQ(store->Claim({.now_ms = 100, .owner = "n1", .lease_ms = 50}).value().size(), 1u);
  ASSERT_TRUE(store->Schedule({"a", 10, Redrive{1}}));
  EXPECT_TRUE(store->Claim({.now_ms = 120, .owner = "n2", .lease_ms = 50}).value().empty());
  auto again = store->Claim({.now_ms = 150, .owner = "n2", .lease_ms = 50}).value();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].redrive, Redrive{1});
}

// Parks on many threads write timer rows at once (ParkTimers::OnPark runs on
// the thread that ran the body): their Schedules share commits, as the event
// store's appends do, instead of one WAL fsync each under one mutex.
TEST(SqliteTimerStore, ConcurrentWritesShareACommit) {
  testing::RegisterCountingVfs();
  TempDir dir;
  auto store = SqliteTimerStore::Open(dir.File("t.db"), {.vfs = testing::kCountingVfsName});
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  testing::SetWalSyncDelay(std::chrono::milliseconds(2));  // writers pile up behind a commit
  constexpr int kThreads = 16, kRowsEach = 10;
  uint64_t wal_before = testing::WalSyncs();
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRowsEach; ++i) {
        if (!(*store)->Schedule({"e" + std::to_string(t) + "-" + std::to_string(i), 10 + i}))
          ++failed;
      }
    });
  }
  for (auto& th : threads) th.join();
  testing::SetWalSyncDelay(std::chrono::microseconds(0));
  uint64_t syncs = testing::WalSyncs() - wal_before;
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ((*store)->Due(1'000, 1'000, true).value().size(), size_t{kThreads * kRowsEach});
  // One fsync per row would be 160; a group commit needs far fewer.
  EXPECT_LT(syncs, uint64_t{kThreads * kRowsEach / 2}) << syncs << " WAL fsyncs";
  // A claim and a CompleteMany in the same groups keep their own atomicity.
  auto claimed = (*store)->Claim({.now_ms = 100, .limit = 1'000, .owner = "n"}).value();
  ASSERT_EQ(claimed.size(), size_t{kThreads * kRowsEach});
  std::vector<timers::TimerKey> keys;
  for (const TimerRow& r : claimed) keys.push_back(r.key());
  ASSERT_TRUE((*store)->CompleteMany(keys));
  EXPECT_TRUE((*store)->Due(1'000, 1'000, true).value().empty());
}

TEST(SqliteTimerStore, SharesAFileWithTheEventStore) {
  TempDir dir;
  std::string path = dir.File("loom.db");
  auto events = SqliteEventStore::Open(path);
  ASSERT_TRUE(events.has_value()) << events.error().ToString();
  auto timers = OpenOrDie(path);
  ASSERT_NE(timers, nullptr);
  ASSERT_TRUE(timers->Schedule({"ex-1", 10}));
  ASSERT_EQ((*events)->AcquireFence("ex-1").value(), 1);
  events->reset();
  timers.reset();
  auto reopened = SqliteEventStore::Open(path);
  ASSERT_TRUE(reopened.has_value()) << reopened.error().ToString();
  EXPECT_EQ((*reopened)->ReadFence("ex-1").value(), 1);
  EXPECT_EQ((*reopened)->Settings().value().schema_version, kSqliteSchemaVersion);
  EXPECT_EQ(OpenOrDie(path)->RowsOf("ex-1").value().size(), 1u);
}

TEST(SqliteTimerStore, MalformedRedriveIsCorruption) {
  TempDir dir;
  std::string path = dir.File("t.db");
  OpenOrDie(path).reset();
  ASSERT_EQ(RawExec(path,
                    "INSERT INTO timers(execution_id, wake_at_ms, redrive) "
                    "VALUES ('a', 1, '{\"attempt\":\"x\"}')"),
            SQLITE_OK);
  auto store = OpenOrDie(path);
  auto due = store->Due(10, 10, true);
  ASSERT_FALSE(due.has_value());
  EXPECT_EQ(due.error().code, ErrorCode::kCorruption);
  auto claimed = store->Claim({.now_ms = 10, .owner = "n1"});
  ASSERT_FALSE(claimed.has_value());
  EXPECT_EQ(claimed.error().code, ErrorCode::kCorruption);
  EXPECT_EQ(store->Due(10, 10, false).value().size(), 0u);
}

TEST(SqliteTimerStore, InMemoryPathIsRefused) {
  auto store = SqliteTimerStore::Open(":memory:");
  ASSERT_FALSE(store.has_value());
  EXPECT_EQ(store.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace once::store
