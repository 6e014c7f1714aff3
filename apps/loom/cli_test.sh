#!/usr/bin/env bash
# The operator's CLI and `loom serve` on a real SQLite store (ctest:
# loom_cli_test): each command, its --json fields, its exit code
# (docs/operations.md, "Exit codes"), bad input writing nothing, the token
# file, the API's refusals and the absence of CORS headers.
#
#   cli_test.sh path/to/loom
set -uo pipefail
loom=$1
work=$(mktemp -d /tmp/loom-cli.XXXXXX)
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fails=0 passes=0
check() {  # check WHAT CONDITION...
  local what=$1; shift
  if "$@"; then passes=$((passes + 1)); else fails=$((fails + 1)); echo "FAIL: $what"; fi
}
# run EXPECTED_RC ARGS...: runs loom, keeps stdout in $out and stderr in $err.
run() {
  local want=$1; shift
  out=$("$loom" "$@" 2>"$work/err"); rc=$?
  err=$(cat "$work/err")
  check "loom $* exits $want (got $rc: $err)" [ "$rc" = "$want" ]
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" <<<"$out"; }

db="$work/loom.db"
run 0 seed --db "$db" --executions 40
run 0 list --db "$db" --limit 5 --json
check "list --json: 5 rows, newest first, a cursor" \
  [ "$(json 'len(d["executions"]), d["next_cursor"] is not None, d["executions"][0]["started_ms"] >= d["executions"][4]["started_ms"]')" = "5 True True" ]
check "list --json names its fields" \
  [ "$(json 'sorted(d["executions"][0].keys())')" = "['execution_id', 'fence', 'head', 'parent_id', 'park_seq', 'parked_on', 'result', 'started_ms', 'status', 'updated_ms', 'workflow']" ]
cursor=$(json 'd["next_cursor"]')
run 0 list --db "$db" --limit 5 --cursor "$cursor" --json
check "the next page continues older" [ "$(json 'len(d["executions"])')" = 5 ]
run 0 list --db "$db" --status failed --json
check "status failed lists the 4 declined orders" \
  [ "$(json 'sorted(set(r["status"] for r in d["executions"])), len(d["executions"])')" = "['failed'] 4" ]
run 0 list --db "$db" --parked-on timer --json
check "parked on a timer: the 4 naps" [ "$(json 'len(d["executions"])')" = 4 ]
LOOM_URL="sqlite:$db" run 0 list --status cancelled --json
check "LOOM_URL names the store" [ "$(json 'len(d["executions"])')" = 4 ]
run 0 list --db "$db" --started-after 2000-01-01 --started-before 2000-01-02 --json
check "a time window before the store: nothing" [ "$(json 'len(d["executions"])')" = 0 ]
run 0 list --db "$db"
check "list prints a table" grep -q "^EXECUTION *WORKFLOW *STATUS" <<<"$out"

nap=nap-0000005 ask=ask-0000006 order=order-0000000
# A kernel event whose payload breaks its kind's shape (written by hand):
# show prints the log and names the event, it does not abort.
cp "$db" "$work/bent.db"
python3 -c "import sqlite3; c = sqlite3.connect('$work/bent.db'); c.execute(\"UPDATE events SET payload = '{\\\"key\\\":7}' WHERE execution_id = 'parent-0000007' AND kind = 'CHILD_STARTED'\"); c.commit()"
run 0 show parent-0000007 --db "$work/bent.db" --json
check "show names a bent kernel event and reads no member of it" \
  [ "$(json 'd["problems"][0]["sequence"], len(d["children"])')" = "2 0" ]
run 0 show parent-0000007 --db "$work/bent.db"
check "show's text names the problem" grep -q '^problem  event 2: CHILD_STARTED' <<<"$out"
run 0 show "$nap" --db "$db" --json
check "show --json: the open park, its timer row" \
  [ "$(json 'd["execution"]["status"], d["open_park"]["waits"][0]["type"], len(d["timers"]), d["owner"]')" = "suspended timer 1 None" ]
run 0 show parent-0000007 --db "$db" --json
check "show names the child and its state" \
  [ "$(json 'd["children"][0]["execution_id"], d["children"][0]["status"]')" = "parent-0000007/approval suspended" ]

# Acts.
run 0 resume "$nap" --db "$db" --json
check "resume answers the timer park under a new fence" [ "$(json 'd["status"], d["fence"], d["park_seq"]')" = "running 1 2" ]
run 4 resume "$nap" --db "$db"
check "a second resume is refused: one line" [ "$(wc -l <<<"$err")" = 1 ]
run 0 cancel "$nap" --db "$db" --reason "cli test" --json
check "cancel fences out the runner" [ "$(json 'd["status"], d["fence"]')" = "cancelled 2" ]
run 4 cancel "$nap" --db "$db"
run 0 send "$ask" approve '{"by":"ann"}' --db "$db" --json
check "send stores message 1" [ "$(json 'd["seq"], d["delivery"]')" = "1 stored" ]
run 0 show "$ask" --db "$db" --json
check "show lists the pending message" [ "$(json 'd["pending_messages"][0]["message"]["by"]')" = ann ]
run 0 fork "$order" --from-step 1 --id "$order.copy" --db "$db" --json
check "fork copies through the first step" [ "$(json 'd["execution_id"], d["events_copied"]')" = "$order.copy 2" ]
run 0 show "$order.copy" --db "$db" --json
check "the fork is running, its log the prefix" \
  [ "$(json 'd["execution"]["status"], [e["kind"] for e in d["events"]]')" = "running ['EXECUTION_STARTED', 'STEP_COMPLETED']" ]
run 2 fork "$order" --from-step 9 --db "$db"
run 0 fork parent-0000007 --from-step 0 --id p.copy --db "$db"
run 5 fork parent-0000007 --from-step 1 --id p.copy2 --db "$db"
check "the refused fork wrote nothing" [ "$("$loom" show p.copy2 --db "$db" >/dev/null 2>&1; echo $?)" = 3 ]
run 0 timers --db "$db" --json
check "timers lists the parks' rows" [ "$(json 'len(d["timers"]) >= 3')" = True ]
run 0 retention run --db "$db" --age-ms 0 --dry-run --json
check "a dry run deletes nothing" [ "$(json 'd["deleted"], d["would_delete"] > 0')" = "0 True" ]
would=$(json 'd["would_delete"]')
run 0 retention run --db "$db" --age-ms 0 --json
check "retention deletes what the dry run counted" [ "$(json 'd["deleted"]')" = "$would" ]
run 0 nodes --db "$db" --json
check "no node ran the plain seed" [ "$(json 'len(d["nodes"])')" = 0 ]
# A seed run as a node: its row in loom_nodes (stopped at its end, released)
# and the run row of the body it left running (order-0000009).
nodes_db="$work/nodes.db"
run 0 seed --db "$nodes_db" --executions 10 --node seed-1
run 0 nodes --db "$nodes_db" --json
check "nodes reads loom_nodes and loom_runs" \
  [ "$(json '[(n["node_id"], n["host"], n["stopped"], n["alive"], n["runs_owned"]) for n in d["nodes"]]')" = "[('seed-1', 'seed', True, False, 1)]" ]
run 0 show order-0000009 --db "$nodes_db" --json
check "show names the owner from loom_runs" \
  [ "$(json 'd["owner"]["node_id"], d["execution"]["status"]')" = "seed-1 running" ]
run 0 queues --db "$nodes_db" --json
check "queues reads loom_queues and loom_queue_items" \
  [ "$(json '[(q["name"], q["concurrency_max"], q["rate_max"], q["pending"], q["claimed"]) for q in d["queues"]]')" = "[('seed-mail', 2, 10, 1, 0)]" ]
run 0 queues --db "$nodes_db"
check "queues prints a row per queue" [ "$(grep -c seed-mail <<<"$out")" = 1 ]
run 5 queues --db "$db"

# Bad input: one line, the documented code, nothing written.
before=$(stat -c %Y.%s "$db")
run 3 show no-such-id --db "$db"
run 2 show $'bad\x01id' --db "$db"
check "an id no execution can have: InvalidArgument" grep -q "InvalidArgument" <<<"$err"
check "unknown id: one line" [ "$(wc -l <<<"$err")" = 1 ]
run 3 cancel no-such-id --db "$db"
run 3 list --db "$work/typo.db"
check "a missing file is not created" [ ! -e "$work/typo.db" ]
run 2 list --url 'postgresql://[::1:5432/x'
run 2 list --url nonsense
run 2 list
run 2 list --db "$db" --status sleeping
run 2 list --db "$db" --cursor garbage
run 2 send "$ask" approve '{not json' --db "$db"
run 2 list --db "$db" --frobnicate
run 2 bench --backend memory --runs 0
run 2 bench --backend memory --executions 0
check "a count out of range names its range" grep -q "not in range 1 to 10000000" <<<"$err"
run 2 seed --db "$work/neg.db" --executions -1
check "a negative seed count writes no store" [ ! -e "$work/neg.db" ]
run 2 list --db "$db" --started-after 99999999999999999999
check "a time past int64: said, not a crash" grep -q "too large for Unix ms" <<<"$err"
cp "$db" "$work/newer.db"
python3 -c "import sqlite3; c = sqlite3.connect('$work/newer.db'); c.execute('PRAGMA user_version = 99'); c.commit()"
newer_before=$(stat -c %Y.%s "$work/newer.db")
run 5 list --db "$work/newer.db"
run 5 cancel "$ask" --db "$work/newer.db"
check "a newer store: 'newer' said, nothing written" \
  [ "$(grep -c newer <<<"$err")" = 1 -a "$(stat -c %Y.%s "$work/newer.db")" = "$newer_before" ]
check "refused commands wrote nothing" [ "$(stat -c %Y.%s "$db")" = "$before" ]

# loom serve: the token file, reads, refusals, no CORS.
"$loom" serve --db "$db" --listen 127.0.0.1:0 --token-file "$work/token" >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^listening .*:\([0-9]*\)$/\1/p' "$work/serve.out")
check "serve prints its port" [ -n "$port" ]
check "the token file is created 0600" [ "$(stat -c %a "$work/token")" = 600 ]
api="http://127.0.0.1:$port"
code=$(curl -s -o "$work/body" -w '%{http_code}' -X POST "$api/api/v1/executions/$ask/cancel" -d '{}')
check "acting without the token: 401" [ "$code" = 401 ]
code=$(curl -s -o "$work/body" -w '%{http_code}' -X POST -H "Authorization: Bearer wrong" "$api/api/v1/executions/$ask/cancel" -d '{}')
check "acting with a wrong token: 401" [ "$code" = 401 ]
code=$(curl -s -o "$work/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $(cat "$work/token")" "$api/api/v1/executions/$ask/send" -d '[1]')
check "a body that is not an object: 400" [ "$code" = 400 ]
code=$(curl -s -o "$work/body" -w '%{http_code}' "$api/api/v1/executions/no-such")
check "an unknown id: 404" [ "$code" = 404 ]
code=$(curl -s -o "$work/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $(cat "$work/token")" "$api/api/v1/executions/$ask/cancel" -d '{"reason":"api"}')
check "acting with the token: 200" [ "$code" = 200 ]
for query in "executions?limit=abc" "executions?limit=-1" "executions?started_after=99999999999999999999" \
             "timers?limit=1x" "timers?due_within_ms=1e3" "executions/$ask?events=99999999999999999999"; do
  code=$(curl -s -o "$work/body" -w '%{http_code}' "$api/api/v1/$query")
  check "a malformed number ($query): 400 InvalidArgument" \
    [ "$code" = 400 -a "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["error"]["code"])' <"$work/body")" = InvalidArgument ]
done
for path in "executions/%FF%FE" "executions/abc%00def" "executions?cursor=%FF%FF" "timers?cursor=%FF"; do
  code=$(curl -s -o "$work/body" -w '%{http_code}' "$api/api/v1/$path")
  check "bytes that are not UTF-8 or a control in $path: 400 InvalidArgument, not a 500" \
    [ "$code" = 400 -a "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["error"]["code"])' <"$work/body")" = InvalidArgument ]
done
# What httplib refuses itself answers the typed JSON of every other refusal.
code=$(curl -s -o "$work/body" -w '%{http_code}' "$api/api/v1/no-such-endpoint")
check "an unknown endpoint: 404 NotFound as JSON" \
  [ "$code" = 404 -a "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["error"]["code"])' <"$work/body")" = NotFound ]
python3 -c "print('x' * (1 << 20))" >"$work/big"
code=$(curl -s -o "$work/body" -w '%{http_code}' -H 'Content-Type: application/json' -X POST -H "Authorization: Bearer $(cat "$work/token")" "$api/api/v1/executions/$ask/send" --data-binary @"$work/big")
check "a body past request_body_bytes_max: 413 LimitExceeded as JSON" \
  [ "$code" = 413 -a "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["error"]["code"])' <"$work/body")" = LimitExceeded ]
for body in '{"reason":5}' '{"reason":null}'; do
  code=$(curl -s -o "$work/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $(cat "$work/token")" "$api/api/v1/executions/$nap/cancel" -d "$body")
  check "a cancel reason that is not a string ($body): 400, not a 500" [ "$code" = 400 ]
done
code=$(curl -s -o "$work/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $(cat "$work/token")" "$api/api/v1/executions/$order/fork" -d '{"from_step":1,"id":7}')
check "a fork id that is not a string: 400" [ "$code" = 400 ]
code=$(curl -s -o "$work/body" -w '%{http_code}' "$api/api/v1/timers?due_within_ms=9223372036854775807")
check "due within more than the clock counts: every timer, 200" [ "$code" = 200 ]
check "no CORS header" bash -c "! curl -s -D - -o /dev/null -H 'Origin: http://evil.example' '$api/api/v1/counts' | grep -qi access-control"
check "each refusal is one log line with its code" [ "$(grep -c 'refused POST .* 401 PermissionDenied' "$work/serve.err")" = 2 ]
check "/metrics counts the refusals" bash -c "curl -s '$api/metrics' | grep -q 'loom_serve_refusals_total{code=\"PermissionDenied\"} 2'"
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null; serve_pid=""
chmod 644 "$work/token"
run 2 serve --db "$db" --listen 127.0.0.1:0 --token-file "$work/token"
check "a token file others can read is refused" grep -q "readable by others" <<<"$err"

# loom bench's node and queue cases (issue 15) run end to end on SQLite
# and print their paired ratio; the end listener is PostgreSQL's only.
run 0 bench --backend sqlite --dir "$work" --case unfenced unfenced_node queue --runs 1 \
  --warm-up-runs 0 --executions 40 --concurrency 4
check "bench runs the queue case" grep -q "^loom-bench backend=sqlite case=queue .*wf_per_s=[1-9]" <<<"$out"
check "bench pairs the node case with its base" \
  grep -q "^loom-bench-ratio backend=sqlite case=unfenced_node base=unfenced" <<<"$out"
run 1 bench --backend sqlite --dir "$work" --case unfenced_notify --runs 1 --warm-up-runs 0 \
  --executions 4
check "the end listener needs PostgreSQL" grep -q "needs PostgreSQL" <<<"$err"

# --input: every execution's input (a payload's size is most of its cost);
# text that is not JSON, or over 64 KiB, is refused before anything runs.
input='{"order":{"id":123,"items":[{"sku":"A1","qty":2}]},"notes":"at the door"}'
run 0 bench --backend memory --case unfenced park_resume_if --runs 1 --warm-up-runs 0 \
  --executions 40 --concurrency 4 --input "$input"
check "bench runs its cases on the input" \
  grep -q "^loom-bench backend=memory case=park_resume_if .*wf_per_s=[1-9]" <<<"$out"
check "bench names the input's size" grep -q "an input of ${#input} bytes" <<<"$out"
run 2 bench --backend memory --input '{not json'
check "an input that is not JSON is said" grep -q "is not JSON" <<<"$err"
run 2 bench --backend memory --input "[$(printf '1,%.0s' $(seq 40000))1]"
check "an input over its limit names the limit" grep -q "at most 65536" <<<"$err"

echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
