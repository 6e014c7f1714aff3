#!/usr/bin/env bash
# The rack simulator's acceptance, run through the real `sush sim` commands:
#   1. every scenario in scenarios/ holds under the real rules and fails under
#      each flaw it names in `# catches:` (sush sim check);
#   2. a bounded slice of random exploration finds no breach;
#   3. each flaw (the rejected designs) is found by exploration within a
#      bounded number of schedules (or, for one found by the model, caught by
#      a scenario); its shrunk scenario (at most 25 steps) replays the breach
#      from its recorded seed, and holds under the real rules;
#   4. a scenario replays to the same trace hash.
#   apps/sush/sim_test.sh path/to/sush path/to/scenarios [SCHEDULES]
set -euo pipefail
sush="$1"
scenarios="$2"
schedules="${3:-1500}"
dir="$(mktemp -d /tmp/sush-sim-XXXXXX)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "sim_test: $*" >&2; exit 1; }

"$sush" sim check "$scenarios" || fail "sush sim check $scenarios"

clean="$("$sush" sim explore --sleds 4-8 --seed 20261202 --schedules "$schedules" --threads 2 \
  --out "$dir/unexpected.sush")" || fail "a breach in the clean slice: $clean"
echo "clean slice: $clean"
grep -q "^schedules=$schedules breaches=0 " <<<"$clean" || fail "clean slice: $clean"

# The flaws random exploration must find. Every other flaw `sush sim flaws`
# names must be caught by a scenario (rehop-past: model 3 found its schedule,
# which random schedules reach too rarely; scenarios/owed_job_after_crash.sush).
explored="single-session-version no-filter-insert-on-hit lazy-entry-marker
  unpersisted-entry-marker zombies-by-join-frontier record-after-start position-unchecked"
for flaw in $("$sush" sim flaws); do
  grep -qw -- "$flaw" <<<"$explored" && continue
  grep -q "^# catches:.*\b$flaw\b" "$scenarios"/*.sush ||
    fail "flaw $flaw is neither explored here nor caught by a scenario"
done
for flaw in $explored; do
  out="$dir/$flaw.sush"
  found="$("$sush" sim explore --sleds 4-8 --seed 1 --schedules 20000 --threads 2 --flaw "$flaw" \
    --expect-breach --out "$out")" || fail "flaw $flaw not found in 20000 schedules"
  echo "$flaw: $(head -1 <<<"$found") | $(tail -1 <<<"$found")"
  steps="$(grep -c -v '^#' "$out")"
  [ "$steps" -le 25 ] || fail "flaw $flaw: the shrunk scenario has $steps steps (more than 25)"
  "$sush" sim run "$out" --flaw "$flaw" --quiet >/dev/null &&
    fail "flaw $flaw: the shrunk scenario does not replay the breach"
  "$sush" sim run "$out" --quiet >/dev/null ||
    fail "flaw $flaw: the shrunk scenario breaches under the real rules"
done

first="$("$sush" sim run "$scenarios/partition_flip_flop.sush" --quiet | sed -n 's/.*trace=//p')"
again="$("$sush" sim run "$scenarios/partition_flip_flop.sush" --quiet | sed -n 's/.*trace=//p')"
[ -n "$first" ] && [ "$first" = "$again" ] || fail "trace hash $first then $again"
echo "sim_test: ok"
