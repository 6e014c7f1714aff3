/*
 * boundary.pml: the sled's boundary record and its rules (issue 19, model 3;
 * seed 001 and its reviews). One sled with crashes and moves between
 * partitions, two gossip universes, three sessions whose starts are ordered
 * or concurrent, chains of two jobs each, the boundary record on the drives
 * (one atomic write, lost if the sled dies before it), the entry, flip-flop
 * and hop markers, and the birth marker.
 *
 * Stands for (each carries a comment naming this model):
 *   components/rack/src/boundary.cc   ClassifyArrival, JudgeSession, JobMayRun,
 *       AfterExecution, AfterMarker, Enter (the map of left universes and the
 *       filter of evicted ones; LEFT_MAX stands for left_universes_max)
 *   components/rack/src/sled_core.cc  SledCore::OnJoined, OnReplayDrained,
 *       OnSessionStart, Activate, EndSession, OnJobStart, AdvanceReplay,
 *       Advance, Judge, Execute (the single execution gate: the record is on
 *       the drives before the process starts), MintHopIfNeeded,
 *       OnMarkerDelivered, OnProcessExited, WriteDeferredRecord (the
 *       record-after-start control), NoteOwnStart, ClassifyStart,
 *       ResolvePreviousLives
 * models/README.md says what is abstracted and why; docs/models.md reports
 * the runs and the scope.
 *
 * Where the code and seed 001 differ, this models the code: a session is new
 * when its start is not below V (the seed: strictly above V) and above the
 * floor (the markers bounding a forgotten past); left universes go to an
 * exact map first and the filter only when evicted from it (the review's
 * capped map); after a hop a job runs only if its predecessor is above the
 * marker too (at most once per chain position); a marker is the sled's own
 * part of its version (OwnPart), not the version of the error message.
 *
 * Properties:
 *   safety        no chain position starts twice across the sled's lives
 *                 (the assert in execute)
 *   ltl live      (-DLIVE) a job whose chain position came to be after the
 *                 sled arrived in its partition (settled there since its last
 *                 move) runs there, unless its session ended first: the
 *                 simulator's liveness/not-run
 *   ltl reported  (-DSTATUSES) once everything is delivered, no job sits
 *                 Started at this sled with no process of this life behind
 *                 it: the simulator's liveness/started (a previous life's
 *                 start ends Interrupted)
 * Statuses never feed the gate and the liveness ghosts never feed anything,
 * so each is compiled in only for the property that reads it.
 *
 * Negative controls (-D flags; rack::BoundaryFlaws, the simulator's --flaw):
 *   SINGLE_VERSION     V := the last session's start, not the join   (safety)
 *   NO_FILTER_INSERT   a flip-flop overwrites the record's universe  (safety)
 *   RECORD_AFTER_START the record written after the process starts  (safety)
 *   LAZY_ENTRY         the entry marker minted at the first job      (live)
 *   UNPERSISTED_ENTRY  the entry marker kept in memory only          (live)
 *   JOIN_FRONTIER      previous-life starts by the drain's frontier  (reported)
 * Reachability checks (-D flags: an assert at a rare branch, which must fail,
 * so the property about that branch is not vacuous):
 *   REACH_THREE        the three-session flip-flop's last step: C active
 *                      again after the sled executed under C, D and then A
 *   REACH_FLIPFLOP     a return to a universe the filter holds, after the
 *                      sled executed in both
 *   REACH_SKIP_STARTED a job whose position started in an earlier life is
 *                      judged again and skipped
 *   REACH_OWED         a job owed by the live property runs
 *   REACH_LATE_START   a previous life's start delivered after the drain is
 *                      resolved (what the birth marker is for)
 *
 * Topologies (-DTOPOLOGY=N; sessions 0, 1, 2 are named as below):
 *   1  three sessions in one universe, three partitions: P0 holds A, P1 holds
 *      C (its start saw A's: A < C), P2 holds D (concurrent with A and C):
 *      the seed's partition flip-flop and three-session flip-flop
 *   2  two universes, a partition in each: P0 (universe 0) holds A, P1
 *      (universe 1) holds C: the universe flip-flop, through the map
 *      (LEFT_MAX=1) or the filter (LEFT_MAX=0)
 *   3  one partition, two sessions: P0 holds A and then B (A < B: B
 *      supersedes A there), crashes in place: a session superseded under a
 *      sled that ran its job, a previous life's start coming back late
 * One topology with all of it is the product of the three (over 10^7 states
 * measured); each schedule the seed names needs only one of them.
 */

#ifndef TOPOLOGY
#define TOPOLOGY 1
#endif
#ifndef LEFT_MAX
#define LEFT_MAX 0      /* left_universes_max: 0 sends every left universe to the filter */
#endif
#ifndef MAX_CRASHES
#define MAX_CRASHES 3   /* lives - 1 */
#endif
#ifndef MAX_MOVES
#if TOPOLOGY == 3
#define MAX_MOVES 0
#else
#define MAX_MOVES 3     /* moves of the stopped sled (each after a crash) */
#endif
#endif

#define NS 3            /* sessions */
#define NJ 2            /* jobs (chain positions) per session */
#define NJOBS 6         /* job j = session * NJ + position - 1 */
#define NONE 7          /* no session or job */
#define NOH 255         /* no version (next_from of a first position) */
#define BIT(i) (1 << (i))
#define JOB(s, k) ((s) * NJ + (k) - 1)
#define MAXH 9          /* the sled's marker heights per universe (asserted) */

#if TOPOLOGY == 1
#define NP 3
#define USED(s) 1
#define HOME(s) (s)                             /* A (0): P0, C (1): P1, D (2): P2 */
#define UNIV(p) 0
#define DOWN(s) ((s) == 1 -> 3 : BIT(s))        /* the starts at or below s's: C saw A */
#define PREDS_HERE(s) 0                         /* earlier starts its partition delivers first */
#elif TOPOLOGY == 2
#define NP 2
#define USED(s) ((s) != 2)
#define HOME(s) ((s) == 2 -> 0 : (s))           /* A (0): P0, C (1): P1 */
#define UNIV(p) (p)                             /* P0: universe 0, P1: universe 1 */
#define DOWN(s) BIT(s)
#define PREDS_HERE(s) 0
#elif TOPOLOGY == 3
#define NP 1
#define USED(s) ((s) != 2)
#define HOME(s) 0                               /* A (0), B (1): P0 */
#define UNIV(p) 0
#define DOWN(s) ((s) == 1 -> 3 : BIT(s))        /* B saw A */
#define PREDS_HERE(s) ((s) == 1 -> 1 : 0)       /* P0 delivers A's start before B's */
#endif

/* Every session of partition p started, every job submitted. */
#define AT(s, p) (USED(s) && HOME(s) == (p))     /* session s lives in partition p */
#define COMPLETE(p) ((!AT(0, p) || ((screated & 1) && jcr[0] == NJ)) && \
                     (!AT(1, p) || ((screated & 2) && jcr[1] == NJ)) && \
                     (!AT(2, p) || ((screated & 4) && jcr[2] == NJ)))

/* ---- Versions ----
 * A marker is kept as the sled's own part of its version (SledCore::OwnPart):
 * the height of the sled's event in its gossip party, which the bookmark
 * keeps across lives. A message is above it iff its creator had seen a sled
 * event at that height or later. Heights count the sled's markers per
 * universe (xh), so "above marker m" is "h >= m", and a list of markers is
 * tested by its oldest (lowest) one: floor and markers are kept as their
 * minimum, 0 when empty (the lists never reach kMarkersMax = 3 here: one
 * floor marker per entry into a forgotten past, one lightcone marker after a
 * hop). Session starts compare by their down-sets: Leq(start(s), V) iff s is
 * at or below a session whose start V joined, so V is the union of DOWN(s)
 * over the executed sessions.
 */
typedef Uni {
  byte V;   /* bit s: start(s) <= V */
  byte S;   /* the session of the last executed job + 1 (0: none) */
  byte L;   /* its chain position (the successor is L + 1) */
  byte F;   /* floor: the oldest marker's height (0: empty) */
  byte M;   /* lightcone markers: the oldest one's height (0: empty) */
  byte PS;  /* the left session (one kept, LEFT_SESSIONS=1): session + 1 (0: none) */
  byte PL;  /* its last executed position */
}
typedef Rec {
  Uni b[2];       /* per universe: `here` (net) or the map's entry (inmap) */
  byte net;       /* 1 + the universe `here` is about (0: an empty record) */
  bit ran;        /* amnesia kNone (0: kUntilFirstExecution, a new sled) */
  bit inmap[2];   /* in the map of left universes (`left`) */
  bit filt[2];    /* in the filter of evicted universes (`evicted`) */
}

/* ---- The rack ---- */
byte screated;          /* sessions started */
byte sh[NS];            /* the sled height each start saw */
byte jcr[NS];           /* jobs submitted per session (positions 1..jcr) */
byte jh[NJOBS];         /* the sled height each job saw */
byte ph[NP];            /* the sled height each partition has seen */

/* ---- The sled: the drives and the gossip bookmark, kept across lives ---- */
Rec mem;                /* SledCore::record_ */
Rec disk;               /* what the locker holds */
byte xh[2];             /* the sled's height per universe */
byte crashes, moves;

/* ---- The sled: one life ---- */
bit up;
byte part;              /* its partition (it moves only while down) */
bit drained;            /* ReplayDrained came */
byte pend;              /* the marker being minted: 0, P_ENTRY, P_FLIP, P_HOP */
byte act = NONE;        /* the active session */
byte nxt;               /* the chain's next position */
byte nfrom = NOH;       /* next_from: the height of the job that derived nxt */
byte rpl;               /* replay until this position (0: none) */
byte rpos;              /* the replay's cursor */
byte dS;                /* session starts delivered */
byte dJ[NS];            /* jobs delivered per session (in chain order) */
byte xthis;             /* jobs started in this life (executed_) */
byte xb;                /* its height when this life's LifeMarker was sent */
bit deferred;           /* RECORD_AFTER_START: record_ not on the drives yet */

/* ---- The property ---- */
byte started;           /* chain positions ever started */

#define P_ENTRY 1
#define P_FLIP 2
#define P_HOP 3

#ifndef LEFT_SESSIONS
#define LEFT_SESSIONS 1   /* left sessions kept per universe (kLeftSessionsMax; 0: V alone) */
#endif
#define V_RESUME 1
#define V_NEW 2
#define V_GATED 3
#define V_HOP 4
#define V_PAST 5   /* kPastForgotten: not below V, not above the floor */

#define G_HOLD 0
#define G_RUN 1
#define G_SKIP 2

#define A_KNOWN 0
#define A_NEW 1
#define A_ENTRY 2
#define A_FLIP 3

/* Scratch: written before it is read within each step, so not state. */
hidden byte t_j, t_k, t_v, t_g, t_i, t_x, t_s, t_m;

#define HERE UNIV(part)
#define KNOWN(u) (mem.net == (u) + 1 || mem.inmap[u])
#define AMNESIC (!mem.ran)

/* ---- Statuses (for the reported property only) ---- */
#ifdef STATUSES
#define S_NONE 0        /* by strength (Stronger) */
#define S_REFUSED 1
#define S_QUEUED 2
#define S_STARTED 3
#define S_TERMINAL 4    /* Stopped, Skipped, Cancelled, Interrupted, Error */
byte pst;               /* the sled's JobStarted events its partitions hold */
byte pen;               /* its terminal statuses they hold */
byte dSt;               /* own JobStarted events delivered in this life */
byte dEn;               /* own terminal statuses delivered in this life */
byte ost[NJOBS];        /* the sled's status of each job, as this life knows it */
byte sentE;             /* terminal statuses reported in this life */
byte prevS;             /* previous_life_starts_ */
byte punres;            /* passed_unresolved_ */
#ifdef JOIN_FRONTIER
byte unclass;           /* unclassified_starts_ */
byte jf;                /* the jobs delivered when the drain came */
#endif
/* A status this sled reports (ReportIfStronger) that ends the job here. */
inline report_terminal(j) {
  if
  :: ost[j] != S_TERMINAL -> ost[j] = S_TERMINAL; sentE = sentE | BIT(j)
  :: else -> skip
  fi
}
#define AT_LEAST(j, st) if :: ost[j] < st -> ost[j] = st :: else -> skip fi
#define PASSED_UNRESOLVED(j) punres = punres | BIT(j)
/* SledCore::ResolvePreviousLives (ResolvePassed gives Interrupted, the
 * recorded outcome or Skipped{already executed}: all terminal). */
inline resolve_previous_lives() {
  t_i = 0;
  do
  :: t_i < NJOBS ->
     if
     :: (prevS | punres) & BIT(t_i) ->
        printf("  sled resolves job %d of a previous life (Interrupted or its outcome)\n", t_i);
        report_terminal(t_i)
     :: else -> skip
     fi;
     t_i++
  :: else -> break
  od;
  prevS = 0; punres = 0
}
/* SledCore::ClassifyStart, for a start of this baseboard this life did not make. */
inline classify_start(j) {
  if :: ost[j] != S_TERMINAL -> prevS = prevS | BIT(j) :: else -> skip fi
}
#else
#define report_terminal(j) skip
#define AT_LEAST(j, st) skip
#define PASSED_UNRESOLVED(j) skip
#define resolve_previous_lives() skip
#endif

/* ---- Arrival and what is owed (for the live property only) ---- */
#ifdef LIVE
bit arrived;            /* settled in its partition since its last move */
byte posnew;            /* chain positions that came to be after the arrival */
byte owed;              /* jobs at such positions, not run, not ended with their session */
#define OWED_CLEAR(j) owed = owed & ~BIT(j)
#define LOSE_ARRIVAL arrived = 0; posnew = 0; owed = 0
#define POSITION_CAME(j) if :: arrived -> posnew = posnew | BIT(j) :: else -> skip fi
#define OWE(j) if :: posnew & BIT(j) -> owed = owed | BIT(j) :: else -> skip fi
#else
#define OWED_CLEAR(j) skip
#define LOSE_ARRIVAL skip
#define POSITION_CAME(j) skip
#define OWE(j) skip
#endif

/* ---- The record ---- */

inline reset_uni(x) { x.V = 0; x.S = 0; x.L = 0; x.F = 0; x.M = 0; x.PS = 0; x.PL = 0 }
inline copy_uni(d, s) { d.V = s.V; d.S = s.S; d.L = s.L; d.F = s.F; d.M = s.M; d.PS = s.PS; d.PL = s.PL }
inline copy_rec(d, s) {
  copy_uni(d.b[0], s.b[0]); copy_uni(d.b[1], s.b[1]);
  d.net = s.net; d.ran = s.ran;
  d.inmap[0] = s.inmap[0]; d.inmap[1] = s.inmap[1];
  d.filt[0] = s.filt[0]; d.filt[1] = s.filt[1]
}
/* BoundaryStore::Record: both drives, durable when it returns; a crash
 * during it leaves the old record (the locker adopts one of the two). */
inline write_record() { copy_rec(disk, mem) }

/* Enter (boundary.cc): whenever the record's universe changes, the old one
 * goes into the map first, the oldest of the map into the filter. */
inline enter(u) {
  if
  :: mem.net == u + 1 -> skip
  :: else ->
     if
     :: mem.inmap[u] -> mem.inmap[u] = 0        /* its boundary comes back */
     :: else -> reset_uni(mem.b[u])
     fi;
     if
     :: mem.net != 0 ->
#if LEFT_MAX == 0
        mem.filt[mem.net - 1] = 1; reset_uni(mem.b[mem.net - 1])
#else
        mem.inmap[mem.net - 1] = 1             /* two universes: the map never overflows */
#endif
     :: else -> skip
     fi;
     mem.net = u + 1
  fi
}

/* ClassifyArrival (boundary.cc) */
inline classify_arrival(u, out) {
  if
  :: KNOWN(u) -> out = A_KNOWN
  :: else ->
     if
#ifdef LAZY_ENTRY
     :: AMNESIC -> out = A_NEW                 /* the rejected design mints nothing now */
#else
     :: AMNESIC -> out = A_ENTRY
#endif
     :: else -> if :: mem.filt[u] -> out = A_FLIP :: else -> out = A_NEW fi
     fi
  fi
}

/* JudgeSession (boundary.cc) */
inline judge_session(u, s, out) {
  if
  :: !KNOWN(u) -> if :: AMNESIC || mem.filt[u] -> out = V_HOP :: else -> out = V_NEW fi
  :: else ->
     if
     :: mem.b[u].S == s + 1 -> out = V_RESUME
     :: LEFT_SESSIONS && mem.b[u].PS == s + 1 -> out = V_RESUME   /* a left session: exact */
     :: else ->
        if
        :: !(mem.b[u].V & BIT(s)) ->
           if
           :: mem.b[u].F == 0 || sh[s] >= mem.b[u].F -> out = V_NEW
#ifdef REHOP_PAST
           /* the rejected design: held to the lightcone like a session below V */
           :: else -> if :: mem.b[u].M != 0 -> out = V_GATED :: else -> out = V_HOP fi
#else
           :: else -> out = V_PAST
#endif
           fi
        :: else -> if :: mem.b[u].M != 0 -> out = V_GATED :: else -> out = V_HOP fi
        fi
     fi
  fi
}

/* AfterExecution (boundary.cc) */
inline after_execution(u, s, k) {
  enter(u);
#ifdef SINGLE_VERSION
  mem.b[u].V = DOWN(s);                 /* the rejected design: the last session's start */
#else
  mem.b[u].V = mem.b[u].V | DOWN(s);    /* V joins every executed session's start */
#endif
  /* LeaveSession: the recorded chain becomes the left session (the entry of
   * s, if it was that one, comes out); with none kept, it is forgotten. */
  if
  :: mem.b[u].S != s + 1 && LEFT_SESSIONS && mem.b[u].S != 0 ->
     mem.b[u].PS = mem.b[u].S; mem.b[u].PL = mem.b[u].L
  :: mem.b[u].S != s + 1 && !(LEFT_SESSIONS && mem.b[u].S != 0) && mem.b[u].PS == s + 1 ->
     mem.b[u].PS = 0; mem.b[u].PL = 0
  :: else -> skip
  fi;
  mem.b[u].S = s + 1; mem.b[u].L = k;
  mem.b[u].M = 0;       /* the lightcone gates only the first execution after re-entry */
  mem.ran = 1
}

/* AfterMarker (boundary.cc): the marker of height h, kind t_v. */
inline after_marker(u, h) {
  t_x = KNOWN(u);
#ifdef NO_FILTER_INSERT
  if
  :: t_v == P_FLIP ->                   /* the rejected design: the old universe is forgotten */
     if :: mem.net != 0 -> reset_uni(mem.b[mem.net - 1]) :: else -> skip fi;
     mem.net = u + 1; reset_uni(mem.b[u])
  :: else -> enter(u)
  fi;
#else
  enter(u);
#endif
  if :: t_v == P_HOP && !t_x && AMNESIC -> t_v = P_ENTRY :: else -> skip fi;
  if
  :: t_v == P_HOP -> mem.b[u].M = h
  :: else ->                            /* entry, flip-flop: it bounds a forgotten past */
     if :: mem.b[u].F == 0 -> mem.b[u].F = h :: else -> skip fi;
     if :: mem.b[u].M == 0 -> mem.b[u].M = h :: else -> skip fi
  fi
}

/* ---- The sled core ---- */

/* A marker's message is sent: the sled's next height in its universe. */
inline mint(kind) {
  xh[HERE]++;
  assert(xh[HERE] <= MAXH);
  pend = kind;
  printf("  sled mints marker kind %d (1 entry, 2 flip-flop, 3 hop) at height %d\n", kind, xh[HERE])
}

/* SledCore::MintHopIfNeeded; t_g: at the gate. */
inline mint_hop_if_needed() {
  if
  :: drained && pend == 0 && act != NONE ->
     judge_session(HERE, act, t_v);
     if
     :: t_v == V_HOP ->
#ifdef LAZY_ENTRY
        if
        :: !t_g && AMNESIC && !KNOWN(HERE) -> skip   /* the rejected design waits for a job */
        :: else -> mint(P_HOP)
        fi
#else
        mint(P_HOP)
#endif
     :: else -> skip
     fi
  :: else -> skip
  fi
}

/* SledCore::Judge for job j at the chain's head: t_g := the gate. */
inline judge(j) {
  if
  :: !drained || pend != 0 -> t_g = G_HOLD
  :: else ->
     judge_session(HERE, act, t_v);
     if
     :: t_v == V_HOP -> t_g = 1; mint_hop_if_needed(); t_g = G_HOLD
     :: t_v == V_RESUME || t_v == V_NEW -> t_g = G_RUN
     :: t_v == V_GATED ->      /* JobMayRun: it and its predecessor above a marker */
        if
        :: jh[j] >= mem.b[HERE].M && nfrom != NOH && nfrom >= mem.b[HERE].M -> t_g = G_RUN
        :: else -> t_g = G_SKIP
        fi
     :: t_v == V_PAST ->       /* JobMayRun: both above a floor or lightcone marker */
        t_m = mem.b[HERE].F;
        if :: mem.b[HERE].M != 0 && mem.b[HERE].M < t_m -> t_m = mem.b[HERE].M :: else -> skip fi;
        if
        :: jh[j] >= t_m && nfrom != NOH && nfrom >= t_m -> t_g = G_RUN
        :: else -> t_g = G_SKIP
        fi
     fi
  fi
}

/* SledCore::Execute, THE EXECUTION GATE: the record naming the job is on the
 * drives before its process starts. */
inline execute(j) {
  after_execution(HERE, act, nxt);
#ifdef RECORD_AFTER_START
  deferred = 1;                         /* the rejected design: written at the next input */
#else
  write_record();
#endif
  printf("  sled STARTS job %d (session %d position %d); record: V %d session %d last %d floor %d markers %d\n",
         j, act, nxt, mem.b[HERE].V, mem.b[HERE].S - 1, mem.b[HERE].L, mem.b[HERE].F,
         mem.b[HERE].M);
  assert(!(started & BIT(j)));          /* no chain position starts twice */
#if defined(REACH_OWED) && defined(LIVE)
  assert(!(owed & BIT(j)));
#endif
  started = started | BIT(j);
  xthis = xthis | BIT(j);
  OWED_CLEAR(j);
  AT_LEAST(j, S_STARTED);
  report_terminal(j)    /* its process ends (OnProcessExited) */
}

/* SledCore::Advance, with AdvanceReplay first. */
inline advance() {
  do
  :: act != NONE && rpl != 0 && dJ[act] >= rpos ->
     t_j = JOB(act, rpos);
     if :: drained -> report_terminal(t_j) :: else -> PASSED_UNRESOLVED(t_j) fi;
     if :: rpos == rpl -> rpl = 0; rpos = 0 :: else -> rpos++ fi
  :: else -> break
  od;
  do
  :: act != NONE && rpl == 0 && nxt <= NJ && dJ[act] >= nxt ->
     t_j = JOB(act, nxt);
     judge(t_j);
     if
     :: t_g == G_HOLD -> break
     :: t_g == G_RUN ->
        if
        :: xthis & BIT(t_j) -> report_terminal(t_j)   /* "already executed" */
        :: else -> execute(t_j)
        fi
     :: t_g == G_SKIP ->                                /* Skipped{lightcone} */
        printf("  sled skips job %d (height %d, predecessor %d, markers %d)\n", t_j, jh[t_j],
               nfrom, mem.b[HERE].M);
#ifdef REACH_SKIP_STARTED
        assert(!(started & BIT(t_j)));
#endif
        report_terminal(t_j)
     fi;
     nfrom = (nxt < NJ -> jh[t_j] : NOH); nxt++   /* past the chain's end: nothing derives */
  :: else -> break
  od;
  skip                  /* a loop's exit must stay inside the d_step */
}

/* SledCore::EndSession: the active session's queued jobs are Cancelled. */
inline end_session() {
  t_k = (rpl != 0 -> rpos : nxt);
  do
  :: t_k <= dJ[act] ->
     t_j = JOB(act, t_k);
     report_terminal(t_j);
     OWED_CLEAR(t_j);
     t_k++
  :: else -> break
  od;
  /* A job of the ended session skipped before the news came is no longer
   * owed either: nobody may expect it to run (sled_core: EndSession). */
  t_k = 1;
  do
  :: t_k <= NJ -> OWED_CLEAR(JOB(act, t_k)); t_k++
  :: else -> break
  od;
  act = NONE; nxt = 0; nfrom = NOH; rpl = 0; rpos = 0
}

/* SledCore::Activate: the recorded session resumes by chain position. */
inline activate(s) {
  act = s; nxt = 1; nfrom = NOH; rpl = 0; rpos = 1;
  judge_session(HERE, s, t_v);
  printf("  session %d (start height %d) active: verdict %d (1 resume, 2 new, 3 gated, 4 hop)\n",
         s, sh[s], t_v);
#ifdef REACH_THREE
  assert(!(s == 1 && (mem.b[HERE].V & 7) == 7 && mem.b[HERE].S == 1));
#endif
  if
  :: t_v == V_RESUME && mem.b[HERE].S == s + 1 -> nxt = mem.b[HERE].L + 1; rpl = mem.b[HERE].L
  :: t_v == V_RESUME && mem.b[HERE].S != s + 1 -> nxt = mem.b[HERE].PL + 1; rpl = mem.b[HERE].PL
  :: else -> rpos = 0
  fi;
  t_g = 0; mint_hop_if_needed()
}

/* The start of every input (SledCore::Handle). */
inline handle() {
#ifdef RECORD_AFTER_START
  if :: deferred -> write_record(); deferred = 0 :: else -> skip fi
#else
  skip
#endif
}

#ifdef LIVE
/* Settled (the simulator's settle, for this sled): drained, no marker in
 * flight, every event of its partition delivered. */
#define DELIVERED_ALL(p) \
  ((screated & PMASK(p)) == (dS & PMASK(p)) && \
   (!AT(0, p) || dJ[0] == jcr[0]) && (!AT(1, p) || dJ[1] == jcr[1]) && \
   (!AT(2, p) || dJ[2] == jcr[2]))
#define PMASK(p) ((AT(0, p) -> 1 : 0) | (AT(1, p) -> 2 : 0) | (AT(2, p) -> 4 : 0))
#define SETTLED (up && drained && pend == 0 && DELIVERED_ALL(part))
#endif

#define CAN_START(s) (AT(s, part) && (screated & BIT(s)) && !(dS & BIT(s)) && \
                      (dS & PREDS_HERE(s)) == PREDS_HERE(s))
#define CAN_JOB(s, k) (AT(s, part) && jcr[s] >= k && (dS & BIT(s)) && dJ[s] == k - 1)
#ifdef STATUSES
#define CAN_OWN_START(j) (AT((j) / NJ, part) && dJ[(j) / NJ] > (j) % NJ && \
                          (pst & BIT(j)) && !(dSt & BIT(j)))
#define CAN_OWN_END(j) (AT((j) / NJ, part) && dJ[(j) / NJ] > (j) % NJ && \
                        (pen & BIT(j)) && !(dEn & BIT(j)))
#define CAN_OWN(j) (CAN_OWN_START(j) || CAN_OWN_END(j))
#define CAN_OWN_ANY (CAN_OWN(0) || CAN_OWN(1) || CAN_OWN(2) || CAN_OWN(3) || CAN_OWN(4) || \
                     CAN_OWN(5))
#else
#define CAN_OWN_ANY 0
#endif
/* Something its partition holds can be delivered now. After the drain a
 * delivery comes before the rack's next submission (the same schedules
 * with the submission first only differ by what a crash before the
 * delivery forgets, which is what a crash before the submission gives). */
#define CAN_DELIVER \
  (up && pend == 0 && (CAN_START(0) || CAN_START(1) || CAN_START(2) || \
   CAN_JOB(0, 1) || CAN_JOB(0, 2) || CAN_JOB(1, 1) || CAN_JOB(1, 2) || CAN_JOB(2, 1) || \
   CAN_JOB(2, 2) || CAN_OWN_ANY))
#define RACK_MAY (up && !(drained && CAN_DELIVER))

/* Delivery of a session start (SledCore::OnSessionStart) in causal order:
 * after the earlier starts its partition holds; a later start supersedes.
 * At most one start can be delivered at a time in every topology. */
inline deliver_start(s) {
  handle();
  printf("sled delivers session %d's start\n", s);
  dS = dS | BIT(s);
  if :: act != NONE -> end_session() :: else -> skip fi;
  activate(s)
}

/* Delivery of a job (SledCore::OnJobStart) after its session's start and its
 * predecessor; a job of a session that is not active is refused (RefuseJob). */
inline deliver_job(s) {
  handle();
  dJ[s]++;
  t_j = JOB(s, dJ[s]);
  printf("sled delivers job %d (session %d position %d, height %d)\n", t_j, s, dJ[s], jh[t_j]);
  if
  :: act != s -> AT_LEAST(t_j, S_REFUSED); OWED_CLEAR(t_j)
  :: else -> AT_LEAST(t_j, S_QUEUED); advance()
  fi
}
#define CAN_NEXT_JOB(s) CAN_JOB(s, dJ[s] + 1)
#define CAN_JOB_ANY (CAN_NEXT_JOB(0) || CAN_NEXT_JOB(1) || CAN_NEXT_JOB(2))

#ifdef STATUSES
#ifdef JOIN_FRONTIER
/* The rejected design: a start is a previous life's iff its version is at or
 * below the frontier the drain saw. That version is above the job's, so a
 * job delivered only after the drain puts it above. */
#define NOTE_OWN_START(j) \
  if \
  :: xthis & BIT(j) -> skip \
  :: !drained -> unclass = unclass | BIT(j) \
  :: else -> if :: jf & BIT(j) -> classify_start(j) :: else -> skip fi; \
             resolve_previous_lives() \
  fi
#else
/* The birth marker: a start of this baseboard this life did not make is not
 * above this life's birth marker, so it is a previous life's. */
#define NOTE_OWN_START(j) \
  if \
  :: xthis & BIT(j) -> skip \
  :: else -> classify_start(j); if :: drained -> REACHED_LATE(j); resolve_previous_lives() \
                                   :: else -> skip fi \
  fi
#ifdef REACH_LATE_START
#define REACHED_LATE(j) assert(!(prevS & BIT(j)))
#else
#define REACHED_LATE(j) skip
#endif
#endif
/* This sled's own JobStarted (SledCore::NoteOwnStart) and terminal statuses
 * (Learn) coming back through gossip, after the job itself. */
#define DELIVER_OWN(s, k) \
  :: d_step { up && pend == 0 && CAN_OWN_START(JOB(s, k)) -> \
       handle(); \
       t_j = JOB(s, k); \
       printf("sled delivers its own JobStarted of job %d\n", t_j); \
       dSt = dSt | BIT(t_j); \
       AT_LEAST(t_j, S_STARTED); \
       NOTE_OWN_START(t_j) } \
  :: d_step { up && pend == 0 && CAN_OWN_END(JOB(s, k)) -> \
       handle(); \
       t_j = JOB(s, k); \
       printf("sled delivers its own end of job %d\n", t_j); \
       dEn = dEn | BIT(t_j); \
       ost[t_j] = S_TERMINAL; \
       prevS = prevS & ~BIT(t_j) }
#else
#define DELIVER_OWN(s, k)
#endif

bit placed;

active proctype sled() {
  atomic {                              /* the first life's partition */
#ifdef START
    part = START;                       /* fixed (a reachability check's shortcut) */
#else
    if
    :: part = 0
#if NP > 1
    :: part = 1
#endif
#if NP > 2
    :: part = 2
#endif
    fi;
#endif
    placed = 1
  };
end:
  do
  /* The process starts: SledCore::OnJoined. The birth LifeMarker is sent
   * (for an amnesic record it is the entry marker); a universe in the
   * filter gets a UniverseFlipFlop marker. */
  :: d_step { !up ->
       printf("sled boots in partition %d (universe %d); record: net %d ran %d map %d%d filter %d%d\n",
              part, HERE, mem.net - 1, mem.ran, mem.inmap[0], mem.inmap[1], mem.filt[0],
              mem.filt[1]);
       up = 1;
       xb = (COMPLETE(part) -> 0 : xh[HERE]);
       classify_arrival(HERE, t_v);
       if
       :: t_v == A_ENTRY -> mint(P_ENTRY)
       :: t_v == A_FLIP ->
#ifdef REACH_FLIPFLOP
          assert(false);
#endif
          mint(P_FLIP)
       :: else -> skip
       fi }

  /* A crash: the life's memory is gone (the record is read again from the
   * drives, a running process is killed). Its partition holds what the
   * sled's gossip had spread: (STATUSES) any of its status events. (Its
   * height too, but only a submission reads that, and one after the crash
   * can hear any height before it.) */
  :: atomic { up && crashes < MAX_CRASHES ->
#ifdef STATUSES
       if :: pst = pst | xthis :: skip fi;
       if :: pen = pen | sentE :: skip fi;
#endif
       d_step {
       printf("sled CRASHES\n");
       crashes++;
       up = 0;
       copy_rec(mem, disk);
       deferred = 0;
       drained = 0; pend = 0; act = NONE; nxt = 0; nfrom = NOH; rpl = 0; rpos = 0;
       dS = 0; dJ[0] = 0; dJ[1] = 0; dJ[2] = 0;
       xthis = 0; xb = 0;
#ifdef STATUSES
       dSt = 0; dEn = 0; sentE = 0; prevS = 0; punres = 0;
       ost[0] = 0; ost[1] = 0; ost[2] = 0; ost[3] = 0; ost[4] = 0; ost[5] = 0;
#ifdef JOIN_FRONTIER
       unclass = 0; jf = 0;
#endif
#endif
       skip } }

  /* A move of the stopped sled to another partition. */
#if NP > 1
  :: d_step { !up && moves < MAX_MOVES && part != 0 -> moves++; part = 0; LOSE_ARRIVAL;
              printf("sled moves to partition 0\n") }
  :: d_step { !up && moves < MAX_MOVES && part != 1 -> moves++; part = 1; LOSE_ARRIVAL;
              printf("sled moves to partition 1\n") }
#endif
#if NP > 2
  :: d_step { !up && moves < MAX_MOVES && part != 2 -> moves++; part = 2; LOSE_ARRIVAL;
              printf("sled moves to partition 2\n") }
#endif

  /* SledCore::OnReplayDrained: a reconciliation with a peer completed
   * (however much that peer lagged), or the timeout passed. RenewLostMarker
   * never fires here: the ceiling holds this life's LifeMarker, above every
   * earlier marker of the same party. */
  :: d_step { up && pend == 0 && !drained ->
       handle();
       printf("sled: replay drained\n");
       drained = 1;
#if defined(STATUSES) && defined(JOIN_FRONTIER)
       jf = 0; t_i = 0;
       do
       :: t_i < NJOBS -> if :: dJ[t_i / NJ] > t_i % NJ -> jf = jf | BIT(t_i) :: else -> skip fi; t_i++
       :: else -> break
       od;
       t_i = 0;
       do
       :: t_i < NJOBS -> if :: unclass & BIT(t_i) -> classify_start(t_i) :: else -> skip fi; t_i++
       :: else -> break
       od;
       unclass = 0;
#endif
       resolve_previous_lives();
       t_g = 0; mint_hop_if_needed();
       advance() }

  /* SledCore::OnMarkerDelivered: the marker comes back; the record naming
   * it is written. */
  :: d_step { up && pend != 0 ->
       handle();
       t_v = pend; t_k = pend;
       pend = 0;
       after_marker(HERE, xh[HERE]);
       printf("sled: marker %d back; record: V %d session %d last %d floor %d markers %d\n",
              xh[HERE], mem.b[HERE].V, mem.b[HERE].S - 1, mem.b[HERE].L, mem.b[HERE].F,
              mem.b[HERE].M);
#ifdef UNPERSISTED_ENTRY
       if :: t_k == P_ENTRY -> skip :: else -> write_record() fi;   /* the rejected design */
#else
       write_record();
#endif
       t_g = 0; mint_hop_if_needed();
       advance() }

  /* Deliveries: the one start that can come, and the next job of the first
   * or of the last chain that can move (two chains at most move at once:
   * every order of their jobs is one of these choices at each step). */
  :: d_step { up && pend == 0 && (CAN_START(0) || CAN_START(1) || CAN_START(2)) ->
       t_s = (CAN_START(0) -> 0 : (CAN_START(1) -> 1 : 2));
       deliver_start(t_s) }
  :: d_step { up && pend == 0 && CAN_JOB_ANY ->
       t_s = (CAN_NEXT_JOB(0) -> 0 : (CAN_NEXT_JOB(1) -> 1 : 2));
       deliver_job(t_s) }
  :: d_step { up && pend == 0 && CAN_JOB_ANY ->
       t_s = (CAN_NEXT_JOB(2) -> 2 : (CAN_NEXT_JOB(1) -> 1 : 0));
       deliver_job(t_s) }
  DELIVER_OWN(0, 1)
  DELIVER_OWN(0, 2)
  DELIVER_OWN(1, 1)
  DELIVER_OWN(1, 2)
  DELIVER_OWN(2, 1)
  DELIVER_OWN(2, 2)

#ifdef LIVE
  /* The rack settles around the sled: its partition has every sled event. */
  :: d_step { !arrived && SETTLED ->
       ph[part] = (COMPLETE(part) -> 0 : xh[HERE]);
       arrived = 1;
       printf("sled settled in partition %d: arrived (later positions are owed)\n", part) }
#endif
  od
}

/* ---- The rack ---- */

/* Before a submission, the partition may have heard more of the sled: one
 * of its events of this life, each at least as high as its LifeMarker (xb:
 * above every earlier marker, wherever it was minted). */
inline hear_sled() {
  if
  :: skip
  :: ph[part] < xh[HERE] ->
     if :: ph[part] < xb -> ph[part] = xb :: else -> skip fi;
     do :: ph[part] < xh[HERE] -> ph[part]++ :: break od
  fi
}

/* A session starts in its partition. Only where the sled is: what a
 * partition does while the sled is elsewhere is the same as doing it just
 * before the sled comes. Its start saw what its partition had seen, and the
 * starts below it with what they had seen (an earlier start from another
 * partition crossed into this one before it; one not started yet starts
 * now in its own partition). */
#define START_SESSION(s) \
  :: atomic { RACK_MAY && AT(s, part) && !(screated & BIT(s)) -> \
       hear_sled(); \
       d_step { \
       t_x = ph[HOME(s)]; \
       t_i = 0; \
       do \
       :: t_i < NS -> \
          if \
          :: t_i != s && (DOWN(s) & BIT(t_i)) -> \
             if \
             :: !(screated & BIT(t_i)) -> screated = screated | BIT(t_i); sh[t_i] = ph[HOME(t_i)] \
             :: else -> skip \
             fi; \
             if :: sh[t_i] > t_x -> t_x = sh[t_i] :: else -> skip fi \
          :: else -> skip \
          fi; \
          t_i++ \
       :: else -> break \
       od; \
       screated = screated | BIT(s); sh[s] = t_x; ph[HOME(s)] = t_x; \
       printf("rack: session %d starts in partition %d at height %d\n", s, HOME(s), t_x); \
       POSITION_CAME(JOB(s, 1)); \
       forget_dead() } }

/* Once every session of a partition started and every job was submitted
 * there, what it heard of the sled is never read again. */
inline forget_dead() {
  if :: COMPLETE(part) -> ph[part] = 0; xb = 0 :: else -> skip fi
}

/* A client submits the job at a session's next chain position. */
#define SUBMIT_JOB(s) \
  :: atomic { RACK_MAY && AT(s, part) && (screated & BIT(s)) && jcr[s] < NJ -> \
       hear_sled(); \
       d_step { \
       jcr[s]++; \
       t_j = JOB(s, jcr[s]); \
       jh[t_j] = ph[part]; \
       printf("rack: job %d submitted (session %d position %d) at height %d\n", t_j, s, jcr[s], \
              jh[t_j]); \
       OWE(t_j); \
       if :: jcr[s] < NJ -> POSITION_CAME(t_j + 1) :: else -> skip fi; \
       forget_dead() } }

active proctype rack() {
  placed;
end:
  do
  START_SESSION(0)
  START_SESSION(1)
  START_SESSION(2)
  SUBMIT_JOB(0)
  SUBMIT_JOB(1)
  SUBMIT_JOB(2)
  od
}

#ifdef LIVE
ltl live { [] <> (owed == 0) }
#endif
#ifdef STATUSES
#define ZOMBIE(j) (ost[j] == S_STARTED)   /* no process outlives its start step */
ltl reported { [] <> !(ZOMBIE(0) || ZOMBIE(1) || ZOMBIE(2) || ZOMBIE(3) || ZOMBIE(4) || ZOMBIE(5)) }
#endif
