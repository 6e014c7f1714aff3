#!/usr/bin/env bash
# The lone append's guard, without the store around it: the server CPU of
# one statement of each shape (shapes.sh), run by pgbench on one connection,
# each transaction appending the next event to one fenced execution (the
# store bench's lone cell). synchronous_commit is off for these sessions so
# that the statement's CPU, not the commit's fsync, sets the rate. The store
# makes its own tables and indexes (`loom seed --executions 0` into schema
# loom_lone_bench, dropped at the end). instructions.sh counts the same
# shapes' instructions, which do not move with the machine's load.
#
#   bench/store/lone_statements/run.sh URL PGDATA [ROUNDS] [TRANSACTIONS] [SHAPES]
#
# PGDATA is the server's data folder (its postmaster.pid): the CPU of a
# pgbench session's backend is read from the postmaster's reaped children,
# so the server must be local and otherwise idle. Prints one
# "lone-statements" line per shape per round (shapes alternated) with the
# server's microseconds of CPU a statement and pgbench's rate. LOOM is the
# loom binary that makes the tables (default build-bench/apps/loom/loom);
# SHAPES a quoted list (default: all of shapes.sh's).
set -euo pipefail
url=${1:?usage: run.sh URL PGDATA [ROUNDS] [TRANSACTIONS] [SHAPES]}
pgdata=${2:?usage: run.sh URL PGDATA [ROUNDS] [TRANSACTIONS] [SHAPES]}
rounds=${3:-3}
transactions=${4:-20000}
source "$(dirname "$0")/shapes.sh"
shapes=${5:-$lone_shapes}
postmaster=$(head -1 "$pgdata/postmaster.pid")
ticks_per_s=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lone_make_tables "$url"
for shape in $shapes; do
  { echo '\set n :n + 1'; lone_shape_sql "$shape" | sed 's/@ID/:id/g; s/@NEXT/:n/g; s/@FENCE/1/g'
    echo ';'; } >"$work/$shape.sql"
done
reaped_cpu_ticks() { awk '{print $16 + $17}' "/proc/$postmaster/stat"; }
for round in $(seq "$rounds"); do
  for shape in $shapes; do
    id="'$shape-$round'"
    psql "$url" -q -c "INSERT INTO $SCHEMA.fences (execution_id, token) VALUES ($id, 1)"
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
shape_count=$(echo $shapes | wc -w)
events=$(psql "$url" -qtA -c "SELECT count(*) FROM $SCHEMA.events")
raw=$(psql "$url" -qtA -c "SELECT count(*) FROM $SCHEMA.raw")
echo "lone-statements rows_landed=$((events + raw)) (expected $((rounds * shape_count * transactions)))"
PGOPTIONS="-c client_min_messages=warning" psql "$url" -q -c "DROP SCHEMA $SCHEMA CASCADE"
