/*
 * fence_postgres.pml: the conditional fence on PostgreSQL (issue 19, model 1).
 *
 * Stands for (each carries a comment naming this model):
 *   components/store_postgres/src/acquire_group.cc  AppendSteps (lock_fence
 *       FOR UPDATE, fence_if_bump, fence_if_tail: one implicit READ COMMITTED
 *       transaction, a fresh snapshot per statement; when the lock found no
 *       row, RunGroup runs them again after ensure_fence)
 *   components/store_postgres/src/sql.cc  FenceIfBumpSql (the guarded UPDATE),
 *       AppendSql (the guard; FOR SHARE OF f in the `locked` CTE for requests
 *       that answer; the park's token-0 fence row in `parks`), LeanAppendSql
 *       (the plain guard of every other append: EXECUTION_DENIED; for one
 *       request of one event LoneInsertSql, and LoneAppendSql after it only
 *       when it inserted nothing: a refused statement writes nothing, so the
 *       pair is one APPEND here; LoneInsertSql's near head read accepts only
 *       where the exact rule does, reading one snapshot, so it is that
 *       APPEND's guard or a refusal that writes nothing). A node's
 *       owned append (one that leaves the run running and names its owner in
 *       the same row) locks FOR NO KEY UPDATE instead: a stronger lock, which
 *       conflicts with everything FOR SHARE does, so it only removes
 *       interleavings this model allows. A park or an end writes no owner.
 *   components/store_postgres/src/postgres_event_store.cc
 *       PostgresEventStore::Append (the single path),
 *       PostgresEventStore::AppendBatch (the batch path the runtime's
 *       Committer takes) and RunUnderSavepoint (its replay after a lost
 *       primary-key race), PostgresEventStore::AcquireFenceIfReadTail
 * and, through fence_resumer.pmh, the runtime and supervisor functions named
 * there (Runtime::ResumeImpl, Runtime::AcquireIfParked, ...).
 *
 * PostgreSQL as modelled (READ COMMITTED):
 *  - a statement reads committed data as of its start (its snapshot); the
 *    model copies what a statement reads at that step;
 *  - SELECT ... FOR SHARE / FOR UPDATE finds rows in the snapshot, waits for
 *    a conflicting lock holder to end, then reads the row's newest committed
 *    version; FOR SHARE conflicts only with FOR UPDATE;
 *  - an INSERT whose key another transaction inserted and has not committed
 *    waits for it; a committed duplicate is a unique violation (the single
 *    path reports SequenceConflict; the batch path replays request by
 *    request, whose verdict is SequenceConflict or StaleFence as well);
 *  - INSERT ... ON CONFLICT DO NOTHING waits likewise, then does nothing if
 *    the row exists;
 *  - a transaction's writes and locks vanish if its process crashes before
 *    COMMIT.
 *
 * Negative controls (-D flags; each must yield a counterexample):
 *   NO_SHARE_BATCH  the batch path reads the fence row without FOR SHARE
 *   HEAD            the acquire compares the log head with the park, not the token
 *   TOKEN_ALONE     the acquire checks the token only (no answered-park check)
 *   ONE_STATEMENT   lock, check and bump in one UPDATE, one snapshot taken
 *                   before the row lock is granted
 *   NO_PARK_ROW     the park wrote no token-0 fence row
 */

#include "fence_common.pmh"

/* Fence row state (besides `token` and the event log in fence_resumer.pmh). */
#ifdef NO_PARK_ROW
bool row = false;       /* the fence row is committed */
#else
bool row = true;
#endif
byte token = 0;         /* its committed token (0 while it does not exist) */
byte row_pend = 0;      /* a transaction's uncommitted insert of the row */
byte xlock = 0;         /* FOR UPDATE holder */
byte slock = 0;         /* FOR SHARE holders (bit per process) */
byte pend = 0;          /* a transaction's uncommitted event at head + 1 */

#define BACKEND_LOCALS byte s_head, tok; bool s_ans, lk;

inline ABORT_TXN() {
  if
  :: xlock == me -> xlock = 0
  :: else -> skip
  fi;
  slock = slock & ~BIT(me);
  if
  :: pend == me -> pend = 0
  :: else -> skip
  fi;
  if
  :: row_pend == me -> row_pend = 0
  :: else -> skip
  fi
}

/* Runtime::ReadAll: one statement, one snapshot. */
inline READ_LOG(h, ans) {
  atomic {
    h = head; ans = landed;
    printf("P%d: read the log: %d events past the park, answered %d\n", me, h, ans) }
}

/* The condition of the bump: token and answered park (D1), or a control. */
#ifdef HEAD
#define BUMP_OK(e) (s_head == 0)
#else
#ifdef TOKEN_ALONE
#define BUMP_OK(e) (cur == e)
#else
#define BUMP_OK(e) (cur == e && !s_ans)
#endif
#endif

/* Steps are cut where another process can observe the difference: a lock
 * held or released, a row inserted or committed, a snapshot taken. Statements
 * of one transaction that follow each other with no such observer between
 * them share a step (README.md, "Steps"). */

/* AcquireFenceIfReadTail: AppendSteps' statements in one implicit
 * transaction. Sets vhead/vans (the tail) in the caller. */
inline ACQUIRE_IF(e, st, cur) {
#ifdef ONE_STATEMENT
  /* ensure_fence, then the single UPDATE's snapshot, taken before it waits
   * for the row lock (its NOT EXISTS reads this snapshot) */
  if
  :: atomic { (GATE_OK && row_pend == 0) ->
       GATE_TAKE;
       if
       :: !row -> row_pend = me
       :: else -> skip
       fi;
       s_ans = landed;
       s_head = head;
       printf("P%d: UPDATE takes its snapshot (answered %d), then waits for the row\n", me, s_ans) }
  :: (landed && !GATE_OK) -> goto again
  :: CRASH()
  fi;
  /* ... the UPDATE gets the row lock and re-reads the row (only the row);
   * then fence_if_tail and COMMIT */
  if
  :: atomic { (xlock == 0 && slock == 0) ->
       cur = token;
       BUMP_AND_COMMIT(e, st, cur) }
  :: CRASH()
  fi;
#else
  /* lock_fence first, with no ensure_fence: a snapshot without the row
   * (never parked, never acquired; an insert not yet committed is not in
   * it) locks nothing, so the bump updates nothing and that transaction
   * commits nothing; the acquire goes on with a transaction that ensures
   * the row first (AcquireGroup::RunGroup). A row, once committed, stays. */
  if
  :: atomic { (GATE_OK && !row) ->
       printf("P%d: lock_fence finds no row: nothing locked or bumped; again with ensure_fence\n", me) }
  :: row -> skip
  :: CRASH()
  fi;
  /* ensure_fence (the second transaction only; a no-op on a row that
   * exists); lock_fence: SELECT token ... FOR UPDATE (waits for every
   * FOR SHARE holder) */
  if
  :: atomic { (GATE_OK && row_pend == 0 && (!row || (xlock == 0 && slock == 0))) ->
       GATE_TAKE;
       if
       :: !row -> row_pend = me
       :: else -> skip
       fi;
       xlock = me;
       cur = token;
       printf("P%d: ensure + lock the fence row FOR UPDATE: token %d, expect %d\n", me, cur, e) }
  :: (landed && !GATE_OK) -> goto again
  :: CRASH()
  fi;
  /* fence_if_bump: a new statement, so a snapshot taken after the lock was
   * granted; fence_if_tail; COMMIT */
  if
  :: atomic {
       s_ans = landed;
       s_head = head;
       BUMP_AND_COMMIT(e, st, cur) }
  :: CRASH()
  fi;
#endif
}

inline BUMP_AND_COMMIT(e, st, cur) {
  st = true;
  if
  :: BUMP_OK(e) ->
     printf("P%d: bump to %d, COMMIT\n", me, cur + 1);
     assert(!landed);      /* a body whose resume landed is never fenced out */
     cur = cur + 1;
     token = cur;
     st = false
  :: else -> printf("P%d: stale (token %d, answer seen %d), COMMIT\n", me, cur, s_ans)
  fi;
  vhead = head;
  vans = landed;
  if
  :: row_pend == me -> row = true; row_pend = 0
  :: else -> skip
  fi;
  xlock = 0;
  s_ans = false;
  s_head = 0
}

/* AppendSql / LeanAppendSql for one request of one event, as its own
 * implicit transaction. `pres`: a fence is presented (an audit append
 * presents none). FOR SHARE is taken for an answering kind (RES) past the
 * log's first event: lk (LocksFenceRow: a first append can answer no park;
 * `exp` here counts from the park, and every RES append follows its park,
 * so each is past the log's first event and locks).
 *
 * The statement, one step: its snapshot (the head probe, a plain fence read);
 * the locked CTE (FOR SHARE OF f on a row the snapshot holds: it waits for a
 * FOR UPDATE holder, then reads the newest token); the guard; the INSERT at
 * head + 1 (it waits for an uncommitted twin; a committed one is a unique
 * violation, a lost sequence). Then COMMIT, a step of its own. */
inline APPEND_STATEMENT(k, f, pres, exp, res) {
  tok = token;
  if
  :: lk && row -> slock = slock | BIT(me)
  :: else -> skip
  fi;
  if
  :: pres && f < tok -> res = STALE; slock = slock & ~BIT(me)
  :: else ->
     if
     :: exp != head + 1 -> res = SEQ; slock = slock & ~BIT(me)
     :: else -> pend = me; res = OK
     fi
  fi;
  printf("P%d: append kind %d under %d at %d (FOR SHARE %d, token read %d): %d (0 inserted, 1 stale, 2 lost sequence)\n",
         me, k, f, exp, lk, tok, res);
  tok = 0;
  lk = false
}

inline APPEND(k, f, pres, exp, res) {
  if
  :: atomic { (pend == 0 && (k != RES || !row || xlock == 0)) ->
       lk = (k == RES);   /* LocksFenceRow: an RES follows its park */
       APPEND_STATEMENT(k, f, pres, exp, res) }
#ifdef NO_SHARE_BATCH
  :: atomic { (pend == 0 && k == RES) ->
       lk = false;               /* the batch path, here without FOR SHARE */
       APPEND_STATEMENT(k, f, pres, exp, res) }
#endif
  :: CRASH()
  fi;
  /* COMMIT */
  if
  :: res == OK ->
     if
     :: atomic {
          if
          :: k == RES ->
             assert(!landed);               /* at most one RESUMED per park */
             assert(f >= token);             /* the resumed body holds the current token */
             landed = true;
             landed_fence = f
          :: else -> skip
          fi;
          head++;
          pend = 0;
          slock = slock & ~BIT(me);
          printf("P%d: COMMIT the append (token now %d)\n", me, token) }
     :: CRASH()
     fi
  :: else -> skip
  fi
}

#include "fence_resumer.pmh"
