# What the operator index (events_by_status_kind) costs raw SQLite inserts of a park/resume
# execution pattern, paired with and without it (BENCHMARKS.md, "Visibility").
#   python3 bench/visibility/index_cost.py
import sqlite3, time, os, json, statistics
IDX = ("CREATE INDEX events_by_status_kind ON events(kind, time_ms, execution_id, sequence) WHERE "
       "kind = 'EXECUTION_STARTED' OR kind = 'EXECUTION_SUSPENDED' OR kind = 'EXECUTION_COMPLETED' OR "
       "kind = 'EXECUTION_FAILED' OR kind = 'EXECUTION_CANCELLED' OR kind = 'EXECUTION_CONTINUED'")
KINDS = ["EXECUTION_STARTED", "STEP_COMPLETED", "EXECUTION_SUSPENDED", "EXECUTION_RESUMED", "STEP_COMPLETED", "EXECUTION_COMPLETED"]
def run(with_index, n=20000, batch=64):
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"idx-{with_index}.db")
    for s in ("", "-wal", "-shm"):
        if os.path.exists(path + s): os.remove(path + s)
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA synchronous=OFF")
    c.execute("CREATE TABLE events (execution_id TEXT NOT NULL, sequence INTEGER NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL, metadata TEXT NOT NULL, time_ms INTEGER NOT NULL, PRIMARY KEY (execution_id, sequence))")
    if with_index: c.execute(IDX)
    payload = json.dumps({"workflow": "order", "input": {"cents": 1999, "sku": 42}})
    t = time.perf_counter(); now = 1_700_000_000_000
    # Group commits of `batch` executions, each commit one event per execution (the runtime's pattern).
    for g in range(0, n, batch):
        for seq, kind in enumerate(KINDS, 1):
            c.execute("BEGIN")
            c.executemany("INSERT INTO events VALUES (?, ?, ?, ?, '{\"kernel\":true}', ?)",
                          [(f"order-{i:07}", seq, kind, payload, now + i) for i in range(g, min(n, g + batch))])
            c.execute("COMMIT")
    dt = time.perf_counter() - t
    c.close()
    return n * len(KINDS) / dt
rows = []
for r in range(5):
    a = run(False); b = run(True); rows.append((a, b, b / a))
    print(f"pair {r}: no index {a:,.0f} events/s, with index {b:,.0f} events/s, ratio {b/a:.3f}")
print("median ratio", statistics.median([x[2] for x in rows]))
