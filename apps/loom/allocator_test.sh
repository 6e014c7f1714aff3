#!/usr/bin/env bash
# The app's allocator setting is in force (once/allocator/settings.h): loom
# runs on tcmalloc's own transfer batch (the batch we ship since payloads are
# packed; it reports it), and keeps a value the caller set.
set -euo pipefail
loom=$1
bench=(bench --backend memory --case unfenced --runs 1 --executions 16 --concurrency 2)
out=$(env -u TCMALLOC_TRANSFER_NUM_OBJ "$loom" "${bench[@]}")
grep -q "allocator tcmalloc, TCMALLOC_TRANSFER_NUM_OBJ=unset (32)" <<<"$out" \
  || { echo "the setting is not in force:"; echo "$out"; exit 1; }
out=$(TCMALLOC_TRANSFER_NUM_OBJ=64 "$loom" "${bench[@]}")
grep -q "allocator tcmalloc, TCMALLOC_TRANSFER_NUM_OBJ=64" <<<"$out" \
  || { echo "the caller's value was not kept:"; echo "$out"; exit 1; }
grep -q "^loom-bench backend=memory case=unfenced" <<<"$out"
echo "allocator test passed"
