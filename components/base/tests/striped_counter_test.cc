#include "once/base/striped_counter.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace once {
namespace {

TEST(StripedCounterTest, SumsEveryThreadsAdds) {
  StripedCounter counter;
  EXPECT_EQ(counter.Sum(), 0u);
  std::vector<std::thread> threads;
  for (int t = 0; t < 40; ++t) {  // more threads than stripes: some share one
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) counter.Add();
      counter.Add(5);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter.Sum(), 40u * 1005u);
}

}  // namespace
}  // namespace once
