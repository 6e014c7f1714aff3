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
// a time, 32 unless the environment says otherwise. The memory store keeps
// every event it is handed, and a timer firing frees on one thread the logs
// another thread decoded, so threads refill (and drain) their caches through
// the central lists all the time, and at 32 objects a trade the cores queue
// on those lists' locks. The programs ask for trades of up to 64 KiB
// (kTransferObjectsMax objects, capped by tcmalloc at 64 KiB a batch): in
// paired `loom bench --backend memory --case unfenced` runs that gave 12%
// more executions/s (BENCHMARKS.md, "The allocator's transfer batch"), and
// a burst of 100,000 timers on PostgreSQL a median 0.78 of the client's CPU
// ("Timers in bursts: the timer bench on the allocator settings we ship").
// tcmalloc reads the variable once, at the process's first allocation,
// before main; so when it is unset the program sets it and re-executes
// itself (same pid, same arguments). A value the caller set is kept.
// Without tcmalloc this does nothing.
#pragma once

#include <string>

namespace once::allocator {

inline constexpr const char* kTransferObjectsVariable = "TCMALLOC_TRANSFER_NUM_OBJ";
inline constexpr int kTransferObjectsMax = 4096;
inline constexpr int kTransferObjectsDefault = 32;  // tcmalloc's, when the variable is unset

// Returns when the settings are in force (or cannot be applied: an exec that
// fails leaves the process running with tcmalloc's defaults).
void ApplySettings(char** argv);

// The allocator in force, for reports: "tcmalloc, TCMALLOC_TRANSFER_NUM_OBJ=4096"
// or "system (glibc)".
std::string Description();

// tcmalloc's transfer batch in force, for key=value reports: the variable's
// value, tcmalloc's default when it is unset, or "-" without tcmalloc.
std::string TransferObjectsInForce();

}  // namespace once::allocator
