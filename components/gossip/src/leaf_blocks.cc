#include "leaf_blocks.h"

#include <atomic>
#include <cstdint>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define ONCE_LEAF_BLOCKS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ONCE_LEAF_BLOCKS_ASAN 1
#endif
#endif
#ifdef ONCE_LEAF_BLOCKS_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace once::gossip::internal {

namespace {

constexpr size_t kClasses = kLeafBlockCachedMax / kLeafBlockGrain;
static_assert(kLeafBlockCachedMax % kLeafBlockGrain == 0);
static_assert(kLeafBlockGrain >= sizeof(void*) &&
              kLeafBlockGrain % __STDCPP_DEFAULT_NEW_ALIGNMENT__ == 0);

// A kept block: its first bytes link it to the next of its size.
struct Kept {
  Kept* next;
};

enum class State : uint8_t {
  kUnused,  // nothing kept yet: the Reaper is not armed
  kLive,    // the Reaper is armed
  kEnded,   // the thread is ending: blocks go straight to the heap
};

// Trivially destructible, so that a leaf freed by another thread-local's
// destructor, after the Reaper ran, still finds it (kEnded).
struct Lists {
  Kept* heads[kClasses];
  size_t bytes;   // of the blocks kept
  size_t credit;  // the room claimed under the total: >= bytes
  State state;
};
thread_local Lists t_lists{};

// The room all threads have claimed: <= kLeafBlocksCachedBytesTotalMax.
std::atomic<size_t> g_claimed{0};
static_assert(kLeafBlocksCachedBytesMax % kLeafBlocksCreditBytes == 0 &&
              kLeafBlocksCachedBytesTotalMax % kLeafBlocksCreditBytes == 0);

// Room for `rounded` more bytes on this thread: claimed already, or one more
// credit under both limits.
bool Room(Lists& lists, size_t rounded) {
  if (lists.bytes + rounded <= lists.credit) return true;
  if (lists.credit + kLeafBlocksCreditBytes > kLeafBlocksCachedBytesMax) return false;
  const size_t before = g_claimed.fetch_add(kLeafBlocksCreditBytes, std::memory_order_relaxed);
  if (before + kLeafBlocksCreditBytes > kLeafBlocksCachedBytesTotalMax) {
    g_claimed.fetch_sub(kLeafBlocksCreditBytes, std::memory_order_relaxed);
    return false;
  }
  lists.credit += kLeafBlocksCreditBytes;
  return true;
}

// Gives back room this thread no longer fills, keeping one credit spare (so
// that a thread taking and freeing around a boundary does not claim and give
// back each time).
void GiveBackUnused(Lists& lists) {
  while (lists.credit >= lists.bytes + 2 * kLeafBlocksCreditBytes) {
    lists.credit -= kLeafBlocksCreditBytes;
    g_claimed.fetch_sub(kLeafBlocksCreditBytes, std::memory_order_relaxed);
  }
}

void Poison([[maybe_unused]] void* block, [[maybe_unused]] size_t bytes) {
#ifdef ONCE_LEAF_BLOCKS_ASAN
  ASAN_POISON_MEMORY_REGION(block, bytes);
#endif
}
void Unpoison([[maybe_unused]] void* block, [[maybe_unused]] size_t bytes) {
#ifdef ONCE_LEAF_BLOCKS_ASAN
  ASAN_UNPOISON_MEMORY_REGION(block, bytes);
#endif
}

size_t Rounded(size_t bytes) { return (bytes + kLeafBlockGrain - 1) & ~(kLeafBlockGrain - 1); }
size_t ClassOf(size_t rounded) { return rounded / kLeafBlockGrain - 1; }

// Takes a kept block of class `c` (there is one).
Kept* Pop(Lists& lists, size_t c, size_t rounded) {
  Kept* block = lists.heads[c];
  Unpoison(block, sizeof(Kept));
  lists.heads[c] = block->next;
  lists.bytes -= rounded;
  Unpoison(block, rounded);
  return block;
}

void ReleaseAll(Lists& lists) {
  for (size_t c = 0; c < kClasses; ++c) {
    const size_t rounded = (c + 1) * kLeafBlockGrain;
    while (lists.heads[c]) FreeSized(Pop(lists, c, rounded), rounded);
  }
}

// Gives this thread's kept blocks to the heap when the thread ends.
struct Reaper {
  bool armed = false;
  ~Reaper() {
    ReleaseAll(t_lists);
    g_claimed.fetch_sub(t_lists.credit, std::memory_order_relaxed);
    t_lists.credit = 0;
    t_lists.state = State::kEnded;
  }
};
thread_local Reaper t_reaper;

}  // namespace

void FreeSized(void* block, size_t bytes) {
#if defined(__cpp_sized_deallocation)
  ::operator delete(block, bytes);  // the size spares the allocator a lookup
#else
  (void)bytes;  // clang without -fsized-deallocation (the fuzz build)
  ::operator delete(block);
#endif
}

void* AllocateLeafBlock(size_t bytes) {
  const size_t rounded = Rounded(bytes);
  if (rounded > kLeafBlockCachedMax) return ::operator new(bytes);
  Lists& lists = t_lists;
  const size_t c = ClassOf(rounded);
  if (lists.heads[c]) {
    Kept* block = Pop(lists, c, rounded);
    GiveBackUnused(lists);
    return block;
  }
  return ::operator new(rounded);  // so that any block of its class may be kept
}

void FreeLeafBlock(void* block, size_t bytes) {
  const size_t rounded = Rounded(bytes);
  if (rounded > kLeafBlockCachedMax) return FreeSized(block, bytes);
  Lists& lists = t_lists;
  if (lists.state == State::kEnded || !Room(lists, rounded)) return FreeSized(block, rounded);
  if (lists.state == State::kUnused) {
    t_reaper.armed = true;  // constructs it: its destructor will run
    lists.state = State::kLive;
  }
  const size_t c = ClassOf(rounded);
  Kept* kept = static_cast<Kept*>(block);
  kept->next = lists.heads[c];
  lists.heads[c] = kept;
  lists.bytes += rounded;
  Poison(block, rounded);
}

size_t LeafBlocksCachedBytes() { return t_lists.bytes; }
size_t LeafBlocksClaimedBytes() { return g_claimed.load(std::memory_order_relaxed); }

}  // namespace once::gossip::internal
