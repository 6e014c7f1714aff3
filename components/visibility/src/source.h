// Private: what a backend (SQLite, PostgreSQL) answers; visibility.cc builds
// the operator's queries from it, the same way for both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"
#include "once/events/kinds.h"
#include "once/store/validate.h"
#include "once/visibility/visibility.h"

namespace once::visibility::internal {

// The kinds whose newest occurrence decides an execution's status: those of
// the stores' partial status indexes
// (events::StatusKernelKindNames) and EXECUTION_RESUMED, as a parenthesised
// SQL list.
inline const std::string& FoldKindsSql() {
  static const std::string sql = [] {
    std::vector<std::string_view> kinds(events::StatusKernelKindNames().begin(),
                                        events::StatusKernelKindNames().end());
    kinds.push_back(events::Info(events::KernelKind::kExecutionResumed).name);
    return "(" + store::SqlQuotedList(kinds) + ")";
  }();
  return sql;
}
// The kernel kinds that answer a park (events::AnsweringKernelKindNames), likewise.
inline const std::string& AnsweringKindsSql() {
  static const std::string sql =
      "(" + store::SqlQuotedList(events::AnsweringKernelKindNames()) + ")";
  return sql;
}

// A position in the index, newest first: entries strictly older than it.
struct IndexKey {
  int64_t time_ms = 0;
  std::string execution_id;
  int64_t sequence = 0;
};

struct Candidate {
  IndexKey key;
};

struct RawEvent {
  int64_t sequence = 0;
  std::string kind;
  std::string payload;  // JSON text
  int64_t time_ms = 0;
};

struct RawSummary {
  std::string execution_id;
  int64_t head = 0;  // 0: no events
  int64_t updated_ms = 0;
  std::optional<RawEvent> started;      // the first EXECUTION_STARTED
  std::optional<RawEvent> last_status;  // the newest of FoldKindsSql()
  int64_t fence = 0;
};

// The PostgreSQL source's reads of the status indexes, for a schema of
// `version` (status_index.h); the tests read their plans. Candidates' SQL
// takes $1..$5: the IndexKey before (time_ms, execution_id, sequence),
// min_ms and the limit.
std::string PostgresCandidatesSql(std::string_view kind, int64_t version);
std::string PostgresCountKindSql(std::string_view kind, int64_t version);
std::string PostgresCountOpenParksSql(int64_t version);

class Source {
 public:
  virtual ~Source() = default;
  // Index entries of `kind` (one of events::StatusKernelKindNames) strictly older
  // than `before`, newest first, with min_ms <= time_ms (when min_ms > 0).
  virtual Result<std::vector<Candidate>> Candidates(std::string_view kind, const IndexKey& before,
                                                    int64_t min_ms, size_t limit) = 0;
  virtual Result<std::vector<RawSummary>> Summarise(const std::vector<std::string>& ids) = 0;
  // Index entries of one kind.
  virtual Result<int64_t> CountKind(std::string_view kind) = 0;
  // Parks no answering event follows.
  virtual Result<int64_t> CountOpenParks() = 0;
  // Inbox messages stored (0 without an inbox table).
  virtual Result<int64_t> CountPendingMessages() = 0;
  virtual Result<TimersPage> Timers(int64_t due_before_ms, size_t limit, const IndexKey& after) = 0;
  virtual Result<std::vector<TimerInfo>> TimersOf(const std::string& id) = 0;
  virtual Result<std::vector<PendingMessage>> Pending(const std::string& id, size_t limit) = 0;
  // kUnsupported without a loom_nodes table.
  virtual Result<std::vector<NodeRow>> Nodes(size_t limit) = 0;
  virtual Result<std::optional<Owner>> OwnerOf(const std::string& id) = 0;
  // kUnsupported without a loom_queues table.
  virtual Result<std::vector<QueueRow>> Queues(size_t limit) = 0;
  virtual std::string Description() const = 0;
};

Result<std::unique_ptr<Source>> OpenSqliteSource(const std::string& path,
                                                 const VisibilityLimits& limits);
Result<std::unique_ptr<Source>> OpenPostgresSource(const Target& target,
                                                   const VisibilityLimits& limits);

// The answer of Nodes() on a store without node leases.
inline std::unexpected<Error> NoNodes() {
  return MakeError(ErrorCode::kUnsupported,
                   "this store records no nodes (no loom_nodes table: node leases, issue 15)");
}

// The answer of Queues() on a store without durable queues.
inline std::unexpected<Error> NoQueues() {
  return MakeError(ErrorCode::kUnsupported,
                   "this store has no durable queues (no loom_queues table: docs/queues.md)");
}

// Both sources' query: limits and item counts per queue, by name.
inline constexpr const char* kQueuesSql =
    "SELECT q.name, q.concurrency_max, q.per_node_concurrency_max, q.rate_max, "
    "q.rate_period_ms, (SELECT COUNT(*) FROM loom_queue_items i WHERE i.queue = q.name AND "
    "i.claimed_by IS NULL), (SELECT COUNT(*) FROM loom_queue_items i WHERE i.queue = q.name "
    "AND i.claimed_by IS NOT NULL) FROM loom_queues q ORDER BY q.name LIMIT ";

// Cursors: "<time_ms>.<sequence>.<hex of the execution id>".
std::string EncodeCursor(const IndexKey& key);
Result<IndexKey> DecodeCursor(std::string_view cursor);

}  // namespace once::visibility::internal
