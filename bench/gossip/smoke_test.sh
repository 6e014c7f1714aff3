#!/usr/bin/env bash
# gossip_bench end to end, briefly: `gossip_bench apply 1` (one batch of
# kBatchOpsMax operations per case on a host of 100,000 messages) must print
# every case's row with a time, and exit 0 (a refused batch exits 1); and
# `gossip_bench 0.01 0` the converged pair's row and the pipe's raw limit.
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
# The shapes' table, one shape (the converged pair), and the pipe's raw limit
# measured in the same run.
out=$("$bench" 0.01 0) || fail "gossip_bench 0.01 0 exited $?"
echo "$out"
echo "$out" | grep -Eq '^\| 0 \| 0 \| 0 \| \(converged\) \| [0-9.]+ (us|ms) \|' || fail "no converged row"
echo "$out" | grep -Eq "^The pipe's raw limit in this run: a hop .* [0-9.]+ us before the shapes, [0-9.]+ us after" ||
  fail "no raw limit of the pipe"
