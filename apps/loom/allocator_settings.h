// File: allocator_settings.h
//
// The loom app's allocator settings, applied before anything else runs.
//
//   int main(int argc, char** argv) {
//     once::loom_app::ApplyAllocatorSettings(argv);  // may re-execute the process
//     ...
//
// With tcmalloc (ONCE_MALLOC=tcmalloc, the default): a thread's cache trades
// objects with the shared central lists at most TCMALLOC_TRANSFER_NUM_OBJ at
// a time, 32 unless the environment says otherwise. The memory store keeps
// every event it is handed, so the threads that run executions refill their
// caches from the central lists all the time, and at 32 objects a refill
// the cores queue on those lists' locks. The app asks for transfers of up to
// 64 KiB (kTransferObjectsMax objects, capped by tcmalloc at 64 KiB a
// batch): in paired `loom bench --backend memory --case unfenced` runs that
// gave 12% more executions/s (BENCHMARKS.md, "The allocator's transfer
// batch"). tcmalloc reads the variable once, at the process's first
// allocation, before main; so when it is unset the app sets it and
// re-executes itself (same pid, same arguments). A value the caller set is
// kept. Without tcmalloc this does nothing.
#pragma once

#include <string>

namespace once::loom_app {

inline constexpr const char* kTransferObjectsVariable = "TCMALLOC_TRANSFER_NUM_OBJ";
inline constexpr int kTransferObjectsMax = 4096;

// Returns when the settings are in force (or cannot be applied: an exec that
// fails leaves the process running with tcmalloc's defaults).
void ApplyAllocatorSettings(char** argv);

// The allocator in force, for reports: "tcmalloc, TCMALLOC_TRANSFER_NUM_OBJ=4096"
// or "system (glibc)".
std::string AllocatorDescription();

}  // namespace once::loom_app
