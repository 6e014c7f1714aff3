// File: group_wait.h
//
// GroupWait: one caller's wait in a leader/follower group (the runtime's
// Committer, the PostgreSQL store's acquire, read and schedule groups). The
// caller queues its ops under the group's lock, releases it, and waits here
// until a leader has answered every op or the group asks it to lead.
//
//   GroupWait wait(ops.size());          // before any op is queued
//   ... queue the ops under the group's lock; release it ...
//   if (wait.Wait() == GroupWait::Woken::kAskedToLead) { ... lead ... }
//
//   // a leader, after releasing the group's lock:
//   for (op : group) op.wait->AnswerOne();
//
// How it waits. A 32-bit word holds the count of unanswered ops, the ask to
// lead and whether the caller sleeps, and the caller sleeps on the word
// itself (a futex). Leaders used to answer under the group's lock with a
// condition variable: each woken caller then blocked on that lock at once,
// and the group's end became a convoy of futex waits and wakes (a third of a
// client's CPU on the PostgreSQL store, on this project's VMs) that the next
// group waited behind. A lock per caller, notified under it, still woke each
// caller into that lock. Here an answer is one atomic step, and a wake-up
// only when the caller sleeps.
//
// Lifetime. The caller owns the GroupWait (on its stack) and may destroy it
// as soon as Wait returns kAnswered or Answered() is true; a group may call
// AnswerOne and AskToLead only while one of the caller's ops is unanswered.
// The last answer's wake-up may reach the word after the caller returned: a
// futex wake reads no memory, and at worst wakes a later GroupWait at the
// same address, which checks its word and sleeps again.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace once {

class GroupWait {
 public:
  enum class Woken { kAnswered, kAskedToLead };
  // The most ops one caller may wait for at once.
  static constexpr size_t kOpsMax = (size_t{1} << 30) - 1;

  // `ops`: how many answers the caller waits for (1..kOpsMax).
  explicit GroupWait(size_t ops);
  GroupWait(const GroupWait&) = delete;
  GroupWait& operator=(const GroupWait&) = delete;

  // Blocks until every op is answered (kAnswered) or a leader asked this
  // caller to lead (kAskedToLead; the ask is consumed). The caller's thread.
  Woken Wait();

  // Every op answered (without blocking). The caller's thread.
  bool Answered() const { return (state_.load(std::memory_order_acquire) & kPending) == 0; }

  // One op is answered (its result written before this call); the last
  // answer wakes the caller. Any thread.
  void AnswerOne();

  // Asks the caller to lead the next group. Any thread.
  void AskToLead();

 private:
  static constexpr uint32_t kPending = (uint32_t{1} << 30) - 1;
  static constexpr uint32_t kAsked = uint32_t{1} << 30;
  static constexpr uint32_t kSleeping = uint32_t{1} << 31;
  void Wake();

  std::atomic<uint32_t> state_;
};

}  // namespace once
