#include "once/store_postgres/postgres_event_store.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>
#include <span>

#include "acquire_group.h"
#include "append_hints.h"
#include "once/store/validate.h"
#include "packed_rows.h"
#include "pg_conn.h"
#include "read_group.h"
#include "sql.h"

namespace once::store {

std::string PostgresRunningOwnerSql(std::string_view alias) { return sql::RunningPredicate(alias); }

std::optional<std::string> PostgresRestColumn(std::span<const EncodedEvent> row) {
  return pg::EncodeRest(row);
}

using pg::Conn;
using pg::IntAt;
using pg::Params;
using pg::PgResult;

namespace {

constexpr char kUniqueViolation[] = "23505";

// One request of an append statement.
struct Item {
  const AppendRequest* req = nullptr;
  const EncodedAppend* enc = nullptr;
  std::optional<int64_t> fence;  // nullopt: unguarded
  bool exact = false;            // the token must equal fence (AppendIfUnchanged)
  bool lock = false;             // read the fence row FOR SHARE / FOR UPDATE

  // Whether the append writes the run row (kOwnership): it names an owner
  // and leaves the execution running. A park or an end writes no run row:
  // sql::RunningPredicate reads the row as released from the log.
  bool owned() const { return !req->owner.empty() && enc->run_row == RunRowChange::kRun; }
};

// An item; an owned append past its log's first event also locks its fence
// row (the run row it writes), in execution-id order with the others, so
// that its write takes no row lock out of that order (acquire groups lock
// in the same order).
Item MakeItem(const AppendRequest& req, const EncodedAppend& enc, std::optional<int64_t> fence,
              bool exact, bool lock) {
  Item it{&req, &enc, fence, exact, lock};
  if (it.owned() && req.expected_next > 1) it.lock = true;
  return it;
}

// Whether an append reads its fence row FOR SHARE (the full statement): one
// that answers a park, so that a conditional acquire, which locks the row
// FOR UPDATE and then looks for an answer past the park, cannot pass it
// (models/fence_postgres.pml). An append at the log's first event answers
// no park: a park it could answer would be in the log before it. So a first
// append that ends its execution (start, steps, end: the one-step
// execution) takes the lean statement like any other; if it races an
// acquire, the acquire's own sequence or park check decides. (Never with
// PostgresOptions::testing_disable_for_share, the races' negative control.)
bool LocksFenceRow(const AppendRequest& req, const EncodedAppend& enc,
                   const PostgresOptions& options) {
  return enc.answering && req.expected_next > 1 && !options.testing_disable_for_share;
}

bool AnyOwned(std::span<const Item> items) {
  return std::any_of(items.begin(), items.end(), [](const Item& it) { return it.owned(); });
}

// The run-row array of an owned statement: owner ("" for none).
void BindOwners(std::span<const Item> items, Params& p) {
  std::vector<std::string_view> owners;
  owners.reserve(items.size());
  for (const Item& it : items) owners.push_back(it.owned() ? it.req->owner : std::string_view());
  p.Binary(pg::TextArrayBinary(owners));
}

struct Verdict {
  int64_t token = 0;
  int64_t head = 0;
};

// True when the lean statement serves `items`: no lock, no park, no exact
// token.
bool IsLean(std::span<const Item> items) {
  return std::none_of(items.begin(), items.end(),
                      [](const Item& it) { return it.lock || it.exact || it.enc->suspends; });
}

size_t EventCount(std::span<const Item> items) {
  size_t n = 0;
  for (const Item& it : items) n += it.enc->events.size();
  return n;
}

// Calls add(row) for each stored row of the item's events (packed_rows.h).
template <class Add>
void ForEachRow(const Item& it, Add add) {
  pg::ForEachRow(it.enc->events, add);
}

// The parameters of sql::AppendSql.
Params AppendParams(std::span<const Item> items) {
  std::vector<std::string_view> ids;
  std::vector<std::optional<int64_t>> fences, expected, row_req;
  std::vector<bool> exact, lock, suspends;
  pg::RowArrays rows(EventCount(items));
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    ids.push_back(it.req->execution_id);
    fences.push_back(it.fence);
    exact.push_back(it.exact);
    lock.push_back(it.lock);
    expected.push_back(it.req->expected_next);
    suspends.push_back(it.enc->suspends);
    ForEachRow(it, [&](std::span<const EncodedEvent> row) {
      row_req.push_back(static_cast<int64_t>(i + 1));
      rows.Add(row);
    });
  }
  // Binary arrays: no escaping here, no array literal parse on the server.
  Params p;
  p.Binary(pg::TextArrayBinary(ids)).Binary(pg::IntArrayBinary(fences));
  p.Binary(pg::BoolArrayBinary(exact)).Binary(pg::BoolArrayBinary(lock));
  p.Binary(pg::IntArrayBinary(expected)).Binary(pg::BoolArrayBinary(suspends));
  p.Binary(pg::IntArrayBinary(row_req));
  rows.BindTo(p);
  if (AnyOwned(items)) BindOwners(items, p);
  return p;
}

// The parameters of sql::LeanAppendSql: each stored row carries its
// request's id, fence, expected_next and (hinted: asks not empty) fence-row
// version hint; asks[i] is items[i]'s.
Params LeanParams(std::span<const Item> items, std::span<const pg::AppendHints::Ask> asks) {
  const size_t n = EventCount(items);
  std::vector<std::string_view> ids, req_ids;
  std::vector<std::optional<int64_t>> fences, expected;
  std::vector<std::optional<uint32_t>> hint_xmin;
  std::vector<std::optional<pg::Tid>> hint_ctid;
  std::vector<bool> learn;
  pg::RowArrays rows(n);
  req_ids.reserve(items.size());
  learn.reserve(items.size());
  ids.reserve(n);
  fences.reserve(n);
  expected.reserve(n);
  hint_xmin.reserve(n);
  hint_ctid.reserve(n);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    const pg::FenceVersion* v = !asks.empty() && asks[i].version ? &*asks[i].version : nullptr;
    req_ids.push_back(it.req->execution_id);
    learn.push_back(!asks.empty() && asks[i].learn);
    ForEachRow(it, [&](std::span<const EncodedEvent> row) {
      ids.push_back(it.req->execution_id);
      fences.push_back(it.fence);
      expected.push_back(it.req->expected_next);
      hint_xmin.push_back(v ? std::optional(v->xmin) : std::nullopt);
      hint_ctid.push_back(v ? std::optional(pg::Tid{v->block, v->offset}) : std::nullopt);
      rows.Add(row);
    });
  }
  Params p;
  p.Binary(pg::TextArrayBinary(ids)).Binary(pg::IntArrayBinary(fences));
  p.Binary(pg::IntArrayBinary(expected));
  rows.BindTo(p);
  p.Binary(pg::TextArrayBinary(req_ids));
  if (!asks.empty()) {
    p.Binary(pg::XidArrayBinary(hint_xmin)).Binary(pg::TidArrayBinary(hint_ctid));
    p.Binary(pg::BoolArrayBinary(learn));
  }
  if (AnyOwned(items)) BindOwners(items, p);
  return p;
}

// The parameters of sql::LoneAppendSql: one request of one event (IsLone).
Params LoneParams(const Item& it) {
  const EncodedEvent& e = it.enc->events.front();
  Params p;
  p.Text(it.req->execution_id);
  if (it.fence) {
    p.Int(*it.fence);
  } else {
    p.Null();
  }
  p.Int(it.req->expected_next).Int(e.sequence).Text(e.kind);
  p.Text(e.payload_json).Text(e.metadata_json).Int(e.time_ms);
  return p;
}

// One lean request of one event, writing no run row: sql::LoneAppendSql.
bool IsLone(std::span<const Item> items) {
  return items.size() == 1 && items[0].enc->events.size() == 1 && !items[0].owned();
}

// sql::LoneInsertSql: whether the lone request's event landed.
Result<bool> TryLoneInsert(Conn& conn, const Item& item) {
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn.Prepared("append_lone_insert", LoneParams(item)));
  const char* inserted = PQcmdTuples(res.get());
  if (std::string_view(inserted) == "1") return true;
  if (std::string_view(inserted) == "0") return false;
  return MakeError(ErrorCode::kInternal, "lone append inserted " + std::string(inserted) + " rows",
                   item.req->execution_id);
}

// The request's outcome under its verdict; mirrors the statement's WHERE.
Result<int64_t> Judge(const Item& it, const Verdict& v) {
  const AppendRequest& req = *it.req;
  if (it.fence) {
    bool ok = it.exact ? *it.fence == v.token : *it.fence >= v.token;
    if (!ok) return StaleFence(req.execution_id, *it.fence, v.token);
  }
  if (req.expected_next != v.head + 1) {
    return SequenceConflict(req.execution_id, v.head + 1, req.expected_next);
  }
  return req.expected_next + static_cast<int64_t>(req.events.size()) - 1;
}

// The rows a statement inserted must be the events of the requests it accepted.
Status CheckInserted(std::span<const Item> items, const std::vector<Result<int64_t>>& out,
                     int64_t inserted) {
  int64_t expected_rows = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (out[i]) ForEachRow(items[i], [&](std::span<const EncodedEvent>) { ++expected_rows; });
  }
  if (inserted != expected_rows) {
    return MakeError(ErrorCode::kInternal, "append inserted " + std::to_string(inserted) +
                                               " rows, the verdicts accept " +
                                               std::to_string(expected_rows));
  }
  return Ok();
}

// Whether the append ends its execution (a terminal event, not a park): its
// log takes no further append of the runtime's, so a hint of it is dead
// weight (learning it is a fence-row read and a table entry).
bool EndsExecution(const Item& it) {
  return it.enc->run_row == RunRowChange::kEnd && !it.enc->suspends;
}

// After a committed lean statement: a request that landed advances its
// execution's hint (to the version it learned, if it asked), a refused one
// is forgotten (learned again next time), and so is one that ended its
// execution.
void Teach(pg::AppendHints& hints, std::span<const Item> items,
           const std::vector<Result<int64_t>>& out,
           const std::vector<std::optional<pg::FenceVersion>>& learned) {
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& id = items[i].req->execution_id;
    if (out[i] && !EndsExecution(items[i])) {
      hints.Landed(id, *out[i], learned[i]);
    } else {
      hints.Forget(id);
    }
  }
}

// Runs sql::LeanAppendSql: every request lands but those it returns a
// verdict for, and each of those must be refused by its verdict. A lone
// request runs sql::LoneInsertSql (LoneHead::kNear), and sql::LoneAppendSql
// (the exact head) only when that inserted nothing (the store counts both
// in `hints`). `hints`
// (nullptr: none) is consulted and taught when there are at least
// kHintedRequestsMin items, so the statement must commit on its own (no
// explicit transaction around it).
Result<std::vector<Result<int64_t>>> RunLean(Conn& conn, std::span<const Item> items,
                                             pg::AppendHints* hints) {
  pg::AppendHints* const counts = hints;  // the store's, for CountLone
  if (items.size() < pg::kHintedRequestsMin) hints = nullptr;
  std::vector<pg::AppendHints::Ask> asks;
  if (hints) {
    asks.reserve(items.size());
    for (const Item& it : items) {
      pg::AppendHints::Ask ask = hints->Before(it.req->execution_id, it.req->expected_next);
      if (EndsExecution(it)) ask.learn = false;  // see Teach
      asks.push_back(ask);
    }
    // Nothing to send or to learn (a batch of one-append executions): the
    // plain statement, without the hint arrays.
    if (std::none_of(asks.begin(), asks.end(),
                     [](const auto& a) { return a.version || a.learn; })) {
      hints = nullptr;
      asks.clear();
    }
  }
  const bool owned = AnyOwned(items);
  const char* statement = hints ? (owned ? "append_lean_hinted_owned" : "append_lean_hinted")
                                : (owned ? "append_lean_owned" : "append_lean");
  const bool lone = !hints && IsLone(items);
  if (lone) {
    ONCE_ASSIGN_OR_RETURN(bool landed, TryLoneInsert(conn, items[0]));
    if (counts) counts->CountLone(landed);
    if (landed) return std::vector<Result<int64_t>>{items[0].req->expected_next};
    // Refused (or the log moved): the form with a verdict tries again and
    // says why, from one snapshot.
  }
  ONCE_ASSIGN_OR_RETURN(PgResult res, lone ? conn.Prepared("append_lean_one", LoneParams(items[0]))
                                           : conn.Prepared(statement, LeanParams(items, asks)));
  const PGresult* r = res.get();
  std::vector<Result<int64_t>> out;
  out.reserve(items.size());
  for (const Item& it : items) {
    out.push_back(it.req->expected_next + static_cast<int64_t>(it.req->events.size()) - 1);
  }
  std::optional<int64_t> inserted;
  std::vector<std::optional<pg::FenceVersion>> learned(items.size());
  for (int row = 0; row < PQntuples(r); ++row) {
    int64_t ord = IntAt(r, row, 0);
    if (ord == 0) {
      inserted = IntAt(r, row, 3);
      continue;
    }
    if (ord < -static_cast<int64_t>(items.size()) || ord > static_cast<int64_t>(items.size())) {
      return MakeError(ErrorCode::kInternal, "append returned an unknown request");
    }
    if (ord < 0) {
      // No fence row: a zero version, which no row has (ctid offsets start at 1).
      learned[static_cast<size_t>(-ord - 1)] = PQgetisnull(r, row, 4)
                                                   ? std::optional(pg::FenceVersion{})
                                                   : pg::ParseFenceVersion(PQgetvalue(r, row, 4));
      continue;
    }
    size_t i = static_cast<size_t>(ord - 1);
    out[i] = Judge(items[i], Verdict{IntAt(r, row, 1), IntAt(r, row, 2)});
    if (out[i]) {
      return MakeError(ErrorCode::kInternal, "append refused a request its verdict accepts",
                       items[i].req->execution_id);
    }
  }
  if (!inserted) return MakeError(ErrorCode::kInternal, "append returned no row count");
  ONCE_RETURN_IF_ERROR(CheckInserted(items, out, *inserted));
  if (hints) Teach(*hints, items, out, learned);
  return out;
}

// Runs the append statement (`statement`, or the lean one when it serves
// the items and `statement` is the guard's); element i is items[i]'s outcome.
// `hints` as RunLean's.
Result<std::vector<Result<int64_t>>> RunAppend(Conn& conn, const char* statement,
                                               std::span<const Item> items,
                                               pg::AppendHints* hints) {
  if (std::string_view(statement) == "append_share" && IsLean(items)) {
    return RunLean(conn, items, hints);
  }
  std::string name = std::string(statement) + (AnyOwned(items) ? "_owned" : "");
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn.Prepared(name.c_str(), AppendParams(items)));
  if (PQntuples(res.get()) != static_cast<int>(items.size())) {
    return MakeError(ErrorCode::kInternal, "append returned an unexpected row count");
  }
  std::vector<Result<int64_t>> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    int row = static_cast<int>(i);
    out.push_back(Judge(items[i], Verdict{IntAt(res.get(), row, 1), IntAt(res.get(), row, 2)}));
  }
  int64_t inserted = items.empty() ? 0 : IntAt(res.get(), 0, 3);
  ONCE_RETURN_IF_ERROR(CheckInserted(items, out, inserted));
  return out;
}

Result<int64_t> HeadOn(Conn& conn, std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn.Prepared("head", Params().Text(std::string(id))));
  return IntAt(res.get(), 0, 0);
}

// A primary-key race lost to a concurrent append: report the head now.
Result<int64_t> SequenceRaceLost(Conn& conn, const AppendRequest& req) {
  conn.ResetTransaction();
  ONCE_ASSIGN_OR_RETURN(int64_t head, HeadOn(conn, req.execution_id));
  return SequenceConflict(req.execution_id, head + 1, req.expected_next);
}

// Runs one item inside `SAVEPOINT one`: a lost primary-key race rolls back
// only this request.
// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
Result<int64_t> RunUnderSavepoint(Conn& conn, const Item& item) {
  ONCE_RETURN_IF_ERROR(conn.Exec("SAVEPOINT one"));
  auto res = RunAppend(conn, "append_share", std::span<const Item>(&item, 1), nullptr);
  if (!res && conn.last_sqlstate() == kUniqueViolation) {
    ONCE_RETURN_IF_ERROR(conn.Exec("ROLLBACK TO SAVEPOINT one"));
    ONCE_ASSIGN_OR_RETURN(int64_t head, HeadOn(conn, item.req->execution_id));
    return SequenceConflict(item.req->execution_id, head + 1, item.req->expected_next);
  }
  if (!res) return std::unexpected(res.error());
  ONCE_RETURN_IF_ERROR(conn.Exec("RELEASE SAVEPOINT one"));
  return std::move((*res)[0]);
}

struct Statement {
  const char* name;
  std::string sql;
};

constexpr const char* kListEndedNames[] = {"list_ended_0", "list_ended_1", "list_ended_2",
                                           "list_ended_3"};

std::string ListEndedOf(size_t k) {
  std::span<const std::string_view> ending = EndingKindNames();
  ONCE_CHECK_MSG(ending.size() == std::size(kListEndedNames), "one statement an ending kind");
  return sql::ListEndedSql(ending[k]);
}

std::vector<Statement> Statements() {
  return {
      {"append_share", sql::AppendSql("SHARE")},
      {"append_update", sql::AppendSql("UPDATE")},
      {"append_lean", sql::LeanAppendSql(false)},
      {"append_lean_one", sql::LoneAppendSql()},
      {"append_lone_insert", sql::LoneInsertSql(sql::LoneHead::kNear)},
      {"append_lean_hinted", sql::LeanAppendSql(true)},
      // The same, writing run rows (kOwnership): the owner is in the fences
      // row, which the statement may update after its guard locked it, so
      // the guard's lock is the update's (no upgrade from SHARE to wait on).
      {"append_share_owned", sql::AppendSql("NO KEY UPDATE", true)},
      {"append_update_owned", sql::AppendSql("UPDATE", true)},
      {"append_lean_owned", sql::LeanAppendSql(false, true)},
      {"append_lean_hinted_owned", sql::LeanAppendSql(true, true)},
      {"run_owner",
       "SELECT f.owner, f.since_ms FROM fences f WHERE f.execution_id = $1::text AND " +
           sql::RunningPredicate("f")},
      {"head", "SELECT COALESCE(" + sql::HeadSql("$1::text") + ", 0)"},
      {"read_ranges", pg::ReadRangesSql()},
      {"list",
       "WITH RECURSIVE ids(id, n) AS ("
       "(SELECT execution_id, 1 FROM events WHERE execution_id > $1::text "
       "ORDER BY execution_id LIMIT 1) UNION ALL "
       "SELECT (SELECT e.execution_id FROM events e WHERE e.execution_id > ids.id "
       "ORDER BY e.execution_id LIMIT 1), ids.n + 1 FROM ids "
       "WHERE ids.id IS NOT NULL AND ids.n < $2::int8) "
       "SELECT id FROM ids WHERE id IS NOT NULL"},
      {"acquire",
       "INSERT INTO fences (execution_id, token) VALUES ($1::text, 1) ON CONFLICT "
       "(execution_id) DO UPDATE SET token = fences.token + 1 RETURNING token"},
      {"read_fence", "SELECT token FROM fences WHERE execution_id = $1::text"},
      {"ensure_fence",
       "INSERT INTO fences (execution_id, token) VALUES ($1::text, 0) "
       "ON CONFLICT (execution_id) DO NOTHING"},
      {"lock_fence", "SELECT token FROM fences WHERE execution_id = $1::text FOR UPDATE"},
      // Locks the row and writes a new version of it (append_hints.h), with
      // no owner (a deleted execution has no run).
      {"renew_fence",
       "UPDATE fences SET token = token, owner = NULL, since_ms = NULL "
       "WHERE execution_id = $1::text"},
      {"fence_if_bump", sql::FenceIfBumpSql()},
      // The group-wide forms (acquire_group.cc): arrays in execution-id order.
      {"ensure_fences",
       "INSERT INTO fences (execution_id, token) SELECT r.id, 0 FROM unnest($1::text[]) AS r(id) "
       "ON CONFLICT (execution_id) DO NOTHING"},
      {"lock_fences",
       "SELECT r.ord, f.token FROM unnest($1::text[]) WITH ORDINALITY AS r(id, ord) "
       "JOIN fences f ON f.execution_id = r.id ORDER BY r.ord FOR UPDATE OF f"},
      {"fence_if_bump_many", sql::FenceIfBumpManySql()},
      // The rows from the one that holds $2 + 1 (packed_rows.h), $3 of them.
      {"fence_if_tail",
       "SELECT " + pg::StoredRowColumns("e") +
           " FROM events e WHERE e.execution_id = $1::text AND e.sequence >= COALESCE(" +
           pg::RowHoldingSql("rh.sequence", "$1::text", "$2::int8 + 1") +
           ", $2::int8 + 1) ORDER BY e.sequence LIMIT $3::int8"},
      {"delete_events", "DELETE FROM events WHERE execution_id = $1::text"},
      // DeleteEnded: the ids that still ended by the cutoff; then their
      // fence rows (renewed as renew_fence does, or deleted at token 0: two
      // disjoint sets of rows), then their events, as DeleteExecution orders
      // them.
      {"ended_by_many",
       "SELECT DISTINCT execution_id FROM events WHERE execution_id = ANY($1::text[]) "
       "AND ((time_ms <= $2::int8 AND kind IN (" +
           SqlQuotedList(EndingKindNames()) + ")) OR (end_time_ms <= $2::int8 AND end_kind IN (" +
           SqlQuotedList(EndingKindNames()) + ")))"},
      {"delete_ended_fences",
       "WITH renewed AS (UPDATE fences SET token = token, owner = NULL, since_ms = NULL "
       "WHERE execution_id = ANY($1::text[]) AND token <> 0 RETURNING 1) "
       "DELETE FROM fences WHERE execution_id = ANY($1::text[]) AND token = 0"},
      {"delete_ended_events", "DELETE FROM events WHERE execution_id = ANY($1::text[])"},
      // ListEnded: one statement per ending kind, the kind inlined so that
      // the generic plan reads the partial status indexes.
      {kListEndedNames[0], ListEndedOf(0)},
      {kListEndedNames[1], ListEndedOf(1)},
      {kListEndedNames[2], ListEndedOf(2)},
      {kListEndedNames[3], ListEndedOf(3)},
      {"delete_zero_fence", "DELETE FROM fences WHERE execution_id = $1::text AND token = 0"},
      // CopyPrefix: whether `to` has a log (its head), then the source's
      // events read as a range, appended to `to` as one request.
      // TruncatePrefixKeeping, in one transaction: a run row the log reads
      // as released (a park or an end past run_from) is cleared first (the
      // cut may remove that park or end); then the row that holds the cut
      // (sequence < $2 <= its last) is read and every row before the cut
      // deleted; the read row's events from the cut on are inserted again
      // as rows of their own (insert_rows).
      {"release_before_cut",
       "UPDATE fences f SET owner = NULL, since_ms = NULL, run_from = NULL "
       "WHERE f.execution_id = $1::text AND f.owner IS NOT NULL AND NOT " +
           sql::RunningPredicate("f")},
      {"row_across_cut",
       "SELECT " + pg::StoredRowColumns("e") +
           " FROM events e WHERE e.execution_id = $1::text AND e.sequence < $2::int8 "
           "ORDER BY e.sequence DESC LIMIT 1"},
      {"delete_before_cut",
       "DELETE FROM events WHERE execution_id = $1::text AND sequence < $2::int8"},
      {"insert_rows", sql::InsertRowsSql()},
  };
}

// Every statement here is index probes keyed by its arguments: the generic
// plan is always right (pg::kIndexPlanSettings; before it, the append was
// re-planned on every call, the planner pricing an unnest by its array's
// actual length).
Status PrepareAll(Conn& conn) {
  ONCE_RETURN_IF_ERROR(conn.Exec(std::string(pg::kIndexPlanSettings) +
                                 "; SET default_transaction_isolation = 'read committed'"));
  for (const auto& s : Statements()) ONCE_RETURN_IF_ERROR(conn.Prepare(s.name, s.sql));
  return Ok();
}

// Runs fn between BEGIN and COMMIT; on any error the pool's Return rolls back.
template <class Fn>
auto InTransaction(Conn& conn, Fn&& fn) -> decltype(fn()) {
  ONCE_RETURN_IF_ERROR(conn.Exec("BEGIN"));
  auto result = fn();
  if (!result) {
    conn.ResetTransaction();
    return result;
  }
  ONCE_RETURN_IF_ERROR(conn.Exec("COMMIT"));
  return result;
}

Result<bool> HasRow(Conn& conn, std::string_view name) {
  ONCE_ASSIGN_OR_RETURN(PgResult res,
                        conn.ExecParams("SELECT value FROM once_schema WHERE name = $1",
                                        Params().Text(std::string(name))));
  return PQntuples(res.get()) > 0;
}

Status PutRow(Conn& conn, std::string_view name, int64_t value) {
  ONCE_RETURN_IF_ERROR(
      conn.ExecParams("INSERT INTO once_schema (name, value) VALUES ($1, $2::int8) "
                      "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                      Params().Text(std::string(name)).Int(value)));
  return Ok();
}

// Creates the operator's indexes unless they exist. Looked up first: CREATE
// INDEX IF NOT EXISTS locks the table (SHARE) before it finds the index, so
// every boot would wait for the writes in flight.
Status EnsureStatusIndexes(Conn& conn) {
  const std::pair<std::string_view, std::string> indexes[] = {
      {sql::kStatusIndex, sql::CreateStatusIndexSql()},
      {sql::kEndStatusIndex, sql::CreateEndStatusIndexSql()},
  };
  for (const auto& [name, create] : indexes) {
    ONCE_ASSIGN_OR_RETURN(PgResult found, conn.ExecParams("SELECT to_regclass($1) IS NULL",
                                                          Params().Text(std::string(name))));
    if (std::string_view(PQgetvalue(found.get(), 0, 0)) != "t") continue;
    ONCE_RETURN_IF_ERROR(conn.Exec(create));
  }
  return Ok();
}

}  // namespace

// Everything after the advisory lock, inside the migration transaction.
Status sql::MigrateEventSchemaLocked(Conn& conn, const PostgresOptions& options,
                                     const Clock& clock) {
  ONCE_RETURN_IF_ERROR(
      conn.Exec("CREATE SCHEMA IF NOT EXISTS " + pg::QuoteIdentifier(options.schema)));
  ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kCreateSchemaTable)));
  ONCE_ASSIGN_OR_RETURN(PgResult version,
                        conn.ExecParams("SELECT value FROM once_schema WHERE name = $1",
                                        Params().Text(std::string(sql::kVersionRow))));
  bool fresh = PQntuples(version.get()) == 0;
  if (!fresh && IntAt(version.get(), 0, 0) > sql::kSchemaVersion) {
    return MakeError(ErrorCode::kUnsupported, "the schema is newer than this build");
  }
  if (fresh) {
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kCreateTables)));
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kCreateFenceHashIndex)));
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kCreateNodeTables)));
    ONCE_RETURN_IF_ERROR(EnsureStatusIndexes(conn));
    ONCE_RETURN_IF_ERROR(PutRow(conn, sql::kVersionRow, sql::kSchemaVersion));
    // A new database holds no park written before parks created fence rows.
    return PutRow(conn, sql::kParkFencesMarker, clock.NowUnixMillis());
  }
  int64_t at = IntAt(version.get(), 0, 0);
  if (at == 1) {
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kMigrateV1ToV2)));
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kCreateFenceHashIndex)));
    ONCE_RETURN_IF_ERROR(PutRow(conn, sql::kVersionRow, at = 2));
  }
  if (at == 2) {
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kCreateNodeTables)));
    ONCE_RETURN_IF_ERROR(PutRow(conn, sql::kVersionRow, at = 3));
  }
  if (at == 3) {
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kMigrateV3ToV4)));
    ONCE_ASSIGN_OR_RETURN(PgResult runs,
                          conn.ExecParams("SELECT to_regclass('loom_runs') IS NOT NULL", Params()));
    if (std::string_view(PQgetvalue(runs.get(), 0, 0)) == "t") {
      ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kCarryRunRows)));
    }
    ONCE_RETURN_IF_ERROR(PutRow(conn, sql::kVersionRow, at = 4));
  }
  if (at == 4) {
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kMigrateV4ToV5)));
    ONCE_RETURN_IF_ERROR(PutRow(conn, sql::kVersionRow, at = 5));
  }
  if (at == 5) {
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kMigrateV5ToV6)));
    ONCE_RETURN_IF_ERROR(PutRow(conn, sql::kVersionRow, at = 6));
  }
  if (at == 6) {
    // Rebuilt by EnsureStatusIndexes below, in this transaction: writers
    // wait for the two builds (docs/event-store.md, "one status entry
    // for a paired row": build them beforehand CONCURRENTLY on a large store).
    ONCE_RETURN_IF_ERROR(conn.Exec(std::string(sql::kMigrateV6ToV7)));
    ONCE_RETURN_IF_ERROR(PutRow(conn, sql::kVersionRow, at = 7));
  }
  ONCE_RETURN_IF_ERROR(EnsureStatusIndexes(conn));
  if (!options.backfill_park_fences) return Ok();
  ONCE_ASSIGN_OR_RETURN(bool done, HasRow(conn, sql::kParkFencesMarker));
  if (done) return Ok();
  ONCE_RETURN_IF_ERROR(conn.Exec(sql::BackfillAllSql()));
  return PutRow(conn, sql::kParkFencesMarker, clock.NowUnixMillis());
}

namespace {

Status Migrate(const PostgresOptions& options, const Clock& clock) {
  return pg::MigrateUnderLock(
      options.conninfo, options.schema, kMigrationLockKey, options.migration_lock_timeout_ms,
      [&](Conn& conn) -> Status { return sql::MigrateEventSchemaLocked(conn, options, clock); });
}

Status CheckOptions(const PostgresOptions& o) {
  if (o.schema.empty() || o.connections_max == 0 || o.acquire_groups_in_flight_max == 0 ||
      o.read_groups_in_flight_max == 0 || o.append_batches_in_flight == 0 ||
      o.checkout_timeout_ms < 0 || o.migration_lock_timeout_ms < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "PostgresOptions: schema must be set, connections_max > 0, "
                     "acquire_groups_in_flight_max > 0, read_groups_in_flight_max > 0, "
                     "append_batches_in_flight > 0, timeouts >= 0");
  }
  return Ok();
}

}  // namespace

PostgresEventStore::PostgresEventStore(PostgresOptions options, const Clock& clock,
                                       std::unique_ptr<pg::ConnectionPool> pool)
    : options_(std::move(options)),
      clock_(clock),
      pool_(std::move(pool)),
      acquire_group_(
          std::make_unique<pg::AcquireGroup>(*pool_, options_.acquire_groups_in_flight_max)),
      read_group_(std::make_unique<pg::ReadGroup>(*pool_, options_.read_groups_in_flight_max)),
      append_hints_(std::make_unique<pg::AppendHints>(options_.append_hints_max)) {}

PostgresEventStore::~PostgresEventStore() = default;

Result<std::unique_ptr<PostgresEventStore>> PostgresEventStore::Open(const PostgresOptions& options,
                                                                     const Clock& clock) {
  ONCE_RETURN_IF_ERROR(CheckOptions(options));
  ONCE_RETURN_IF_ERROR(Migrate(options, clock));
  auto pool = std::make_unique<pg::ConnectionPool>(pg::PoolOptions{
      .conninfo = options.conninfo,
      .schema = options.schema,
      .connections_max = options.connections_max,
      .checkout_timeout_ms = options.checkout_timeout_ms,
      .on_connect = PrepareAll,
  });
  // Prove the pool works (and keep one warm connection).
  { ONCE_ASSIGN_OR_RETURN(pg::Lease lease, pool->Checkout()); }
  return std::unique_ptr<PostgresEventStore>(
      new PostgresEventStore(options, clock, std::move(pool)));
}

// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
Result<int64_t> PostgresEventStore::Append(const AppendRequest& req) {
  ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(req, limits(), clock_));
  Item item = MakeItem(req, enc, req.fence, false, LocksFenceRow(req, enc, options_));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  auto res = RunAppend(*conn, "append_share", std::span<const Item>(&item, 1), append_hints_.get());
  if (!res && conn->last_sqlstate() == kUniqueViolation) {
    append_hints_->Forget(req.execution_id);
    return SequenceRaceLost(*conn, req);
  }
  if (!res) return std::unexpected(res.error());
  return std::move((*res)[0]);
}

// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
size_t PostgresEventStore::AppendBatchesInFlightUseful() const {
  return std::min(options_.append_batches_in_flight, options_.connections_max);
}

Result<std::vector<Result<int64_t>>> PostgresEventStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  ONCE_RETURN_IF_ERROR(ValidateBatchShape(requests, limits()));
  std::vector<Result<EncodedAppend>> encoded;
  encoded.reserve(requests.size());
  size_t bytes = 0;
  for (const auto& r : requests) {
    encoded.push_back(EncodeAppend(r, limits(), clock_));
    if (encoded.back()) bytes += encoded.back()->bytes;
  }
  ONCE_RETURN_IF_ERROR(CheckBatchBytes(bytes, limits()));
  std::vector<Item> items;
  std::vector<size_t> slot;  // items[k] answers requests[slot[k]]
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!encoded[i]) continue;
    items.push_back(MakeItem(requests[i], *encoded[i], requests[i].fence, false,
                             LocksFenceRow(requests[i], *encoded[i], options_)));
    slot.push_back(i);
  }
  std::vector<Result<int64_t>> out;
  out.reserve(requests.size());
  for (auto& e : encoded) {
    out.push_back(e ? Result<int64_t>(0) : Result<int64_t>(std::unexpected(e.error())));
  }
  if (items.empty()) return out;
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  auto fast = RunAppend(*conn, "append_share", items, append_hints_.get());
  if (fast) {
    for (size_t k = 0; k < items.size(); ++k) out[slot[k]] = std::move((*fast)[k]);
    return out;
  }
  if (conn->last_sqlstate() != kUniqueViolation) return std::unexpected(fast.error());
  // The replay commits only at its end: it neither uses nor teaches hints.
  for (const Item& it : items) append_hints_->Forget(it.req->execution_id);
  // A concurrent append won a primary-key race: replay request by request so
  // that only the loser fails, still in one transaction.
  auto slow = InTransaction(*conn, [&]() -> Status {
    for (size_t k = 0; k < items.size(); ++k) {
      auto one = RunUnderSavepoint(*conn, items[k]);
      if (!one && one.error().code != ErrorCode::kSequenceConflict &&
          one.error().code != ErrorCode::kStaleFence) {
        return std::unexpected(one.error());
      }
      out[slot[k]] = std::move(one);
    }
    return Ok();
  });
  if (!slow) return std::unexpected(slow.error());
  return out;
}

Result<std::vector<Envelope>> PostgresEventStore::ReadRange(std::string_view id, int64_t first,
                                                            int64_t last) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  first = std::max<int64_t>(first, 1);
  if (last < first) return std::vector<Envelope>{};
  pg::ReadOp op{.id = id,
                .first = first,
                .last = last,
                .limit = static_cast<int64_t>(limits().read_events_max)};
  read_group_->Run(op);
  return std::move(op.result);
}

Result<int64_t> PostgresEventStore::Head(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  return HeadOn(*conn, id);
}

Result<ExecutionPage> PostgresEventStore::ListExecutions(std::string_view after, size_t limit) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "limit must be >= 1");
  limit = std::min(limit, limits().list_page_executions_max);
  ExecutionPage page;
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(
      PgResult res,
      conn->Prepared("list",
                     Params().Text(std::string(after)).Int(static_cast<int64_t>(limit + 1))));
  for (int i = 0; i < PQntuples(res.get()); ++i) {
    if (page.execution_ids.size() == limit) {
      page.next_after = page.execution_ids.back();
      break;
    }
    page.execution_ids.emplace_back(PQgetvalue(res.get(), i, 0));
  }
  return page;
}

Status PostgresEventStore::DeleteExecution(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  Params p = Params().Text(std::string(id));
  append_hints_->Forget(id);
  // A new fence row version: no store's hint survives the deletion.
  return InTransaction(*conn, [&]() -> Status {
    ONCE_RETURN_IF_ERROR(conn->Prepared("renew_fence", p));
    ONCE_RETURN_IF_ERROR(conn->Prepared("delete_events", p));
    ONCE_RETURN_IF_ERROR(conn->Prepared("delete_zero_fence", p));
    return Ok();
  });
}

Result<EndedPage> PostgresEventStore::ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                                                size_t limit) {
  ONCE_ASSIGN_OR_RETURN(limit, EndedPageLimit(limit, limits()));
  size_t fetch = limit + 1;  // one more: whether another page follows
  std::span<const std::string_view> ending = EndingKindNames();
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  std::vector<EndedExecution> found;
  for (size_t k = 0; k < ending.size() && found.size() < fetch; ++k) {
    if (ending[k] < after.kind) continue;
    bool same_kind = after.kind == ending[k];
    Params p = Params()
                   .Int(ended_ms_max)
                   .Int(same_kind ? after.ended_ms : std::numeric_limits<int64_t>::min())
                   .Text(same_kind ? after.execution_id : std::string())
                   .Int(static_cast<int64_t>(fetch - found.size()));
    ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared(kListEndedNames[k], p));
    for (int i = 0; i < PQntuples(res.get()); ++i) {
      found.push_back({.execution_id = PQgetvalue(res.get(), i, 0),
                       .kind = std::string(ending[k]),
                       .ended_ms = IntAt(res.get(), i, 1)});
    }
  }
  return EndedPageOf(std::move(found), limit);
}

Result<std::vector<Status>> PostgresEventStore::DeleteEnded(std::span<const std::string> ids,
                                                            int64_t ended_ms_max) {
  ONCE_RETURN_IF_ERROR(CheckDeleteEnded(ids, limits()));
  std::vector<Status> out(ids.size(), Ok());
  std::vector<std::string_view> valid;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (Status one = ValidateExecutionId(ids[i], limits()); !one) {
      out[i] = std::move(one);
      continue;
    }
    valid.push_back(ids[i]);
    append_hints_->Forget(ids[i]);  // their fence rows get new versions
  }
  if (valid.empty()) return out;
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  std::set<std::string, std::less<>> ended;
  ONCE_RETURN_IF_ERROR(InTransaction(*conn, [&]() -> Status {
    ONCE_ASSIGN_OR_RETURN(
        PgResult res,
        conn->Prepared("ended_by_many",
                       Params().Binary(pg::TextArrayBinary(valid)).Int(ended_ms_max)));
    for (int i = 0; i < PQntuples(res.get()); ++i) ended.emplace(PQgetvalue(res.get(), i, 0));
    if (ended.empty()) return Ok();
    std::vector<std::string_view> doomed(ended.begin(), ended.end());
    Params p = Params().Binary(pg::TextArrayBinary(doomed));
    ONCE_RETURN_IF_ERROR(conn->Prepared("delete_ended_fences", p));
    ONCE_RETURN_IF_ERROR(conn->Prepared("delete_ended_events", p));
    return Ok();
  }));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (out[i] && !ended.contains(ids[i])) out[i] = NotEndedBy(ids[i], ended_ms_max);
  }
  return out;
}

Result<int64_t> PostgresEventStore::AcquireFence(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  append_hints_->Forget(id);  // the row gets a new version: learn it on the next append
  pg::AcquireOp op{.id = std::string(id)};
  acquire_group_->Run(op);
  if (!op.result) return std::unexpected(op.result.error());
  return op.result->acquire.fence;
}

Result<int64_t> PostgresEventStore::ReadFence(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("read_fence", Params().Text(std::string(id))));
  return PQntuples(res.get()) == 0 ? 0 : IntAt(res.get(), 0, 0);
}

Result<ConditionalAcquire> PostgresEventStore::AcquireFenceIf(std::string_view id,
                                                              FenceExpectation expect) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, expect, limits()));
  append_hints_->Forget(id);
  pg::AcquireOp op{.id = std::string(id), .expect = expect};
  op.SetOwners(expect);
  acquire_group_->Run(op);
  if (!op.result) return std::unexpected(op.result.error());
  return op.result->acquire;
}

// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
Result<AcquireWithTail> PostgresEventStore::AcquireFenceIfReadTail(std::string_view id,
                                                                   FenceExpectation expect,
                                                                   int64_t read_after) {
  ONCE_ASSIGN_OR_RETURN(pg::AcquireOp op, TailAcquireOp({id, expect, read_after}));
  acquire_group_->Run(op);
  return std::move(op.result);
}

// One combined acquire's op, its arguments checked.
Result<pg::AcquireOp> PostgresEventStore::TailAcquireOp(const AcquireIfRead& r) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(r.execution_id, r.expect, limits(), r.read_after));
  append_hints_->Forget(r.execution_id);
  pg::AcquireOp op{.id = std::string(r.execution_id),
                   .expect = r.expect,
                   .read_after = r.read_after,
                   .tail_max = static_cast<int64_t>(limits().read_events_max)};
  op.SetOwners(r.expect);
  return op;
}

// The batch queues together in the acquire groups: up to kAcquireGroupMax
// of them share one pipeline and one commit, led by this thread.
std::vector<Result<AcquireWithTail>> PostgresEventStore::AcquireFencesIfReadTail(
    std::span<const AcquireIfRead> requests) {
  std::vector<Result<AcquireWithTail>> out(requests.size());
  std::vector<pg::AcquireOp> ops;
  std::vector<size_t> positions;
  ops.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Result<pg::AcquireOp> op = TailAcquireOp(requests[i]);
    if (!op) {
      out[i] = std::unexpected(op.error());
      continue;
    }
    ops.push_back(std::move(*op));
    positions.push_back(i);
  }
  std::vector<pg::AcquireOp*> queued;
  queued.reserve(ops.size());
  for (pg::AcquireOp& op : ops) queued.push_back(&op);
  acquire_group_->RunMany(queued);
  for (size_t k = 0; k < ops.size(); ++k) out[positions[k]] = std::move(ops[k].result);
  return out;
}

PostgresAcquireStats PostgresEventStore::AcquireStats() const { return acquire_group_->stats(); }

PostgresReadStats PostgresEventStore::ReadStats() const { return read_group_->stats(); }

PostgresAppendStats PostgresEventStore::AppendStats() const {
  pg::AppendHintCounts c = append_hints_->counts();
  return PostgresAppendStats{.hinted = c.hinted,
                             .learned = c.learned,
                             .hint_entries = c.entries,
                             .hint_clears = c.clears,
                             .lone_landed = c.lone_landed,
                             .lone_refused = c.lone_refused};
}

Result<int64_t> PostgresEventStore::AppendIfUnchanged(const AppendRequest& req, int64_t observed) {
  ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(req, limits(), clock_));
  if (observed < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "observed fence must be >= 0", req.execution_id);
  }
  // The row must exist before it can be locked FOR UPDATE.
  Item item = MakeItem(req, enc, observed, true, true);
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  auto res = InTransaction(*conn, [&]() -> Result<std::vector<Result<int64_t>>> {
    ONCE_RETURN_IF_ERROR(conn->Prepared("ensure_fence", Params().Text(req.execution_id)));
    return RunAppend(*conn, "append_update", std::span<const Item>(&item, 1), nullptr);
  });
  if (!res && conn->last_sqlstate() == kUniqueViolation) return SequenceRaceLost(*conn, req);
  if (!res) return std::unexpected(res.error());
  return std::move((*res)[0]);
}

Status PostgresEventStore::CopyPrefix(std::string_view from, std::string_view to, int64_t through) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(from, limits()));
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(to, limits()));
  if (through < 1) return MakeError(ErrorCode::kInvalidArgument, "through must be >= 1");
  auto incomplete = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     "source has no complete prefix through " + std::to_string(through),
                     std::string(from));
  };
  // The prefix is read a page at a time and appended to `to` a page per
  // request, in one transaction: the first request's guard (expected_next 1)
  // is what refuses a `to` that has a log.
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  auto res = InTransaction(*conn, [&]() -> Result<bool> {
    for (int64_t next = 1; next <= through;) {
      ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> page, ReadRange(from, next, through));
      if (page.empty() || page.front().sequence != next) return incomplete();
      AppendRequest req{
          .execution_id = std::string(to), .expected_next = next, .fence = std::nullopt};
      req.events = std::move(page);
      for (Envelope& e : req.events) e.execution_id = req.execution_id;
      next += static_cast<int64_t>(req.events.size());
      ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(req, limits(), clock_));
      Item item = MakeItem(req, enc, std::nullopt, false, false);
      ONCE_ASSIGN_OR_RETURN(
          auto out, RunAppend(*conn, "append_share", std::span<const Item>(&item, 1), nullptr));
      ONCE_RETURN_IF_ERROR(out[0]);
    }
    return true;
  });
  if (!res && conn->last_sqlstate() == kUniqueViolation) {
    conn->ResetTransaction();
    ONCE_ASSIGN_OR_RETURN(int64_t head, HeadOn(*conn, to));
    return SequenceConflict(to, head + 1, 1);
  }
  if (!res) return std::unexpected(res.error());
  return Ok();
}

Status PostgresEventStore::TruncatePrefixKeeping(std::string_view id, int64_t first_kept) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  if (first_kept < 1) return MakeError(ErrorCode::kInvalidArgument, "first_kept must be >= 1");
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  const std::string sid(id);
  auto res = InTransaction(*conn, [&]() -> Result<bool> {
    ONCE_RETURN_IF_ERROR(conn->Prepared("release_before_cut", Params().Text(sid)));
    ONCE_ASSIGN_OR_RETURN(int64_t head, HeadOn(*conn, id));
    if (head == 0) return true;                      // an unknown execution
    const int64_t cut = std::min(first_kept, head);  // the newest event always stays
    ONCE_ASSIGN_OR_RETURN(PgResult across,
                          conn->Prepared("row_across_cut", Params().Text(sid).Int(cut)));
    // The events from the cut on of the row that holds it, if it starts
    // before the cut: written again as rows of their own.
    AppendRequest kept{.execution_id = sid, .expected_next = cut, .fence = std::nullopt};
    if (PQntuples(across.get()) == 1) {
      ONCE_RETURN_IF_ERROR(
          pg::DecodeStoredRow(id, pg::ReadStoredRow(across.get(), 0, 0), cut, kToEnd,
                              [&](Envelope e) { kept.events.push_back(std::move(e)); }));
    }
    ONCE_RETURN_IF_ERROR(conn->Prepared("delete_before_cut", Params().Text(sid).Int(cut)));
    if (kept.events.empty()) return true;
    ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(kept, limits(), clock_));
    pg::RowArrays rows(enc.events.size());
    pg::ForEachRow(enc.events, [&](std::span<const EncodedEvent> row) { rows.Add(row); });
    Params p = Params().Text(sid);
    rows.BindTo(p);
    ONCE_RETURN_IF_ERROR(conn->Prepared("insert_rows", p));
    return true;
  });
  if (!res) return std::unexpected(res.error());
  return Ok();
}

Result<int64_t> BackfillParkFences(const PostgresOptions& options, int64_t batch_executions) {
  if (batch_executions < 1) {
    return MakeError(ErrorCode::kInvalidArgument, "batch_executions must be >= 1");
  }
  ONCE_ASSIGN_OR_RETURN(auto conn, pg::Connect(options.conninfo, options.schema));
  std::string index(sql::kParkIndex);
  // A failed earlier run may have left an invalid index behind.
  ONCE_RETURN_IF_ERROR(conn->Exec("SET statement_timeout = 0"));
  ONCE_RETURN_IF_ERROR(conn->Exec("DROP INDEX CONCURRENTLY IF EXISTS " + index));
  ONCE_RETURN_IF_ERROR(conn->Exec("CREATE INDEX CONCURRENTLY " + index +
                                  " ON events (execution_id, sequence) "
                                  "WHERE kind = 'EXECUTION_SUSPENDED'"));
  const std::string batch_sql = sql::BackfillBatchSql();
  std::string after;
  int64_t parked = 0;
  while (true) {
    ONCE_ASSIGN_OR_RETURN(PgResult res,
                          conn->ExecParams(batch_sql, Params().Text(after).Int(batch_executions)));
    if (PQgetisnull(res.get(), 0, 0)) break;
    after = PQgetvalue(res.get(), 0, 0);
    parked += IntAt(res.get(), 0, 1);
  }
  // The marker's value is the server's time in Unix milliseconds.
  ONCE_RETURN_IF_ERROR(
      conn->ExecParams("INSERT INTO once_schema (name, value) VALUES ($1, "
                       "(extract(epoch FROM clock_timestamp()) * 1000)::int8) "
                       "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                       Params().Text(std::string(sql::kParkFencesMarker))));
  ONCE_RETURN_IF_ERROR(conn->Exec("DROP INDEX CONCURRENTLY IF EXISTS " + index));
  return parked;
}

namespace {

// The error of a step's statement: what the server refuses as the
// caller's input (see sql_transaction.h), the rest as the store's own.
Error StepSqlError(const Conn& conn, Error e) {
  const std::string& state = conn.last_sqlstate();
  if (state == kUniqueViolation) {
    e.code = ErrorCode::kAlreadyExists;
  } else if (state.starts_with("42") || state.starts_with("23") || state.starts_with("22") ||
             state.starts_with("2B") || state == "0A000") {
    e.code = ErrorCode::kInvalidArgument;
  }
  return e;
}

// A step's statements on a pooled connection inside the store's
// transaction (checks and spoiling: CheckedSqlTransaction; the server has
// aborted the transaction after a failure anyway).
class PgSqlTransaction final : public CheckedSqlTransaction {
 public:
  PgSqlTransaction(Conn& conn, const Limits& limits) : CheckedSqlTransaction(limits), conn_(conn) {}

 private:
  Result<SqlRows> Run(std::string_view sql, std::span<const Json> params) override {
    Params p;
    for (const Json& param : params) {
      ONCE_ASSIGN_OR_RETURN(std::optional<std::string> text, SqlParamText(param));
      if (text) {
        p.Text(std::move(*text));
      } else {
        p.Null();
      }
    }
    // The extended protocol: one statement, parameters never spliced.
    Result<PgResult> res = conn_.ExecParams(std::string(sql), p);
    if (!res) return std::unexpected(StepSqlError(conn_, res.error()));
    // Defence in depth behind CheckSqlStatement: the transaction must
    // still be open (a statement that ended it committed its writes alone).
    if (PQtransactionStatus(conn_.raw()) != PQTRANS_INTRANS) {
      return MakeError(ErrorCode::kInternal, "sql: the statement ended the store's transaction");
    }
    return Rows(res->get());
  }

  Result<SqlRows> Rows(const PGresult* r) {
    SqlRows out;
    const int columns = PQnfields(r);
    for (int c = 0; c < columns; ++c) out.columns.emplace_back(PQfname(r, c));
    SqlResultBudget budget(limits());
    for (int row = 0; row < PQntuples(r); ++row) {
      auto& values = out.rows.emplace_back();
      size_t bytes = 0;
      for (int c = 0; c < columns; ++c) {
        if (PQgetisnull(r, row, c)) {
          values.emplace_back();
          continue;
        }
        values.emplace_back(std::string(PQgetvalue(r, row, c), PQgetlength(r, row, c)));
        bytes += values.back()->size();
      }
      ONCE_RETURN_IF_ERROR(budget.AddRow(bytes));
    }
    const char* changed = PQcmdTuples(const_cast<PGresult*>(r));
    out.changed = PQntuples(r) == 0 && changed && *changed ? std::atoll(changed) : 0;
    return out;
  }

  Conn& conn_;
};

}  // namespace

// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
// The append locks the fence row FOR SHARE (created at token 0 if missing),
// so an AcquireFence waits for this commit: the guard holds until it.
Result<int64_t> PostgresEventStore::AppendInTransaction(std::string_view id,
                                                        TransactionWorkRef work) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  append_hints_->Forget(id);  // this append does not teach hints
  std::optional<AppendRequest> req;
  bool appending = false;  // a unique violation from here on is the log's, not the work's
  auto res = [&]() -> Result<int64_t> {
    // The pool's sessions forbid sequential scans (PrepareAll); the step's
    // tables are the caller's.
    ONCE_RETURN_IF_ERROR(conn->Exec("BEGIN; SET LOCAL enable_seqscan = on"));
    PgSqlTransaction sql(*conn, limits());
    ONCE_ASSIGN_OR_RETURN(req, work(sql));
    if (sql.spoiled()) return std::unexpected(*sql.spoiled());
    if (req->execution_id != id) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "the transaction's append names another execution", std::string(id));
    }
    ONCE_ASSIGN_OR_RETURN(EncodedAppend enc, EncodeAppend(*req, limits(), clock_));
    ONCE_RETURN_IF_ERROR(conn->Prepared("ensure_fence", Params().Text(req->execution_id)));
    Item item = MakeItem(*req, enc, req->fence, false, !options_.testing_disable_for_share);
    appending = true;
    ONCE_ASSIGN_OR_RETURN(
        auto out, RunAppend(*conn, "append_share", std::span<const Item>(&item, 1), nullptr));
    Result<int64_t> landed = std::move(out[0]);
    if (!landed) return landed;  // refused by its guard or its sequence: roll back
    ONCE_RETURN_IF_ERROR(conn->Exec("COMMIT"));
    return landed;
  }();
  if (res) return res;
  if (appending && conn->last_sqlstate() == kUniqueViolation) return SequenceRaceLost(*conn, *req);
  conn->ResetTransaction();
  return res;
}

Result<std::optional<RunOwner>> PostgresEventStore::RunOwnerOf(std::string_view id) {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits()));
  ONCE_ASSIGN_OR_RETURN(pg::Lease conn, pool_->Checkout());
  ONCE_ASSIGN_OR_RETURN(PgResult res, conn->Prepared("run_owner", Params().Text(std::string(id))));
  if (PQntuples(res.get()) == 0) return std::optional<RunOwner>();
  return std::optional<RunOwner>(RunOwner{PQgetvalue(res.get(), 0, 0), IntAt(res.get(), 0, 1)});
}

}  // namespace once::store
