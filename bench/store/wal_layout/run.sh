#!/usr/bin/env bash
# What one-step executions write to PostgreSQL's WAL under two layouts of the
# events table, without the store around them:
#   rows      the store's layout (components/store_postgres/src/sql.h): one
#             row per event, its primary key and the partial status index;
#   appends   one row per append, the append's events in one column, and one
#             status index entry per append (its last status event);
#   appends+start  the same and an index of the appends that start an
#             execution (sequence 1) by time, which a listing of the running
#             executions needs once a start and its end share a row.
# 5,000 executions of the `loom bench` unfenced case (start, one step,
# complete, in one append; the bench's id shape and payloads), 64 executions
# an INSERT statement, each statement its own commit. Prints one "wal-layout"
# line per layout: WAL bytes per execution (pg_current_wal_insert_lsn around
# the inserts) and the wall time of its inserts (one connection, statements
# one after another, each waiting for its commit). The schemas (wal_layout_rows, _appends, _starts) are
# dropped at the end.
#
#   bench/store/wal_layout/run.sh URL
set -euo pipefail
url=${1:?usage: run.sh URL}
export PGOPTIONS="-c client_min_messages=warning"
psql=(psql "$url" -qAtX -v ON_ERROR_STOP=1)
executions=5000
batch=64

"${psql[@]}" <<'SQL'
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS wal_layout_rows CASCADE;
DROP SCHEMA IF EXISTS wal_layout_appends CASCADE;
DROP SCHEMA IF EXISTS wal_layout_starts CASCADE;
CREATE SCHEMA wal_layout_rows;
CREATE SCHEMA wal_layout_appends;
CREATE SCHEMA wal_layout_starts;
CREATE TABLE wal_layout_rows.events (
  execution_id text COLLATE "C" NOT NULL, sequence bigint NOT NULL, kind text NOT NULL,
  payload text NOT NULL, metadata text NOT NULL, time_ms bigint NOT NULL,
  PRIMARY KEY (execution_id, sequence));
CREATE INDEX ON wal_layout_rows.events (kind, time_ms, execution_id, sequence)
  WHERE kind IN ('EXECUTION_STARTED', 'EXECUTION_SUSPENDED', 'EXECUTION_COMPLETED',
                 'EXECUTION_FAILED', 'EXECUTION_CANCELLED', 'EXECUTION_CONTINUED');
CREATE TABLE wal_layout_appends.events (
  execution_id text COLLATE "C" NOT NULL, sequence bigint NOT NULL, last_sequence bigint NOT NULL,
  status_kind text, events text NOT NULL, time_ms bigint NOT NULL,
  PRIMARY KEY (execution_id, sequence));
CREATE INDEX ON wal_layout_appends.events (status_kind, time_ms, execution_id, sequence)
  WHERE status_kind IS NOT NULL;
CREATE TABLE wal_layout_starts.events (LIKE wal_layout_appends.events INCLUDING ALL);
CREATE INDEX ON wal_layout_starts.events (time_ms, execution_id) WHERE sequence = 1;
SQL

# The INSERT of executions [first, first + batch) in one layout.
statements() {
  local layout=$1
  "${psql[@]}" -v layout="$layout" -v executions="$executions" -v batch="$batch" <<'SQL'
SELECT CASE WHEN :'layout' = 'rows' THEN format(
  'INSERT INTO wal_layout_rows.events SELECT ''unfenced-0-f1-1796336596639-f-'' || n, e.seq, '
  'e.kind, e.payload, ''{"kernel":true}'', 1796336596743 FROM generate_series(%s, %s) n, '
  '(VALUES (1, ''EXECUTION_STARTED'', ''{"input":{"n":1},"workflow":"one_step"}''), '
  '(2, ''STEP_COMPLETED'', ''{"name":"work","value":{"n":1}}''), '
  '(3, ''EXECUTION_COMPLETED'', ''{"value":{"n":1}}'')) e(seq, kind, payload) ORDER BY n, e.seq',
  b, least(b + :batch - 1, :executions - 1))
ELSE format(
  'INSERT INTO wal_layout_' || CASE WHEN :'layout' = 'appends' THEN 'appends' ELSE 'starts' END ||
  '.events SELECT ''unfenced-0-f1-1796336596639-f-'' || n, 1, 3, '
  '''EXECUTION_COMPLETED'', ''[["EXECUTION_STARTED",{"input":{"n":1},"workflow":"one_step"},'
  '{"kernel":true}],["STEP_COMPLETED",{"name":"work","value":{"n":1}},{"kernel":true}],'
  '["EXECUTION_COMPLETED",{"value":{"n":1}},{"kernel":true}]]'', 1796336596743 '
  'FROM generate_series(%s, %s) n',
  b, least(b + :batch - 1, :executions - 1))
END
FROM generate_series(0, :executions - 1, :batch) b
SQL
}

for layout in rows appends appends+start; do
  file=$(mktemp)
  statements "$layout" | sed 's/$/;/' >"$file"
  before=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  start_ns=$(date +%s%N)
  "${psql[@]}" -f "$file"
  elapsed_ms=$((($(date +%s%N) - start_ns) / 1000000))
  after=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  rm -f "$file"
  bytes=$("${psql[@]}" -c "SELECT round(pg_wal_lsn_diff('$after', '$before') / $executions.0)")
  echo "wal-layout layout=$layout executions=$executions per_statement=$batch wal_bytes_per_exec=$bytes elapsed_ms=$elapsed_ms"
done

"${psql[@]}" -c "DROP SCHEMA wal_layout_rows, wal_layout_appends, wal_layout_starts CASCADE"
