#include "once/base/group_wait.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace once {
namespace {

TEST(GroupWaitTest, ReturnsAnsweredOnlyAfterEveryOp) {
  GroupWait wait(3);
  EXPECT_FALSE(wait.Answered());
  std::atomic<int> answered{0};
  std::thread leader([&] {
    for (int i = 0; i < 3; ++i) {
      answered.fetch_add(1);
      wait.AnswerOne();
    }
  });
  EXPECT_EQ(wait.Wait(), GroupWait::Woken::kAnswered);
  EXPECT_EQ(answered.load(), 3);
  EXPECT_TRUE(wait.Answered());
  leader.join();
}

TEST(GroupWaitTest, AnAskToLeadIsTakenOnce) {
  GroupWait wait(1);
  wait.AskToLead();
  EXPECT_EQ(wait.Wait(), GroupWait::Woken::kAskedToLead);
  EXPECT_FALSE(wait.Answered());
  std::thread leader([&] { wait.AnswerOne(); });
  EXPECT_EQ(wait.Wait(), GroupWait::Woken::kAnswered);  // the ask was consumed
  leader.join();
}

TEST(GroupWaitTest, AnAnsweredCallerMayDestroyItsWaitAtOnce) {
  // Callers queue waits that live on their stacks and return the moment
  // they are answered; a leader answers them from another thread. Under
  // ASan or TSan a touch of a wait after its last answer is caught.
  std::mutex mu;
  std::deque<GroupWait*> queue;
  std::atomic<bool> stop{false};
  std::thread leader([&] {
    while (!stop.load()) {
      std::vector<GroupWait*> taken;
      {
        std::lock_guard lock(mu);
        taken.assign(queue.begin(), queue.end());
        queue.clear();
      }
      for (GroupWait* w : taken) w->AnswerOne();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        GroupWait wait(1);
        {
          std::lock_guard lock(mu);
          queue.push_back(&wait);
        }
        EXPECT_EQ(wait.Wait(), GroupWait::Woken::kAnswered);
      }
    });
  }
  for (auto& t : callers) t.join();
  stop.store(true);
  leader.join();
  EXPECT_TRUE(queue.empty());
}

}  // namespace
}  // namespace once
