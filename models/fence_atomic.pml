/*
 * fence_atomic.pml: the conditional fence on the memory and SQLite stores
 * (issue 19, model 2): the acquire (compare the token, scan for an answer
 * past the park, bump, read the tail) and an append (the guard, the
 * sequence, the rows) are each one atomic step.
 *
 * Stands for (each carries a comment naming this model):
 *   components/store/src/memory_store.cc  MemoryEventStore::AcquireIfLocked
 *       (under the shard's mutex, with ReadLocked for the tail) and
 *       MemoryEventStore::AppendLocked (Append and AppendBatch)
 *   components/store_sqlite/src/sqlite_event_store.cc  AcquireIfOn (in one
 *       BEGIN IMMEDIATE with the tail read: SqliteEventStore::
 *       AcquireFenceIfReadTail) and AppendOn (Append and AppendBatch)
 * and, through fence_resumer.pmh, the runtime and supervisor functions named
 * there. The same resumers, auditor, properties and scope as
 * fence_postgres.pml.
 *
 * Negative controls (-D flags): HEAD (compare the log head), TOKEN_ALONE (no
 * answered-park check). The PostgreSQL-only controls (FOR SHARE, snapshots,
 * the token-0 row) have nothing to remove here: one writer at a time.
 */

#include "fence_common.pmh"

byte token = 0;     /* the execution's token (0 until someone acquires) */

#define BACKEND_LOCALS skip;

inline ABORT_TXN() {
  skip    /* a step is all or nothing: a crash holds nothing */
}

inline READ_LOG(h, ans) {
  atomic {
    h = head; ans = landed;
    printf("P%d: read the log: %d events past the park, answered %d\n", me, h, ans) }
}

#ifdef HEAD
#define BUMP_OK(e) (head == 0)
#else
#ifdef TOKEN_ALONE
#define BUMP_OK(e) (token == e)
#else
#define BUMP_OK(e) (token == e && !landed)
#endif
#endif

inline ACQUIRE_IF(e, st, cur) {
  if
  :: atomic { GATE_OK ->
       GATE_TAKE;
       if
       :: BUMP_OK(e) ->
          assert(!landed);      /* a body whose resume landed is never fenced out */
          token++;
          st = false
       :: else -> st = true
       fi;
       cur = token;
       vhead = head;
       vans = landed;
       printf("P%d: acquire expecting %d: stale %d, token %d\n", me, e, st, cur) }
  :: (landed && !GATE_OK) -> goto again
  :: CRASH()
  fi
}

inline APPEND(k, f, pres, exp, res) {
  if
  :: atomic {
       if
       :: pres && f < token -> res = STALE
       :: else ->
          if
          :: exp != head + 1 -> res = SEQ
          :: else ->
             res = OK;
             if
             :: k == RES ->
                assert(!landed);            /* at most one RESUMED per park */
                assert(f >= token);         /* the resumed body holds the current token */
                landed = true;
                landed_fence = f
             :: else -> skip
             fi;
             head++
          fi
       fi;
       printf("P%d: append kind %d under %d at %d: %d (0 landed, 1 stale, 2 lost sequence)\n",
              me, k, f, exp, res) }
  :: CRASH()
  fi
}

#include "fence_resumer.pmh"
