#!/usr/bin/env bash
# store_bench end to end, briefly: a single-event cell on SQLite run one
# after the other and in turns (--interleave-ms), and on PostgreSQL too when
# ONCE_TEST_POSTGRES_URL is set. Checks the machine-readable line (both
# figures above zero, a ratio, the turn recorded) and that --interleave-ms
# without both sides is refused.
#
#   bench/store/smoke_test.sh path/to/store_bench
set -euo pipefail
bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "smoke_test: $*" >&2; exit 1; }
# field LINE NAME: the value of NAME= in LINE.
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# check BACKEND TURN_MS [options]: one cell, its line checked.
check() {
  local backend=$1 turn=$2 line
  shift 2
  line=$("$bench" --backend "$backend" --mode single --clients 1 --seconds 0.3 --runs 2 \
    --warmup-seconds 0.05 --dir "$work/$backend-$turn" "$@" 2>"$work/err" | grep '^store-bench ') ||
    { cat "$work/err" >&2; fail "$backend turn $turn: no store-bench line"; }
  echo "$line"
  [ "$(field "$line" interleave_ms)" = "$turn" ] || fail "interleave_ms is not $turn"
  awk -v s="$(field "$line" events_per_s)" -v r="$(field "$line" raw_events_per_s)" \
    -v q="$(field "$line" ratio)" 'BEGIN { exit !(s > 0 && r > 0 && q > 0 && q < 5) }' ||
    fail "$backend turn $turn: figures out of range: $line"
  if [ "$turn" != 0 ]; then
    grep -q "interleaved: store" "$work/err" || fail "$backend: no interleaved run reported"
  fi
}
check sqlite 0
check sqlite 20 --interleave-ms 20
if [ -n "${ONCE_TEST_POSTGRES_URL:-}" ]; then
  check postgres 20 --interleave-ms 20 --url "$ONCE_TEST_POSTGRES_URL"
fi
set +e
"$bench" --backend sqlite --only store --interleave-ms 20 --dir "$work/refused" >/dev/null 2>"$work/err"
code=$?
set -e
[ "$code" = 2 ] && grep -q "needs the store and the raw limit both" "$work/err" ||
  fail "--interleave-ms with --only store: exit $code, $(cat "$work/err")"
echo "smoke_test: ok"
