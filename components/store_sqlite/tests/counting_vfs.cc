#include "counting_vfs.h"

#include <sqlite3.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

namespace once::store::testing {
namespace {

std::atomic<uint64_t> wal_syncs{0};
std::atomic<uint64_t> db_syncs{0};
std::atomic<int64_t> wal_sync_delay_us{0};
std::atomic<int> wal_syncs_to_fail{0};

struct CountingFile {
  sqlite3_file base;
  sqlite3_file* real;  // lives right after this struct
  int open_flags;
};

sqlite3_vfs* Real(sqlite3_vfs* vfs) { return static_cast<sqlite3_vfs*>(vfs->pAppData); }
sqlite3_file* R(sqlite3_file* f) { return reinterpret_cast<CountingFile*>(f)->real; }

int Close(sqlite3_file* f) { return R(f)->pMethods->xClose(R(f)); }
int Read(sqlite3_file* f, void* b, int n, sqlite3_int64 o) {
  return R(f)->pMethods->xRead(R(f), b, n, o);
}
int Write(sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
  return R(f)->pMethods->xWrite(R(f), b, n, o);
}
int Truncate(sqlite3_file* f, sqlite3_int64 s) { return R(f)->pMethods->xTruncate(R(f), s); }
int Sync(sqlite3_file* f, int flags) {
  int open_flags = reinterpret_cast<CountingFile*>(f)->open_flags;
  if (open_flags & SQLITE_OPEN_WAL) {
    ++wal_syncs;
    // Decided before the delay: a failure armed during a slow sync hits the next one.
    int left = wal_syncs_to_fail.load();
    while (left > 0 && !wal_syncs_to_fail.compare_exchange_weak(left, left - 1)) {
    }
    if (int64_t us = wal_sync_delay_us.load(); us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    if (left > 0) return SQLITE_IOERR_FSYNC;
  }
  if (open_flags & SQLITE_OPEN_MAIN_DB) ++db_syncs;
  return R(f)->pMethods->xSync(R(f), flags);
}
int FileSize(sqlite3_file* f, sqlite3_int64* s) { return R(f)->pMethods->xFileSize(R(f), s); }
int Lock(sqlite3_file* f, int l) { return R(f)->pMethods->xLock(R(f), l); }
int Unlock(sqlite3_file* f, int l) { return R(f)->pMethods->xUnlock(R(f), l); }
int CheckReserved(sqlite3_file* f, int* o) { return R(f)->pMethods->xCheckReservedLock(R(f), o); }
int FileControl(sqlite3_file* f, int op, void* a) {
  return R(f)->pMethods->xFileControl(R(f), op, a);
}
int SectorSize(sqlite3_file* f) { return R(f)->pMethods->xSectorSize(R(f)); }
int DeviceCharacteristics(sqlite3_file* f) { return R(f)->pMethods->xDeviceCharacteristics(R(f)); }
int ShmMap(sqlite3_file* f, int i, int sz, int e, void volatile** p) {
  return R(f)->pMethods->xShmMap(R(f), i, sz, e, p);
}
int ShmLock(sqlite3_file* f, int o, int n, int fl) {
  return R(f)->pMethods->xShmLock(R(f), o, n, fl);
}
void ShmBarrier(sqlite3_file* f) { R(f)->pMethods->xShmBarrier(R(f)); }
int ShmUnmap(sqlite3_file* f, int d) { return R(f)->pMethods->xShmUnmap(R(f), d); }
int Fetch(sqlite3_file* f, sqlite3_int64 o, int n, void** p) {
  return R(f)->pMethods->xFetch(R(f), o, n, p);
}
int Unfetch(sqlite3_file* f, sqlite3_int64 o, void* p) {
  return R(f)->pMethods->xUnfetch(R(f), o, p);
}

const sqlite3_io_methods kMethods = {
    3,
    Close,
    Read,
    Write,
    Truncate,
    Sync,
    FileSize,
    Lock,
    Unlock,
    CheckReserved,
    FileControl,
    SectorSize,
    DeviceCharacteristics,
    ShmMap,
    ShmLock,
    ShmBarrier,
    ShmUnmap,
    Fetch,
    Unfetch,
};

int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  auto* file = reinterpret_cast<CountingFile*>(f);
  file->real = reinterpret_cast<sqlite3_file*>(file + 1);
  file->open_flags = flags;
  int rc = Real(vfs)->xOpen(Real(vfs), name, file->real, flags, out_flags);
  // SQLite calls xClose only when pMethods is set, so set it only on success.
  file->base.pMethods = rc == SQLITE_OK && file->real->pMethods != nullptr ? &kMethods : nullptr;
  return rc;
}
int Delete(sqlite3_vfs* v, const char* n, int s) { return Real(v)->xDelete(Real(v), n, s); }
int Access(sqlite3_vfs* v, const char* n, int f, int* o) {
  return Real(v)->xAccess(Real(v), n, f, o);
}
int FullPathname(sqlite3_vfs* v, const char* n, int sz, char* o) {
  return Real(v)->xFullPathname(Real(v), n, sz, o);
}
int Randomness(sqlite3_vfs* v, int n, char* o) { return Real(v)->xRandomness(Real(v), n, o); }
int Sleep(sqlite3_vfs* v, int us) { return Real(v)->xSleep(Real(v), us); }
int CurrentTime(sqlite3_vfs* v, double* t) { return Real(v)->xCurrentTime(Real(v), t); }
int LastError(sqlite3_vfs* v, int n, char* o) { return Real(v)->xGetLastError(Real(v), n, o); }
int CurrentTimeInt64(sqlite3_vfs* v, sqlite3_int64* t) {
  return Real(v)->xCurrentTimeInt64(Real(v), t);
}

}  // namespace

void RegisterCountingVfs() {
  static std::once_flag once;
  std::call_once(once, [] {
    static sqlite3_vfs vfs;
    sqlite3_vfs* real = sqlite3_vfs_find(nullptr);
    std::memset(&vfs, 0, sizeof(vfs));
    vfs.iVersion = 2;
    vfs.szOsFile = static_cast<int>(sizeof(CountingFile)) + real->szOsFile;
    vfs.mxPathname = real->mxPathname;
    vfs.zName = kCountingVfsName;
    vfs.pAppData = real;
    vfs.xOpen = Open;
    vfs.xDelete = Delete;
    vfs.xAccess = Access;
    vfs.xFullPathname = FullPathname;
    vfs.xRandomness = Randomness;
    vfs.xSleep = Sleep;
    vfs.xCurrentTime = CurrentTime;
    vfs.xGetLastError = LastError;
    vfs.xCurrentTimeInt64 = CurrentTimeInt64;
    sqlite3_vfs_register(&vfs, 0);
  });
}

uint64_t WalSyncs() { return wal_syncs.load(); }
uint64_t DatabaseSyncs() { return db_syncs.load(); }
void SetWalSyncDelay(std::chrono::microseconds delay) { wal_sync_delay_us = delay.count(); }
void FailNextWalSyncs(int count) { wal_syncs_to_fail = count; }

}  // namespace once::store::testing
