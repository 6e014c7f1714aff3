#!/usr/bin/env bash
# The demo's promise as a test: a process killed right after the charge is
# recorded, restarted on the same database, completes the order and the card
# is charged exactly once. Also checks the store demo's refusals.
set -euo pipefail
loom=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$("$loom" demo store --db "$dir/s.db")
grep -q "SequenceConflict" <<<"$out"
grep -q "stale (current token 1)" <<<"$out"
grep -q "stale: the park is already answered" <<<"$out"
grep -q "StaleFence" <<<"$out"
set +e
"$loom" demo --db "$dir/o.db" --crash-after charge >/dev/null 2>&1
code=$?
set -e
[ "$code" -eq 137 ] || { echo "expected SIGKILL (137), got $code"; exit 1; }
[ "$(grep -c charged "$dir/o.db.charges")" -eq 1 ]
out=$("$loom" demo --db "$dir/o.db")
grep -q "recovered 1 execution" <<<"$out"
grep -q "charged 1 time(s)" <<<"$out"
[ "$(grep -c charged "$dir/o.db.charges")" -eq 1 ]
# A third run finds the order finished and charges nothing.
"$loom" demo --db "$dir/o.db" >/dev/null
[ "$(grep -c charged "$dir/o.db.charges")" -eq 1 ]
echo "demo test passed"
