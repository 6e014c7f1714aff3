#!/usr/bin/env bash
# The sush client end to end on a 2-sled rack: keys new (0600), --json on
# commands, job output by cubby target, history, the REPL prompt, version as
# 16 rows x 2 cubbies, job stop + session skip of the chain's next position,
# --concurrent, boundary, rack restart, sled reset (refused: trusted), session
# stop, rack down.
#   apps/sush/cli_test.sh path/to/sush
set -euo pipefail
sush="$1"
dir="$(mktemp -d /tmp/sush-cli-XXXXXX)"
trap '"$sush" rack down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fail() { echo "cli_test: $*" >&2; exit 1; }
json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

"$sush" rack up 2 --dir "$dir" --json | json '["sleds"][1]["cubby"]' | grep -qx 1 || fail "rack up"
"$sush" --rack "$dir" keys new alice >/dev/null
[[ "$(stat -c %a "$dir/keys/alice.key")" == 600 ]] || fail "key file mode"
"$sush" --rack "$dir" keys new alice >/dev/null 2>&1 && fail "a key file was overwritten"
session="$("$sush" --rack "$dir" --json session start | json '["session_id"]')"
[[ "$("$sush" --rack "$dir" session show --json | json '["active"]')" == "$session" ]] ||
  fail "session show"
job="$("$sush" --rack "$dir" --json job start -T 1 'echo out; echo err >&2' | json '["job_id"]')"
"$sush" --rack "$dir" --json job status "${job^^}" -w | json '["statuses"]["913-0000019:SLED00001"]["state"]' |
  grep -qx Stopped || fail "job status -w"
[[ "$("$sush" --rack "$dir" job output "$job" stderr -T 1)" == err ]] || fail "job output stderr"
"$sush" --rack "$dir" job output "$job" -T 0 >/dev/null 2>&1 && fail "cubby 0 has no output"
"$sush" --rack "$dir" job history | grep -q "$job" || fail "history"
repl="$(printf 'session show\nversion\nexit\n' | "$sush" --rack "$dir")"
grep -q '^sush# session '"$session" <<<"$repl" || fail "REPL: $repl"
grep -q 'SLED00001' <<<"$repl" || fail "REPL version"
[[ "$(grep -c '^| ' <<<"$repl")" == 16 ]] || fail "version draws 16 rows: $repl"
grep -q '^|  1 SLED00001 .*| 17 -' <<<"$repl" || fail "version: cubby 1 beside 17: $repl"
# session skip: refused (typed) for a position nobody cancelled; after a job
# stop of the chain's next position it burns it and the chain moves on.
next="$("$sush" --rack "$dir" --json session show | json '["next_job_id"]')"
"$sush" --rack "$dir" session skip "$next" >/dev/null 2>&1 &&
  fail "skip of a position not cancelled was accepted"
[[ "$("$sush" --rack "$dir" --json session skip "$next" | json '["error"]["code"]')" == \
  InvalidArgument ]] || fail "skip refusal is not typed"
"$sush" --rack "$dir" --json job stop "$next" | json '["stop_requested"]' | grep -qx True ||
  fail "job stop --json"
skipped="$("$sush" --rack "$dir" --json session skip "${next^^}")" || fail "skip: $skipped"
[[ "$(json '["job_id"]' <<<"$skipped")" == "$next" ]] || fail "skip answer: $skipped"
after="$(json '["next_job_id"]' <<<"$skipped")"
[[ "$after" != "$next" ]] || fail "the chain did not move on"
ran="$("$sush" --rack "$dir" --json job start -w --concurrent 'echo burned')"
[[ "$(json '["job"]["job_id"]' <<<"$ran")" == "$after" ]] || fail "next job not at the burned successor"
[[ "$(json '["job"]["concurrent"]' <<<"$ran")" == True ]] || fail "--concurrent"
[[ "$(json '["stdout"]["913-0000019:SLED00000"]' <<<"$ran")" == burned ]] || fail "job after skip: $ran"
# The boundary record: every sled trusted with its two drives; a sled killed
# (-9) and restarted by `rack restart` keeps its record (adopted) and runs the
# next job once; `sled reset` of a trusted sled is a typed refusal.
b="$("$sush" --rack "$dir" --json boundary)"
[[ "$(json '["sleds"].__len__()' <<<"$b")" == 2 ]] || fail "boundary: $b"
[[ "$(json '["sleds"][1]["trusted"]' <<<"$b")" == True ]] || fail "boundary trusted: $b"
[[ "$(json '["sleds"][1]["drives"].__len__()' <<<"$b")" == 2 ]] || fail "boundary drives: $b"
[[ -d "$dir/sled1/m2a" && -d "$dir/sled1/m2b" ]] || fail "rack up made no drive folders"
"$sush" --rack "$dir" boundary -T 1 | grep -q '^913-0000019:SLED00001: trusted, gate open' ||
  fail "boundary text"
"$sush" rack restart -T 1 --kill --dir "$dir" >/dev/null || fail "rack restart"
[[ "$("$sush" --rack "$dir" --json boundary -T 1 | json '["sleds"][0]["locker_verdict"]')" == \
  adopted ]] || fail "the restarted sled did not adopt its record"
[[ "$("$sush" --rack "$dir" --json sled reset -T 1 | json '["error"]["code"]')" == \
  InvalidArgument ]] || fail "sled reset of a trusted sled"
for _ in $(seq 50); do
  [[ "$("$sush" --rack "$dir" --json boundary -T 1 | json '["sleds"][0]["gate"]')" == open ]] && break
  sleep 0.1
done
again="$("$sush" --rack "$dir" --json job start -w 'echo again >> $HOME/../ledger')"
[[ "$(json '["job"]["statuses"]["913-0000019:SLED00001"]["state"]' <<<"$again")" == Stopped ]] ||
  fail "no job after a restart: $again"
[[ "$(grep -c again "$dir/sled1/ledger")" == 1 ]] || fail "ledger"
# Usage errors and limits answer typed JSON errors too.
[[ "$("$sush" --rack "$dir" --json job stop | json '["error"]["code"]')" == InvalidArgument ]] ||
  fail "usage error as JSON"
long="$(head -c 9000 /dev/zero | tr '\0' x)"
[[ "$("$sush" --rack "$dir" --json job start "$long" | json '["error"]["code"]')" == \
  LimitExceeded ]] || fail "a command past command_bytes_max"
# A target no known sled matches: -w has nothing to wait for.
none="$(timeout 20 "$sush" --rack "$dir" --json job start -w -T 7 true)" || fail "-w -T 7 hung"
[[ "$(json '["job"]["statuses"].__len__()' <<<"$none")" == 0 ]] || fail "-T 7 ran: $none"
"$sush" --rack "$dir" --json session stop | json '["stopped"]' | grep -qx True || fail "session stop"
for _ in $(seq 50); do
  [[ "$("$sush" --rack "$dir" --json session show | json '["active"]')" == None ]] && break
  sleep 0.1
done
[[ "$("$sush" --rack "$dir" --json session show | json '["active"]')" == None ]] || fail "session stop"
"$sush" rack down --dir "$dir" --json | json '["stopped"].__len__()' | grep -qx 2 || fail "rack down"
echo "cli_test: ok"
