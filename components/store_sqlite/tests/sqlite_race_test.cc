// Two real processes share one database file and race, round after round,
// to resume the same parked execution (AcquireFenceIf, then an
// EXECUTION_RESUMED under the token won) and to append at the same sequence.
// The fence lives in the file, so the store must let exactly one of them
// through each time and refuse the other with a typed error.

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

#include "once/base/rng.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "test_support.h"

namespace once::store {
namespace {

using events::KernelEvent;
using events::KernelKind;

constexpr int kRounds = 200;
constexpr int kProcesses = 2;
constexpr int kAttemptsMax = 1000;
constexpr int64_t kParkSeq = 2;
constexpr auto kBarrierWait = std::chrono::seconds(60);
constexpr uint64_t kJitterUsMax = 800;

struct Outcome {
  int resumed = 0;          // this process's EXECUTION_RESUMED landed
  int resume_refused = 0;   // its resume append was refused (stale token / taken sequence)
  int acquire_stale = 0;    // AcquireFenceIf answered stale
  int plain_landed = 0;     // its plain append landed
  int plain_conflict = 0;   // its plain append got kSequenceConflict
  int body_fenced_out = 0;  // the winner's next append (its body running) was refused
  int unexpected = 0;       // any other error (kept in `code`)
  int code = -1;
};

// Shared between the processes (MAP_SHARED | MAP_ANONYMOUS, set up before fork).
struct Shared {
  std::atomic<int> arrived[kRounds];
  Outcome outcomes[kProcesses][kRounds];
};
static_assert(std::atomic<int>::is_always_lock_free);

std::string ParkId(int round) { return "park-" + std::to_string(round); }
std::string PlainId(int round) { return "plain-" + std::to_string(round); }

// Both processes start round r together.
bool Barrier(Shared& shared, int round) {
  shared.arrived[round].fetch_add(1);
  auto deadline = std::chrono::steady_clock::now() + kBarrierWait;
  while (shared.arrived[round].load() < kProcesses) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    sched_yield();
  }
  return true;
}

void Unexpected(Outcome& out, const Error& e) {
  ++out.unexpected;
  out.code = static_cast<int>(e.code);
}

bool Answered(EventStore& store, const std::string& id) {
  auto tail = store.ReadRange(id, kParkSeq + 1);
  return tail && !tail->empty();
}

// The winner's body goes on under its token; the loser must never have
// fenced it out (that is what the answering scan of AcquireFenceIf is for).
void ContinueBody(EventStore& store, const std::string& id, int64_t token, Outcome& out) {
  AppendRequest req{
      .execution_id = id,
      .expected_next = kParkSeq + 2,
      .events = {KernelEvent(KernelKind::kStepCompleted, nlohmann::json{{"name", "s"}}, token)},
      .fence = token};
  if (!store.Append(req)) ++out.body_fenced_out;
}

// Races to resume `id` the way the runtime does: acquire conditionally; when
// stale and the park is still unanswered, retry with the token just seen.
// Random pauses widen the windows between a read and the write it decides.
void Jitter(Rng& rng) { usleep(static_cast<useconds_t>(rng.Below(kJitterUsMax))); }

void RaceResume(EventStore& store, const std::string& id, Rng& rng, Outcome& out) {
  int64_t expect = 0;
  for (int attempt = 0; attempt < kAttemptsMax; ++attempt) {
    auto acquired = store.AcquireFenceIf(id, {.fence = expect, .park_seq = kParkSeq});
    if (!acquired) return Unexpected(out, acquired.error());
    if (acquired->stale) {
      ++out.acquire_stale;
      if (Answered(store, id)) return;
      expect = acquired->fence;
      Jitter(rng);
      continue;
    }
    AppendRequest req{.execution_id = id,
                      .expected_next = kParkSeq + 1,
                      .events = {KernelEvent(KernelKind::kExecutionResumed, {}, acquired->fence)},
                      .fence = acquired->fence};
    Jitter(rng);
    auto head = store.Append(req);
    if (head) {
      ++out.resumed;
      return ContinueBody(store, id, acquired->fence, out);
    }
    ErrorCode code = head.error().code;
    if (code != ErrorCode::kStaleFence && code != ErrorCode::kSequenceConflict) {
      return Unexpected(out, head.error());
    }
    ++out.resume_refused;
    if (Answered(store, id)) return;
    expect = store.ReadFence(id).value_or(acquired->fence);
  }
  ++out.unexpected;  // no decision after kAttemptsMax: a livelock
}

void RacePlain(EventStore& store, const std::string& id, int process, Outcome& out) {
  AppendRequest req{.execution_id = id,
                    .expected_next = 1,
                    .events = {events::AppEvent("tick", {{"process", process}})},
                    .fence = 0};
  auto head = store.Append(req);
  if (head) {
    ++out.plain_landed;
  } else if (head.error().code == ErrorCode::kSequenceConflict) {
    ++out.plain_conflict;
  } else {
    Unexpected(out, head.error());
  }
}

[[noreturn]] void RunChild(const std::string& path, Shared& shared, int process) {
  SqliteOptions options;
  options.busy_timeout = std::chrono::seconds(30);
  auto store = SqliteEventStore::Open(path, options);
  if (!store) _exit(2);
  SeededRng rng(0x5eed + process);
  for (int r = 0; r < kRounds; ++r) {
    if (!Barrier(shared, r)) _exit(3);
    Outcome& out = shared.outcomes[process][r];
    RaceResume(**store, ParkId(r), rng, out);
    RacePlain(**store, PlainId(r), process, out);
  }
  store->reset();
  _exit(0);
}

void Prepare(const std::string& path) {
  SqliteOptions options;
  options.durability = Durability::kNormal;
  auto store = SqliteEventStore::Open(path, options);
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  std::vector<AppendRequest> batch;
  for (int r = 0; r < kRounds; ++r) {
    batch.push_back(
        {.execution_id = ParkId(r),
         .expected_next = 1,
         .events = {KernelEvent(KernelKind::kExecutionStarted, nlohmann::json::object()),
                    KernelEvent(KernelKind::kExecutionSuspended, {{"wait", "t"}})}});
  }
  auto results = (*store)->AppendBatch(batch);
  ASSERT_TRUE(results.has_value()) << results.error().ToString();
  for (const auto& r : *results) ASSERT_EQ(r.value_or(-1), kParkSeq);
}

TEST(SqliteTwoProcessRace, ExactlyOneResumePerRound) {
  testing::TempDir dir;
  std::string path = dir.File("race.db");
  Prepare(path);
  if (HasFatalFailure()) return;

  void* mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* shared = new (mem) Shared{};
  pid_t children[kProcesses];
  for (int p = 0; p < kProcesses; ++p) {
    children[p] = fork();
    ASSERT_GE(children[p], 0);
    if (children[p] == 0) RunChild(path, *shared, p);
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }

  auto store = SqliteEventStore::Open(path).value();
  int contended_rounds = 0;
  for (int r = 0; r < kRounds; ++r) {
    const Outcome& a = shared->outcomes[0][r];
    const Outcome& b = shared->outcomes[1][r];
    SCOPED_TRACE("round " + std::to_string(r));
    EXPECT_EQ(a.unexpected + b.unexpected, 0) << a.code << " " << b.code;
    EXPECT_EQ(a.body_fenced_out + b.body_fenced_out, 0);
    EXPECT_EQ(a.resumed + b.resumed, 1);
    EXPECT_EQ(a.plain_landed + b.plain_landed, 1);
    EXPECT_EQ(a.plain_conflict + b.plain_conflict, 1);
    if (a.resume_refused + b.resume_refused + a.acquire_stale + b.acquire_stale > 0) {
      ++contended_rounds;
    }
    auto log = store->ReadRange(ParkId(r), 1).value();
    ASSERT_EQ(log.size(), 4u);
    int resumes = 0;
    for (size_t i = 0; i < log.size(); ++i) {
      EXPECT_EQ(log[i].sequence, static_cast<int64_t>(i + 1));
      resumes += log[i].Is(KernelKind::kExecutionResumed) ? 1 : 0;
    }
    EXPECT_EQ(resumes, 1);
    // The resume that landed carries the token that is still current.
    EXPECT_EQ(log[2].fence(), store->ReadFence(ParkId(r)).value());
    EXPECT_TRUE(log[3].Is(KernelKind::kStepCompleted));
    EXPECT_EQ(store->Head(PlainId(r)).value(), 1);
  }
  // Every round both processes try; the loser is refused or sees the answer.
  EXPECT_EQ(contended_rounds, kRounds);
  int refused = 0;
  int stale = 0;
  for (int p = 0; p < kProcesses; ++p) {
    for (int r = 0; r < kRounds; ++r) {
      refused += shared->outcomes[p][r].resume_refused;
      stale += shared->outcomes[p][r].acquire_stale;
    }
  }
  std::printf("rounds=%d resume appends refused=%d stale acquires=%d\n", kRounds, refused, stale);
  munmap(mem, sizeof(Shared));
}

}  // namespace
}  // namespace once::store
