// File: timer_store.h
//
// TimerStore: durable wake-ups. A timer row is (execution id, wake_at_ms) with
// an optional re-drive marker {attempt}. Rows are idempotent per (execution
// id, wake_at_ms): scheduling the same key twice keeps one row, and the
// re-drive flag is merged, never lost: a flagged row is never downgraded by a
// plain schedule, and a flagged schedule upgrades a plain row (the new flag
// wins when both carry one: COALESCE(new, old)).
//
// A plain row may carry the park it wakes (TimerPark: the park's sequence and
// the fence token it was written under), so the waker can make its
// conditional acquire before reading anything. The key stays (execution id,
// wake_at_ms): two parks of one execution waiting on the same instant share
// the row, and the newest park wins: a schedule carrying a park replaces the
// row's park when its sequence is at least the row's; a schedule without one
// (a re-drive row, an older writer) leaves the row's park as it is.
//
//   MemoryTimerStore timers;
//   timers.Schedule({.execution_id = "order-7", .wake_at_ms = now + 5000});
//   auto due = timers.Claim({.now_ms = now, .limit = 100, .owner = "node-a",
//                            .lease_ms = 30'000});
//   std::vector<TimerKey> fired;
//   for (const TimerRow& row : *due) { fire(row); fired.push_back(row.key()); }
//   timers.CompleteMany(fired);  // the whole batch retired in one commit
//
// Claim is the lease: it returns due rows whose lease has expired (or that
// were never leased) and leases them to `owner` until now + lease_ms, in one
// atomic step, so two nodes polling one database never fire the same row at
// once (a row under a live lease is skipped, whoever holds it).
// A node that dies holding a lease lets the row come due again when the
// lease ends (timers are at-least-once; the resume they trigger is fenced).
// With include_redrive = false, re-drive rows are excluded BEFORE the limit,
// so rows a node cannot judge never starve the plain wakes behind them.
// With ahead_ms > 0 a claim also takes rows due up to now + ahead_ms (to be
// fired at their own wake, not before), while leases are still judged at
// now: a row under a live lease is never taken early.
//
// Threads: every method may be called from any thread.

#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/result.h"

namespace once::timers {

struct Redrive {
  int attempt = 0;
  friend bool operator==(const Redrive&, const Redrive&) = default;
};

// A redrive as the SQL stores keep it in a row, JSON {"attempt":n}, and
// back: anything else (not JSON, no integer "attempt" in 0..INT_MAX) is
// kCorruption. One format for the stores that write it and the operator's
// views that read it.
std::string RedriveText(const Redrive& redrive);
Result<Redrive> ParseRedriveText(std::string_view text);

// A row's key; `park_seq` is a claim's view of it (TimerRow::key()): the
// park sequence the claimed row carried (0: none). A retire by such a key
// removes the row only while its park is not newer, so a park written into
// the row after the claim (the resumed body parked again on the same
// instant) survives the retire of the wake that came before it. Without a
// view (nullopt) a retire removes the row whatever it holds.
struct TimerKey {
  std::string execution_id;
  int64_t wake_at_ms = 0;
  std::optional<int64_t> park_seq;
  friend bool operator==(const TimerKey&, const TimerKey&) = default;
};

// The park a plain row wakes: its sequence, and its metadata.fence (the
// token the conditional acquire expects; 0 when never fenced).
struct TimerPark {
  int64_t sequence = 0;  // >= 1
  int64_t fence = 0;     // >= 0
  friend bool operator==(const TimerPark&, const TimerPark&) = default;
};

struct TimerRow {
  std::string execution_id;
  int64_t wake_at_ms = 0;
  std::optional<Redrive> redrive;
  std::optional<TimerPark> park;  // nullopt: the waker finds the park in the log

  TimerKey key() const { return {execution_id, wake_at_ms, park ? park->sequence : 0}; }
  friend bool operator==(const TimerRow&, const TimerRow&) = default;
};

struct ClaimRequest {
  int64_t now_ms = 0;
  size_t limit = 100;
  bool include_redrive = true;
  std::string owner;  // who holds the lease; non-empty
  int64_t lease_ms = 30'000;
  // Also rows due by now_ms + ahead_ms (0 <= ahead_ms < lease_ms, so a row
  // is still leased when its wake comes). Leases are judged at now_ms.
  int64_t ahead_ms = 0;
};

struct TimerLimits {
  size_t claim_rows_max = 1'000;     // rows one Claim / Due returns at most
  size_t complete_keys_max = 1'000;  // keys one CompleteMany retires at most
};

class TimerStore {
 public:
  virtual ~TimerStore() = default;

  // Upserts the row (see the merge rules above). A strictly newer park also
  // ends the row's lease: it is a new wake, claimable at once, not one a
  // claim holds. kInvalidArgument for a bad
  // id, a negative attempt, or a park with a sequence below 1 or a negative
  // fence.
  virtual Status Schedule(const TimerRow& row) = 0;

  // Rows with wake_at_ms <= now_ms, oldest first, at most `limit` (capped by
  // limits().claim_rows_max); re-drive rows excluded before the limit unless
  // include_redrive. Does not lease (for inspection and tests).
  virtual Result<std::vector<TimerRow>> Due(int64_t now_ms, size_t limit, bool include_redrive) = 0;

  // Due rows not leased by anyone else right now, leased to req.owner. Atomic.
  virtual Result<std::vector<TimerRow>> Claim(const ClaimRequest& req) = 0;

  // Retires the row (a no-op if it is gone, or if key.park_seq is set and
  // the row's park is newer than it).
  virtual Status Complete(const TimerKey& key) = 0;

  // Retires every listed row in ONE atomic step: all of them, or on an error
  // none (a key whose row is gone is skipped; a key listed twice is
  // harmless; key.park_seq as in Complete). A whole fired batch then costs one commit instead of
  // one per row. kInvalidArgument, nothing retired, for more than limits().complete_keys_max keys;
  // an empty list does nothing.
  virtual Status CompleteMany(std::span<const TimerKey> keys) = 0;

  // Keeps the row leased to `owner` until until_ms, so it comes due again
  // exactly then (the in-process backoff of a contended wake). A no-op if
  // the row is gone or leased to someone else.
  virtual Status Defer(const TimerKey& key, std::string_view owner, int64_t until_ms) = 0;

  // Every row of one execution (for tests and the inspector).
  virtual Result<std::vector<TimerRow>> RowsOf(std::string_view execution_id) = 0;

  virtual const TimerLimits& limits() const = 0;
};

// Checks shared by every backend.
Status ValidateTimerRow(const TimerRow& row);
Status ValidateClaim(const ClaimRequest& req);
Status ValidateCompleteMany(std::span<const TimerKey> keys, const TimerLimits& limits);

}  // namespace once::timers
