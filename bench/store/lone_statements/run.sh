#!/usr/bin/env bash
# The lone append's guard, without the store around it: the server CPU of
# one statement of each shape, run by pgbench on one connection, each
# transaction appending the next event to one fenced execution (the store
# bench's lone cell). Shapes:
#   raw        a one-row INSERT into a table with only a primary key
#   unguarded  the same INSERT into the store's events table (its two
#              partial status indexes: what the table itself costs)
#   guard      sql::LoneInsertSql: the INSERT under the fence read and one
#              head probe (the store's statement since 2026-12-05)
#   two_probe  the guard before that day: a branch for the first append,
#              so two probe subplans in the plan
# synchronous_commit is off for these sessions so that the statement's CPU,
# not the commit's fsync, sets the rate. The store makes its own tables and
# indexes (`loom seed --executions 0` into schema loom_lone_bench, dropped at
# the end), so they are always the store's; the statements above are copies
# of components/store_postgres/src/sql.cc's.
#
#   bench/store/lone_statements/run.sh URL PGDATA [ROUNDS] [TRANSACTIONS]
#
# PGDATA is the server's data folder (its postmaster.pid): the CPU of a
# pgbench session's backend is read from the postmaster's reaped children,
# so the server must be local and otherwise idle. Prints one
# "lone-statements" line per shape per round (shapes alternated) with the
# server's microseconds of CPU a statement and pgbench's rate. LOOM is the
# loom binary that makes the tables (default build-bench/apps/loom/loom).
set -euo pipefail
url=${1:?usage: run.sh URL PGDATA [ROUNDS] [TRANSACTIONS]}
pgdata=${2:?usage: run.sh URL PGDATA [ROUNDS] [TRANSACTIONS]}
rounds=${3:-3}
transactions=${4:-20000}
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
root=$(cd "$(dirname "$0")/../../.." && pwd)
loom=${LOOM:-$root/build-bench/apps/loom/loom}
postmaster=$(head -1 "$pgdata/postmaster.pid")
ticks_per_s=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PGOPTIONS="-c client_min_messages=warning" psql "$url" -q -c "DROP SCHEMA IF EXISTS loom_lone_bench CASCADE"
"$loom" --url "$url" --schema loom_lone_bench seed --executions 0 >/dev/null
psql "$url" -q -v ON_ERROR_STOP=1 -c "CREATE TABLE loom_lone_bench.raw (execution_id text NOT NULL,
  sequence bigint NOT NULL, kind text NOT NULL, payload text NOT NULL, metadata text NOT NULL,
  time_ms bigint NOT NULL, PRIMARY KEY (execution_id, sequence))"
columns="(execution_id, sequence, kind, payload, metadata, time_ms)"
values="(:id, :n, 'STEP_COMPLETED', repeat('x', 200), '{\"kernel\": true}', 5)"
row="FROM (SELECT :id::text AS execution_id, 1::int8 AS fence, :n::int8 AS expected_next,
  :n::int8 AS seq, 'STEP_COMPLETED'::text AS kind, repeat('x', 200) AS payload,
  '{\"kernel\": true}'::text AS metadata, 5::int8 AS time_ms) x"
select="SELECT x.execution_id, x.seq, x.kind, x.payload, x.metadata, x.time_ms"
fence="(x.fence IS NULL OR x.fence >= COALESCE((SELECT p.token FROM loom_lone_bench.fences p
  WHERE p.execution_id = x.execution_id), 0))"
head="(SELECT COALESCE(rh.last_sequence, rh.sequence) FROM loom_lone_bench.events rh
  WHERE rh.execution_id = x.execution_id ORDER BY rh.sequence DESC LIMIT 1)"
bounded="(SELECT COALESCE(rh.last_sequence, rh.sequence) FROM loom_lone_bench.events rh
  WHERE rh.execution_id = x.execution_id AND rh.sequence <= (x.expected_next - 1)
  ORDER BY rh.sequence DESC LIMIT 1)"
step='\set n :n + 1'
printf '%s\nINSERT INTO loom_lone_bench.raw %s VALUES %s;\n' "$step" "$columns" "$values" >"$work/raw.sql"
printf '%s\nINSERT INTO loom_lone_bench.events %s VALUES %s;\n' "$step" "$columns" "$values" \
  >"$work/unguarded.sql"
printf '%s\nINSERT INTO loom_lone_bench.events %s %s %s WHERE %s AND COALESCE(%s, 0) = x.expected_next - 1;\n' \
  "$step" "$columns" "$select" "$row" "$fence" "$head" >"$work/guard.sql"
printf '%s\nINSERT INTO loom_lone_bench.events %s %s %s WHERE %s AND CASE WHEN x.expected_next = 1 THEN %s IS NULL ELSE %s = (x.expected_next - 1) END;\n' \
  "$step" "$columns" "$select" "$row" "$fence" "$head" "$bounded" >"$work/two_probe.sql"
reaped_cpu_ticks() { awk '{print $16 + $17}' "/proc/$postmaster/stat"; }
for round in $(seq "$rounds"); do
  for shape in raw unguarded guard two_probe; do
    id="'$shape-$round'"
    psql "$url" -q -c "INSERT INTO loom_lone_bench.fences (execution_id, token) VALUES ($id, 1)"
    sleep 0.2
    before=$(reaped_cpu_ticks)
    tps=$(PGOPTIONS="-c synchronous_commit=off" "$pgbin/pgbench" -n -M prepared -t "$transactions" \
      -c 1 -D n=0 -D "id=$id" -f "$work/$shape.sql" "$url" 2>&1 |
      sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    sleep 0.3  # the backend exits and is reaped
    after=$(reaped_cpu_ticks)
    echo "lone-statements round=$round shape=$shape server_us=$(((after - before) * 1000000 / ticks_per_s / transactions)) tps=${tps%.*}"
  done
done
rows=$(psql "$url" -qtA -c "SELECT count(*) FROM loom_lone_bench.events")
echo "lone-statements rows_landed=$rows (expected $((rounds * 3 * transactions)))"
PGOPTIONS="-c client_min_messages=warning" psql "$url" -q -c "DROP SCHEMA loom_lone_bench CASCADE"
