// A SQLite VFS for tests that forwards everything to the default VFS and
// counts fsyncs (xSync), so a test can assert how many a commit cost.

#pragma once

#include <cstdint>

namespace once::store::testing {

inline constexpr const char* kCountingVfsName = "once-counting";

// Registers the VFS (idempotent; not as the default).
void RegisterCountingVfs();
// xSync calls on write-ahead-log files, and on main database files, since start.
uint64_t WalSyncs();
uint64_t DatabaseSyncs();

}  // namespace once::store::testing
