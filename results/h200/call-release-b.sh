#!/usr/bin/env bash
# GPU call B (right after A, machine still warm, workers still running): wait for the workers,
# then the per-suite passes that write the combined reports from the shared store.
# Results in $OUT/h200-rb.tgz.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1 PYTHONPATH=/tmp/site
while [ "$(cat /tmp/h200/summary.txt 2>/dev/null | grep -c '^w-')" -lt 8 ] && [ "$SECONDS" -lt "${WAIT_B:-440}" ]; do sleep 5; done
echo "workers: $(grep -c '^w-' /tmp/h200/summary.txt) of 8 done at ${SECONDS}s"
bash results/h200/merge-release.sh
tar czf "$OUT/h200-rb.tgz" -C /tmp h200 detcheck-cache-release/store 2>/dev/null
cat /tmp/h200/summary.txt; tail -3 /tmp/h200/gpumem.txt
for s in release-pools release-speculative release-inkling; do echo "== $s"; sed -n '/^| configuration/,/^$/p' /tmp/h200/$s/stdout.md | cut -c1-330; done
