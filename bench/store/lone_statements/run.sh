#!/usr/bin/env bash
# The lone append's statement shapes, without the store around them: the
# server CPU of the form with a verdict (sql::LoneAppendSql: the guarded
# INSERT in a CTE, then its verdict rows) against the bare guarded INSERT
# (sql::LoneInsertSql) and a raw one-row INSERT, each by pgbench on one
# connection. synchronous_commit is off for these sessions so that the
# statement's CPU, not the commit's fsync, sets the rate; the tables are
# the store's (schema loom_lone_bench, dropped at the end).
# The .sql files are copies of the two statements as of 2026-12-03 (ids
# random per transaction, every append at sequence 1); re-copy them from
# components/store_postgres/src/sql.cc when those change.
#
#   bench/store/lone_statements/run.sh URL [ROUNDS] [SECONDS]
#
# Prints one "lone-statements" line per statement per round (alternated).
set -euo pipefail
url=${1:?usage: run.sh URL [ROUNDS] [SECONDS]}
rounds=${2:-3}
seconds=${3:-8}
here=$(cd "$(dirname "$0")" && pwd)
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
PGOPTIONS="-c client_min_messages=warning" psql "$url" -q -v ON_ERROR_STOP=1 <<'SQL'
DROP SCHEMA IF EXISTS loom_lone_bench CASCADE;
CREATE SCHEMA loom_lone_bench;
SET search_path = loom_lone_bench;
CREATE TABLE events (execution_id text COLLATE "C" NOT NULL, sequence bigint NOT NULL,
  kind text NOT NULL, payload text NOT NULL, metadata text NOT NULL, time_ms bigint NOT NULL,
  PRIMARY KEY (execution_id, sequence));
CREATE TABLE fences (execution_id text COLLATE "C" PRIMARY KEY, token bigint NOT NULL,
  owner text COLLATE "C", since_ms bigint, run_from bigint) WITH (fillfactor = 70);
CREATE INDEX fences_id_hash ON fences USING hash (execution_id);
CREATE TABLE raw (execution_id text NOT NULL, sequence bigint NOT NULL, kind text NOT NULL,
  payload text NOT NULL, metadata text NOT NULL, time_ms bigint NOT NULL,
  PRIMARY KEY (execution_id, sequence));
SQL
for round in $(seq "$rounds"); do
  for shape in raw with_verdict bare; do
    tps=$(PGOPTIONS="-c synchronous_commit=off -c plan_cache_mode=force_generic_plan" \
      "$pgbin/pgbench" -n -M prepared -T "$seconds" -c 1 -f "$here/$shape.sql" "$url" 2>&1 |
      sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    echo "lone-statements round=$round shape=$shape tps=$tps"
  done
done
PGOPTIONS="-c client_min_messages=warning" psql "$url" -q -c "DROP SCHEMA loom_lone_bench CASCADE"
