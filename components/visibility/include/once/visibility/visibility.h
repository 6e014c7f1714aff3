// File: visibility.h
//
// Visibility: the operator's read-only queries over a Loom store (SQLite file
// or PostgreSQL schema): executions by status, workflow, park, time and id,
// newest first and paged; counts per status; timers; an execution's pending
// inbox messages. It opens its own read-only connection, never migrates and
// never writes, so pointing it at the wrong file or schema changes nothing.
//
//   ONCE_ASSIGN_OR_RETURN(auto v, Visibility::Open(Target{.sqlite_path = "loom.db"}));
//   ListQuery q{.status = "suspended", .parked_on = "message", .limit = 50};
//   ONCE_ASSIGN_OR_RETURN(ListPage page, v->List(q));
//   for (const ExecutionRow& r : page.rows) { ... }
//   q.cursor = page.next_cursor;  // empty: nothing older
//
// How a page is found (docs/operations.md, "Visibility"): the stores keep a
// partial index on (kind, time_ms, execution_id, sequence) over the kinds
// that place an execution in a status (EXECUTION_STARTED, _SUSPENDED,
// _COMPLETED, _FAILED, _CANCELLED, _CONTINUED; on PostgreSQL two, read
// as one: once/store_postgres/status_index.h). A query walks it newest
// first from its cursor: the terminal kind for a terminal status, the parks
// for "suspended" or a parked_on filter, the starts otherwise. Each candidate is summarised by a
// few primary-key probes (its head, its newest status event, its start, its
// fence) and kept if it passes every filter. A page stops at `limit` rows or
// after `scan_rows_max` candidates, whichever comes first, and hands back a
// cursor, so no page costs more than scan_rows_max probes, whatever the store
// holds.
//
// Counts() counts the index's entries per kind and the open parks; its cost
// grows with the store (measured in BENCHMARKS.md), so a server caches it.
//
// Errors: kNotFound (no such file, or no Loom store in the schema),
// kUnsupported (a store written by a newer version: nothing is read),
// kInvalidArgument (a malformed query or cursor), kUnavailable (I/O,
// connection), kCorruption (a row this build cannot read).
//
// Threads: one Visibility is used by one thread at a time.

#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "once/base/result.h"
#include "once/events/envelope.h"

namespace once::visibility {

using events::Json;

// Where the store is: exactly one of sqlite_path and postgres_url.
struct Target {
  std::string sqlite_path;
  std::string postgres_url;  // a libpq connection string or URL
  std::string postgres_schema = "public";
};

struct VisibilityLimits {
  size_t page_rows_max = 1'000;  // rows one List page returns at most
  size_t scan_rows_max = 5'000;  // candidates one List page examines at most
  size_t timers_page_max = 1'000;
  size_t messages_page_max = 1'000;
  // A statement that runs longer is cancelled (PostgreSQL statement_timeout;
  // SQLite: a progress handler), so a query never holds a server forever.
  int64_t statement_timeout_ms = 30'000;
};

// The statuses (runtime::StatusName): running, suspended, completed, failed,
// cancelled, continued. "" is any.
bool IsStatusName(std::string_view s);
// The wait types a park names: timer, message, child.
bool IsWaitType(std::string_view s);

struct ListQuery {
  std::string status;            // "" = any
  std::string workflow;          // exact name, "" = any
  std::string parked_on;         // timer | message | child, "" = any
  int64_t started_after_ms = 0;  // 0 = no bound; bounds are inclusive
  int64_t started_before_ms = 0;
  int64_t updated_after_ms = 0;
  int64_t updated_before_ms = 0;
  std::string id_prefix;
  size_t limit = 50;   // 1..page_rows_max
  std::string cursor;  // from the previous page; "" = the newest
};

struct ExecutionRow {
  std::string execution_id;
  std::string workflow;
  std::string status;  // runtime::StatusName
  int64_t started_ms = 0;
  int64_t updated_ms = 0;  // the newest event's time
  int64_t head = 0;
  int64_t fence = 0;                   // the store's token, 0 if never acquired
  std::optional<int64_t> park_seq;     // the open park, when suspended
  std::vector<std::string> parked_on;  // the open park's wait types, in its order
  std::string parent_id;               // EXECUTION_STARTED.parent.execution_id, or ""
  Json result;                         // the terminal payload's value / error, or null
};

struct ListPage {
  std::vector<ExecutionRow> rows;
  std::string next_cursor;  // "" = nothing further
  size_t scanned = 0;       // candidates examined for this page
};

struct StatusCounts {
  int64_t total = 0;  // executions started (and not deleted)
  int64_t running = 0;
  int64_t suspended = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t cancelled = 0;
  int64_t continued = 0;
  int64_t inbox_pending = 0;  // inbox messages stored and not yet deleted
};

struct TimerInfo {
  std::string execution_id;
  int64_t wake_at_ms = 0;
  std::optional<int> redrive_attempt;  // a re-drive row
  std::string lease_owner;             // "" when not claimed
  int64_t lease_until_ms = 0;
};

struct TimersPage {
  std::vector<TimerInfo> timers;
  std::string next_cursor;
};

// A node of issue 15's node leases (table loom_nodes) and the executions it
// owns (its run rows: loom_runs, or fences.owner on PostgreSQL schema 4).
// Alive: not stopped and its heartbeat plus its lease is
// not past (PostgreSQL: the database's clock; SQLite: this process's).
struct NodeRow {
  std::string node_id;
  std::string host;
  int64_t pid = 0;
  std::string version;
  int64_t started_at_ms = 0;
  int64_t heartbeat_at_ms = 0;
  int64_t lease_ms = 0;
  bool stopped = false;
  bool alive = false;
  int64_t runs_owned = 0;  // run rows naming it
};

// A durable queue (docs/queues.md; tables loom_queues, loom_queue_items):
// its limits (0: none) and its items, pending (delayed ones included) and
// claimed by a node.
struct QueueRow {
  std::string name;
  int64_t concurrency_max = 0;
  int64_t per_node_concurrency_max = 0;
  int64_t rate_max = 0;
  int64_t rate_period_ms = 0;
  int64_t pending = 0;
  int64_t claimed = 0;
};

struct Owner {
  std::string node_id;
  int64_t since_ms = 0;
};

struct PendingMessage {
  std::string topic;
  int64_t seq = 0;
  Json message;
};

class Visibility {
 public:
  // Opens a read-only connection and checks the store's schema version.
  static Result<std::unique_ptr<Visibility>> Open(const Target& target,
                                                  VisibilityLimits limits = {});
  virtual ~Visibility() = default;

  virtual Result<ListPage> List(const ListQuery& query) = 0;
  // One execution's row (kNotFound when it has no events).
  virtual Result<ExecutionRow> Summary(const std::string& execution_id) = 0;
  virtual Result<StatusCounts> Counts() = 0;
  // Timer rows by wake time, ascending, strictly after the cursor; only
  // those due at or before due_before_ms when it is > 0.
  virtual Result<TimersPage> Timers(int64_t due_before_ms, size_t limit,
                                    const std::string& cursor) = 0;
  virtual Result<std::vector<TimerInfo>> TimersOf(const std::string& execution_id) = 0;
  // Inbox messages stored and not yet deleted, by topic then number.
  virtual Result<std::vector<PendingMessage>> Pending(const std::string& execution_id,
                                                      size_t limit) = 0;
  // Nodes by id. kUnsupported when the store has no loom_nodes table (no
  // node with leases ever opened it).
  virtual Result<std::vector<NodeRow>> Nodes(size_t limit) = 0;
  // Queues by name. kUnsupported when the store has no loom_queues table
  // (no queue store ever opened it).
  virtual Result<std::vector<QueueRow>> Queues(size_t limit) = 0;
  // The node running the execution's body (its run row), if any.
  virtual Result<std::optional<Owner>> OwnerOf(const std::string& execution_id) = 0;
  // The store's schema version ("sqlite user_version 2", "postgres 2").
  virtual std::string SchemaDescription() const = 0;
  const VisibilityLimits& limits() const { return limits_; }

 protected:
  explicit Visibility(VisibilityLimits limits) : limits_(limits) {}
  VisibilityLimits limits_;
};

// The JSON forms the CLI's --json and the HTTP API print (docs/operations.md
// names every field; they are stable: fields are added, never renamed).
Json ToJson(const ExecutionRow& row);
Json ToJson(const StatusCounts& counts);
Json ToJson(const TimerInfo& timer);
Json ToJson(const PendingMessage& message);
Json ToJson(const NodeRow& node);
Json ToJson(const QueueRow& queue);

}  // namespace once::visibility
