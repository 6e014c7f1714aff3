#include "acquire_group.h"

#include <algorithm>
#include <cstdlib>

#include "once/store/validate.h"

namespace once::store::pg {
namespace {

int64_t IntAt(const PGresult* res, int row, int col) {
  return std::strtoll(PQgetvalue(res, row, col), nullptr, 10);
}

// Appends op's statements (see acquire_group.h): the unconditional bump, or
// ensure the row, lock it FOR UPDATE, the conditional bump and, when asked,
// the tail. The bump is a statement of its own so that its NOT EXISTS scan
// takes a fresh snapshot after the lock was granted (a single UPDATE's
// re-check would reuse its old snapshot and miss an answer that committed
// while it waited).
void AppendSteps(const AcquireOp& op, std::vector<PipelineStep>& steps) {
  if (!op.expect) {
    steps.push_back({"acquire", "", Params().Text(op.id)});
    return;
  }
  steps.push_back({"ensure_fence", "", Params().Text(op.id)});
  steps.push_back({"lock_fence", "", Params().Text(op.id)});
  steps.push_back(
      {"fence_if_bump", "", Params().Text(op.id).Int(op.expect->fence).Int(op.expect->park_seq)});
  if (op.read_after) {
    steps.push_back(
        {"fence_if_tail", "", Params().Text(op.id).Int(*op.read_after).Int(op.tail_max)});
  }
}

size_t StepCount(const AcquireOp& op) {
  if (!op.expect) return 1;
  return op.read_after ? 4 : 3;
}

// op's answer from its results (in AppendSteps order).
Result<AcquireWithTail> Verdict(const AcquireOp& op, std::span<const PgResult> results) {
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
  if (PQntuples(results[1].get()) != 1) return unexpected();
  const PGresult* bump = results[2].get();
  out.acquire = PQntuples(bump) == 0
                    ? ConditionalAcquire{.stale = true, .fence = IntAt(results[1].get(), 0, 0)}
                    : ConditionalAcquire{.stale = false, .fence = IntAt(bump, 0, 0)};
  if (!op.read_after) return out;
  const PGresult* r = results[3].get();
  out.tail.reserve(PQntuples(r));
  for (int i = 0; i < PQntuples(r); ++i) {
    ONCE_ASSIGN_OR_RETURN(Envelope e,
                          DecodeRow(op.id, IntAt(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                                    PQgetvalue(r, i, 3), IntAt(r, i, 4)));
    out.tail.push_back(std::move(e));
  }
  return out;
}

void FailAll(std::span<AcquireOp* const> group, const Error& why) {
  for (AcquireOp* op : group) op->result = std::unexpected(why);
}

// The fast path: every op in one pipeline, one implicit transaction. False
// (and nothing written) when a statement failed.
Result<bool> RunPipelined(Conn& conn, std::span<AcquireOp* const> group) {
  std::vector<PipelineStep> steps;
  steps.reserve(1 + group.size() * 4);
  steps.push_back({nullptr, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED", Params()});
  for (const AcquireOp* op : group) AppendSteps(*op, steps);
  auto results = conn.Pipeline(steps);
  if (!results) {
    if (conn.broken()) return std::unexpected(results.error());
    return false;
  }
  std::span<const PgResult> rest(*results);
  rest = rest.subspan(1);
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
          .replays = replays_.load(std::memory_order_relaxed)};
}

void AcquireGroup::RunGroup(std::span<AcquireOp* const> arrived) {
  // Execution-id order (bytewise, as COLLATE "C"), FIFO among equal ids.
  std::vector<AcquireOp*> group(arrived.begin(), arrived.end());
  std::stable_sort(group.begin(), group.end(),
                   [](const AcquireOp* a, const AcquireOp* b) { return a->id < b->id; });
  auto conn = pool_.Checkout();
  if (!conn) return FailAll(group, conn.error());
  auto fast = RunPipelined(**conn, group);
  if (!fast) return FailAll(group, fast.error());
  if (!*fast) {
    replays_.fetch_add(1, std::memory_order_relaxed);
    if (Status s = RunUnderSavepoints(**conn, group); !s) {
      (*conn)->ResetTransaction();
      return FailAll(group, s.error());
    }
  }
  commits_.fetch_add(1, std::memory_order_relaxed);
  acquires_.fetch_add(group.size(), std::memory_order_relaxed);
  uint64_t size = group.size();
  uint64_t seen = largest_.load(std::memory_order_relaxed);
  while (size > seen && !largest_.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {
  }
}

}  // namespace once::store::pg
