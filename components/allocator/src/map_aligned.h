// Private to once::allocator: anonymous memory at an aligned address, and
// the huge-page regions made of it.
#pragma once

#include <cstddef>

namespace once::allocator::internal {

// `bytes` (a multiple of `alignment`, a power of two) of fresh anonymous
// memory at an `alignment`-aligned address, or null when the map fails.
// What was mapped around the aligned range is unmapped again, so the caller
// unmaps exactly `bytes` at the result. System calls only: no allocation.
void* MapAligned(size_t bytes, size_t alignment);

// A huge-page region: `bytes` (a multiple of kHugePageRegionBytes) mapped at
// that alignment and marked MADV_HUGEPAGE, so that the kernel backs it with
// huge pages at first touch where transparent huge pages are "always" or
// "madvise" (with "never", small pages). Null when the map fails. What the
// allocator's regions are, and what MeasureFirstTouch times.
void* MapHugePageRegion(size_t bytes);

}  // namespace once::allocator::internal
