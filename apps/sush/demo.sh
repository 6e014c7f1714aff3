#!/usr/bin/env bash
# The sush demo: a 4-sled rack of real sush-server processes on loopback, a
# session, one signed job on every sled, each sled's output, rack down.
#
#   apps/sush/demo.sh [path/to/sush]     # default: sush next to sush-server in build-sush
#
# Exits non-zero if any sled does not print its greeting.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sush="${1:-${SUSH:-$here/../../build-sush/apps/sush/sush}}"
if [[ ! -x "$sush" ]]; then
  echo "demo.sh: no sush binary at $sush (build the 'sush' target, or pass its path)" >&2
  exit 2
fi
dir="$(mktemp -d /tmp/sush-demo-XXXXXX)"
cleanup() {
  "$sush" rack down --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

echo "== sush: rack up 4"
"$sush" rack up 4 --dir "$dir"
echo
echo "== sush: session start"
"$sush" --rack "$dir" session start
echo
echo "== sush: a signed job on every sled"
out="$("$sush" --rack "$dir" job start -w -T '*' 'echo hello from $SUSH_JOB_ID on $(hostname)')"
echo "$out"
echo
echo "== sush: version (the rack)"
"$sush" --rack "$dir" version
count="$(grep -c '^hello from ' <<<"$out" || true)"
echo
echo "== sush: $count of 4 sleds answered"
[[ "$count" == 4 ]]
