# The lone append's statement shapes, shared by run.sh (time, pgbench) and
# instructions.sh (instructions, callgrind). Copies of
# components/store_postgres/src/sql.cc's statements, over schema $SCHEMA,
# with these placeholders for a harness to substitute:
#   @ID   the execution id (text)   @NEXT  expected_next = the sequence (int8)
#   @FENCE the fence (int8)
# Shapes:
#   raw        a one-row INSERT into a table with only a primary key
#   unguarded  the same INSERT into the store's events table (its two
#              partial status indexes: what the table itself costs)
#   exact      sql::LoneInsertSql(LoneHead::kExact): the INSERT under the
#              fence read and one probe of the log's newest row (the bare
#              INSERT's statement until 2026-12-05 22:30Z; LoneAppendSql's
#              guard still)
#   near       sql::LoneInsertSql(LoneHead::kNear): the same, the probe
#              bounded below by expected_next - 16 (the store's bare INSERT)
#   two_probe  the guard before 2026-12-05: a branch for the first append,
#              so two probe subplans in the plan
lone_shapes="raw unguarded exact near two_probe"
# What both harnesses share: the checkout, the server binaries (PGBIN), the
# loom binary that makes the tables (LOOM) and the schema they go in.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
LOOM=${LOOM:-$root/build-bench/apps/loom/loom}
SCHEMA=loom_lone_bench

lone_shape_sql() {
  local shape=$1 s=$SCHEMA
  local columns="(execution_id, sequence, kind, payload, metadata, time_ms)"
  local values="(@ID, @NEXT, 'STEP_COMPLETED', repeat('x', 200), '{\"kernel\": true}', 5)"
  local select="SELECT x.execution_id, x.seq, x.kind, x.payload, x.metadata, x.time_ms"
  local row="FROM (SELECT @ID::text AS execution_id, @FENCE::int8 AS fence, @NEXT::int8 AS expected_next,
  @NEXT::int8 AS seq, 'STEP_COMPLETED'::text AS kind, repeat('x', 200) AS payload,
  '{\"kernel\": true}'::text AS metadata, 5::int8 AS time_ms) x"
  local fence="(x.fence IS NULL OR x.fence >= COALESCE((SELECT p.token FROM $s.fences p
  WHERE p.execution_id = x.execution_id), 0))"
  local newest="SELECT COALESCE(rh.last_sequence, rh.sequence) FROM $s.events rh
  WHERE rh.execution_id = x.execution_id"
  local order="ORDER BY rh.sequence DESC LIMIT 1"
  case "$shape" in
    raw) echo "INSERT INTO $s.raw $columns VALUES $values" ;;
    unguarded) echo "INSERT INTO $s.events $columns VALUES $values" ;;
    exact) echo "INSERT INTO $s.events $columns $select $row WHERE $fence
  AND COALESCE(($newest $order), 0) = x.expected_next - 1" ;;
    near) echo "INSERT INTO $s.events $columns $select $row WHERE $fence
  AND COALESCE(($newest AND rh.sequence >= x.expected_next - 16 $order), 0) = x.expected_next - 1" ;;
    two_probe) echo "INSERT INTO $s.events $columns $select $row WHERE $fence
  AND CASE WHEN x.expected_next = 1 THEN ($newest $order) IS NULL
  ELSE ($newest AND rh.sequence <= (x.expected_next - 1) $order) = (x.expected_next - 1) END" ;;
    *) echo "unknown shape $shape" >&2; return 2 ;;
  esac
}

# The store's tables and indexes (`loom seed --executions 0`) in $SCHEMA of
# the server at URL $1, and the raw shape's table beside them.
lone_make_tables() {
  local url=$1
  PGOPTIONS="-c client_min_messages=warning" psql "$url" -q -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
  "$LOOM" --url "$url" --schema "$SCHEMA" seed --executions 0 >/dev/null
  psql "$url" -q -v ON_ERROR_STOP=1 -c "CREATE TABLE $SCHEMA.raw (execution_id text NOT NULL,
    sequence bigint NOT NULL, kind text NOT NULL, payload text NOT NULL, metadata text NOT NULL,
    time_ms bigint NOT NULL, PRIMARY KEY (execution_id, sequence))"
}
