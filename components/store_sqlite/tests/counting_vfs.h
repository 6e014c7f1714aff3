// A SQLite VFS for tests that forwards everything to the default VFS and
// counts fsyncs (xSync), so a test can assert how many a commit cost. It can
// also make every WAL fsync slow (a disk that takes its time, so concurrent
// writers pile up behind one commit) and fail the next WAL fsyncs.

#pragma once

#include <chrono>
#include <cstdint>

namespace once::store::testing {

inline constexpr const char* kCountingVfsName = "once-counting";

// Registers the VFS (idempotent; not as the default).
void RegisterCountingVfs();
// xSync calls on write-ahead-log files, and on main database files, since start.
uint64_t WalSyncs();
uint64_t DatabaseSyncs();
// Every WAL xSync sleeps this long first (0: no delay).
void SetWalSyncDelay(std::chrono::microseconds delay);
// The next `count` WAL xSync calls fail with SQLITE_IOERR_FSYNC.
void FailNextWalSyncs(int count);

}  // namespace once::store::testing
