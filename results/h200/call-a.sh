#!/usr/bin/env bash
# GPU call A (machine warm, bundle-03 carried): install the kit, make the base/candidate repo and
# the seeded checkpoint, then the SWA/DFLASH suite (base and candidate at once) beside the pools
# suite (one server at a time). Everything lands in $OUT/h200-a.tgz.
set -uo pipefail
source results/h200/prepare.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > /tmp/h200/gpu.txt
LIMIT=${LIMIT_SWA:-300} bash results/h200/run-suite.sh swa-dflash suites/h200/swa-dflash.toml --parallel &
LIMIT=${LIMIT_POOLS:-420} bash results/h200/run-suite.sh pools suites/h200/pools.toml &
wait
tar czf "$OUT/h200-a.tgz" -C /tmp/h200 .
cat /tmp/h200/summary.txt; for f in /tmp/h200/*/stdout.md; do echo "== $f"; head -20 "$f"; done
tail -5 /tmp/h200/*/stderr.txt
