// The leaf blocks' lists: a freed block is taken back by the next leaf of
// its size on the thread that freed it, and the lists keep no more than
// their limits, on one thread and on all together. Each test runs on threads
// of its own, so that what the others keep does not count.

#include "leaf_blocks.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cstdint>
#include <thread>
#include <vector>

namespace once::gossip::internal {
namespace {

// Runs `body` on a new thread and waits for it (and for its lists to go).
template <typename Body>
void OnOwnThread(Body body) {
  std::thread(body).join();
}

// Frees `count` blocks of `bytes` made on this thread.
void MakeAndFree(size_t count, size_t bytes) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < count; ++i) blocks.push_back(AllocateLeafBlock(bytes));
  for (void* block : blocks) FreeLeafBlock(block, bytes);
}

TEST(LeafBlocksTest, AFreedBlockIsTakenBackByTheNextLeafOfItsSize) {
  OnOwnThread([] {
    void* block = AllocateLeafBlock(40);
    FreeLeafBlock(block, 40);
    EXPECT_EQ(LeafBlocksCachedBytes(), 48u);  // rounded up to kLeafBlockGrain
    void* other_size = AllocateLeafBlock(49);
    EXPECT_NE(other_size, block);
    void* same_class = AllocateLeafBlock(33);
    EXPECT_EQ(same_class, block);
    EXPECT_EQ(LeafBlocksCachedBytes(), 0u);
    FreeLeafBlock(same_class, 33);
    FreeLeafBlock(other_size, 49);
    EXPECT_EQ(LeafBlocksCachedBytes(), 48u + 64u);
  });
}

TEST(LeafBlocksTest, BlocksLargerThanTheLargestKeptGoToTheHeap) {
  OnOwnThread([] {
    void* block = AllocateLeafBlock(kLeafBlockCachedMax + 1);
    FreeLeafBlock(block, kLeafBlockCachedMax + 1);
    EXPECT_EQ(LeafBlocksCachedBytes(), 0u);
    block = AllocateLeafBlock(kLeafBlockCachedMax);
    FreeLeafBlock(block, kLeafBlockCachedMax);
    EXPECT_EQ(LeafBlocksCachedBytes(), kLeafBlockCachedMax);
  });
}

TEST(LeafBlocksTest, AThreadKeepsAtMostItsLimit) {
  OnOwnThread([] {
    const size_t fill = kLeafBlocksCachedBytesMax / kLeafBlockCachedMax;
    MakeAndFree(fill + 100, kLeafBlockCachedMax);
    EXPECT_EQ(LeafBlocksCachedBytes(), kLeafBlocksCachedBytesMax);
    MakeAndFree(10, 16);  // full: these go to the heap
    EXPECT_EQ(LeafBlocksCachedBytes(), kLeafBlocksCachedBytesMax);
  });
}

TEST(LeafBlocksTest, ABlockMadeOnOneThreadIsKeptByTheThreadThatFreesIt) {
  void* block = nullptr;
  OnOwnThread([&] { block = AllocateLeafBlock(100); });
  OnOwnThread([&] {
    FreeLeafBlock(block, 100);
    EXPECT_EQ(LeafBlocksCachedBytes(), 112u);
    EXPECT_EQ(AllocateLeafBlock(112), block);
    FreeLeafBlock(block, 112);
  });
}

TEST(LeafBlocksTest, AllThreadsTogetherKeepAtMostTheTotalAndGiveItBackWhenTheyEnd) {
  const size_t claimed_before = LeafBlocksClaimedBytes();
  constexpr int kThreads = kLeafBlocksCachedBytesTotalMax / kLeafBlocksCachedBytesMax + 2;
  std::vector<size_t> kept(kThreads);
  std::barrier filled(kThreads + 1), checked(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      MakeAndFree(kLeafBlocksCachedBytesMax / kLeafBlockCachedMax, kLeafBlockCachedMax);
      kept[t] = LeafBlocksCachedBytes();
      filled.arrive_and_wait();
      checked.arrive_and_wait();  // hold the blocks until the sums are read
    });
  }
  filled.arrive_and_wait();
  size_t sum = 0;
  for (size_t k : kept) sum += k;
  EXPECT_LE(sum, kLeafBlocksCachedBytesTotalMax);
  EXPECT_GE(sum, kLeafBlocksCachedBytesTotalMax - claimed_before - kLeafBlocksCachedBytesMax);
  EXPECT_LE(LeafBlocksClaimedBytes(), kLeafBlocksCachedBytesTotalMax);
  checked.arrive_and_wait();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(LeafBlocksClaimedBytes(), claimed_before);
}

TEST(LeafBlocksTest, TakingBlocksBackGivesBackTheRoomNoLongerFilled) {
  OnOwnThread([] {
    const size_t claimed_before = LeafBlocksClaimedBytes();
    const size_t count = kLeafBlocksCachedBytesMax / kLeafBlockCachedMax;
    MakeAndFree(count, kLeafBlockCachedMax);
    EXPECT_EQ(LeafBlocksClaimedBytes() - claimed_before, kLeafBlocksCachedBytesMax);
    std::vector<void*> blocks;
    for (size_t i = 0; i < count; ++i) blocks.push_back(AllocateLeafBlock(kLeafBlockCachedMax));
    EXPECT_EQ(LeafBlocksCachedBytes(), 0u);
    EXPECT_LE(LeafBlocksClaimedBytes() - claimed_before, 2 * kLeafBlocksCreditBytes);
    for (void* block : blocks) FreeSized(block, kLeafBlockCachedMax);
  });
}

#if defined(__SANITIZE_ADDRESS__)
// A kept block is poisoned: a leaf used after its last reference went is
// still reported, as the heap would report it.
TEST(LeafBlocksDeathTest, AKeptBlockIsPoisonedUntilTakenBack) {
  EXPECT_DEATH(OnOwnThread([] {
                 auto* block = static_cast<volatile uint8_t*>(AllocateLeafBlock(64));
                 FreeLeafBlock(const_cast<uint8_t*>(block), 64);
                 block[20] = 1;
               }),
               "use-after-poison");
}
#endif

}  // namespace
}  // namespace once::gossip::internal
