// File: postgres_inbox_store.h
//
// PostgresInboxStore: the InboxStore contract (once/inbox/inbox_store.h) on
// PostgreSQL, for many nodes sending to and delivering for one database.
// libpq, raw SQL, prepared statements. Put returns once its transaction has
// committed.
//
//   PostgresInboxOptions options;
//   options.conninfo = "postgresql://postgres@127.0.0.1:5432/loom";
//   options.schema = "loom";  // the event store's schema; created if missing
//   ONCE_ASSIGN_OR_RETURN(std::unique_ptr<PostgresInboxStore> inbox,
//                         PostgresInboxStore::Open(options));
//   ONCE_ASSIGN_OR_RETURN(int64_t seq, inbox->Put("order-7", "approve", Json{{"by", "ann"}}));
//
// Tables (in options.schema; ids and topics COLLATE "C", byte order):
//   inbox_topics(execution_id text, topic text, last_seq bigint,
//                PRIMARY KEY (execution_id, topic))     the numbering
//   inbox_messages(execution_id text, topic text, seq bigint, message text
//                  (compact JSON, kept byte for byte),
//                  PRIMARY KEY (execution_id, topic, seq))   not yet deleted
//
// Schema version. The row once_schema('inbox_version') (the event store's
// table; created if missing) holds the inbox schema's version. Open() runs
// the missing migrations under the event store's advisory migration lock
// (kMigrationLockKey) with lock_timeout = migration_lock_timeout_ms, in one
// transaction: nodes booting together migrate once; a lock wait that times
// out fails that Open() with kTimeout and changes nothing (the next retries);
// a version newer than this build is kUnsupported.
//
// Concurrency. Put and Forget of one execution are serialised by a
// transaction-level advisory lock (pg_advisory_xact_lock(kInboxLockClass,
// hash of the id): two 32-bit keys, a space apart from the migration
// lock's 64-bit one; a collision only serialises two executions). Put is
// three round trips: BEGIN + the lock; one statement that counts the
// execution's messages, bumps the topic's counter (INSERT ... ON CONFLICT
// DO UPDATE, a row lock) and inserts the message unless the count is at
// pending_messages_per_execution_max; COMMIT. So the count is exact across
// nodes and numbers are never repeated or skipped. Trim is one DELETE in a
// transaction with synchronous_commit = off (see trim_waits_for_disk).
//
// Connections: a small pool of its own (connections_max), apart from the
// event store's. Errors as in postgres_event_store.h, plus the contract's;
// a stored message that is not JSON is kCorruption.
//
// Threads: every method may be called from any thread.

#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "once/base/result.h"
#include "once/inbox/inbox_store.h"
#include "once/store_postgres/postgres_event_store.h"

namespace once::store {

inline constexpr int64_t kPostgresInboxSchemaVersion = 1;
// The first key of the per-execution advisory lock ("inbx").
inline constexpr int32_t kInboxLockClass = 0x696e6278;

struct PostgresInboxOptions {
  // A libpq connection string or URL.
  std::string conninfo;
  // The schema that holds the tables; created if missing.
  std::string schema = "public";
  size_t connections_max = 4;
  int64_t checkout_timeout_ms = 5'000;
  // How long Open() waits for the migration lock.
  int64_t migration_lock_timeout_ms = 10'000;
  inbox::InboxLimits limits;
  // Trim commits with synchronous_commit = off (it does not wait for the WAL
  // flush) unless this is set. A Trim lost to a server crash is harmless:
  // what is delivered comes from the log, and the next delivery's Trim or
  // Sweep deletes the rows again.
  bool trim_waits_for_disk = false;
};

namespace pg {
class ConnectionPool;
}  // namespace pg

class PostgresInboxStore final : public inbox::InboxStore {
 public:
  // Connects and migrates (see above).
  static Result<std::unique_ptr<PostgresInboxStore>> Open(const PostgresInboxOptions& options);
  ~PostgresInboxStore() override;

  Result<int64_t> Put(std::string_view execution_id, std::string_view topic,
                      const events::Json& message) override;
  Result<std::optional<inbox::InboxMessage>> Get(std::string_view execution_id,
                                                 std::string_view topic, int64_t seq) override;
  Result<std::vector<inbox::InboxMessage>> Pending(std::string_view execution_id) override;
  Status Trim(std::string_view execution_id, std::string_view topic, int64_t through_seq) override;
  Status Forget(std::string_view execution_id) override;
  Result<bool> Holds(std::string_view execution_id) override;
  Result<std::vector<std::string>> Executions(std::string_view after, size_t limit) override;
  const inbox::InboxLimits& limits() const override { return options_.limits; }

  // The inbox schema version stored in the database.
  Result<int64_t> SchemaVersion();

 private:
  PostgresInboxStore(PostgresInboxOptions options, std::unique_ptr<pg::ConnectionPool> pool);

  PostgresInboxOptions options_;
  std::unique_ptr<pg::ConnectionPool> pool_;
};

}  // namespace once::store
