#include "once/rack/sled_core.h"

#include <gtest/gtest.h>

#include "rack_harness.h"

namespace once::rack {
namespace {

using testing::ClientChain;
using testing::Rack;

constexpr size_t A = 0, B = 1, C = 2;

TEST(SledCoreTest, SessionStartedOnAIsActiveOnB) {
  Rack rack(2);
  auto chain = rack.StartSession(A);
  ASSERT_TRUE(chain.has_value());
  EXPECT_EQ(rack.core(A).active_session(), chain->session);
  EXPECT_EQ(rack.core(B).active_session(), std::nullopt);
  rack.Sync(A, B);
  EXPECT_EQ(rack.core(B).active_session(), chain->session);
}

TEST(SledCoreTest, JobSubmittedToARunsOnAAndBAndEachSeesTheOthersStopped) {
  Rack rack(2);
  auto chain = rack.StartSession(A);
  rack.Sync(A, B);
  SignedRequest job = rack.NextJob(*chain, "uptime");
  JobId id = std::get<JobStart>(job.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, job).status.has_value());
  EXPECT_TRUE(rack.Started(A, id));
  EXPECT_FALSE(rack.Started(B, id));
  rack.Sync(A, B);
  EXPECT_TRUE(rack.Started(B, id));
  rack.Exit(A, id, 0);
  rack.Exit(B, id, 3);
  rack.SyncAll();
  for (size_t viewer : {A, B}) {
    EXPECT_EQ(rack.State(viewer, id, A), JobState::kStopped);
    EXPECT_EQ(rack.State(viewer, id, B), JobState::kStopped);
    EXPECT_EQ(rack.Status(viewer, id, B)->outcome.code, 3);
  }
  EXPECT_EQ(rack.core(A).executions(), 1u);
  EXPECT_EQ(rack.core(B).executions(), 1u);
}

TEST(SledCoreTest, ASessionStartedOnBAfterSeeingA_SupersedesA) {
  Rack rack(2);
  auto first = rack.StartSession(A);
  rack.Sync(A, B);
  auto second = rack.StartSession(B);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(rack.core(B).active_session(), second->session);
  rack.Sync(B, A);
  EXPECT_EQ(rack.core(A).active_session(), second->session);
  // A job of the superseded session is refused everywhere it is targeted.
  SignedRequest stale = rack.NextJob(*first, "true");
  EXPECT_EQ(rack.Submit(A, stale).status.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(rack.sled(A).sled_errors.empty());
}

TEST(SledCoreTest, SupersedingCancelsTheOldSessionsQueuedJobs) {
  Rack rack(2);
  auto first = rack.StartSession(A);
  rack.NextJob(*first, "hole");  // never submitted: a hole
  SignedRequest queued = rack.NextJob(*first, "true");
  JobId id = std::get<JobStart>(queued.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, queued).status.has_value());
  EXPECT_EQ(rack.State(A, id, A), JobState::kQueued);
  rack.Sync(A, B);
  rack.StartSession(B);
  rack.Sync(B, A);
  EXPECT_EQ(rack.State(A, id, A), JobState::kCancelled);
  EXPECT_FALSE(rack.Started(A, id));
}

TEST(SledCoreTest, ConcurrentSessionStartsAnnihilateAndANewSessionIsNeeded) {
  Rack rack(3);
  auto on_a = rack.StartSession(A);
  auto on_b = rack.StartSession(B);  // B has not heard of A's session
  ASSERT_TRUE(on_a && on_b);
  rack.SyncAll();
  for (size_t i : {A, B, C}) {
    EXPECT_EQ(rack.core(i).active_session(), std::nullopt) << i;
    ASSERT_FALSE(rack.sled(i).sled_errors.empty()) << i;
    EXPECT_EQ(rack.sled(i).sled_errors.front().kind, SledErrorKind::kConcurrentSessions);
  }
  // Neither old session accepts jobs any more.
  EXPECT_FALSE(rack.Submit(A, rack.NextJob(*on_a, "true")).status.has_value());
  // A new session, in both their futures, is active everywhere.
  auto fresh = rack.StartSession(C);
  ASSERT_TRUE(fresh.has_value());
  rack.SyncAll();
  for (size_t i : {A, B, C}) EXPECT_EQ(rack.core(i).active_session(), fresh->session);
}

TEST(SledCoreTest, AThirdConcurrentStartIsAbsorbedAfterAnnihilation) {
  Rack rack(3);
  for (size_t i : {A, B, C}) ASSERT_TRUE(rack.StartSession(i).has_value());
  rack.SyncAll();
  for (size_t i : {A, B, C}) EXPECT_EQ(rack.core(i).active_session(), std::nullopt) << i;
  auto fresh = rack.StartSession(B);
  rack.SyncAll();
  for (size_t i : {A, B, C}) EXPECT_EQ(rack.core(i).active_session(), fresh->session) << i;
}

TEST(SledCoreTest, SessionStopEndsTheSessionAndCancelsItsQueue) {
  Rack rack(2);
  auto chain = rack.StartSession(A);
  rack.NextJob(*chain, "hole");
  SignedRequest queued = rack.NextJob(*chain, "true");
  JobId id = std::get<JobStart>(queued.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, queued).status.has_value());
  ASSERT_TRUE(rack.Submit(A, rack.SignOrDie(SessionStop{chain->session}, rack.support()))
                  .status.has_value());
  rack.SyncAll();
  for (size_t i : {A, B}) {
    EXPECT_EQ(rack.core(i).active_session(), std::nullopt);
    EXPECT_EQ(rack.State(i, id, i), JobState::kCancelled);
  }
}

TEST(SledCoreTest, AStartThatSawTheSessionButNotItsStopSupersedesInEitherOrder) {
  Rack rack(3);
  auto first = rack.StartSession(A);
  rack.SyncAll();
  ASSERT_TRUE(rack.Submit(A, rack.SignOrDie(SessionStop{first->session}, rack.support()))
                  .status.has_value());
  auto second = rack.StartSession(B);  // B has not heard of the stop
  ASSERT_TRUE(second.has_value());
  rack.Sync(A, C);  // C: the stop first, then the start
  rack.SyncAll();
  for (size_t i : {A, B, C}) EXPECT_EQ(rack.core(i).active_session(), second->session) << i;
}

// ---- refused jobs: table-driven ----

struct RefusalCase {
  const char* name;
  ErrorCode code;
  const char* message;
  // Turns a good job request into a bad one.
  std::function<SignedRequest(Rack&, ClientChain&)> make;
};

std::vector<RefusalCase> RefusalCases() {
  return {
      {"unsigned", ErrorCode::kPermissionDenied, "bad signature",
       [](Rack& rack, ClientChain& chain) {
         SignedRequest r = rack.NextJob(chain, "touch /tmp/pwned");
         r.signature.fill(0);
         return r;
       }},
      {"wrongly_signed", ErrorCode::kPermissionDenied, "bad signature",
       [](Rack& rack, ClientChain& chain) {
         SignedRequest r = rack.NextJob(chain, "true");
         std::get<JobStart>(r.payload).command = "touch /tmp/pwned";
         r.payload_bytes = *EncodePayload(r.payload);
         return r;
       }},
      {"unknown_key", ErrorCode::kPermissionDenied, "unknown key",
       [](Rack& rack, ClientChain& chain) {
         KeyPair stranger = KeyPair::Generate(rack.rng());
         SignedRequest r =
             rack.SignOrDie(JobStart{chain.next, chain.session, "true", "*", false}, stranger);
         return r;
       }},
      {"leading_dash", ErrorCode::kInvalidArgument, "command starts with '-'",
       [](Rack& rack, ClientChain& chain) { return rack.NextJob(chain, "-c true"); }},
      {"bad_target", ErrorCode::kInvalidArgument, "cubby out of range 0-31",
       [](Rack& rack, ClientChain& chain) { return rack.NextJob(chain, "true", "1,99"); }},
      {"inactive_session", ErrorCode::kNotFound, "session not active",
       [](Rack& rack, ClientChain& chain) {
         ClientChain other{SessionId{}, FirstJobId(SessionId{})};
         return rack.NextJob(other, "true");
       }},
  };
}

class RefusalTest : public ::testing::TestWithParam<RefusalCase> {};

TEST_P(RefusalTest, RefusedAtSubmitAndByGossipAndNeverRuns) {
  const RefusalCase& c = GetParam();
  Rack rack(2);
  auto chain = rack.StartSession(A);
  rack.Sync(A, B);
  SignedRequest bad = c.make(rack, *chain);
  JobId id = std::get<JobStart>(bad.payload).job_id;

  Reply reply = rack.Submit(A, bad);
  ASSERT_FALSE(reply.status.has_value());
  EXPECT_EQ(reply.status.error().code, c.code);
  EXPECT_EQ(reply.status.error().message, c.message);

  // A sled that gossips it anyway (a buggy or hostile peer): every targeted
  // sled records an Error status with the typed code, and nothing runs.
  rack.Inject(B, *Encode(bad));
  rack.SyncAll();
  for (size_t i : {A, B}) {
    EXPECT_FALSE(rack.Started(i, id));
    const JobStatus* status = rack.Status(i, id, i);
    ASSERT_NE(status, nullptr) << c.name;
    EXPECT_EQ(status->state, JobState::kError);
    EXPECT_EQ(status->error_code, c.code);
    EXPECT_EQ(status->error, c.message);
    EXPECT_EQ(rack.core(i).executions(), 0u);
    // The record names the key the request claims.
    EXPECT_EQ(rack.core(i).FindJob(id)->key_id, bad.key_id);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RefusalTest, ::testing::ValuesIn(RefusalCases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SledCoreTest, MalformedSubmissionsAndDeliveriesAreTypedErrors) {
  Rack rack(1);
  rack.StartSession(A);
  EXPECT_EQ(rack.SubmitBytes(A, Bytes{1, 2, 3}).status.error().code, ErrorCode::kInvalidArgument);
  auto event = Encode(JobStarted{"x", JobId{}});
  EXPECT_EQ(rack.SubmitBytes(A, *event).status.error().message, "not a signed request");
  size_t before = rack.sled(A).diagnostics.size();
  rack.Inject(A, Bytes{1, 99});
  EXPECT_EQ(rack.sled(A).diagnostics.size(), before + 1);
}

TEST(SledCoreTest, HostileDeliveriesNeverCrashOrRunAnything) {
  Rack rack(2);
  auto chain = rack.StartSession(A);
  rack.SyncAll();
  SignedRequest job = rack.NextJob(*chain, "true");
  Bytes good = *Encode(job);
  SeededRng rng(11);
  for (int round = 0; round < 1000; ++round) {
    Bytes bad = good;
    for (uint64_t flips = 1 + rng.Below(4); flips > 0; --flips) {
      bad[rng.Below(bad.size())] = static_cast<uint8_t>(rng.Next());
    }
    if (rng.Below(4) == 0) bad.resize(rng.Below(bad.size()));
    if (bad == good) continue;  // the flips happened to restore the genuine job
    rack.Inject(B, bad);
  }
  rack.SyncAll();
  EXPECT_EQ(rack.core(A).executions() + rack.core(B).executions(), 0u);
  EXPECT_EQ(rack.core(A).active_session(), chain->session);
  // The genuine job still runs, and the forgeries did not touch its status.
  ASSERT_TRUE(rack.Submit(A, job).status.has_value());
  JobId id = std::get<JobStart>(job.payload).job_id;
  EXPECT_TRUE(rack.Started(A, id));
  EXPECT_EQ(rack.State(A, id, A), JobState::kStarted);
}

// ---- the chain ----

TEST(SledCoreTest, JobsStartOnlyInChainOrderOnceThePredecessorIsKnown) {
  Rack rack(1);
  auto chain = rack.StartSession(A);
  SignedRequest j1 = rack.NextJob(*chain, "one");
  SignedRequest j2 = rack.NextJob(*chain, "two");
  JobId id1 = std::get<JobStart>(j1.payload).job_id;
  JobId id2 = std::get<JobStart>(j2.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, j2).status.has_value());
  EXPECT_FALSE(rack.Started(A, id2));
  EXPECT_EQ(rack.State(A, id2, A), JobState::kQueued);
  ASSERT_TRUE(rack.Submit(A, j1).status.has_value());
  EXPECT_TRUE(rack.Started(A, id1));
  EXPECT_FALSE(rack.Started(A, id2));  // not concurrent: waits for one to end
  rack.Exit(A, id1, 0);
  ASSERT_EQ(rack.sled(A).started.size(), 2u);
  EXPECT_EQ(rack.sled(A).started[1].job_id, id2);
}

TEST(SledCoreTest, QueuedJobBehindAHoleCanBeCancelledAndTheChainSkipsIt) {
  Rack rack(2);
  auto chain = rack.StartSession(A);
  SignedRequest j1 = rack.NextJob(*chain, "one");
  SignedRequest j2 = rack.NextJob(*chain, "two");
  SignedRequest j3 = rack.NextJob(*chain, "three");
  JobId id1 = std::get<JobStart>(j1.payload).job_id;
  JobId id2 = std::get<JobStart>(j2.payload).job_id;
  JobId id3 = std::get<JobStart>(j3.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, j2).status.has_value());
  ASSERT_TRUE(rack.Submit(A, j3).status.has_value());
  ASSERT_TRUE(rack.Submit(A, rack.SignOrDie(JobStop{id2}, rack.support())).status.has_value());
  EXPECT_EQ(rack.State(A, id2, A), JobState::kCancelled);
  rack.Sync(A, B);
  EXPECT_EQ(rack.State(B, id2, B), JobState::kCancelled);
  EXPECT_EQ(rack.State(B, id2, A), JobState::kCancelled);
  ASSERT_TRUE(rack.Submit(A, j1).status.has_value());
  rack.Exit(A, id1, 0);
  rack.Sync(A, B);
  rack.Exit(B, id1, 0);
  for (size_t i : {A, B}) {
    EXPECT_TRUE(rack.Started(i, id1));
    EXPECT_FALSE(rack.Started(i, id2));
    EXPECT_TRUE(rack.Started(i, id3));
  }
}

TEST(SledCoreTest, StopBeforeTheJobArrivesCancelsItOnArrival) {
  Rack rack(1);
  auto chain = rack.StartSession(A);
  SignedRequest j1 = rack.NextJob(*chain, "one");
  JobId id1 = std::get<JobStart>(j1.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, rack.SignOrDie(JobStop{id1}, rack.support())).status.has_value());
  ASSERT_TRUE(rack.Submit(A, j1).status.has_value());
  EXPECT_FALSE(rack.Started(A, id1));
  EXPECT_EQ(rack.State(A, id1, A), JobState::kCancelled);
}

TEST(SledCoreTest, SessionSkipBurnsACancelledChainPosition) {
  Rack rack(2);
  auto chain = rack.StartSession(A);
  rack.Sync(A, B);
  SignedRequest lost = rack.NextJob(*chain, "lost");  // its bytes never reach the rack
  JobId lost_id = std::get<JobStart>(lost.payload).job_id;
  ClientChain after{chain->session, NextJobIdAfterBurned(lost_id)};
  SignedRequest next = rack.NextJob(after, "next");
  JobId next_id = std::get<JobStart>(next.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, rack.SignOrDie(JobStop{lost_id}, rack.support())).status.has_value());
  ASSERT_TRUE(rack.Submit(A, next).status.has_value());
  EXPECT_EQ(rack.core(A).next_free_job_id(), lost_id);  // the chain is stuck at the hole
  rack.Sync(A, B);
  for (size_t i : {A, B}) {
    EXPECT_EQ(rack.State(i, next_id, i), JobState::kQueued) << i;
    EXPECT_FALSE(rack.Started(i, next_id)) << i;
  }
  // The skip is accepted by B, which saw the stop, and burns the position on both.
  ASSERT_TRUE(rack.Submit(B, rack.SignOrDie(SessionSkip{chain->session, lost_id}, rack.support()))
                  .status.has_value());
  rack.SyncAll();
  for (size_t i : {A, B}) {
    EXPECT_TRUE(rack.Started(i, next_id)) << i;
    EXPECT_EQ(rack.core(i).next_free_job_id(), after.next) << i;
  }
  // The burned job arriving late is refused by the accepting sled and, if
  // delivered anyway, never runs.
  auto late = rack.Submit(A, lost).status;
  ASSERT_FALSE(late.has_value());
  EXPECT_NE(late.error().message.find("chain position already passed"), std::string::npos);
  auto wire = Encode(lost);
  ASSERT_TRUE(wire.has_value());
  rack.Inject(A, *wire);
  rack.SyncAll();
  EXPECT_FALSE(rack.Started(A, lost_id));
  EXPECT_FALSE(rack.Started(B, lost_id));
}

TEST(SledCoreTest, ASkipOfAPositionThatIsNotCancelledIsRefused) {
  Rack rack(2);
  auto chain = rack.StartSession(A);
  rack.Sync(A, B);
  const SessionId session = chain->session;
  auto skip = [&](const JobId& id) {
    return rack.Submit(A, rack.SignOrDie(SessionSkip{session, id}, rack.support())).status;
  };
  // The head of the chain, free and not stopped.
  const JobId head = chain->next;
  auto refused = skip(head);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("not cancelled"), std::string::npos);
  // A job that ran: its position is passed.
  SignedRequest ran = rack.NextJob(*chain, "true");
  ASSERT_TRUE(rack.Submit(A, ran).status.has_value());
  refused = skip(head);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("already passed"), std::string::npos);
  // A queued job (behind a hole) that nobody stopped.
  rack.NextJob(*chain, "hole");
  SignedRequest queued = rack.NextJob(*chain, "queued");
  JobId queued_id = std::get<JobStart>(queued.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, queued).status.has_value());
  EXPECT_FALSE(skip(queued_id).has_value());
  // Once stopped it may be skipped, once.
  ASSERT_TRUE(
      rack.Submit(A, rack.SignOrDie(JobStop{queued_id}, rack.support())).status.has_value());
  EXPECT_TRUE(skip(queued_id).has_value());
  refused = skip(queued_id);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("already skipped"), std::string::npos);
  // Another session's position.
  SessionId other = session;
  other.bytes[0] ^= 0x01;
  refused = rack.Submit(A, rack.SignOrDie(SessionSkip{other, head}, rack.support())).status;
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kNotFound);
}

TEST(SledCoreTest, ADeliveredSkipOfAPositionNotCancelledIsIgnored) {
  Rack rack(1);
  auto chain = rack.StartSession(A);
  const JobId head = chain->next;
  // A skip that bypassed the accepting sled's check (a trusted signer's bytes
  // gossiped directly): the core applies the same rule on delivery.
  auto wire = Encode(rack.SignOrDie(SessionSkip{chain->session, head}, rack.support()));
  ASSERT_TRUE(wire.has_value());
  rack.Inject(A, *wire);
  EXPECT_EQ(rack.core(A).next_free_job_id(), head);
  ASSERT_FALSE(rack.sled(A).diagnostics.empty());
  EXPECT_NE(rack.sled(A).diagnostics.back().message.find("not cancelled"), std::string::npos);
  SignedRequest job = rack.NextJob(*chain, "true");
  ASSERT_TRUE(rack.Submit(A, job).status.has_value());
  EXPECT_TRUE(rack.Started(A, std::get<JobStart>(job.payload).job_id));
}

TEST(SledCoreTest, AStopOfAJobNotTargetedHereStillAllowsItsSkipHere) {
  Rack rack(2);
  auto chain = rack.StartSession(A);
  rack.Sync(A, B);
  rack.NextJob(*chain, "hole");
  SignedRequest for_a = rack.NextJob(*chain, "true", "0");
  JobId id = std::get<JobStart>(for_a.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, for_a).status.has_value());
  ASSERT_TRUE(rack.Submit(A, rack.SignOrDie(JobStop{id}, rack.support())).status.has_value());
  rack.Sync(A, B);
  EXPECT_EQ(rack.State(B, id, B), std::nullopt);  // not B's job: no status of B's own
  EXPECT_TRUE(rack.Submit(B, rack.SignOrDie(SessionSkip{chain->session, id}, rack.support()))
                  .status.has_value());
}

TEST(SledCoreTest, StoppingARunningJobKillsItsProcess) {
  Rack rack(1);
  auto chain = rack.StartSession(A);
  SignedRequest job = rack.NextJob(*chain, "sleep 10");
  JobId id = std::get<JobStart>(job.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, job).status.has_value());
  ASSERT_TRUE(rack.Submit(A, rack.SignOrDie(JobStop{id}, rack.support())).status.has_value());
  ASSERT_EQ(rack.sled(A).stop_requests.size(), 1u);
  EXPECT_EQ(rack.sled(A).stop_requests[0], id);
  rack.Killed(A, id, 9);
  const JobStatus* status = rack.Status(A, id, A);
  EXPECT_EQ(status->state, JobState::kStopped);
  EXPECT_EQ(status->outcome.kind, ExitOutcome::Kind::kSignaled);
  EXPECT_EQ(status->outcome.code, 9);
}

TEST(SledCoreTest, ConcurrentJobsStartBeforeThePreviousEndsButInChainOrder) {
  Rack rack(1);
  auto chain = rack.StartSession(A);
  SignedRequest j1 = rack.NextJob(*chain, "one");
  SignedRequest j2 = rack.NextJob(*chain, "two", "*", /*concurrent=*/true);
  SignedRequest j3 = rack.NextJob(*chain, "three");
  SignedRequest j4 = rack.NextJob(*chain, "four", "*", true);
  JobId id1 = std::get<JobStart>(j1.payload).job_id;
  JobId id2 = std::get<JobStart>(j2.payload).job_id;
  JobId id3 = std::get<JobStart>(j3.payload).job_id;
  for (const auto& j : {j4, j3, j2, j1}) ASSERT_TRUE(rack.Submit(A, j).status.has_value());
  ASSERT_EQ(rack.sled(A).started.size(), 2u);  // one, then two alongside it
  EXPECT_EQ(rack.sled(A).started[0].job_id, id1);
  EXPECT_EQ(rack.sled(A).started[1].job_id, id2);
  rack.Exit(A, id1, 0);
  EXPECT_EQ(rack.sled(A).started.size(), 2u);  // three waits for two as well
  rack.Exit(A, id2, 0);
  ASSERT_EQ(rack.sled(A).started.size(), 4u);  // three, then four alongside it
  EXPECT_EQ(rack.sled(A).started[2].job_id, id3);
}

TEST(SledCoreTest, TargetsPickSledsAndTheChainAdvancesOnTheOthers) {
  Rack rack(3);
  auto chain = rack.StartSession(A);
  rack.SyncAll();
  SignedRequest only_b = rack.NextJob(*chain, "one", "1");
  SignedRequest by_serial = rack.NextJob(*chain, "two", "BRM1002");
  SignedRequest all = rack.NextJob(*chain, "three");
  for (const auto& j : {only_b, by_serial, all}) ASSERT_TRUE(rack.Submit(A, j).status.has_value());
  rack.SyncAll();
  auto id = [](const SignedRequest& r) { return std::get<JobStart>(r.payload).job_id; };
  EXPECT_FALSE(rack.Started(A, id(only_b)));
  EXPECT_TRUE(rack.Started(B, id(only_b)));
  EXPECT_FALSE(rack.Started(C, id(only_b)));
  EXPECT_TRUE(rack.Started(C, id(by_serial)));
  EXPECT_FALSE(rack.Started(B, id(by_serial)));
  EXPECT_TRUE(rack.Started(A, id(all)));  // A was not targeted by one or two
  EXPECT_EQ(rack.State(A, id(only_b), A), std::nullopt);
}

TEST(SledCoreTest, ABoundaryThatCannotBeRecordedMeansTheJobNeverRuns) {
  Rack rack(1);
  auto chain = rack.StartSession(A);
  SignedRequest j1 = rack.NextJob(*chain, "one");
  SignedRequest j2 = rack.NextJob(*chain, "two");
  rack.sled(A).drives.FailNext(MakeError(ErrorCode::kUnavailable, "M.2 gone").error());
  ASSERT_TRUE(rack.Submit(A, j1).status.has_value());
  JobId id1 = std::get<JobStart>(j1.payload).job_id;
  EXPECT_FALSE(rack.Started(A, id1));
  EXPECT_EQ(rack.State(A, id1, A), JobState::kError);
  EXPECT_EQ(rack.Status(A, id1, A)->error_code, ErrorCode::kUnavailable);
  ASSERT_TRUE(rack.Submit(A, j2).status.has_value());  // the chain moved on
  EXPECT_TRUE(rack.Started(A, std::get<JobStart>(j2.payload).job_id));
  const BoundaryRecord& last = rack.sled(A).drives.records().back();
  EXPECT_EQ(last.here.last_executed, std::get<JobStart>(j2.payload).job_id);
  EXPECT_EQ(last.here.successor, chain->next);
  EXPECT_EQ(last.here.session, chain->session);
}

// ---- session nonces ----

TEST(SledCoreTest, SessionStartNeedsAFreshNonceOfTheAcceptingSled) {
  Rack rack(2);
  rack.Handle(A, IssueSessionNonce{});
  Nonce nonce = *rack.sled(A).last_reply->nonce;
  Nonce signer{};
  SignedRequest start =
      rack.SignOrDie(SessionStart{Rack::Baseboard(A), nonce, signer}, rack.support());
  // Another sled refuses it: the session would not be bound to it.
  EXPECT_EQ(rack.Submit(B, start).status.error().message, "session start names another sled");
  ASSERT_TRUE(rack.Submit(A, start).status.has_value());
  // The nonce is used up: the same signed start cannot make a second session.
  EXPECT_EQ(rack.Submit(A, start).status.error().code, ErrorCode::kPermissionDenied);
  // An invented nonce is refused.
  SignedRequest invented =
      rack.SignOrDie(SessionStart{Rack::Baseboard(A), Nonce{}, signer}, rack.support());
  EXPECT_EQ(rack.Submit(A, invented).status.error().code, ErrorCode::kPermissionDenied);
}

// Issue 16: nonces cost the sled no state, so no number of unauthenticated
// requests can exhaust them; each is still good for one start, for
// session_nonce_ttl, on the sled that issued it.
TEST(SledCoreTest, NoncesCostNoStateExpireAndAreUsedOnce) {
  Rack rack(2);
  std::set<Nonce> issued;
  for (int i = 0; i < 10000; ++i) {
    rack.Handle(A, IssueSessionNonce{});
    ASSERT_TRUE(rack.sled(A).last_reply->status.has_value()) << i;
    issued.insert(*rack.sled(A).last_reply->nonce);
  }
  EXPECT_EQ(issued.size(), 10000u);
  const Nonce nonce = *issued.begin();
  auto start = [&](const Nonce& n, size_t sled = A) {
    return rack.Submit(
        sled, rack.SignOrDie(SessionStart{Rack::Baseboard(sled), n, Nonce{}}, rack.support()));
  };
  // Forged (a bit of the MAC flipped), or issued by another sled: unknown.
  Nonce forged = nonce;
  forged.bytes.back() ^= 1;
  EXPECT_NE(start(forged).status.error().message.find("unknown"), std::string::npos);
  EXPECT_NE(start(nonce, B).status.error().message.find("unknown"), std::string::npos);
  ASSERT_TRUE(start(nonce).status.has_value());
  auto again = start(nonce).status;
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(again.error().message.find("already used"), std::string::npos);
  // Past session_nonce_ttl: expired.
  rack.Handle(A, TimerTick{FromUnixMillis(1'700'000'000'000) + std::chrono::minutes(11)});
  auto late = start(*std::next(issued.begin())).status;
  ASSERT_FALSE(late.has_value());
  EXPECT_NE(late.error().message.find("expired"), std::string::npos);
  rack.Handle(A, IssueSessionNonce{});
  EXPECT_TRUE(start(*rack.sled(A).last_reply->nonce).status.has_value());
}

// ---- limits ----

// A job at a chain position whose predecessor the sled does not hold.
SignedRequest Unchained(Rack& rack, const ClientChain& chain, uint8_t n) {
  JobId nowhere;
  nowhere.bytes.fill(n);
  return rack.SignOrDie(JobStart{nowhere, chain.session, "true", "*", false}, rack.support());
}

TEST(SledCoreTest, QueuedJobsPerSessionAreLimited) {
  SledLimits limits;
  limits.queued_jobs_per_session_max = 3;
  Rack rack(1, limits);
  auto chain = rack.StartSession(A);
  const SignedRequest running = rack.NextJob(*chain, "sleep 100");
  ASSERT_TRUE(rack.Submit(A, running).status.has_value());
  ASSERT_TRUE(rack.Started(A, std::get<JobStart>(running.payload).job_id));
  std::vector<JobId> ids;
  std::vector<SignedRequest> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(rack.NextJob(*chain, "true"));
    ids.push_back(std::get<JobStart>(jobs.back().payload).job_id);
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(rack.Submit(A, jobs[i]).status.has_value());
  EXPECT_EQ(rack.core(A).queued_jobs(), 3u);
  // At the limit the accepting sled refuses the next one with a typed error...
  auto past = rack.Submit(A, jobs[3]).status;
  ASSERT_FALSE(past.has_value());
  EXPECT_EQ(past.error().code, ErrorCode::kLimitExceeded);
  ASSERT_NE(past.error().As<LimitDetail>(), nullptr);
  EXPECT_EQ(past.error().As<LimitDetail>()->limit, "queued_jobs_per_session_max");
  EXPECT_EQ(rack.Status(A, ids[3], A), nullptr);
  // ...and a core that is delivered one anyway gives it an Error status.
  auto wire = Encode(jobs[3]);
  ASSERT_TRUE(wire.has_value());
  rack.Inject(A, *wire);
  EXPECT_EQ(rack.core(A).queued_jobs(), 3u);
  const JobStatus* refused = rack.Status(A, ids[3], A);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->state, JobState::kError);
  EXPECT_EQ(refused->error_code, ErrorCode::kLimitExceeded);
  EXPECT_NE(refused->error.find("queued_jobs_per_session_max"), std::string::npos);
}

// Issue 16: validly signed jobs at positions no chain reaches hold no queue
// slot (they have their own limit), and age out with a terminal Error, after
// which they count for nothing and never run.
TEST(SledCoreTest, UnchainedJobsAreLimitedApartAndAgeOut) {
  SledLimits limits;
  limits.queued_jobs_per_session_max = 2;
  limits.unchained_jobs_per_session_max = 3;
  limits.unchained_job_age_max = std::chrono::minutes(1);
  Rack rack(1, limits);
  auto chain = rack.StartSession(A);
  std::vector<JobId> nowhere;
  for (uint8_t n = 1; n <= 3; ++n) {
    const SignedRequest job = Unchained(rack, *chain, n);
    nowhere.push_back(std::get<JobStart>(job.payload).job_id);
    ASSERT_TRUE(rack.Submit(A, job).status.has_value()) << int(n);
  }
  EXPECT_EQ(rack.core(A).unchained_jobs(), 3u);
  EXPECT_EQ(rack.core(A).queued_jobs(), 0u);
  auto fourth = rack.Submit(A, Unchained(rack, *chain, 4)).status;
  ASSERT_FALSE(fourth.has_value());
  EXPECT_EQ(fourth.error().As<LimitDetail>()->limit, "unchained_jobs_per_session_max");
  // The queue is untouched: jobs that can run are accepted and run.
  const SignedRequest first = rack.NextJob(*chain, "sleep 100");
  ASSERT_TRUE(rack.Submit(A, first).status.has_value());
  EXPECT_TRUE(rack.Started(A, std::get<JobStart>(first.payload).job_id));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(rack.Submit(A, rack.NextJob(*chain, "true")).status);
  EXPECT_EQ(rack.core(A).queued_jobs(), 2u);
  EXPECT_FALSE(rack.Submit(A, rack.NextJob(*chain, "true")).status.has_value());
  for (const JobId& id : nowhere) EXPECT_EQ(rack.Status(A, id, A)->state, JobState::kQueued);
  // Past unchained_job_age_max: a terminal Error on every one, room again.
  rack.Handle(A, TimerTick{FromUnixMillis(1'700'000'000'000) + std::chrono::seconds(61)});
  for (const JobId& id : nowhere) {
    const JobStatus* status = rack.Status(A, id, A);
    ASSERT_NE(status, nullptr);
    EXPECT_EQ(status->state, JobState::kError);
    EXPECT_EQ(status->error_code, ErrorCode::kTimeout);
    EXPECT_TRUE(status->terminal());
    EXPECT_NE(status->error.find("unreachable chain position"), std::string::npos);
  }
  EXPECT_EQ(rack.core(A).unchained_jobs(), 0u);
  EXPECT_TRUE(rack.Submit(A, Unchained(rack, *chain, 5)).status.has_value());
  for (const JobId& id : nowhere) EXPECT_EQ(rack.Runs(A, id), 0u);
}

// A job queued behind a hole ages out too, and when the hole fills later
// the chain passes its position without running it.
TEST(SledCoreTest, AnAgedJobBehindAHoleIsPassedWhenTheHoleFills) {
  SledLimits limits;
  limits.unchained_job_age_max = std::chrono::minutes(1);
  Rack rack(1, limits);
  auto chain = rack.StartSession(A);
  const SignedRequest hole = rack.NextJob(*chain, "echo hole");
  const SignedRequest behind = rack.NextJob(*chain, "echo behind");
  const JobId behind_id = std::get<JobStart>(behind.payload).job_id;
  ASSERT_TRUE(rack.Submit(A, behind).status.has_value());
  EXPECT_EQ(rack.core(A).unchained_jobs(), 1u);
  rack.Handle(A, TimerTick{FromUnixMillis(1'700'000'000'000) + std::chrono::seconds(61)});
  EXPECT_EQ(rack.Status(A, behind_id, A)->state, JobState::kError);
  ASSERT_TRUE(rack.Submit(A, hole).status.has_value());
  const JobId hole_id = std::get<JobStart>(hole.payload).job_id;
  EXPECT_TRUE(rack.Started(A, hole_id));
  rack.Exit(A, hole_id, 0);
  EXPECT_EQ(rack.Runs(A, behind_id), 0u);
  const SignedRequest after = rack.NextJob(*chain, "echo after");
  ASSERT_TRUE(rack.Submit(A, after).status.has_value());
  EXPECT_TRUE(rack.Started(A, std::get<JobStart>(after.payload).job_id));
}

// A signed stop of a session that is not active is refused at the sled.
TEST(SledCoreTest, AStopOfASessionThatIsNotActiveIsRefused) {
  Rack rack(1);
  auto chain = rack.StartSession(A);
  SessionId other;
  other.bytes.fill(7);
  auto refused = rack.Submit(A, rack.SignOrDie(SessionStop{other}, rack.support())).status;
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kNotFound);
  EXPECT_NE(refused.error().message.find("not active"), std::string::npos);
  ASSERT_TRUE(rack.Submit(A, rack.SignOrDie(SessionStop{chain->session}, rack.support())).status);
  EXPECT_FALSE(rack.core(A).active_session().has_value());
  EXPECT_FALSE(rack.Submit(A, rack.SignOrDie(SessionStop{chain->session}, rack.support()))
                   .status.has_value());
}

// Two clients that read the same next id sign two jobs for one position:
// the accepting sled refuses the second with a typed error instead of
// gossiping a job that every sled would drop.
TEST(SledCoreTest, ASecondJobForATakenChainPositionIsRefused) {
  Rack rack(1);
  auto chain = rack.StartSession(A);
  ClientChain rival = *chain;
  SignedRequest first = rack.NextJob(*chain, "true");
  SignedRequest second = rack.NextJob(rival, "false");
  const JobId id = std::get<JobStart>(first.payload).job_id;
  ASSERT_EQ(std::get<JobStart>(second.payload).job_id, id);
  ASSERT_TRUE(rack.Submit(A, first).status.has_value());
  auto refused = rack.Submit(A, second).status;
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  // "taken" while the first job is queued or running, "passed" once done.
  EXPECT_NE(refused.error().message.find("chain position already"), std::string::npos);
  // The position keeps its first job; the chain moves on from it.
  SignedRequest next = rack.NextJob(*chain, "true");
  EXPECT_TRUE(rack.Submit(A, next).status.has_value());
}

TEST(SledCoreTest, HistoryEvictsTheCausallyOldestFinishedJobsFirst) {
  SledLimits limits;
  limits.history_entries_max = 3;
  Rack rack(1, limits);
  auto chain = rack.StartSession(A);
  std::vector<JobId> ids;
  for (int i = 0; i < 5; ++i) {
    SignedRequest j = rack.NextJob(*chain, "true");
    ids.push_back(std::get<JobStart>(j.payload).job_id);
    ASSERT_TRUE(rack.Submit(A, j).status.has_value());
    rack.Exit(A, ids.back(), 0);
  }
  EXPECT_EQ(rack.core(A).history_size(), 3u);
  EXPECT_EQ(rack.core(A).FindJob(ids[0]), nullptr);
  EXPECT_EQ(rack.core(A).FindJob(ids[1]), nullptr);
  EXPECT_NE(rack.core(A).FindJob(ids[4]), nullptr);
}

TEST(SledCoreTest, HistoryNeverEvictsRunningJobs) {
  SledLimits limits;
  limits.history_entries_max = 2;
  Rack rack(1, limits);
  auto chain = rack.StartSession(A);
  std::vector<JobId> ids;
  for (int i = 0; i < 3; ++i) {
    SignedRequest j = rack.NextJob(*chain, "sleep 100", "*", /*concurrent=*/true);
    ids.push_back(std::get<JobStart>(j.payload).job_id);
    ASSERT_TRUE(rack.Submit(A, j).status.has_value());
  }
  EXPECT_TRUE(rack.Started(A, ids[0]));
  EXPECT_TRUE(rack.Started(A, ids[1]));
  EXPECT_FALSE(rack.Started(A, ids[2]));
  EXPECT_EQ(rack.core(A).history_size(), 2u);
  const JobStatus* refused = rack.core(A).StatusOf(ids[2], Rack::Baseboard(A));
  EXPECT_EQ(refused, nullptr);  // refused, and no room to remember it
}

TEST(SledCoreTest, SameSeedSameTrace) {
  auto run = [](uint64_t seed) {
    Rack rack(3, {}, seed);
    rack.StartSession(A);
    rack.StartSession(B);
    rack.SyncAll();
    auto fresh = rack.StartSession(C);
    rack.SyncAll();
    for (int i = 0; i < 5; ++i) rack.Submit(C, rack.NextJob(*fresh, "true", "*", i % 2 == 0));
    rack.SyncAll();
    return rack.TraceHash();
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

// The re-announcement (SledCore::OnTick, kReannounceAfter) costs nothing
// once a sled has heard its own VersionAnnouncement: later ticks, and a new
// life's ticks after its announcement came back, send nothing more. (The
// harness delivers a sled's own sends at once, so the loss the
// re-announcement heals is not reproduced here.)
TEST(SledCoreTest, ASledThatHeardItsOwnAnnouncementDoesNotSendItAgain) {
  Rack rack(2);
  const TimePoint t0 = FromUnixMillis(1'700'000'000'000);
  EXPECT_TRUE(rack.core(A).known_sleds().contains(Rack::Baseboard(A)));
  const size_t heard = rack.sent();
  rack.Handle(A, TimerTick{t0 + std::chrono::seconds(10)});
  rack.Handle(A, TimerTick{t0 + std::chrono::seconds(20)});
  EXPECT_EQ(rack.sent(), heard);
  rack.Restart(A);
  EXPECT_TRUE(rack.core(A).known_sleds().contains(Rack::Baseboard(A)));
  const size_t restarted = rack.sent();
  rack.Handle(A, TimerTick{t0 + std::chrono::seconds(3)});
  rack.Handle(A, TimerTick{t0 + std::chrono::seconds(30)});
  EXPECT_EQ(rack.sent(), restarted);
}

TEST(SledCoreTest, VersionAnnouncementsAreLearned) {
  Rack rack(2);
  rack.SyncAll();
  ASSERT_EQ(rack.core(A).known_sleds().size(), 2u);
  EXPECT_EQ(rack.core(A).known_sleds().at(Rack::Baseboard(B)).cubby, 1);
}

}  // namespace
}  // namespace once::rack
