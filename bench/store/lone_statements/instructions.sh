#!/usr/bin/env bash
# The server instructions of one lone-append statement of each shape
# (shapes.sh), counted by callgrind: unlike CPU time on a shared VM, the
# count is the same from run to run, so shapes a few per cent apart can be
# told apart in one sitting. Each shape runs in a stand-alone backend
# (`postgres --single`) on a copy of a fresh cluster holding the store's
# tables, as a prepared statement under a generic plan (as the store's
# connections run it), appending N events to one fenced execution; the
# figure is (count at N2 - count at N1) / (N2 - N1), so start-up and the
# statements around the loop cancel out. The EXECUTE's own parse is in
# every shape's figure alike.
#
#   bench/store/lone_statements/instructions.sh [N1] [N2] [SHAPES]
#
# Needs valgrind and PostgreSQL 15's server binaries (PGBIN); runs as root
# (the backend runs as the postgres user). Prints one "lone-instructions"
# line per shape. LOOM as in run.sh.
set -euo pipefail
n1=${1:-500}
n2=${2:-2500}
source "$(dirname "$0")/shapes.sh"
shapes=${3:-$lone_shapes}
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind" >&2; exit 2; }
work=$(mktemp -d)
chown postgres "$work"
cleanup() {
  "$root/scripts/pg" stop "$work/cluster" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
url=$("$root/scripts/pg" start "$work/cluster")
lone_make_tables "$url"
"$root/scripts/pg" stop "$work/cluster" >/dev/null
# Instructions of a stand-alone backend running N appends of `shape`.
count() {
  local shape=$1 n=$2 copy="$work/data-$1-$2" table="$SCHEMA.events"
  [ "$shape" = raw ] && table="$SCHEMA.raw"
  cp -a "$work/cluster/data" "$copy"
  {
    echo "SET plan_cache_mode = force_generic_plan"
    echo "SET synchronous_commit = off"
    echo "PREPARE p(text, int8, int8) AS $(lone_shape_sql "$shape" |
      sed 's/@ID/$1/g; s/@FENCE/$2/g; s/@NEXT/$3/g' | tr '\n' ' ')"
    echo "INSERT INTO $SCHEMA.fences (execution_id, token) VALUES ('$shape', 1)"
    for i in $(seq "$n"); do echo "EXECUTE p('$shape', 1, $i)"; done
    echo "SELECT count(*) AS landed FROM $table WHERE execution_id = '$shape'"
  } >"$work/$shape-$n.sql"
  runuser -u postgres -- valgrind --tool=callgrind --callgrind-out-file="$work/cg-$shape-$n" \
    "$pgbin/postgres" --single -D "$copy" -c fsync=off postgres \
    <"$work/$shape-$n.sql" >"$work/$shape-$n.log" 2>&1
  grep -q "landed = \"$n\"" "$work/$shape-$n.log" ||
    { echo "instructions.sh: $shape did not land $n rows" >&2; grep ERROR "$work/$shape-$n.log" >&2; return 1; }
  sed -n 's/^summary: //p' "$work/cg-$shape-$n"
  rm -rf "$copy"
}
for shape in $shapes; do
  c1=$(count "$shape" "$n1")
  c2=$(count "$shape" "$n2")
  echo "lone-instructions shape=$shape per_statement=$(((c2 - c1) / (n2 - n1))) n1=$n1 n2=$n2"
done
