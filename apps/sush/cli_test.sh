#!/usr/bin/env bash
# The sush client end to end on a 2-sled rack: keys new (0600), --json and
# --output json on commands, session start refused while one is active
# (--replace, or naming it), session attach, job status -w printing what job
# start -w prints (stdout and stderr), job output by cubby target and its
# refusal for a sled the job did not target, history per sled (ok/failed),
# the REPL prompt and `help`, `sush help`, version as 16 rows x 2 cubbies,
# job stop + session skip of the chain's next position, --concurrent,
# boundary, rack restart, sled reset (refused: trusted), -T naming no sled
# refused before signing, --rack naming no folder, exit statuses (1 refused,
# 2 usage), SSH_CLIENT=sush, job purge, session stop (and of an inactive
# session: refused), rack down after a sled was restarted by hand.
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
first="$("$sush" --rack "$dir" --json session start | json '["session_id"]')"
# A second start while one is active asks for --replace and names the session.
code=0; out="$("$sush" --rack "$dir" --output json session start)" || code=$?
[[ $code == 1 && "$(json '["error"]["code"]' <<<"$out")" == InvalidArgument ]] ||
  fail "a start while a session is active was not refused: $code $out"
grep -q -- "--replace" <<<"$out" && grep -q "$first" <<<"$out" || fail "refusal text: $out"
session="$("$sush" --rack "$dir" --json session start --replace | json '["session_id"]')"
[[ "$session" != "$first" ]] || fail "--replace"
"$sush" --rack "$dir" session start "$first" >/dev/null 2>&1 && fail "start naming an ended session"
[[ "$("$sush" --rack "$dir" session show --json | json '["active"]')" == "$session" ]] ||
  fail "session show"
"$sush" --rack "$dir" --json session attach | json '["session_id"]' | grep -qx "$session" ||
  fail "session attach"
# Attached to a session that is no longer active: job start is refused.
code=0; out="$(SUSH_SESSION="$first" "$sush" --rack "$dir" --json job start true)" || code=$?
[[ $code == 1 && "$(json '["error"]["code"]' <<<"$out")" == NotFound ]] || fail "attached: $out"
# -T naming no sled of the rack is refused before anything is signed.
code=0; out="$("$sush" --rack "$dir" --json job start -T 9 true)" || code=$?
[[ $code == 1 ]] && grep -q "names no sled" <<<"$out" || fail "-T 9: $code $out"
job="$("$sush" --rack "$dir" --json job start -T 1 'echo out; echo err >&2; echo $SSH_CLIENT' |
  json '["job_id"]')"
waited="$("$sush" --rack "$dir" --json job status "${job^^}" -w)"
[[ "$(json '["job"]["statuses"]["913-0000019:SLED00001"]["state"]' <<<"$waited")" == Stopped ]] ||
  fail "job status -w: $waited"
[[ "$(json '["stderr"]["913-0000019:SLED00001"]' <<<"$waited")" == err ]] || fail "-w stderr: $waited"
text="$("$sush" --rack "$dir" job status "$job" -w)"
grep -q '^-- stderr --$' <<<"$text" && grep -q '^sush$' <<<"$text" || fail "job status -w text: $text"
[[ "$("$sush" --rack "$dir" job output "$job" stderr -T 1)" == err ]] || fail "job output stderr"
code=0; out="$("$sush" --rack "$dir" job output "$job" -T 0 2>&1)" || code=$?
[[ $code == 1 ]] && grep -q "did not target" <<<"$out" || fail "cubby 0 was not targeted: $out"
failing="$("$sush" --rack "$dir" --json job start -w 'exit 3' | json '["job"]["job_id"]')"
"$sush" --rack "$dir" job history | grep "^$failing" | grep -q "2 failed" ||
  fail "history: $("$sush" --rack "$dir" job history)"
"$sush" --rack "$dir" job history | grep "^$job" | grep -q "1 ok" || fail "history ok"
repl="$(printf 'session show\nhelp job\nversion\nexit\n' | "$sush" --rack "$dir")"
grep -q '^sush# session '"$session" <<<"$repl" || fail "REPL: $repl"
grep -q 'purge' <<<"$repl" || fail "REPL help job: $repl"
"$sush" help job start | grep -q -- '--timeout-s' || fail "sush help job start"
# Every option of every command has help text, and docs/sush.md names every
# flag of the client and of sush-server (when built beside it).
docs="$(dirname "$0")/../../docs/sush.md"
server="$(dirname "$sush")/../sush-server/sush-server"
python3 - "$sush" "$docs" "$server" <<'PY' || fail "help text or docs/sush.md"
import os, re, subprocess, sys
sush, docs, server = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
bad, flags = [], set()
def options(out, where):
    lines, section = out.splitlines(), None
    for i, line in enumerate(lines):
        if re.match(r"^\S.*:$", line):
            section = line[:-1]
        elif section == "Options" and line.startswith("  -"):
            flags.update(f for f in re.findall(r"--[a-z0-9-]+", line[:30]) if f != "--help")
            # CLI11: the text follows on the line, or on the next one when
            # the option's name fills the first 30 columns.
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if len(line.rstrip()) <= 30 and not nxt.startswith(" " * 30):
                bad.append(where + ": " + line.strip())
        elif section == "Subcommands" and re.match(r"^  \S", line):
            yield line.split()[0]
def walk(path):
    out = subprocess.run([sush, "help", *path], capture_output=True, text=True).stdout
    for sub in list(options(out, "sush " + " ".join(path))):
        if sub != "help":
            walk(path + [sub])
walk([])
if os.path.exists(server):
    list(options(subprocess.run([server, "--help"], capture_output=True, text=True).stdout,
                 "sush-server"))
for b in bad: print("no help text:", b)
missing = sorted(f for f in flags if f not in docs)
for m in missing: print("not in docs/sush.md:", m)
sys.exit(1 if bad or missing or len(flags) < 20 else 0)
PY
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
# Usage errors and limits answer typed JSON errors too; usage errors exit 2.
code=0; out="$("$sush" --rack "$dir" --json job stop)" || code=$?
[[ $code == 2 && "$(json '["error"]["code"]' <<<"$out")" == InvalidArgument ]] ||
  fail "usage error as JSON: $code $out"
code=0; "$sush" --rack "$dir" job stop >/dev/null 2>&1 || code=$?
[[ $code == 2 ]] || fail "usage error exit $code"
code=0; out="$("$sush" --rack "$dir/nope" session show 2>&1)" || code=$?
[[ $code == 1 ]] && grep -q "folder does not exist" <<<"$out" || fail "--rack nope: $out"
long="$(head -c 9000 /dev/zero | tr '\0' x)"
[[ "$("$sush" --rack "$dir" --json job start "$long" | json '["error"]["code"]')" == \
  LimitExceeded ]] || fail "a command past command_bytes_max"
# job purge (signed): the finished jobs' folders go, each sled says what it kept.
purged="$("$sush" --rack "$dir" --json job purge --finished)" || fail "purge: $purged"
[[ ! -d "$dir/sled1/data/output/jobs/$job" ]] || fail "purge left $job"
"$sush" --rack "$dir" --json session stop | json '["stopped"]' | grep -qx True || fail "session stop"
for _ in $(seq 50); do
  [[ "$("$sush" --rack "$dir" --json session show | json '["active"]')" == None ]] && break
  sleep 0.1
done
[[ "$("$sush" --rack "$dir" --json session show | json '["active"]')" == None ]] || fail "session stop"
[[ "$("$sush" --rack "$dir" --json session stop "$session" | json '["error"]["code"]')" == \
  NotFound ]] || fail "a stop of an inactive session was not refused"
# A sled restarted by hand (not through rack.json) is found and stopped by rack down.
pid1="$(python3 -c "import json; print(json.load(open('$dir/rack.json'))['sleds'][1]['pid'])")"
args="$(tr '\0' ' ' </proc/"$pid1"/cmdline)"
kill "$pid1"
for _ in $(seq 100); do kill -0 "$pid1" 2>/dev/null || break; sleep 0.1; done
setsid $args >>"$dir/sled1/server.log" 2>&1 </dev/null &
for _ in $(seq 100); do
  "$sush" --rack "$dir" --json boundary -T 1 | json '["sleds"][0]["trusted"]' 2>/dev/null | grep -qx True && break
  sleep 0.1
done
down="$("$sush" rack down --dir "$dir" --json)" || fail "rack down: $down"
[[ "$(json '["stopped"].__len__()' <<<"$down")" == 2 ]] || fail "rack down: $down"
[[ "$(json '["still_up"].__len__()' <<<"$down")" == 0 ]] || fail "rack down left one: $down"
# Counts out of range are usage errors (exit 2), not requests.
for args in "job history --limit -5" "job history --offset -3" "job status x -w --timeout-s 0"; do
  code=0; "$sush" --rack "$dir" $args >/dev/null 2>&1 || code=$?
  [[ $code == 2 ]] || fail "$args: exit $code, not 2"
done
# Bytes that are not UTF-8 in what a command echoes: U+FFFD in the JSON, not an abort.
code=0; out="$("$sush" --json $'--frob\xff')" || code=$?
[[ $code == 2 && "$(json '["error"]["code"]' <<<"$out")" == InvalidArgument ]] ||
  fail "a usage error with bytes that are not UTF-8: $code $out"
code=0; out="$("$sush" --json --server $'http://\xff:1' session show)" || code=$?
[[ $code == 1 && "$(json '["error"]["code"]' <<<"$out")" == InvalidArgument ]] ||
  fail "an address with bytes that are not UTF-8: $code $out"
# A server whose answers have other types than the API's (an older or a
# foreign server, a proxy): one typed failure (exit 1), never an abort.
python3 - "$dir/odd.port" <<'PY' &
import http.server, json, sys
class Odd(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"active": 5, "next_job_id": [1], "baseboard": 7, "network": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Odd)
open(sys.argv[1], "w").write(str(server.server_address[1]))
server.handle_request(); server.handle_request()
PY
odd_pid=$!
for _ in $(seq 100); do [[ -s "$dir/odd.port" ]] && break; sleep 0.1; done
code=0; out="$("$sush" --server "http://127.0.0.1:$(cat "$dir/odd.port")" --json session show)" || code=$?
kill "$odd_pid" 2>/dev/null || true
[[ $code == 1 && "$(json '["error"]["code"]' <<<"$out")" == Corruption ]] ||
  fail "an answer of another shape: $code $out"
echo "cli_test: ok"
