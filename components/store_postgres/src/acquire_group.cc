#include "acquire_group.h"

#include <algorithm>
#include <limits>

#include "once/store/validate.h"
#include "packed_rows.h"
#include "read_group.h"

namespace once::store::pg {
namespace {

// Appends op's statements (see acquire_group.h): the unconditional bump, or
// (on op.ensure) ensure the row, lock it FOR UPDATE, the conditional bump
// and, when asked, the tail. The bump is a statement of its own so that its
// NOT EXISTS scan takes a fresh snapshot after the lock was granted (a
// single UPDATE's re-check would reuse its old snapshot and miss an answer
// that committed while it waited).
// Model: models/fence_postgres.pml (issue 19; spin checks it, scripts/models).
void AppendSteps(const AcquireOp& op, std::vector<PipelineStep>& steps) {
  if (!op.expect) {
    steps.push_back({"acquire", "", Params().Text(op.id)});
    return;
  }
  if (op.ensure) steps.push_back({"ensure_fence", "", Params().Text(op.id)});
  steps.push_back({"lock_fence", "", Params().Text(op.id)});
  Params bump = Params().Text(op.id).Int(op.expect->fence).Int(op.expect->park_seq);
  if (op.owner.empty()) {
    bump.Null();
  } else {
    bump.Text(op.owner);
  }
  if (op.expected_owner) {
    bump.Text(*op.expected_owner);
  } else {
    bump.Null();
  }
  steps.push_back({"fence_if_bump", "", std::move(bump)});
  if (op.read_after) {
    steps.push_back({"fence_if_tail", "",
                     Params().Text(op.id).Int(*op.read_after).Int(RowsForEvents(op.tail_max))});
  }
}

size_t StepCount(const AcquireOp& op) {
  if (!op.expect) return 1;
  return (op.read_after ? 3 : 2) + (op.ensure ? 1 : 0);
}

// op's answer from its results (in AppendSteps order). Sets op.missing
// instead when the lock found no row and no ensure ran.
Result<AcquireWithTail> Verdict(AcquireOp& op, std::span<const PgResult> results) {
  auto unexpected = [&] {
    return MakeError(ErrorCode::kInternal, "fence acquire: unexpected results", op.id);
  };
  if (results.size() != StepCount(op)) return unexpected();
  AcquireWithTail out;
  if (!op.expect) {
    if (PQntuples(results[0].get()) != 1) return unexpected();
    out.acquire.fence = IntAt(results[0].get(), 0, 0);
    return out;
  }
  op.missing = false;
  // After the optional ensure: the lock, the bump, the tail.
  const std::span<const PgResult> own = results.subspan(op.ensure ? 1 : 0);
  const PGresult* locked = own[0].get();
  if (PQntuples(locked) == 0 && !op.ensure) {
    op.missing = true;  // no row to lock: nothing was bumped; again with ensure
    return out;
  }
  if (PQntuples(locked) != 1) return unexpected();
  const PGresult* bump = own[1].get();
  out.acquire = PQntuples(bump) == 0
                    ? ConditionalAcquire{.stale = true, .fence = IntAt(locked, 0, 0)}
                    : ConditionalAcquire{.stale = false, .fence = IntAt(bump, 0, 0)};
  if (!op.read_after) return out;
  const PGresult* r = own[2].get();
  out.tail.reserve(PQntuples(r));
  for (int i = 0; i < PQntuples(r); ++i) {
    ONCE_RETURN_IF_ERROR(DecodeStoredRow(op.id, ReadStoredRow(r, i, 0), *op.read_after + 1,
                                         std::numeric_limits<int64_t>::max(), [&](Envelope e) {
                                           if (static_cast<int64_t>(out.tail.size()) <
                                               op.tail_max) {
                                             out.tail.push_back(std::move(e));
                                           }
                                         }));
  }
  return out;
}

void FailAll(std::span<AcquireOp* const> group, const Error& why) {
  for (AcquireOp* op : group) {
    op->result = std::unexpected(why);
    op->missing = false;  // failed, not to be tried again
  }
}

// Whether a group-wide run makes every row first: when any of its acquires
// must (one naming no park, or one whose row was missing).
bool EnsuresAll(std::span<AcquireOp* const> group) {
  return std::any_of(group.begin(), group.end(), [](const AcquireOp* op) { return op->ensure; });
}

// True when `group` (in execution-id order) can run as group-wide
// statements: two or more conditional acquires of distinct executions. Two
// acquires of one execution must see each other's bump, and an
// unconditional one has no expectation: those groups run op by op.
bool GroupWide(std::span<AcquireOp* const> group) {
  if (group.size() < 2) return false;
  for (size_t i = 0; i < group.size(); ++i) {
    if (!group[i]->expect) return false;
    if (i > 0 && group[i]->id == group[i - 1]->id) return false;
  }
  return true;
}

// The tails a group-wide run reads, as ranges of the read groups' statement
// (read_group.h): range k is the tail of group[ops[k]].
struct GroupTails {
  Ranges ranges;
  std::vector<size_t> ops;
};

GroupTails TailsOf(std::span<AcquireOp* const> group) {
  GroupTails tails;
  for (size_t i = 0; i < group.size(); ++i) {
    const AcquireOp& op = *group[i];
    // Nothing follows the largest sequence: that tail is empty.
    if (!op.read_after || *op.read_after == std::numeric_limits<int64_t>::max()) continue;
    tails.ranges.Add(op.id, *op.read_after + 1, std::numeric_limits<int64_t>::max(), op.tail_max);
    tails.ops.push_back(i);
  }
  return tails;
}

// The group-wide statements: (on ensure) ensure every fence row, lock them
// all FOR UPDATE in execution-id order, then (new statements, so new snapshots taken
// after every lock was granted) the conditional bump of all and the tails
// of those that asked. The verdicts are those of the op-by-op statements:
// the executions are distinct, so no acquire sees another's bump.
void AppendGroupSteps(std::span<AcquireOp* const> group, const GroupTails& tails,
                      std::vector<PipelineStep>& steps) {
  std::vector<std::string_view> ids, owners, expected;
  std::vector<std::optional<int64_t>> fences, parks;
  std::vector<bool> has_owner, check_owner;
  for (const AcquireOp* op : group) {
    ids.push_back(op->id);
    fences.push_back(op->expect->fence);
    parks.push_back(op->expect->park_seq);
    owners.push_back(op->owner);
    has_owner.push_back(!op->owner.empty());
    expected.push_back(op->expected_owner ? std::string_view(*op->expected_owner) : "");
    check_owner.push_back(op->expected_owner.has_value());
  }
  std::string id_array = TextArrayBinary(ids);
  if (EnsuresAll(group)) steps.push_back({"ensure_fences", "", Params().Binary(id_array)});
  steps.push_back({"lock_fences", "", Params().Binary(id_array)});
  steps.push_back({"fence_if_bump_many", "",
                   Params()
                       .Binary(std::move(id_array))
                       .Binary(IntArrayBinary(fences))
                       .Binary(IntArrayBinary(parks))
                       .Binary(TextArrayBinary(owners))
                       .Binary(BoolArrayBinary(has_owner))
                       .Binary(TextArrayBinary(expected))
                       .Binary(BoolArrayBinary(check_owner))});
  if (!tails.ops.empty()) steps.push_back({"read_ranges", "", tails.ranges.ToParams()});
}

// The ops' answers from the group-wide results (AppendGroupSteps order).
// Without ensure, an op whose row the lock did not find is marked missing.
Status GroupVerdicts(std::span<AcquireOp* const> group, const GroupTails& tails,
                     std::span<const PgResult> results) {
  auto unexpected = [] {
    return MakeError(ErrorCode::kInternal, "grouped fence acquire: unexpected results");
  };
  const size_t n = group.size();
  // The position (1-based) a row names, or 0 when out of range.
  auto ord_at = [n](const PGresult* r, int row) -> size_t {
    int64_t ord = IntAt(r, row, 0);
    return ord >= 1 && ord <= static_cast<int64_t>(n) ? static_cast<size_t>(ord) : 0;
  };
  const bool ensure = EnsuresAll(group);
  const size_t first = ensure ? 1 : 0;  // after the optional ensure
  if (results.size() != first + (tails.ops.empty() ? 2u : 3u)) return unexpected();
  const PGresult* locked = results[first].get();
  const PGresult* bumped = results[first + 1].get();
  if (ensure ? PQntuples(locked) != static_cast<int>(n) : PQntuples(locked) > static_cast<int>(n)) {
    return unexpected();
  }
  std::vector<bool> found(n, false);
  for (int row = 0; row < PQntuples(locked); ++row) {
    size_t ord = ord_at(locked, row);
    if (ord == 0) return unexpected();
    found[ord - 1] = true;
    group[ord - 1]->result = AcquireWithTail{
        .acquire = ConditionalAcquire{.stale = true, .fence = IntAt(locked, row, 1)}};
  }
  for (int row = 0; row < PQntuples(bumped); ++row) {
    size_t ord = ord_at(bumped, row);
    if (ord == 0 || !found[ord - 1]) return unexpected();
    group[ord - 1]->result->acquire =
        ConditionalAcquire{.stale = false, .fence = IntAt(bumped, row, 1)};
  }
  for (size_t i = 0; i < n; ++i) group[i]->missing = !found[i];
  if (tails.ops.empty()) return Ok();
  return DecodeRanges(results[first + 2].get(), tails.ranges, [&](size_t k, Result<Envelope> e) {
    AcquireOp& op = *group[tails.ops[k]];
    if (op.missing) return;  // read again with the ensure round
    if (!op.result) return;  // an earlier row of its tail failed to decode
    if (!e) {
      op.result = std::unexpected(e.error());
      return;
    }
    op.result->tail.push_back(std::move(*e));
  });
}

// The fast path: the whole group in one pipeline, one implicit transaction
// (READ COMMITTED: the session default every pooled connection sets). False
// (and nothing written) when a statement failed.
Result<bool> RunPipelined(Conn& conn, std::span<AcquireOp* const> group) {
  const bool group_wide = GroupWide(group);
  GroupTails tails;
  std::vector<PipelineStep> steps;
  steps.reserve(group_wide ? 4 : group.size() * 4);
  if (group_wide) {
    tails = TailsOf(group);
    AppendGroupSteps(group, tails, steps);
  } else {
    for (const AcquireOp* op : group) AppendSteps(*op, steps);
  }
  auto results = conn.Pipeline(steps);
  if (!results) {
    if (conn.broken()) return std::unexpected(results.error());
    return false;
  }
  if (group_wide) {
    if (Status s = GroupVerdicts(group, tails, *results); !s) FailAll(group, s.error());
    return true;
  }
  std::span<const PgResult> rest(*results);
  for (AcquireOp* op : group) {
    size_t n = std::min(StepCount(*op), rest.size());
    op->result = Verdict(*op, rest.first(n));
    rest = rest.subspan(n);
  }
  return true;
}

// The replay: one explicit transaction, each op under its own savepoint, so
// that an op that fails again rolls back alone.
Status RunUnderSavepoints(Conn& conn, std::span<AcquireOp* const> group) {
  ONCE_RETURN_IF_ERROR(conn.Exec("BEGIN ISOLATION LEVEL READ COMMITTED"));
  for (AcquireOp* op : group) {
    std::vector<PipelineStep> steps;
    steps.push_back({nullptr, "SAVEPOINT acquire", Params()});
    AppendSteps(*op, steps);
    steps.push_back({nullptr, "RELEASE SAVEPOINT acquire", Params()});
    auto results = conn.Pipeline(steps);
    if (results) {
      op->result = Verdict(*op, std::span<const PgResult>(*results).subspan(1, StepCount(*op)));
      continue;
    }
    if (conn.broken()) return std::unexpected(results.error());
    op->result = std::unexpected(results.error());
    ONCE_RETURN_IF_ERROR(conn.Exec("ROLLBACK TO SAVEPOINT acquire"));
  }
  ONCE_RETURN_IF_ERROR(conn.Exec("COMMIT"));
  return Ok();
}

}  // namespace

AcquireGroupStats AcquireGroup::stats() const {
  return {.commits = commits_.load(std::memory_order_relaxed),
          .acquires = acquires_.load(std::memory_order_relaxed),
          .largest = largest_.load(std::memory_order_relaxed),
          .replays = replays_.load(std::memory_order_relaxed),
          .group_wide = group_wide_.load(std::memory_order_relaxed),
          .ensure_rounds = ensure_rounds_.load(std::memory_order_relaxed)};
}

void AcquireGroup::RunGroup(std::span<AcquireOp* const> arrived) {
  // Execution-id order (bytewise, as COLLATE "C"), FIFO among equal ids.
  std::vector<AcquireOp*> group(arrived.begin(), arrived.end());
  std::stable_sort(group.begin(), group.end(),
                   [](const AcquireOp* a, const AcquireOp* b) { return a->id < b->id; });
  // An acquire that names a park finds the row the park wrote; one that
  // names none (park_seq 0: a first acquire) makes it first, as it always did.
  for (AcquireOp* op : group) op->ensure = op->expect && op->expect->park_seq == 0;
  auto conn = pool_.Checkout();
  if (!conn) return FailAll(group, conn.error());
  if (!Commit(**conn, group)) return;
  size_t wrote = group.size();  // a round whose every row was missing wrote nothing
  // The acquires whose row did not exist (never parked, never acquired)
  // locked and bumped nothing: again, in a transaction of their own, with
  // ensure first (the order of models/fence_postgres.pml).
  std::vector<AcquireOp*> missing;
  for (AcquireOp* op : group) {
    if (!op->missing) continue;
    op->missing = false;
    op->ensure = true;
    op->result = AcquireWithTail{};
    missing.push_back(op);
    --wrote;
  }
  if (wrote > 0) commits_.fetch_add(1, std::memory_order_relaxed);
  if (!missing.empty()) {
    ensure_rounds_.fetch_add(1, std::memory_order_relaxed);
    if (!Commit(**conn, missing)) return;
    commits_.fetch_add(1, std::memory_order_relaxed);
  }
  acquires_.fetch_add(group.size(), std::memory_order_relaxed);
  RaiseToAtLeast(largest_, group.size());
}

bool AcquireGroup::Commit(Conn& conn, std::span<AcquireOp* const> group) {
  auto fast = RunPipelined(conn, group);
  if (!fast) {
    FailAll(group, fast.error());
    return false;
  }
  if (!*fast) {
    replays_.fetch_add(1, std::memory_order_relaxed);
    if (Status s = RunUnderSavepoints(conn, group); !s) {
      conn.ResetTransaction();
      FailAll(group, s.error());
      return false;
    }
  }
  if (*fast && GroupWide(group)) group_wide_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace once::store::pg
