#!/usr/bin/env bash
# The app's allocator settings are in force (once/allocator/settings.h): loom
# runs on tcmalloc's own transfer batch (the batch we ship since payloads are
# packed; it reports it) and keeps a value the caller set; its heap grows in
# huge-page regions unless ONCE_MALLOC_HUGE_PAGES=0, and where the kernel
# offers transparent huge pages a heap that grows faults far less often.
set -euo pipefail
loom=$1
bench=(bench --backend memory --case unfenced --runs 1 --executions 16 --concurrency 2)
out=$(env -u TCMALLOC_TRANSFER_NUM_OBJ -u ONCE_MALLOC_HUGE_PAGES "$loom" "${bench[@]}")
grep -q "allocator tcmalloc, TCMALLOC_TRANSFER_NUM_OBJ=unset (32), huge-page regions" <<<"$out" \
  || { echo "the settings are not in force:"; echo "$out"; exit 1; }
out=$(TCMALLOC_TRANSFER_NUM_OBJ=64 "$loom" "${bench[@]}")
grep -q "allocator tcmalloc, TCMALLOC_TRANSFER_NUM_OBJ=64" <<<"$out" \
  || { echo "the caller's value was not kept:"; echo "$out"; exit 1; }
grep -q "^loom-bench backend=memory case=unfenced" <<<"$out"
out=$(ONCE_MALLOC_HUGE_PAGES=0 "$loom" "${bench[@]}")
grep -q "allocator tcmalloc, TCMALLOC_TRANSFER_NUM_OBJ=unset (32), 4 KiB pages" <<<"$out" \
  || { echo "ONCE_MALLOC_HUGE_PAGES=0 did not turn the regions off:"; echo "$out"; exit 1; }

# A heap that grows: a memory store that keeps 200,000 executions (about 150
# MB). The minor page faults that growth adds to a run of 16 executions,
# with the regions and without.
thp=/sys/kernel/mm/transparent_hugepage/enabled
if [ ! -r "$thp" ] || grep -q '\[never\]' "$thp"; then
  echo "allocator test passed (transparent huge pages are off here: fault counts not compared)"
  exit 0
fi
growth_faults() {
  ONCE_MALLOC_HUGE_PAGES=$1 python3 - "$loom" <<'EOF'
import resource, subprocess, sys
def faults(executions):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    subprocess.run([sys.argv[1], "bench", "--backend", "memory", "--case", "unfenced", "--runs",
                    "1", "--warm-up-runs", "0", "--executions", str(executions),
                    "--concurrency", "2"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before
print(max(0, faults(200000) - faults(16)))
EOF
}
with=$(growth_faults 1)
without=$(growth_faults 0)
echo "minor page faults of a heap grown by 200,000 executions: ${with} with huge-page regions, ${without} without"
[ $((with * 10)) -lt "$without" ] \
  || { echo "huge-page regions did not cut the growing heap's page faults tenfold"; exit 1; }
echo "allocator test passed"
