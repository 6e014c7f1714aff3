#!/usr/bin/env bash
# The web UI in a real browser (ctest: loom_browser_test). Seeds a SQLite
# store (and a PostgreSQL schema when ONCE_TEST_POSTGRES_URL is set) with
# `loom seed`, starts `loom serve` on each (the SQLite one also pointed at a
# 3-sled rack from `sush rack up` with one job run), and drives Debian's
# chromium through ui_test.mjs. Screenshots go to OUT.
#
#   run.sh LOOM SUSH OUT
set -euo pipefail
loom=$1 sush=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ] || ! command -v node >/dev/null; then
  if [ "${CI:-}" = true ]; then echo "run.sh: no chromium or node (scripts/install-deps)" >&2; exit 1; fi
  echo "run.sh: no chromium or node; skipped"; exit 0
fi
work=$(mktemp -d /tmp/loom-browser.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$sush" rack down --dir "$work/rack" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The test's own node_modules, from the lockfile (npm ci), kept beside OUT
# while the lockfile does not change.
deps=$(dirname "$out")/browser_test_deps
if ! cmp -s "$here/package-lock.json" "$deps/package-lock.json" 2>/dev/null || [ ! -d "$deps/node_modules" ]; then
  rm -rf "$deps" && mkdir -p "$deps"
  cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$deps/"
  (cd "$deps" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
cp "$here/ui_test.mjs" "$deps/"
mkdir -p "$out"

# serve DIR ARGS...: starts loom serve, sets $port.
serve() {
  local log=$1; shift
  "$loom" serve "$@" --listen 127.0.0.1:0 > "$log.out" 2> "$log.err" &
  pids+=($!)
  for _ in $(seq 100); do
    port=$(sed -n 's/^listening .*:\([0-9]*\)$/\1/p' "$log.out" 2>/dev/null || true)
    [ -n "$port" ] && return 0
    sleep 0.1
  done
  echo "run.sh: loom serve did not start:" >&2; cat "$log.err" >&2; return 1
}

rack_args=()
"$sush" rack up 3 --dir "$work/rack" > "$work/rack-up.log"
"$sush" --rack "$work/rack" session start > /dev/null
"$sush" --rack "$work/rack" job start -w -T '*' 'echo hello from $SUSH_JOB_ID' > /dev/null
rack_args=(--rack "$work/rack")

"$loom" seed --db "$work/loom.db" --executions 300 > /dev/null
serve "$work/sqlite" --db "$work/loom.db" --token-file "$work/token" "${rack_args[@]}"
sqlite_port=$port
status=0
node "$deps/ui_test.mjs" --url "http://127.0.0.1:$port" --token "$(cat "$work/token")" \
  --out "$out" --label sqlite --rack || status=1

if [ -n "${ONCE_TEST_POSTGRES_URL:-}" ]; then
  schema="loom_browser_$$_$RANDOM"
  "$loom" seed --url "$ONCE_TEST_POSTGRES_URL" --schema "$schema" --executions 300 > /dev/null
  serve "$work/pg" --url "$ONCE_TEST_POSTGRES_URL" --schema "$schema" --token-file "$work/pg-token"
  node "$deps/ui_test.mjs" --url "http://127.0.0.1:$port" --token "$(cat "$work/pg-token")" \
    --out "$out" --label postgres || status=1
  psql "$ONCE_TEST_POSTGRES_URL" -qc "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true
fi
# /metrics: loom serve counted the actions the browser took; a sled counted
# its boundary writes (the job's) and its gossip sessions.
metric() { curl -s "$1/metrics" | grep -v '^#' | grep -F "$2" | awk '{print $2}' | head -1; }
cancels=$(metric "http://127.0.0.1:$sqlite_port" 'loom_serve_actions_total{verb="cancel"}')
[ "${cancels:-0}" = 1 ] || { echo "FAIL loom serve /metrics: cancel actions ${cancels:-none}, not 1"; status=1; }
sled=$(sed -n 's/.*"http": *"\([0-9.:]*\)".*/\1/p' "$work/rack/rack.json" | head -1)
writes=$(metric "http://$sled" 'sush_boundary_writes_total')
sessions=$(metric "http://$sled" 'sush_gossip_sessions_ok')
sent=$(metric "http://$sled" 'sush_gossip_bytes_sent' | cut -d. -f1 | sed 's/e+.*//')
if [ "${writes:-0}" -ge 1 ] 2>/dev/null && [ "${sessions:-0}" -ge 1 ] 2>/dev/null &&
   [ "${sent:-0}" -ge 1 ] 2>/dev/null; then
  echo "ok sush-server /metrics: $writes boundary writes, $sessions gossip sessions, bytes sent $sent"
else
  echo "FAIL sush-server /metrics: boundary writes ${writes:-none}, sessions ${sessions:-none}, bytes ${sent:-none}"
  status=1
fi
grep -h "refused" "$work"/*.err | head -5 || true
exit $status
