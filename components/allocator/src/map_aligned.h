// Private to once::allocator: anonymous memory at an aligned address.
#pragma once

#include <cstddef>

namespace once::allocator::internal {

// `bytes` (a multiple of `alignment`, a power of two) of fresh anonymous
// memory at an `alignment`-aligned address, or null when the map fails.
// What was mapped around the aligned range is unmapped again, so the caller
// unmaps exactly `bytes` at the result. System calls only: no allocation.
void* MapAligned(size_t bytes, size_t alignment);

}  // namespace once::allocator::internal
