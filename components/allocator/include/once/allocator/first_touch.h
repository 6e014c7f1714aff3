// File: first_touch.h
//
// What this machine charges for memory touched for the first time: the raw
// limit beside a growing memory store's figures. A store that keeps what it
// is given grows its heap, and each new page costs a fault at its first
// touch; where the kernel runs under a hypervisor that shadows its page
// tables, or hands freed memory back to the host, that fault costs far more
// than on bare metal (BENCHMARKS.md, "Issue 20: what stops a growing memory
// store on this VM is its first touch of memory").
//
//   if (auto raw = once::allocator::MeasureFirstTouch()) {
//     printf("%.2f us a 4 KiB page, %.1f us a 2 MiB page\n",
//            raw->us_per_small_page, raw->us_per_huge_page);
//   }
#pragma once

#include <cstddef>
#include <optional>

namespace once::allocator {

struct FirstTouch {
  double us_per_small_page = 0;  // 4 KiB pages
  // 2 MiB pages (MADV_HUGEPAGE, as the huge-page regions ask); where the
  // kernel gives none, 512 small pages' faults.
  double us_per_huge_page = 0;
};

inline constexpr size_t kFirstTouchBytes = size_t{64} << 20;  // 64 MiB

// Maps `bytes` (rounded up to whole 2 MiB pages) freshly, writes one byte
// in each 4 KiB page, times it and unmaps it; once in small pages, then
// once asked for huge ones. Takes about 0.2 s on a VM whose faults cost
// 11 us. nullopt when a map fails. Any thread; allocates nothing.
std::optional<FirstTouch> MeasureFirstTouch(size_t bytes = kFirstTouchBytes);

}  // namespace once::allocator
