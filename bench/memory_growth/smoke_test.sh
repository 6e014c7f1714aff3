#!/usr/bin/env bash
# memory_growth_bench end to end, briefly: a store of 1,000 executions, two
# rounds of 200. It must print the machine's first-touch costs (positive),
# the allocator it ran with, every round, and a summary whose slowest call
# is no faster than the average call; and refuse a count that is not one.
#
#   bench/memory_growth/smoke_test.sh path/to/memory_growth_bench
set -euo pipefail
bench=$1
fail() { echo "smoke_test: $*" >&2; exit 1; }
out=$("$bench" 1000 200 2) || fail "memory_growth_bench exited $?"
echo "$out"
# The value of key=... on the line that starts with `prefix `.
value() { echo "$out" | grep "^$1 " | grep -o "$2=[^ ]*" | cut -d= -f2 | tr -d '"'; }
positive() { awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'; }
for key in first_touch_us_per_4k_page first_touch_us_per_2m_page; do
  positive "$(value memory-growth-raw "$key")" || fail "no positive $key"
done
echo "$out" | grep -q '^memory-growth-fill executions=1000 .*allocator="' || fail "no fill line"
[ "$(echo "$out" | grep -c '^memory-growth-round ')" = 2 ] || fail "not two rounds"
for op in acquire append; do
  avg_ns=$(value memory-growth "${op}_ns_full")
  max_us=$(value memory-growth "${op}_us_max_full")
  positive "$avg_ns" || fail "no ${op}_ns_full"
  awk -v a="$avg_ns" -v m="$max_us" 'BEGIN { exit !(m * 1000 + 1000 >= a) }' ||
    fail "$op: slowest call ${max_us} us under the average ${avg_ns} ns"
done
if "$bench" 1000 0 2 >/dev/null 2>&1; then fail "a count of 0 was taken"; fi
echo "smoke_test: ok"
