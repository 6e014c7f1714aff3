// File: sqlite_inbox_store.h
//
// SqliteInboxStore: the InboxStore contract (once/inbox/inbox_store.h) on a
// SQLite file in WAL mode, synchronous=FULL by default: Put returns once the
// message's transaction is committed and synced. It may share the event
// store's file (its tables are inbox_topics and inbox_messages) or have a
// file of its own; several processes may open one file.
//
//   SqliteInboxOptions options;
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<SqliteInboxStore> inbox,
//                         SqliteInboxStore::Open("/var/lib/once/loom.db", options));
//   ONCE_ASSIGN_OR_RETURN(int64_t seq, inbox->Put("order-7", "approve", Json{{"by", "ann"}}));
//
// Tables.
//   inbox_topics(execution_id TEXT, topic TEXT, last_seq INTEGER,
//                PRIMARY KEY (execution_id, topic)) WITHOUT ROWID
//     the numbering: the seq of the last Put on (execution, topic).
//   inbox_messages(execution_id TEXT, topic TEXT, seq INTEGER, message TEXT
//                  (compact JSON), PRIMARY KEY (execution_id, topic, seq)) WITHOUT ROWID
//     the messages not yet deleted (Trim, Forget).
// Ids and topics compare as bytes (BINARY collation).
//
// Schema version. The row once_schema('inbox_version') (a table the inbox
// creates if missing: name TEXT PRIMARY KEY, value INTEGER) holds the
// inbox schema's version, apart from PRAGMA user_version, which belongs to
// the event store. Open() applies the missing migrations (kInboxMigrations,
// append-only: migration i brings the version from i - 1 to i) inside ONE
// BEGIN IMMEDIATE, so processes opening a file together migrate it once; a
// version newer than this build is kUnsupported and changes nothing.
//
// Atomicity. Put runs in one BEGIN IMMEDIATE: it counts the execution's
// stored messages (kLimitExceeded at pending_messages_per_execution_max),
// bumps the topic's counter (INSERT ... ON CONFLICT DO UPDATE ... RETURNING)
// and inserts the message; a failure rolls back all three. Trim and Forget
// are single transactions too; Trim does not wait for the disk (see
// trim_waits_for_disk).
//
// Threads: every method may be called from any thread; the store uses one
// connection under a mutex. Errors: as SqliteEventStore's (kBusy past
// busy_timeout, kUnavailable for I/O, kCorruption for a damaged file or a
// stored message that is not JSON, kInternal otherwise), plus the contract's.

#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "once/inbox/inbox_store.h"
#include "once/store_sqlite/sqlite_event_store.h"

namespace once::store {

inline constexpr int kSqliteInboxSchemaVersion = 1;

struct SqliteInboxOptions {
  Durability durability = Durability::kFull;
  std::chrono::milliseconds busy_timeout{5000};
  inbox::InboxLimits limits;
  // Trim commits without waiting for the disk (synchronous=NORMAL for that
  // transaction) unless this is set. A Trim lost to a power cut is harmless:
  // what is delivered comes from the log, and the next delivery's Trim (which
  // deletes everything through its seq) or Sweep deletes the rows again.
  bool trim_waits_for_disk = false;
  // A registered SQLite VFS name; empty: the default.
  std::string vfs;
};

class SqliteInboxStore final : public inbox::InboxStore {
 public:
  // Opens (creating if needed) the file and its inbox tables, migrating an
  // older version. Errors: kInvalidArgument (empty or in-memory path),
  // kUnavailable, kBusy, kCorruption, kUnsupported (a newer schema).
  static Result<std::unique_ptr<SqliteInboxStore>> Open(const std::string& path,
                                                        SqliteInboxOptions options = {});
  ~SqliteInboxStore() override;

  Result<int64_t> Put(std::string_view execution_id, std::string_view topic,
                      const events::Json& message) override;
  Result<std::optional<inbox::InboxMessage>> Get(std::string_view execution_id,
                                                 std::string_view topic, int64_t seq) override;
  Result<std::vector<inbox::InboxMessage>> Pending(std::string_view execution_id) override;
  Status Trim(std::string_view execution_id, std::string_view topic, int64_t through_seq) override;
  Status Forget(std::string_view execution_id) override;
  Result<bool> Holds(std::string_view execution_id) override;
  Result<std::vector<std::string>> Executions(std::string_view after, size_t limit) override;
  const inbox::InboxLimits& limits() const override;

  // The inbox schema version stored in the file.
  Result<int> SchemaVersion();

 private:
  struct Impl;
  explicit SqliteInboxStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace once::store
