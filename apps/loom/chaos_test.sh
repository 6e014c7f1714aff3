#!/usr/bin/env bash
# The SIGKILL chaos test (ctest: loom_chaos_sqlite_test, loom_chaos_postgres_test;
# docs/nodes.md "The chaos test"): three node processes on one store, 30
# SIGKILLs at random moments with restarts, under queued, direct, child,
# timer and cron load; `loom chaos run` checks every invariant from the
# ledger and the store, and that its checker catches each doctored input.
#
#   chaos_test.sh path/to/loom sqlite
#   chaos_test.sh path/to/loom postgres   (ONCE_TEST_POSTGRES_URL; skips
#                                          without it, fails when CI=true)
set -uo pipefail
loom=$1 backend=$2
work=$(mktemp -d /tmp/loom-chaos.XXXXXX)
keep=0
trap '[ "$keep" = 1 ] || rm -rf "$work"' EXIT
case "$backend" in
  sqlite) store=(--db "$work/loom.db") ;;
  postgres)
    if [ -z "${ONCE_TEST_POSTGRES_URL:-}" ]; then
      [ "${CI:-}" = true ] && { echo "CI=true but ONCE_TEST_POSTGRES_URL is unset"; exit 1; }
      echo "skipped: ONCE_TEST_POSTGRES_URL is unset"; exit 0
    fi
    store=(--url "$ONCE_TEST_POSTGRES_URL" --schema "chaos_$$_$RANDOM") ;;
  *) echo "usage: chaos_test.sh LOOM sqlite|postgres"; exit 2 ;;
esac
# A short lease keeps the run bounded (takeover after ~1.5 s); the seed
# varies per run so that CI explores kill times (printed for a replay).
seed=${CHAOS_SEED:-$RANDOM}
echo "seed $seed"
"$loom" chaos run "${store[@]}" --dir "$work" --kills 30 --load-ms 40000 --queued 120 \
  --seed "$seed"
rc=$?
if [ "$rc" != 0 ]; then
  keep=1
  echo "kept for a look: $work (the ledger, the store when SQLite, the node logs)"
  for log in "$work"/node-*.log; do
    echo "== $log (last lines)"; tail -n 20 "$log"
  done
fi
exit "$rc"
