#!/usr/bin/env bash
# gossip_bench end to end, briefly: `gossip_bench apply 1` (one batch of
# kBatchOpsMax operations per case on a host of 100,000 messages) must print
# every case's row with a time, and exit 0 (a refused batch exits 1).
#
#   bench/gossip/smoke_test.sh path/to/gossip_bench
set -euo pipefail
bench=$1
fail() { echo "smoke_test: $*" >&2; exit 1; }
out=$("$bench" apply 1) || fail "gossip_bench apply exited $?"
echo "$out"
for row in "redact held" "send" "send half, then redact held" \
  "redact held, one Host::Redact each (all calls)"; do
  line=$(echo "$out" | grep -F "| $row | ") || fail "no row: $row"
  echo "$line" | cut -d'|' -f3 | grep -Eq '^ [0-9.]+ (us|ms) $' || fail "no time: $line"
done
