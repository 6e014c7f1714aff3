// File: sqlite_event_store.h
//
// SqliteEventStore: the embedded default EventStore, one SQLite database file
// in WAL mode. It offers every optional capability, fences included: the
// fence token lives in the file, so several PROCESSES sharing one file are
// ordered by it exactly as threads of one process are.
//
//   SqliteOptions options;                       // durable: synchronous=FULL
//   options.busy_timeout = std::chrono::milliseconds(2000);
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<SqliteEventStore> store,
//                         SqliteEventStore::Open("/var/lib/once/loom.db", options));
//   ONCE_ASSIGN_OR_RETURN(int64_t head, store->Append(req));
//
// Atomicity. Every write (Append, AppendBatch, AcquireFence, AcquireFenceIf,
// AppendIfUnchanged, CopyPrefix, TruncatePrefixKeeping, DeleteExecution) is
// atomic and serial: its guard checks (fence token, head, answering events
// past a park) and its writes cannot interleave with any other writer, in
// this process or another (other processes are kept out by BEGIN IMMEDIATE
// and wait up to busy_timeout). A refused write writes nothing.
//
// Group commit. Concurrent writes of one store object share a transaction:
// callers queue their operation; one of them (the leader) opens one
// BEGIN IMMEDIATE, runs the queued operations in order, each under its own
// SAVEPOINT (an operation that fails is rolled back alone and the others
// commit), COMMITs once (one WAL fsync under Durability::kFull) and answers
// every caller. Each operation sees the effects of those before it, exactly as
// if each were its own transaction in that order; a caller gets its answer
// only after the commit. If the BEGIN (kBusy past busy_timeout) or the COMMIT
// fails, every operation of the group gets that error and none of them was
// durable; an error that makes SQLite end the transaction mid-group (I/O, a
// full disk) goes to the operations that had run, and the rest run in a new
// transaction. A group holds at most group_operations_max operations and
// about group_bytes_max bytes. An AppendBatch is one operation: its requests
// commit together, and a request refused by its own guard or sequence writes
// nothing while the others commit. Cost: 64 threads running fenced
// executions (AcquireFence + 3 guarded appends each) pay 0.07 WAL fsyncs per
// execution instead of 4 (see the design check in the tests).
//
// Threads. Every method may be called from any thread. Writes go through one
// writer connection, used by the group leader of the moment; reads
// (ReadRange, Head, ReadFence, ListExecutions) use a small pool of reader
// connections and run concurrently with the writer (WAL snapshot reads).
//
// Errors, besides the contract's: a lock held by another process past
// busy_timeout is kBusy (retryable); I/O trouble is kUnavailable (retryable);
// a damaged file or a stored row that is not JSON is kCorruption; any other
// SQLite failure is kInternal. Nothing throws.
//
// Schema. Created on Open; the version is PRAGMA user_version and newer
// versions are reached by an ordered list of migrations, each in one
// transaction. A file whose version is newer than this build is refused
// (kUnsupported).

#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "once/base/clock.h"
#include "once/store/event_store.h"

namespace once::store {

// How hard a commit waits for the disk.
enum class Durability : uint8_t {
  kFull,    // PRAGMA synchronous=FULL: a commit survives power loss
  kNormal,  // synchronous=NORMAL: survives a process crash; power loss may drop the last commits
};

struct SqliteOptions {
  Durability durability = Durability::kFull;
  // How long a write waits for another connection's (or process's) lock
  // before kBusy.
  std::chrono::milliseconds busy_timeout{5000};
  // Reader connections opened on demand, at most this many.
  size_t reader_connections_max = 4;
  Limits limits;
  // Must outlive the store. nullptr: the system clock.
  const Clock* clock = nullptr;
  // A registered SQLite VFS name (tests count fsyncs with one); empty: default.
  std::string vfs;
  // Group commit: operations in one transaction at most, and the bytes they
  // write about at most (the first operation of a group always fits).
  size_t group_operations_max = 1'024;
  size_t group_bytes_max = 16u << 20;
};

// Group commit counters of one store object; for diagnostics and tests.
struct SqliteGroupStats {
  uint64_t commits = 0;        // transactions committed
  uint64_t operations = 0;     // write operations those transactions held
  uint64_t largest_group = 0;  // operations in the largest of them
};

// What the writer connection reports; for diagnostics and tests.
struct SqliteSettings {
  std::string journal_mode;  // "wal"
  int synchronous = 0;       // 2 FULL, 1 NORMAL
  int64_t busy_timeout_ms = 0;
  int schema_version = 0;
};

inline constexpr int kSqliteSchemaVersion = 4;

class SqliteEventStore final : public EventStore {
 public:
  // Opens (creating if needed) the database file at `path` and brings its
  // schema up to date. Errors: kInvalidArgument (empty or ":memory:" path),
  // kUnavailable (cannot open), kBusy, kCorruption, kUnsupported (schema
  // from a newer build).
  static Result<std::unique_ptr<SqliteEventStore>> Open(const std::string& path,
                                                        SqliteOptions options = {});
  ~SqliteEventStore() override;

  Result<int64_t> Append(const AppendRequest& req) override;
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const AppendRequest> requests) override;
  Result<std::vector<Envelope>> ReadRange(std::string_view id, int64_t first,
                                          int64_t last = kToEnd) override;
  Result<int64_t> Head(std::string_view id) override;
  Result<ExecutionPage> ListExecutions(std::string_view after, size_t limit) override;
  Status DeleteExecution(std::string_view id) override;
  Result<EndedPage> ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                              size_t limit) override;
  Result<std::vector<Status>> DeleteEnded(std::span<const std::string> execution_ids,
                                          int64_t ended_ms_max) override;
  const Limits& limits() const override;

  bool Supports(Capability) const override { return true; }
  Result<int64_t> AcquireFence(std::string_view id) override;
  Result<int64_t> ReadFence(std::string_view id) override;
  Result<ConditionalAcquire> AcquireFenceIf(std::string_view id, FenceExpectation expect) override;
  // The acquire and the read in one BEGIN IMMEDIATE.
  Result<AcquireWithTail> AcquireFenceIfReadTail(std::string_view id, FenceExpectation expect,
                                                 int64_t read_after) override;
  // The batch in one write operation of the group: one transaction.
  std::vector<Result<AcquireWithTail>> AcquireFencesIfReadTail(
      std::span<const AcquireIfRead> requests) override;
  Result<int64_t> AppendIfUnchanged(const AppendRequest& req, int64_t observed) override;
  Status CopyPrefix(std::string_view from, std::string_view to, int64_t through) override;
  Status TruncatePrefixKeeping(std::string_view id, int64_t first_kept) override;
  Result<std::optional<RunOwner>> RunOwnerOf(std::string_view id) override;
  // Its own BEGIN IMMEDIATE on the writer connection (outside the write
  // groups: the work runs on the caller's thread), one commit of its own.
  // The work's statements are prepared under an authorizer that refuses
  // transaction control, ATTACH/DETACH, PRAGMA and writes (triggers,
  // indexes) to the stores' tables: events, fences, kept_heads, once_schema,
  // timers, inbox_*, loom_* (kPermissionDenied).
  Result<int64_t> AppendInTransaction(std::string_view id, TransactionWorkRef work) override;

  // The writer connection's journal mode, synchronous level, busy timeout
  // and schema version.
  Result<SqliteSettings> Settings();
  // Write transactions committed by this store object so far (one per
  // group; a write refused alone in a group of one commits nothing).
  uint64_t write_transactions() const;
  SqliteGroupStats GroupStats() const;

 private:
  struct Impl;
  explicit SqliteEventStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace once::store
