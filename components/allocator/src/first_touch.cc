#include "once/allocator/first_touch.h"

#include <sys/mman.h>

#include <chrono>

#include "map_aligned.h"
#include "once/allocator/settings.h"

namespace once::allocator {
namespace {

constexpr size_t kSmallPageBytes = size_t{4} << 10;

// Microseconds a page (a huge one when `huge`) to fault in `bytes` freshly
// mapped at a huge page's alignment; -1 when the map fails.
double UsPerPage(size_t bytes, bool huge) {
  void* region =
      huge ? internal::MapHugePageRegion(bytes) : internal::MapAligned(bytes, kHugePageRegionBytes);
  if (region == nullptr) return -1;
  volatile char* at = static_cast<volatile char*>(region);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < bytes; i += kSmallPageBytes) at[i] = 1;
  const auto t1 = std::chrono::steady_clock::now();
  munmap(region, bytes);
  const size_t pages = bytes / (huge ? kHugePageRegionBytes : kSmallPageBytes);
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / static_cast<double>(pages);
}

}  // namespace

std::optional<FirstTouch> MeasureFirstTouch(size_t bytes) {
  bytes = (bytes + kHugePageRegionBytes - 1) & ~(kHugePageRegionBytes - 1);
  if (bytes == 0) bytes = kHugePageRegionBytes;
  FirstTouch out{.us_per_small_page = UsPerPage(bytes, false),
                 .us_per_huge_page = UsPerPage(bytes, true)};
  if (out.us_per_small_page < 0 || out.us_per_huge_page < 0) return std::nullopt;
  return out;
}

}  // namespace once::allocator
