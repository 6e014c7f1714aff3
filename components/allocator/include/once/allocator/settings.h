// File: settings.h
//
// The allocator settings of the programs we ship (loom; timer_bench, which
// runs the timer service as a program embedding the runtime would), applied
// before anything else runs.
//
//   int main(int argc, char** argv) {
//     once::allocator::ApplySettings(argv);  // may re-execute the process
//     ...
//
// With tcmalloc (ONCE_MALLOC=tcmalloc, the default): a thread's cache trades
// objects with the shared central lists at most TCMALLOC_TRANSFER_NUM_OBJ at
// a time, 32 unless the environment says otherwise. The programs shipped
// 4096 (64 KiB trades) from 2026-11-30: the memory store kept every event's
// JSON tree, and a timer firing freed on one thread the logs another thread
// decoded. Since then the timers' frees moved and the memory store packs
// its payloads (one block a log), and in paired runs on 2026-12-05 the large
// batch bought nothing on PostgreSQL or SQLite (timer bursts, executions)
// and cost the memory table: packed payloads with it ran 0.70x, and the park
// cases 0.75-0.8x (BENCHMARKS.md, "Issue 20: payloads packed at rest,
// shipped"). So the batch we ship is tcmalloc's own (kTransferObjects).
// tcmalloc reads the variable once, at the process's first allocation,
// before main: a setting that differs from tcmalloc's is applied by setting
// it and re-executing the program (same pid, same arguments). A value the
// caller set is kept.
//
// Huge-page regions. tcmalloc takes memory from the system as its heap grows
// (a store that keeps every execution grows it with every one), and each
// 4 KiB page of it costs a page fault at its first touch: on a memory store
// of a million executions, 0.26 faults an execution on this project's VMs,
// several microseconds each. So ApplySettings installs a system allocator
// that gives tcmalloc whole 2 MiB regions, aligned and marked MADV_HUGEPAGE,
// which the kernel backs with huge pages at their first touch when
// transparent huge pages are "always" or "madvise": one fault per 2 MiB, a
// hundredth of the faults (BENCHMARKS.md, "Issue 20: the heap in huge-page
// regions"). The cost: a large heap's resident size rounds up to whole
// huge pages (the memory table: 44 MB against 37), and where the kernel
// compacts memory to find a huge page, a fault may wait for it. With THP
// "never" the regions are ordinary pages. A request it cannot serve that
// way (no room for the rest of a region to be used, an alignment over 2 MiB,
// a failed mmap) goes to tcmalloc's own system allocator.
// ONCE_MALLOC_HUGE_PAGES=0 turns it off.
//
// Without tcmalloc this does nothing.
#pragma once

#include <cstddef>
#include <string>

namespace once::allocator {

inline constexpr const char* kTransferObjectsVariable = "TCMALLOC_TRANSFER_NUM_OBJ";
inline constexpr int kTransferObjectsDefault = 32;  // tcmalloc's, when the variable is unset
inline constexpr int kTransferObjects = kTransferObjectsDefault;             // the batch we ship
inline constexpr const char* kHugePagesVariable = "ONCE_MALLOC_HUGE_PAGES";  // "0": off
inline constexpr size_t kHugePageRegionBytes = size_t{2} << 20;  // 2 MiB, x86-64's huge page

// Returns when the settings are in force (or cannot be applied: an exec that
// fails leaves the process running with tcmalloc's defaults).
void ApplySettings(char** argv);

// The allocator in force, for reports: "tcmalloc, TCMALLOC_TRANSFER_NUM_OBJ=unset (32),
// huge-page regions" (or ", 4 KiB pages" when they are off) or "system (glibc)".
std::string Description();

// Whether tcmalloc's heap grows in huge-page regions in this process.
bool HugePageRegionsInForce();

// tcmalloc's transfer batch in force, for key=value reports: the variable's
// value, tcmalloc's default when it is unset, or "-" without tcmalloc.
std::string TransferObjectsInForce();

}  // namespace once::allocator
