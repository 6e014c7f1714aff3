#include "once/base/group_wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "once/base/result.h"

namespace once {

GroupWait::GroupWait(size_t ops) : state_(static_cast<uint32_t>(ops)) {
  ONCE_CHECK(ops > 0 && ops <= kOpsMax);
}

GroupWait::Woken GroupWait::Wait() {
  for (;;) {
    uint32_t s = state_.load(std::memory_order_acquire);
    if ((s & kPending) == 0) return Woken::kAnswered;
    if (s & kAsked) {
      state_.fetch_and(~(kAsked | kSleeping), std::memory_order_acq_rel);
      return Woken::kAskedToLead;
    }
    if (!(s & kSleeping)) {
      // Announced before sleeping, so that an answer after it wakes us; an
      // answer before it fails the exchange and is seen above.
      if (!state_.compare_exchange_weak(s, s | kSleeping, std::memory_order_acq_rel)) continue;
      s |= kSleeping;
    }
    // Returns at once if the word is no longer `s`; spurious returns loop.
    syscall(SYS_futex, &state_, FUTEX_WAIT_PRIVATE, s, nullptr, nullptr, 0);
  }
}

void GroupWait::AnswerOne() {
  const uint32_t before = state_.fetch_sub(1, std::memory_order_acq_rel);
  ONCE_CHECK((before & kPending) > 0);
  if ((before & kPending) == 1 && (before & kSleeping)) Wake();
}

void GroupWait::AskToLead() {
  const uint32_t before = state_.fetch_or(kAsked, std::memory_order_acq_rel);
  if (before & kSleeping) Wake();
}

void GroupWait::Wake() { syscall(SYS_futex, &state_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0); }

}  // namespace once
