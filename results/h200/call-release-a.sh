#!/usr/bin/env bash
# GPU call A of the release pair (machine warm, bundle-01/02 copied to /tmp/gpu-kit by the two
# calls before, bundle-03 carried now): install the kit, build the 0.5.16/0.5.17 repo and the
# seeded checkpoints, then every worker for LIMIT_A seconds. Results in $OUT/h200-ra.tgz.
# Run from a snapshot of the project whose .gpu-kit links to the carried kit folder.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1
mkdir -p /tmp/gpu-kit /tmp/h200 && cp -r .gpu-kit/bundle-03 /tmp/gpu-kit/
bash .gpu-kit/kit/install.sh > /tmp/h200/install.log 2>&1 || { tail -20 /tmp/h200/install.log; exit 1; }
export PYTHONPATH=/tmp/site
bash results/h200/setup-release.sh > /tmp/h200/setup.log 2>&1 || { tail -30 /tmp/h200/setup.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > /tmp/h200/gpu.txt
(while sleep 30; do nvidia-smi --query-gpu=memory.used --format=csv,noheader; done > /tmp/h200/gpumem.txt) &
LIMIT=${LIMIT_A:-400} bash results/h200/workers-release.sh
tar czf "$OUT/h200-ra.tgz" -C /tmp h200 detcheck-cache-release/store
cat /tmp/h200/summary.txt; tail -3 /tmp/h200/gpumem.txt
for f in /tmp/h200/w-*/stdout.md; do echo "== $f"; sed -n '/^| configuration/,/^$/p' "$f" | cut -c1-400; done
tail -n 3 /tmp/h200/w-*/stderr.txt | cut -c1-300
