// The boundary rules on the sled core (issue 13, rules 1-8), each with the
// schedule that breaks the design without it: restarts (the drives keep the
// record, the gossip set is relearned from peers), partitions (SyncGroup),
// moves (a restart into another group), wiped and disagreeing drives.

#include <gtest/gtest.h>

#include "once/rack/sled_core.h"
#include "rack_harness.h"

namespace once::rack {
namespace {

using testing::ClientChain;
using testing::Rack;

JobId Id(const SignedRequest& request) { return std::get<JobStart>(request.payload).job_id; }

const SledError* FindError(const Rack::Sled& sled, SledErrorKind kind) {
  for (const SledError& e : sled.sled_errors) {
    if (e.kind == kind) return &e;
  }
  return nullptr;
}

// Rule 2: the recorded session resumes by chain position.
TEST(BoundaryRulesTest, ARestartedSledRunsNothingAtOrBeforeItsLastJob) {
  Rack rack(2);
  auto chain = rack.StartSession(0);
  rack.SyncAll();
  SignedRequest j1 = rack.NextJob(*chain, "one");
  SignedRequest j2 = rack.NextJob(*chain, "two");
  ASSERT_TRUE(rack.Submit(0, j1).status.has_value());
  rack.SyncAll();
  rack.Exit(1, Id(j1), 0);
  ASSERT_TRUE(rack.Submit(0, j2).status.has_value());
  rack.SyncAll();
  rack.Exit(1, Id(j2), 0);
  rack.SyncAll();

  rack.Restart(1);
  rack.Sync(0, 1);
  rack.Drain(1);
  EXPECT_EQ(rack.Runs(1, Id(j1)), 1u);
  EXPECT_EQ(rack.Runs(1, Id(j2)), 1u);
  EXPECT_EQ(rack.State(1, Id(j2), 1), JobState::kStopped);

  SignedRequest j3 = rack.NextJob(*chain, "three");  // the chain goes on from the successor
  ASSERT_TRUE(rack.Submit(0, j3).status.has_value());
  rack.SyncAll();
  EXPECT_EQ(rack.Runs(1, Id(j3)), 1u);
}

// Rule 2 without the predecessor's bytes: a lost suffix (the sled ran J1 and
// nobody else ever heard of it) still resumes at J1's successor.
TEST(BoundaryRulesTest, TheSuccessorInTheRecordResumesTheChainWithoutThePredecessor) {
  Rack rack(2);
  auto chain = rack.StartSession(0);
  rack.SyncAll();
  SignedRequest j1 = rack.NextJob(*chain, "one");
  ASSERT_TRUE(rack.Submit(1, j1).status.has_value());  // only sled 1 has it
  EXPECT_EQ(rack.Runs(1, Id(j1)), 1u);
  rack.Restart(1);  // J1 and its Started are lost with sled 1's gossip set
  rack.Sync(0, 1);
  rack.Drain(1);
  SignedRequest j2 = rack.NextJob(*chain, "two");  // signed by a client that kept J1
  ASSERT_TRUE(rack.Submit(1, j2).status.has_value());
  EXPECT_EQ(rack.Runs(1, Id(j2)), 1u);
  EXPECT_EQ(rack.Runs(1, Id(j1)), 1u);
}

// Rule 7: a start with no stop from a previous life becomes Interrupted once
// the replay drained; the outcome the record kept wins when there is one.
TEST(BoundaryRulesTest, APreviousLifesStartWithNoStopIsInterrupted) {
  Rack rack(2);
  auto chain = rack.StartSession(0);
  rack.SyncAll();
  SignedRequest j1 = rack.NextJob(*chain, "sleep 100");
  ASSERT_TRUE(rack.Submit(0, j1).status.has_value());
  rack.SyncAll();  // sled 0 knows sled 1's Started
  rack.Restart(1);
  rack.Sync(0, 1);
  EXPECT_EQ(rack.State(1, Id(j1), 1), JobState::kStarted);  // not before the drain
  rack.Drain(1);
  EXPECT_EQ(rack.State(1, Id(j1), 1), JobState::kInterrupted);
  rack.SyncAll();
  EXPECT_EQ(rack.State(0, Id(j1), 1), JobState::kInterrupted);
  EXPECT_EQ(rack.Runs(1, Id(j1)), 1u);
}

TEST(BoundaryRulesTest, TheRecordedOutcomeWinsOverInterrupted) {
  Rack rack(2);
  auto chain = rack.StartSession(0);
  rack.SyncAll();
  SignedRequest j1 = rack.NextJob(*chain, "exit 3");
  ASSERT_TRUE(rack.Submit(0, j1).status.has_value());
  rack.SyncAll();
  rack.Exit(1, Id(j1), 3);  // its Stopped never leaves sled 1: it dies at once
  rack.Restart(1);
  rack.Sync(0, 1);
  rack.Drain(1);
  const JobStatus* status = rack.Status(1, Id(j1), 1);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->state, JobState::kStopped);
  EXPECT_EQ(status->outcome.code, 3);
  rack.SyncAll();
  EXPECT_EQ(rack.Status(0, Id(j1), 1)->outcome.code, 3);
}

// Rules 3 and 4, the seed's partition flip-flop (its steps 1-8): a sled that
// moves across a partition twice never runs the first side's job again; with
// the record's left sessions it resumes the first side's chain exactly, with
// V alone it hops.
void RunPartitionFlipFlop(size_t left_sessions) {
  Rack rack(4);  // {0, X=1} | {2, 3}
  const size_t X = 1;
  rack.sled(X).config.boundary.left_sessions_max = left_sessions;
  rack.Restart(X);
  rack.Drain(X);
  rack.SyncAll();
  auto side_a = rack.StartSession(0);
  rack.SyncGroup({0, X});
  auto side_b = rack.StartSession(2);  // concurrent: 2 never heard of side A's session
  rack.SyncGroup({2, 3});
  SignedRequest j1 = rack.NextJob(*side_a, "append ledger", "1");
  ASSERT_TRUE(rack.Submit(0, j1).status.has_value());
  rack.SyncGroup({0, X});
  ASSERT_EQ(rack.Runs(X, Id(j1)), 1u);  // step 3
  rack.Exit(X, Id(j1), 0);
  rack.SyncGroup({0, X});

  SignedRequest queued_b = rack.NextJob(*side_b, "queued before X arrived", "1");
  ASSERT_TRUE(rack.Submit(2, queued_b).status.has_value());
  rack.SyncGroup({2, 3});
  rack.Restart(X);  // steps 4-5: X powers up on side B
  rack.Sync(2, X);
  rack.Drain(X);
  rack.SyncGroup({2, 3, X});
  // X never executed under side B's session (its start is not below X's V):
  // its whole queue runs, the one queued before X arrived included.
  EXPECT_EQ(FindError(rack.sled(X), SledErrorKind::kSessionHop), nullptr);
  EXPECT_EQ(rack.Runs(X, Id(queued_b)), 1u);
  rack.Exit(X, Id(queued_b), 0);
  SignedRequest j2 = rack.NextJob(*side_b, "append ledger", "1");
  ASSERT_TRUE(rack.Submit(2, j2).status.has_value());
  rack.SyncGroup({2, 3, X});
  EXPECT_EQ(rack.Runs(X, Id(j2)), 1u);
  rack.Exit(X, Id(j2), 0);
  rack.SyncGroup({2, 3, X});
  SignedRequest queued_a = rack.NextJob(*side_a, "queued while X was away", "1");
  ASSERT_TRUE(rack.Submit(0, queued_a).status.has_value());

  rack.Restart(X);  // step 6: back on side A, whose session X did execute under
  rack.Sync(0, X);
  rack.Drain(X);
  rack.SyncGroup({0, X});
  if (left_sessions > 0) {
    // The record kept side A's chain when X left it: an exact resume after
    // J1, no hop, nothing skipped (the job queued while X was away runs).
    EXPECT_EQ(FindError(rack.sled(X), SledErrorKind::kSessionHop), nullptr);
    EXPECT_EQ(rack.Runs(X, Id(j1)), 1u);  // step 8 does not happen
    EXPECT_EQ(rack.Runs(X, Id(queued_a)), 1u);
    rack.Exit(X, Id(queued_a), 0);
    SignedRequest j3 = rack.NextJob(*side_a, "append ledger", "1");
    ASSERT_TRUE(rack.Submit(0, j3).status.has_value());
    rack.SyncGroup({0, X});
    EXPECT_EQ(rack.Runs(X, Id(j3)), 1u);
    return;
  }
  // V alone (no left sessions kept): a hop.
  EXPECT_NE(FindError(rack.sled(X), SledErrorKind::kSessionHop), nullptr);
  EXPECT_EQ(rack.Runs(X, Id(j1)), 1u);  // step 8 does not happen
  EXPECT_EQ(rack.Runs(X, Id(queued_a)), 0u);
  EXPECT_EQ(rack.State(X, Id(queued_a), X), JobState::kSkipped);
  EXPECT_EQ(rack.Status(X, Id(queued_a), X)->skip_reason, SkipReason::kLightcone);
  // Submitted after the hop. The first one's chain position is older than
  // the hop (its predecessor was queued before), and another job may have
  // held it where X was: skipped too. The next position is new: it runs.
  SignedRequest first_a = rack.NextJob(*side_a, "append ledger", "1");
  ASSERT_TRUE(rack.Submit(0, first_a).status.has_value());
  rack.SyncGroup({0, X});
  EXPECT_EQ(rack.Runs(X, Id(first_a)), 0u);
  SignedRequest j3 = rack.NextJob(*side_a, "append ledger", "1");
  ASSERT_TRUE(rack.Submit(0, j3).status.has_value());
  rack.SyncGroup({0, X});
  EXPECT_EQ(rack.Runs(X, Id(j3)), 1u);
  // The other sleds learn why X skipped: a terminal status, not a silent Queued.
  EXPECT_EQ(rack.State(0, Id(queued_a), X), JobState::kSkipped);
}

TEST(BoundaryRulesTest, ThePartitionFlipFlopRunsNoJobTwiceAndResumesExactly) {
  RunPartitionFlipFlop(kLeftSessionsMax);
}

TEST(BoundaryRulesTest, ThePartitionFlipFlopRunsNoJobTwiceByVAlone) { RunPartitionFlipFlop(0); }

// Rule 3 with V, not a single stored session version: the three-session
// flip-flop (in C; into D, concurrent with C; into A, concurrent with D but
// before C; back to C).
struct ThreeSessions {
  size_t c_runs = 0;
};
// V alone: the record keeps no left sessions (with them, each return would
// resume exactly and V would never be asked).
ThreeSessions RunThreeSessionFlipFlop(BoundaryFlaws flaws) {
  Rack rack(4);  // sleds 0, 1, 2 stay put; X = 3 moves
  const size_t X = 3;
  rack.sled(X).config.boundary.flaws = flaws;
  rack.sled(X).config.boundary.left_sessions_max = 0;
  rack.Restart(X);
  rack.Drain(X);
  rack.SyncAll();
  auto a = rack.StartSession(2);
  rack.Sync(2, 0);
  auto c = rack.StartSession(0);  // C is after A
  auto d = rack.StartSession(1);  // D is concurrent with both
  rack.SyncGroup({0, X});
  SignedRequest c1 = rack.NextJob(*c, "c1", "3");
  EXPECT_TRUE(rack.Submit(0, c1).status.has_value());
  rack.SyncGroup({0, X});
  rack.Exit(X, Id(c1), 0);

  // Into D (concurrent with C: never executed there, its jobs run), then
  // into A (before C: below V, a hop; the first job after it holds a
  // position as old as the session and is skipped, the next runs).
  for (const auto& [peer, session, hop] :
       {std::tuple{size_t{1}, &d, false}, std::tuple{size_t{2}, &a, true}}) {
    rack.Restart(X);
    rack.Sync(peer, X);
    rack.Drain(X);
    rack.SyncGroup({peer, X});
    SignedRequest first = rack.NextJob(**session, "first", "3");
    EXPECT_TRUE(rack.Submit(peer, first).status.has_value());
    rack.SyncGroup({peer, X});
    if (rack.Runs(X, Id(first)) > 0) rack.Exit(X, Id(first), 0);
    SignedRequest job = rack.NextJob(**session, "second", "3");
    EXPECT_TRUE(rack.Submit(peer, job).status.has_value());
    rack.SyncGroup({peer, X});
    if (hop && !flaws.single_session_version) {
      EXPECT_EQ(rack.Runs(X, Id(first)), 0u);
    }
    EXPECT_EQ(rack.Runs(X, Id(job)), 1u);
    rack.Exit(X, Id(job), 0);
  }
  rack.Restart(X);  // back where C lives
  rack.Sync(0, X);
  rack.Drain(X);
  rack.SyncGroup({0, X});
  return ThreeSessions{rack.Runs(X, Id(c1))};
}

TEST(BoundaryRulesTest, TheThreeSessionFlipFlopRunsNoJobTwice) {
  EXPECT_EQ(RunThreeSessionFlipFlop({}).c_runs, 1u);
}

TEST(BoundaryRulesTest, ASingleStoredSessionVersionReplaysTheThreeSessionFlipFlop) {
  BoundaryFlaws flaws;
  flaws.single_session_version = true;
  EXPECT_EQ(RunThreeSessionFlipFlop(flaws).c_runs, 2u);  // the rejected design breaks
}

// Rule 6: an empty record (wiped drives) mints its entry marker when it
// joins, runs only jobs above it, and a crash loop reuses the marker.
TEST(BoundaryRulesTest, AWipedSledSkipsWhatWasQueuedBeforeItAndRunsWhatCameAfter) {
  Rack rack(2);
  auto chain = rack.StartSession(0);
  rack.SyncAll();
  SignedRequest j1 = rack.NextJob(*chain, "one");
  ASSERT_TRUE(rack.Submit(0, j1).status.has_value());
  rack.SyncAll();
  rack.Exit(1, Id(j1), 0);
  rack.SyncAll();
  SignedRequest queued = rack.NextJob(*chain, "queued while sled 1 was down");
  ASSERT_TRUE(rack.Submit(0, queued).status.has_value());

  rack.Restart(1, BoundaryLoad{BoundaryRecord{}, "empty", "", {}});  // both drives wiped
  rack.Sync(0, 1);
  rack.Drain(1);
  EXPECT_EQ(rack.Runs(1, Id(j1)), 1u);
  EXPECT_EQ(rack.Runs(1, Id(queued)), 0u);
  EXPECT_EQ(rack.State(1, Id(queued), 1), JobState::kSkipped);
  ASSERT_FALSE(rack.sled(1).drives.current()->here.floor.empty());
  rack.SyncAll();
  SignedRequest first = rack.NextJob(*chain, "first after: its position is older than the marker");
  ASSERT_TRUE(rack.Submit(0, first).status.has_value());
  rack.SyncAll();
  EXPECT_EQ(rack.Runs(1, Id(first)), 0u);
  SignedRequest after = rack.NextJob(*chain, "after");
  ASSERT_TRUE(rack.Submit(0, after).status.has_value());
  rack.SyncAll();
  EXPECT_EQ(rack.Runs(1, Id(after)), 1u);
}

size_t CrashLoopRuns(BoundaryFlaws flaws) {
  Rack rack(2);
  rack.sled(1).config.boundary.flaws = flaws;
  rack.Restart(1, BoundaryLoad{BoundaryRecord{}, "empty", "", {}});
  rack.Sync(0, 1);
  rack.Drain(1);
  rack.SyncAll();                     // the entry marker spreads
  auto chain = rack.StartSession(0);  // after the marker: all of it is new to sled 1
  SignedRequest job = rack.NextJob(*chain, "submitted between two crashes");
  EXPECT_TRUE(rack.Submit(0, job).status.has_value());
  rack.Restart(1);  // crashes before it ever heard of the job
  rack.Sync(0, 1);
  rack.Drain(1);
  return rack.Runs(1, Id(job));
}

TEST(BoundaryRulesTest, ACrashLoopBeforeTheFirstExecutionReusesTheEntryMarker) {
  EXPECT_EQ(CrashLoopRuns({}), 1u);
}

TEST(BoundaryRulesTest, AnUnpersistedEntryMarkerLosesJobsInACrashLoop) {
  BoundaryFlaws flaws;
  flaws.unpersisted_entry_marker = true;
  EXPECT_EQ(CrashLoopRuns(flaws), 0u);  // the rejected design never catches the job
}

// Untrusted drives: every job is refused with a terminal status and the
// error gossiped, until a signed reset naming the sled's reset nonce.
TEST(BoundaryRulesTest, AnUntrustedSledSkipsEverythingUntilAnOperatorResetsIt) {
  Rack rack(2);
  auto chain = rack.StartSession(0);
  rack.SyncAll();
  rack.Restart(1,
               BoundaryLoad{std::nullopt, "discarded", "drives disagree: different writers", {}});
  rack.Sync(0, 1);
  rack.Drain(1);
  EXPECT_FALSE(rack.core(1).trusted());
  EXPECT_EQ(rack.core(1).gate(), GateState::kUntrusted);
  SignedRequest j1 = rack.NextJob(*chain, "one");
  ASSERT_TRUE(rack.Submit(0, j1).status.has_value());
  rack.SyncAll();
  EXPECT_EQ(rack.Runs(1, Id(j1)), 0u);
  ASSERT_EQ(rack.State(1, Id(j1), 1), JobState::kSkipped);
  EXPECT_EQ(rack.Status(1, Id(j1), 1)->skip_reason, SkipReason::kUntrusted);
  EXPECT_EQ(rack.State(0, Id(j1), 1), JobState::kSkipped);
  EXPECT_NE(FindError(rack.sled(0), SledErrorKind::kUntrusted), nullptr);

  const std::string board = Rack::Baseboard(1);
  Reply wrong = rack.Submit(1, rack.SignOrDie(SledReset{board, Nonce{}}, rack.support()));
  EXPECT_EQ(wrong.status.error().code, ErrorCode::kPermissionDenied);
  Reply elsewhere =
      rack.Submit(0, rack.SignOrDie(SledReset{board, *rack.core(1).reset_nonce()}, rack.support()));
  EXPECT_EQ(elsewhere.status.error().code, ErrorCode::kInvalidArgument);  // names another sled
  Reply reset =
      rack.Submit(1, rack.SignOrDie(SledReset{board, *rack.core(1).reset_nonce()}, rack.support()));
  ASSERT_TRUE(reset.status.has_value()) << reset.status.error().ToString();
  EXPECT_TRUE(rack.core(1).trusted());
  EXPECT_EQ(rack.sled(1).drives.current()->resets, 1u);
  EXPECT_EQ(rack.sled(1).drives.current()->amnesia, Amnesia::kPermanent);
  rack.SyncAll();
  // The session predates the reset: its next position is older than the
  // entry marker (skipped), the one after it is new.
  SignedRequest first = rack.NextJob(*chain, "first");
  ASSERT_TRUE(rack.Submit(0, first).status.has_value());
  SignedRequest j2 = rack.NextJob(*chain, "two");
  ASSERT_TRUE(rack.Submit(0, j2).status.has_value());
  rack.SyncAll();
  EXPECT_EQ(rack.Runs(1, Id(first)), 0u);
  EXPECT_EQ(rack.Runs(1, Id(j2)), 1u);
  // A replay of the reset in a later life changes nothing.
  rack.Restart(1);
  rack.Sync(0, 1);
  rack.Drain(1);
  EXPECT_TRUE(rack.core(1).trusted());
  EXPECT_EQ(rack.Runs(1, Id(j2)), 1u);
}

// Rule 8: statuses merge by strength, so every sled ends on one answer
// whatever order it learns them in.
TEST(BoundaryRulesTest, StatusesConvergeWhateverTheOrder) {
  JobStatus ran;
  ran.state = JobState::kStopped;
  ran.outcome.code = 0;
  JobStatus skipped;
  skipped.state = JobState::kSkipped;
  JobStatus interrupted;
  interrupted.state = JobState::kInterrupted;
  JobStatus queued;
  JobStatus refused;
  refused.state = JobState::kError;
  refused.refused = true;
  const std::vector<JobStatus> order = {refused, queued, skipped, interrupted, ran};
  for (size_t i = 0; i < order.size(); ++i) {
    for (size_t j = 0; j < order.size(); ++j) {
      EXPECT_EQ(Stronger(order[i], order[j]), i > j) << i << " " << j;
    }
  }
}

// Universes: a dropped universe is reported, its state forgotten, and what
// runs keeps running (and blocks the next non-concurrent start).
TEST(BoundaryRulesTest, ADroppedUniverseIsReportedAndItsRunningJobsKept) {
  Rack rack(1);
  auto chain = rack.StartSession(0);
  SignedRequest j1 = rack.NextJob(*chain, "sleep 100");
  ASSERT_TRUE(rack.Submit(0, j1).status.has_value());
  ASSERT_EQ(rack.core(0).running_jobs(), 1u);
  NetworkId other;
  other.bytes.fill(7);
  std::vector<Output> out = rack.core(0).Handle(Joined{other});
  bool reported = false;
  for (const Output& o : out) {
    if (const auto* b = std::get_if<Broadcast>(&o)) {
      auto m = Decode(b->payload);
      if (const auto* e = m ? std::get_if<SledError>(&*m) : nullptr) {
        reported = e->kind == SledErrorKind::kUniverseDropped && e->first == chain->session &&
                   e->count == 1;
      }
    }
  }
  EXPECT_TRUE(reported);
  EXPECT_EQ(rack.core(0).active_session(), std::nullopt);
  EXPECT_EQ(rack.core(0).history_size(), 0u);
  EXPECT_EQ(rack.core(0).running_jobs(), 1u);
}

}  // namespace
}  // namespace once::rack
