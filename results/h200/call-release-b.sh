#!/usr/bin/env bash
# GPU call B (right after A, machine still warm): the workers again, resuming from the shared
# store, then the per-suite passes that write the combined reports. Results in $OUT/h200-rb.tgz.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1 PYTHONPATH=/tmp/site
rm -f /tmp/h200/summary.txt
LIMIT=${LIMIT_B:-420} bash results/h200/workers-release.sh
bash results/h200/merge-release.sh
tar czf "$OUT/h200-rb.tgz" -C /tmp h200 detcheck-cache-release/store
cat /tmp/h200/summary.txt
for s in release-pools release-speculative release-inkling; do echo "== $s"; sed -n '/^| configuration/,/^$/p' /tmp/h200/$s/stdout.md | cut -c1-400; done
