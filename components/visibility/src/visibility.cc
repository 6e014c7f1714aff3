#include "once/visibility/visibility.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "once/base/hex.h"
#include "once/runtime/log_view.h"
#include "source.h"

namespace once::visibility {

using internal::Candidate;
using internal::IndexKey;
using internal::RawEvent;
using internal::RawSummary;
using internal::Source;

namespace {

constexpr std::string_view kStatuses[] = {"running", "suspended", "completed",
                                          "failed",  "cancelled", "continued"};
constexpr std::string_view kWaitTypes[] = {"timer", "message", "child"};

// The terminal status a kind lists, or "".
std::string_view TerminalKindOf(std::string_view status) {
  if (status == "completed") return "EXECUTION_COMPLETED";
  if (status == "failed") return "EXECUTION_FAILED";
  if (status == "cancelled") return "EXECUTION_CANCELLED";
  if (status == "continued") return "EXECUTION_CONTINUED";
  return "";
}

// Which index kind a query walks: the entry that places an execution in the
// filtered status, or its start.
std::string_view ScanKind(const ListQuery& q) {
  if (auto terminal = TerminalKindOf(q.status); !terminal.empty()) return terminal;
  if (q.status == "suspended" || !q.parked_on.empty()) return "EXECUTION_SUSPENDED";
  return "EXECUTION_STARTED";
}

events::Envelope ToEnvelope(const std::string& id, const RawEvent& raw) {
  events::Envelope e;
  e.execution_id = id;
  e.sequence = raw.sequence;
  e.kind = events::Kind(raw.kind);
  auto payload = events::ParseJson(raw.payload);
  e.payload = payload ? std::move(*payload) : Json();
  e.time_ms = raw.time_ms;
  return e;
}

// The row of one execution from its start and its newest status event,
// folded as the runtime folds a whole log (runtime::Fold).
Result<ExecutionRow> ToRow(const RawSummary& raw) {
  ExecutionRow row;
  row.execution_id = raw.execution_id;
  row.head = raw.head;
  row.updated_ms = raw.updated_ms;
  row.fence = raw.fence;
  std::vector<events::Envelope> log;
  if (raw.started) {
    row.started_ms = raw.started->time_ms;
    log.push_back(ToEnvelope(raw.execution_id, *raw.started));
  }
  if (raw.last_status && (!raw.started || raw.last_status->sequence != raw.started->sequence)) {
    log.push_back(ToEnvelope(raw.execution_id, *raw.last_status));
  }
  Result<runtime::ExecutionState> folded = runtime::Fold(log);
  if (!folded) {
    return MakeError(ErrorCode::kCorruption,
                     "visibility: a status event cannot be read: " + folded.error().message,
                     raw.execution_id);
  }
  const runtime::ExecutionState& state = *folded;
  row.status = std::string(runtime::StatusName(state.status));
  row.workflow = state.workflow;
  row.park_seq = state.park_seq;
  if (state.parent.is_object() && state.parent.contains("execution_id") &&
      state.parent["execution_id"].is_string()) {
    row.parent_id = state.parent["execution_id"].get<std::string>();
  }
  row.result = state.result;
  if (state.park_seq && log.back().payload.is_object()) {
    const Json& waits = log.back().payload.value("waits", Json::array());
    for (const Json& w : waits) {
      if (w.is_object() && w.contains("type") && w["type"].is_string()) {
        row.parked_on.push_back(w["type"].get<std::string>());
      }
    }
  }
  return row;
}

bool InRange(int64_t v, int64_t after_ms, int64_t before_ms) {
  return (after_ms <= 0 || v >= after_ms) && (before_ms <= 0 || v <= before_ms);
}

bool Matches(const ListQuery& q, const ExecutionRow& r) {
  if (!q.status.empty() && r.status != q.status) return false;
  if (!q.workflow.empty() && r.workflow != q.workflow) return false;
  if (!q.parked_on.empty() &&
      std::find(r.parked_on.begin(), r.parked_on.end(), q.parked_on) == r.parked_on.end()) {
    return false;
  }
  if (!q.id_prefix.empty() && !r.execution_id.starts_with(q.id_prefix)) return false;
  return InRange(r.started_ms, q.started_after_ms, q.started_before_ms) &&
         InRange(r.updated_ms, q.updated_after_ms, q.updated_before_ms);
}

Status CheckQuery(const ListQuery& q, const VisibilityLimits& limits) {
  if (!q.status.empty() && !IsStatusName(q.status)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "status must be running, suspended, completed, failed, cancelled or "
                     "continued, not '" +
                         q.status + "'");
  }
  if (!q.parked_on.empty() && !IsWaitType(q.parked_on)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "parked_on must be timer, message or child, not '" + q.parked_on + "'");
  }
  if (!q.parked_on.empty() && !q.status.empty() && q.status != "suspended") {
    return MakeError(ErrorCode::kInvalidArgument, "parked_on lists suspended executions only");
  }
  if (q.limit == 0 || q.limit > limits.page_rows_max) {
    return LimitError("page_rows_max", static_cast<int64_t>(q.limit),
                      static_cast<int64_t>(limits.page_rows_max));
  }
  return Ok();
}

class SqlVisibility final : public Visibility {
 public:
  SqlVisibility(std::unique_ptr<Source> source, VisibilityLimits limits)
      : Visibility(limits), source_(std::move(source)) {}

  Result<ListPage> List(const ListQuery& q) override {
    ONCE_RETURN_IF_ERROR(CheckQuery(q, limits_));
    IndexKey before{.time_ms = std::numeric_limits<int64_t>::max()};
    if (!q.cursor.empty()) {
      ONCE_ASSIGN_OR_RETURN(before, internal::DecodeCursor(q.cursor));
    }
    const std::string_view kind = ScanKind(q);
    // The walk's own time bounds the started filter when it walks starts.
    int64_t min_ms = kind == "EXECUTION_STARTED" ? q.started_after_ms : 0;
    if (kind == "EXECUTION_STARTED" && q.started_before_ms > 0 &&
        before.time_ms > q.started_before_ms) {
      // Strictly older than (before + 1, "", 0): at or before the bound.
      before = IndexKey{.time_ms = q.started_before_ms + 1};
    }
    ListPage page;
    bool exhausted = false;
    while (page.rows.size() < q.limit && page.scanned < limits_.scan_rows_max) {
      size_t chunk = std::min<size_t>(std::max<size_t>(q.limit - page.rows.size(), 16),
                                      limits_.scan_rows_max - page.scanned);
      chunk = std::min<size_t>(chunk, 256);
      ONCE_ASSIGN_OR_RETURN(std::vector<Candidate> found,
                            source_->Candidates(kind, before, min_ms, chunk));
      if (found.empty()) {
        exhausted = true;
        break;
      }
      std::vector<std::string> ids;
      for (const Candidate& c : found) ids.push_back(c.key.execution_id);
      ONCE_ASSIGN_OR_RETURN(std::vector<RawSummary> summaries, source_->Summarise(ids));
      size_t consumed = 0;
      for (size_t i = 0; i < found.size(); ++i) {
        before = found[i].key;
        ++consumed;
        ++page.scanned;
        auto row = ToRow(summaries[i]);
        if (!row) continue;  // unreadable: Summary() reports it
        // A park entry counts once: only while it is the open park.
        if (kind == "EXECUTION_SUSPENDED" && row->park_seq != found[i].key.sequence) continue;
        if (!Matches(q, *row)) continue;
        page.rows.push_back(std::move(*row));
        if (page.rows.size() == q.limit) break;
      }
      if (found.size() < chunk && consumed == found.size()) {
        exhausted = true;  // the index has nothing older
        break;
      }
    }
    if (!exhausted) page.next_cursor = internal::EncodeCursor(before);
    return page;
  }

  Result<ExecutionRow> Summary(const std::string& id) override {
    ONCE_ASSIGN_OR_RETURN(std::vector<RawSummary> raw, source_->Summarise({id}));
    if (raw.empty() || raw[0].head == 0) {
      return MakeError(ErrorCode::kNotFound, "no execution with this id", id);
    }
    return ToRow(raw[0]);
  }

  Result<StatusCounts> Counts() override {
    StatusCounts c;
    ONCE_ASSIGN_OR_RETURN(c.total, source_->CountKind("EXECUTION_STARTED"));
    ONCE_ASSIGN_OR_RETURN(c.completed, source_->CountKind("EXECUTION_COMPLETED"));
    ONCE_ASSIGN_OR_RETURN(c.failed, source_->CountKind("EXECUTION_FAILED"));
    ONCE_ASSIGN_OR_RETURN(c.cancelled, source_->CountKind("EXECUTION_CANCELLED"));
    ONCE_ASSIGN_OR_RETURN(c.continued, source_->CountKind("EXECUTION_CONTINUED"));
    ONCE_ASSIGN_OR_RETURN(c.suspended, source_->CountOpenParks());
    ONCE_ASSIGN_OR_RETURN(c.inbox_pending, source_->CountPendingMessages());
    c.running = std::max<int64_t>(
        0, c.total - c.completed - c.failed - c.cancelled - c.continued - c.suspended);
    return c;
  }

  Result<TimersPage> Timers(int64_t due_before_ms, size_t limit,
                            const std::string& cursor) override {
    if (limit == 0 || limit > limits_.timers_page_max) {
      return LimitError("timers_page_max", static_cast<int64_t>(limit),
                        static_cast<int64_t>(limits_.timers_page_max));
    }
    IndexKey after{.time_ms = std::numeric_limits<int64_t>::min()};
    if (!cursor.empty()) {
      ONCE_ASSIGN_OR_RETURN(after, internal::DecodeCursor(cursor));
    }
    return source_->Timers(due_before_ms, limit, after);
  }

  Result<std::vector<TimerInfo>> TimersOf(const std::string& id) override {
    return source_->TimersOf(id);
  }

  Result<std::vector<PendingMessage>> Pending(const std::string& id, size_t limit) override {
    if (limit == 0 || limit > limits_.messages_page_max) {
      return LimitError("messages_page_max", static_cast<int64_t>(limit),
                        static_cast<int64_t>(limits_.messages_page_max));
    }
    return source_->Pending(id, limit);
  }

  Result<std::vector<NodeRow>> Nodes(size_t limit) override {
    if (limit == 0 || limit > limits_.page_rows_max) {
      return LimitError("page_rows_max", static_cast<int64_t>(limit),
                        static_cast<int64_t>(limits_.page_rows_max));
    }
    return source_->Nodes(limit);
  }
  Result<std::optional<Owner>> OwnerOf(const std::string& id) override {
    return source_->OwnerOf(id);
  }
  Result<std::vector<QueueRow>> Queues(size_t limit) override {
    if (limit == 0 || limit > limits_.page_rows_max) {
      return LimitError("page_rows_max", static_cast<int64_t>(limit),
                        static_cast<int64_t>(limits_.page_rows_max));
    }
    return source_->Queues(limit);
  }

  std::string SchemaDescription() const override { return source_->Description(); }

 private:
  std::unique_ptr<Source> source_;
};

}  // namespace

bool IsStatusName(std::string_view s) {
  return std::find(std::begin(kStatuses), std::end(kStatuses), s) != std::end(kStatuses);
}

bool IsWaitType(std::string_view s) {
  return std::find(std::begin(kWaitTypes), std::end(kWaitTypes), s) != std::end(kWaitTypes);
}

Result<std::unique_ptr<Visibility>> Visibility::Open(const Target& target,
                                                     VisibilityLimits limits) {
  if (target.sqlite_path.empty() == target.postgres_url.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "name exactly one store: a SQLite file or a PostgreSQL URL");
  }
  std::unique_ptr<Source> source;
  if (!target.sqlite_path.empty()) {
    ONCE_ASSIGN_OR_RETURN(source, internal::OpenSqliteSource(target.sqlite_path, limits));
  } else {
    ONCE_ASSIGN_OR_RETURN(source, internal::OpenPostgresSource(target, limits));
  }
  return std::unique_ptr<Visibility>(new SqlVisibility(std::move(source), limits));
}

namespace internal {

std::string EncodeCursor(const IndexKey& key) {
  return std::to_string(key.time_ms) + "." + std::to_string(key.sequence) + "." +
         HexEncode(key.execution_id);
}

Result<IndexKey> DecodeCursor(std::string_view cursor) {
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument, "malformed cursor: " + std::string(cursor));
  };
  size_t dot1 = cursor.find('.');
  if (dot1 == std::string_view::npos) return bad();
  size_t dot2 = cursor.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos) return bad();
  IndexKey key;
  auto parse = [](std::string_view s, int64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  };
  if (!parse(cursor.substr(0, dot1), key.time_ms) ||
      !parse(cursor.substr(dot1 + 1, dot2 - dot1 - 1), key.sequence)) {
    return bad();
  }
  auto id = HexDecode(cursor.substr(dot2 + 1));
  if (!id) return bad();
  key.execution_id.assign(id->begin(), id->end());
  return key;
}

}  // namespace internal
}  // namespace once::visibility
