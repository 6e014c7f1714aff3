#include "fence_protocol.h"

#include <algorithm>
#include <iterator>

#include "json_access.h"
#include "once/store/read_log.h"

namespace once::runtime::internal {

using events::KernelKind;
using store::Capability;

namespace {

// The envelope at `seq` in the (ascending) events in hand, or null.
const Envelope* InHand(std::span<const Envelope> log, int64_t seq) {
  auto it = std::lower_bound(log.begin(), log.end(), seq,
                             [](const Envelope& e, int64_t s) { return e.sequence < s; });
  return it != log.end() && it->sequence == seq ? &*it : nullptr;
}

}  // namespace

std::optional<ParkVerdict> VerdictOf(const Result<RunOutcome>& resumed) {
  if (resumed) return ParkVerdict::kResumed;
  switch (resumed.error().code) {
    case ErrorCode::kResumeRefused:
      return ParkVerdict::kNoop;
    case ErrorCode::kResumeContended:
      return ParkVerdict::kContended;
    default:
      return std::nullopt;
  }
}

Status AdvanceByTail(store::EventStore& store, std::string_view id, std::vector<Envelope>& log,
                     std::vector<Envelope> tail) {
  const bool complete = tail.size() < store.limits().read_events_max;
  log.insert(log.end(), std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
  if (complete) return Ok();
  return store::ReadTailInto(store, id, log);  // a long tail
}

const Json* FindWait(const Envelope& park, std::string_view type, const char* key,
                     std::string_view value) {
  for (const Json& wait : Member(park.payload, "waits")) {
    if (!IsString(Member(wait, "type"), type)) continue;
    if (!key || IsString(Member(wait, key), value)) return &wait;
  }
  return nullptr;
}

Result<ExecutionState> CheckResumable(std::string_view id, std::span<const Envelope> log,
                                      const ResumeTarget& target) {
  if (log.empty()) return Refused(id, "unknown-execution");
  ONCE_ASSIGN_OR_RETURN(ExecutionState st, Fold(log));
  if (IsTerminal(st.status)) return Refused(id, "terminal");
  const Envelope* park = FindOpenPark(log);
  if (!park) return Refused(id, "not-suspended");
  if (target.park_seq && park->sequence != *target.park_seq) return Refused(id, "not-suspended");
  if (target.topic && !FindWait(*park, "message", "topic", *target.topic)) {
    return Refused(id, "not-suspended");
  }
  return st;
}

Result<Fenced> FenceProtocol::ForResume(std::string_view id, std::vector<Envelope>& log,
                                        const RunOptions& options, std::string_view owner,
                                        int* budget, std::optional<int64_t> expect_fence) {
  if (!store_.Supports(Capability::kAcquireFence)) return Fenced{};  // a store that does not fence
  if (options.fence_if_parked_at) {
    return AcquireIfParked(id, log, *options.fence_if_parked_at, owner, budget, expect_fence);
  }
  if (options.fence) return Fenced{.token = *options.fence};
  return Fenced{};
}

Result<store::ConditionalAcquire> FenceProtocol::AcquireOnce(std::string_view id,
                                                             std::vector<Envelope>& log,
                                                             store::FenceExpectation expect,
                                                             bool* fresh) {
  *fresh = false;
  if (!store_.Supports(Capability::kAcquireFenceIfReadTail)) {
    return store_.AcquireFenceIf(id, expect);
  }
  int64_t read_after = log.empty() ? 0 : log.back().sequence;
  ONCE_ASSIGN_OR_RETURN(store::AcquireWithTail got,
                        store_.AcquireFenceIfReadTail(id, expect, read_after));
  ONCE_RETURN_IF_ERROR(AdvanceByTail(store_, id, log, std::move(got.tail)));
  *fresh = true;
  return got.acquire;
}

Result<Fenced> FenceProtocol::AcquireIfParked(std::string_view id, std::vector<Envelope>& log,
                                              int64_t park_seq, std::string_view owner, int* budget,
                                              std::optional<int64_t> expect_fence) {
  // Nothing in hand and the park's token known (acquire-first): the
  // acquire itself judges the park and returns the log to check it on.
  const bool blind = log.empty() && expect_fence.has_value() &&
                     store_.Supports(Capability::kAcquireFenceIfReadTail);
  Envelope read;
  const Envelope* park = blind ? nullptr : InHand(log, park_seq);
  if (!park && !blind) {
    ONCE_ASSIGN_OR_RETURN(std::vector<Envelope> one, store_.ReadRange(id, park_seq, park_seq));
    if (one.empty()) return Refused(id, "not-suspended");
    read = std::move(one.front());
    park = &read;
  }
  if (park && !park->Is(KernelKind::kExecutionSuspended)) return Refused(id, "not-suspended");
  const bool owned = !owner.empty() && store_.Supports(Capability::kOwnership);
  if (!store_.Supports(Capability::kAcquireFenceIf)) {
    if (*budget <= 0) {
      return MakeError(ErrorCode::kResumeContended, "no acquire left", std::string(id),
                       ResumeContendedDetail{0});
    }
    --*budget;
    ONCE_ASSIGN_OR_RETURN(int64_t token, store_.AcquireFence(id));
    return Fenced{.token = token};
  }
  store::FenceExpectation expect{.fence = expect_fence ? *expect_fence : park->fence(),
                                 .park_seq = park_seq};
  if (owned) expect.owner = owner;
  int attempts = 0;
  while (*budget > 0) {
    --*budget;
    ++attempts;
    bool fresh = false;
    ONCE_ASSIGN_OR_RETURN(store::ConditionalAcquire got, AcquireOnce(id, log, expect, &fresh));
    if (!got.stale) return Fenced{.token = got.fence, .fresh = fresh, .owner_recorded = owned};
    // Re-read the park (the combined acquire brought the tail along): still
    // the same unanswered one means the token moved only because someone
    // acquired and never appended; retry on the store's current token (the
    // envelope's is stale forever).
    if (!fresh) ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
    const Envelope* open = FindOpenPark(log);
    if (!open || open->sequence != park_seq) return Refused(id, "not-suspended");
    expect.fence = got.fence;
  }
  return MakeError(ErrorCode::kResumeContended,
                   "conditional acquire lost every attempt; retry later", std::string(id),
                   ResumeContendedDetail{attempts});
}

Result<std::optional<Fenced>> FenceProtocol::ClaimRunning(
    std::string_view id, std::vector<Envelope>& log, int64_t token_seen, std::string_view owner,
    std::optional<std::string_view> expected_owner) {
  if (!store_.Supports(Capability::kAcquireFence)) return std::optional<Fenced>(Fenced{});
  if (!store_.Supports(Capability::kAcquireFenceIf)) {
    // The documented residual of a store without the conditional acquire.
    ONCE_ASSIGN_OR_RETURN(int64_t token, store_.AcquireFence(id));
    ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
    return std::optional<Fenced>(Fenced{.token = token, .fresh = true});
  }
  const bool owned = store_.Supports(Capability::kOwnership);
  store::FenceExpectation expect{.fence = token_seen,
                                 .park_seq = log.empty() ? 0 : log.back().sequence};
  if (owned) {
    expect.owner = owner;
    expect.expected_owner = expected_owner;
  }
  bool fresh = false;
  ONCE_ASSIGN_OR_RETURN(store::ConditionalAcquire got, AcquireOnce(id, log, expect, &fresh));
  if (got.stale) return std::optional<Fenced>();
  if (!fresh) ONCE_RETURN_IF_ERROR(store::ReadTailInto(store_, id, log));
  return std::optional<Fenced>(
      Fenced{.token = got.fence, .fresh = true, .owner_recorded = owned && !owner.empty()});
}

}  // namespace once::runtime::internal
