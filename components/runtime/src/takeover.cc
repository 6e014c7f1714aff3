// Recovery and takeover (issue 15; docs/nodes.md): which running executions
// this runtime may re-drive, and claiming them with the conditional acquire.
#include "fence_protocol.h"
#include "once/runtime/runtime.h"
#include "once/store/read_log.h"
#include "run_state.h"

namespace once::runtime {

using internal::RunState;
using store::Capability;

namespace {

Result<ExecutionState> FoldRead(const Result<std::vector<Envelope>>& log) {
  if (!log) return std::unexpected(log.error());
  return Fold(*log);
}

}  // namespace

Result<RunOutcome> Runtime::Redrive(std::string_view id, int64_t token, bool owner_recorded,
                                    std::vector<Envelope> log) {
  // A claim's acquire named this node: anything but the body leaves the row.
  OwnRowWatch watch(*this, owner_recorded);
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, Fold(log));
  if (st.status != ExecutionStatus::kRunning) {
    return OutcomeOf(std::string(id), st);
  }
  ONCE_ASSIGN_OR_RETURN(const Def* def, WorkflowOf(id, st));
  RunState run;
  run.id = id;
  run.workflow = std::move(st.workflow);
  run.fn = &def->fn;
  run.input = std::move(st.input);
  run.parent = std::move(st.parent);
  run.head = st.head;
  run.fence = token;
  run.owner = Owner();
  run.owner_recorded = owner_recorded;
  run.log = std::move(log);
  watch.Disarm();  // the body releases the row, or marks it unsure
  return Execute(run);
}

// A child or a continuation this runtime has just created (its start is
// durable and names this node as its owner): run it, unfenced.
Result<RunOutcome> Runtime::RedriveUnfenced(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store_, id));
  return Redrive(id, /*token=*/0, /*owner_recorded=*/false, std::move(log));
}

// Claims a running execution and re-drives it: reads the token and the log
// (in that order: a token read after the log could be one taken after it),
// and takes the fence with ONE conditional acquire expecting that token, no
// answer past the log's head, and the run row naming `expected_owner`.
Result<Runtime::Claimed> Runtime::Claim(const std::string& id,
                                        std::optional<std::string_view> expected_owner) {
  int64_t token = 0;
  const bool fences = store_.Supports(Capability::kAcquireFence);
  if (fences) {
    ONCE_ASSIGN_OR_RETURN(token, store_.ReadFence(id));
  }
  ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> log, store::ReadLog(store_, id));
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, Fold(log));
  if (st.status != ExecutionStatus::kRunning) return Claimed::kNotRunning;
  // Running here from before the acquire names this node until the body
  // ends: this node's own takeover must not claim it again meanwhile.
  std::shared_ptr<void> running = HoldRunningHere(id);
  // A body of this process that began since the caller looked (a resume
  // marks itself before its acquire, so one whose answer this log shows is
  // marked by now) is that body's to run.
  if (RunningHereBesidesUs(id)) return Claimed::kLost;
  internal::Fenced fenced;
  if (fences && options_.recover_acquires_fence) {
    internal::FenceProtocol fence(store_);
    ONCE_ASSIGN_OR_RETURN(std::optional<internal::Fenced> won,
                          fence.ClaimRunning(id, log, token, Owner(), expected_owner));
    if (!won) return Claimed::kLost;
    fenced = *won;
  }
  if (pool_) {
    // On the workers: a body that runs long (it neither parks nor ends for
    // a while) must not hold up the claims behind it. Inline, a dead node's
    // ten running bodies resumed one after another: the last waited for the
    // nine before it to park or end.
    Schedule([this, running, id, token = fenced.token, recorded = fenced.owner_recorded,
              log = std::move(log)]() mutable {
      if (Result<RunOutcome> r = Redrive(id, token, recorded, std::move(log)); !r) {
        ReportError(r.error());
      }
    });
    return Claimed::kRedriven;
  }
  ONCE_RETURN_IF_ERROR(Redrive(id, fenced.token, fenced.owner_recorded, std::move(log)));
  return Claimed::kRedriven;
}

void Runtime::Quarantine(Error e, std::vector<Error>& into) {
  bool first = false;
  {
    std::lock_guard lock(quarantine_mu_);
    if (quarantined_.size() < options_.quarantined_executions_max) {
      first = quarantined_.insert(e.subject).second;
    }
  }
  if (first) ReportError(e);  // once per execution and process
  into.push_back(std::move(e));
}

std::vector<std::string> Runtime::Quarantined() const {
  std::lock_guard lock(quarantine_mu_);
  return {quarantined_.begin(), quarantined_.end()};
}

// ---- Takeover -------------------------------------------------------------------

// One page of run rows: dead owners' (own = false) or this node's own that
// no body here runs (own = true), each claimed.
Status Runtime::TakeoverPage(bool own, TakeoverReport& report, std::string& after, bool& more) {
  nodes::Node& node = *options_.node;
  const size_t page_max = std::max<size_t>(1, options_.takeover_page_max);
  Result<std::vector<nodes::RunRow>> rows =
      own ? node.registry().RunsOf(node.id(), after, page_max)
          : node.registry().OrphanedRuns(node.id(), after, page_max, options_.ownerless_lease_ms);
  if (!rows) return std::unexpected(rows.error());
  more = rows->size() == page_max;
  for (const nodes::RunRow& row : *rows) {
    after = row.execution_id;
    if (own && RunningHere(row.execution_id)) continue;
    ++report.orphaned;
    Result<Claimed> claimed = Claim(row.execution_id, std::string_view(row.owner));
    if (!claimed) {
      if (claimed.error().code == ErrorCode::kCorruption ||
          claimed.error().code == ErrorCode::kPayloadShredded) {
        Quarantine(claimed.error(), report.quarantined);
      } else {
        report.errors.push_back(claimed.error());
      }
      continue;
    }
    switch (*claimed) {
      case Claimed::kRedriven:
        ++report.redriven;
        break;
      case Claimed::kLost:
        ++report.lost;
        break;
      case Claimed::kNotRunning:
        // A run that ended without an owned append left its row.
        if (Status s = node.registry().ForgetRun(row.execution_id, row.owner); !s) {
          report.errors.push_back(s.error());
        } else {
          ++report.forgotten;
        }
        break;
    }
  }
  return Ok();
}

Result<TakeoverReport> Runtime::Takeover() {
  if (!options_.node) {
    return MakeError(ErrorCode::kUnsupported, "Takeover needs a node (RuntimeOptions::node)");
  }
  if (options_.node->draining()) return TakeoverReport{};  // a draining node claims nothing
  Outermost outermost(*this);
  TakeoverReport report;
  for (bool own : {false, true}) {
    // This node's own rows: a scan of every run row naming it, only when
    // some may be left (OwnScanDue).
    if (own && !OwnScanDue()) continue;
    std::string after;
    for (bool more = true; more;) {
      if (Status s = TakeoverPage(own, report, after, more); !s) {
        if (own) MarkOwnRowsUnsure();  // look again next time
        return std::unexpected(s.error());
      }
    }
  }
  return report;
}

bool Runtime::OwnScanDue() {
  // A lapse (a new epoch) abandoned this node's bodies: their rows are left.
  const uint64_t epoch = options_.node->epoch();
  const bool lapsed = own_scan_epoch_.exchange(epoch, std::memory_order_acq_rel) != epoch;
  const bool unsure = own_rows_unsure_.exchange(false, std::memory_order_acq_rel);
  return lapsed || unsure;
}

// ---- Recover: the full pass -------------------------------------------------------

Result<RecoverReport> Runtime::Recover() {
  Outermost outermost(*this);
  RecoverReport report;
  // The nodes alive now (by the registry's clock), to leave their runs alone.
  std::set<std::string, std::less<>> alive;
  if (options_.node) {
    if (options_.node->draining()) return report;
    ONCE_ASSIGN_OR_RETURN(std::vector<nodes::NodeRecord> nodes, options_.node->registry().Nodes());
    for (const nodes::NodeRecord& n : nodes) {
      if (n.alive) alive.insert(n.info.node_id);
    }
  }
  std::string after;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(store::ExecutionPage page,
                          store_.ListExecutions(after, store_.limits().list_page_executions_max));
    for (const std::string& id : page.execution_ids) {
      ++report.examined;
      RecoverOne(id, report, alive);
    }
    if (page.next_after.empty()) break;
    after = page.next_after;
  }
  return report;
}

// One execution of Recover's pass. A log that cannot be read (a row the
// store cannot decode, a payload of the wrong shape) quarantines that one
// execution: it is reported and left alone, and the pass goes on.
void Runtime::RecoverOne(const std::string& id, RecoverReport& report,
                         const std::set<std::string, std::less<>>& alive) {
  Result<std::vector<Envelope>> log = store::ReadLog(store_, id);
  Result<ExecutionState> st = FoldRead(log);
  if (!st) return Quarantine(st.error(), report.quarantined);
  if (st->status == ExecutionStatus::kSuspended) {
    const Envelope* park = FindOpenPark(*log);
    Result<std::optional<Answer>> answer = ChildAnswer(id, *park);
    if (!answer) {
      report.errors.push_back(answer.error());
    } else if (*answer) {
      ++report.notified;
      Status s = ResumeParked(id, park->sequence, std::move(**answer), &*log);
      if (!s) report.errors.push_back(s.error());
    }
    return;
  }
  if (st->status != ExecutionStatus::kRunning) return;
  // Whose run is it? A live node's is left to it; a dead node's, or this
  // node's own that nothing here runs, is claimed; an ownerless one only
  // once its newest event is older than ownerless_lease_ms.
  std::optional<store::RunOwner> row;
  if (store_.Supports(Capability::kOwnership)) {
    Result<std::optional<store::RunOwner>> r = store_.RunOwnerOf(id);
    if (!r) {
      report.errors.push_back(r.error());
      return;
    }
    row = std::move(*r);
  }
  const std::string_view self = Owner();
  if (row) {
    bool mine = !self.empty() && row->owner == self;
    bool live_elsewhere = !mine && (!options_.node || alive.contains(row->owner));
    if (live_elsewhere || (mine && RunningHere(id))) {
      ++report.left_alive;
      return;
    }
    return ClaimInto(id, std::string_view(row->owner), report);
  }
  if (log->back().time_ms + options_.ownerless_lease_ms > clock_.NowUnixMillis()) {
    ++report.left_alive;
    return;
  }
  std::optional<std::string_view> no_row;
  if (store_.Supports(Capability::kOwnership)) no_row = std::string_view();
  ClaimInto(id, no_row, report);
}

void Runtime::ClaimInto(const std::string& id, std::optional<std::string_view> expected_owner,
                        RecoverReport& report) {
  Result<Claimed> claimed = Claim(id, expected_owner);
  if (!claimed) {
    report.errors.push_back(claimed.error());
  } else if (*claimed == Claimed::kRedriven) {
    ++report.redriven;
  } else if (*claimed == Claimed::kLost) {
    ++report.lost;
  }
}

}  // namespace once::runtime
