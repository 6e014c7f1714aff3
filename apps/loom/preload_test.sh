#!/usr/bin/env bash
# `loom bench --preload N` on memory and SQLite with a small N (ctest:
# loom_preload_test): the preload verifies itself (verified=ok), the paired
# ratio and the inspect and list lines are printed, and the kept SQLite
# file reads back through `loom list` and `loom show` as N finished
# executions of 10 events each, oldest first by id. Without --keep-preload
# the file is removed; --retention deletes the preloaded executions only.
# With ONCE_TEST_POSTGRES_URL, PostgreSQL too. Then the pipelined case
# (unfenced_pipelined) on every backend at hand.
#
#   preload_test.sh path/to/loom
set -uo pipefail
loom=$1
work=$(mktemp -d /tmp/loom-preload.XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0 passes=0
check() {  # check WHAT CONDITION...
  local what=$1; shift
  if "$@"; then passes=$((passes + 1)); else fails=$((fails + 1)); echo "FAIL: $what"; fi
}
has() { grep -q -- "$1" <<<"$out"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" <<<"$out"; }

n=300
bench=(bench --preload "$n" --runs 1 --warm-up-runs 0 --executions 100 --concurrency 8
       --case unfenced --inspects 20 --dir "$work")
out=$("$loom" "${bench[@]}" --backend memory sqlite --keep-preload 2>"$work/err"); rc=$?
check "bench --preload exits 0 (got $rc: $(tail -3 "$work/err"))" [ "$rc" = 0 ]
for backend in memory sqlite; do
  check "$backend: the preload verified itself" \
    has "loom-preload backend=$backend executions=$n events=$((n * 10)) .* verified=ok"
  check "$backend: the paired ratio to the fresh store" \
    has "loom-bench-ratio backend=$backend case=unfenced@$n base=unfenced"
  check "$backend: inspect percentiles" \
    has "loom-preload-inspect backend=$backend executions=$n samples=20 "
done
check "sqlite: list percentiles" has "loom-preload-list backend=sqlite executions=$n samples=50 "
check "memory: the first touch of memory after the preload, positive" \
  grep -Eq '^loom-preload-raw backend=memory first_touch_us_per_4k_page=[0-9.]*[1-9][0-9.]* first_touch_us_per_2m_page=[0-9.]*[1-9][0-9.]*$' <<<"$out"
check "sqlite: no first touch (its memory is the library's and the server's)" \
  bash -c '! grep -q "^loom-preload-raw backend=sqlite" <<<"$1"' _ "$out"
db=$(sed -n 's/^loom-preload backend=sqlite .* store=\(.*\)$/\1/p' <<<"$out")
check "the kept file exists ($db)" [ -f "$db" ]

out=$("$loom" list --db "$db" --status completed --id-prefix pre-0 --limit 5 --json 2>&1)
check "list: the newest preloaded first, completed" \
  [ "$(json '[r["execution_id"] for r in d["executions"]][:2], d["executions"][0]["status"]')" \
    = "['pre-0000000299', 'pre-0000000298'] completed" ]
out=$("$loom" show pre-0000000007 --db "$db" --json 2>&1)
check "show: a parked-then-resumed shape, 10 events, completed, its fence" \
  [ "$(json 'd["execution"]["status"], d["execution"]["workflow"], len(d["events"]), d["execution"]["fence"]')" \
    = "completed preload_parked 10 1" ]
out=$("$loom" show pre-0000000008 --db "$db" --json 2>&1)
check "show: the plain shape, 10 events, its start older than its end" \
  [ "$(json 'd["execution"]["workflow"], len(d["events"]), d["events"][0]["time_ms"] <= d["events"][9]["time_ms"]')" \
    = "preload_plain 10 True" ]

rm -f "$db" "$db-wal" "$db-shm"
out=$("$loom" "${bench[@]}" --backend sqlite --retention 2>"$work/err"); rc=$?
check "without --keep-preload: exits 0" [ "$rc" = 0 ]
check "--retention deletes every preloaded execution (and none of the runs')" \
  has "loom-retention backend=sqlite executions=$n examined=[0-9]* deleted=$n "
db=$(sed -n 's/^loom-preload backend=sqlite .* store=\(.*\)$/\1/p' <<<"$out")
check "without --keep-preload: the file is removed" test -n "$db" -a ! -e "$db"

# PostgreSQL when a server is given (COPY, VACUUM, the schema dropped after).
if [ -n "${ONCE_TEST_POSTGRES_URL:-}" ]; then
  out=$("$loom" "${bench[@]}" --backend postgres --url "$ONCE_TEST_POSTGRES_URL" 2>"$work/err")
  rc=$?
  check "postgres: exits 0 (got $rc: $(tail -3 "$work/err"))" [ "$rc" = 0 ]
  check "postgres: the preload verified itself" \
    has "loom-preload backend=postgres executions=$n events=$((n * 10)) .* verified=ok"
  check "postgres: WAL bytes per execution" \
    has "loom-bench backend=postgres case=unfenced@$n .* wal_bytes_per_exec=[0-9]"
  check "postgres: inspect and list percentiles" \
    has "loom-preload-list backend=postgres executions=$n samples=50 "
fi

# The pipelined case (Runtime::StartPipelined): two driver threads keep 16
# executions in flight; every execution completes (an error fails the run)
# and the cell reports its rate. On SQLite its last appends go through the
# group commit's flushers; on memory they are written inline.
pipelined=(bench --runs 1 --executions 200 --concurrency 16 --drivers 2 --case unfenced_pipelined
           --dir "$work")
backends=(memory sqlite)
[ -n "${ONCE_TEST_POSTGRES_URL:-}" ] && backends+=(postgres)
out=$("$loom" "${pipelined[@]}" --backend "${backends[@]}" --url "${ONCE_TEST_POSTGRES_URL:-}" \
  2>"$work/err"); rc=$?
check "pipelined: exits 0 (got $rc: $(tail -3 "$work/err"))" [ "$rc" = 0 ]
for backend in "${backends[@]}"; do
  check "$backend: the pipelined cell's rate" \
    has "loom-bench backend=$backend case=unfenced_pipelined .*wf_per_s=[1-9]"
done
check "sqlite: the pipelined appends shared store writes" \
  grep -q "sqlite unfenced_pipelined .*appends in [0-9]* store writes" "$work/err"
out=$("$loom" bench --backend memory --runs 1 --executions 10 --case park_resume_pipelined 2>&1)
check "a case that cannot run pipelined is an error, not a figure" \
  has "only unfenced runs pipelined"

echo "preload_test: $passes passed, $fails failed"
[ "$fails" = 0 ]
