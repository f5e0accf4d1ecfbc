#!/usr/bin/env bash
# GPU call A (machine warm, bundle-03 carried): install the kit, make the base/candidate repo and
# the seeded checkpoint, then the SWA/DFLASH suite (base and candidate at once) beside the pools
# suite (one server at a time). Everything lands in $OUT/h200-a.tgz.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1
mkdir -p /tmp/gpu-kit /tmp/h200 && cp -r .gpu-kit/bundle-03 /tmp/gpu-kit/
bash .gpu-kit/kit/install.sh > /tmp/h200/install.log 2>&1 || { tail -20 /tmp/h200/install.log; exit 1; }
export PYTHONPATH=/tmp/site
bash results/h200/setup.sh > /tmp/h200/setup.log 2>&1 || { tail -20 /tmp/h200/setup.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > /tmp/h200/gpu.txt
LIMIT=${LIMIT_SWA:-300} bash results/h200/run-suite.sh swa-dflash suites/h200/swa-dflash.toml --parallel &
LIMIT=${LIMIT_POOLS:-420} bash results/h200/run-suite.sh pools suites/h200/pools.toml &
wait
tar czf "$OUT/h200-a.tgz" -C /tmp/h200 .
cat /tmp/h200/summary.txt; for f in /tmp/h200/*/stdout.md; do echo "== $f"; head -20 "$f"; done
tail -5 /tmp/h200/*/stderr.txt
