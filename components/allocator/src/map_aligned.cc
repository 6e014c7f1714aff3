#include "map_aligned.h"

#include <sys/mman.h>

#include <cstdint>

#include "once/allocator/settings.h"

namespace once::allocator::internal {

void* MapAligned(size_t bytes, size_t alignment) {
  const size_t mapped = bytes + alignment;
  void* at = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (at == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(at);
  const uintptr_t aligned = (start + alignment - 1) & ~(alignment - 1);
  const uintptr_t end = aligned + bytes;
  if (aligned > start) munmap(at, aligned - start);
  if (start + mapped > end) munmap(reinterpret_cast<void*>(end), start + mapped - end);
  return reinterpret_cast<void*>(aligned);
}

void* MapHugePageRegion(size_t bytes) {
  void* region = MapAligned(bytes, kHugePageRegionBytes);
  if (region != nullptr) madvise(region, bytes, MADV_HUGEPAGE);  // advice: may change nothing
  return region;
}

}  // namespace once::allocator::internal
