#!/usr/bin/env bash
# GPU follow-up call (machine warm, bundle-03 carried): install, set up, then the follow-up suite
# (DSPARK / DFLASH on a 4-layer Llama, STANDALONE with more requests). Results in $OUT/h200-f.tgz.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1
mkdir -p /tmp/gpu-kit /tmp/h200 && cp -r .gpu-kit/bundle-03 /tmp/gpu-kit/
bash .gpu-kit/kit/install.sh > /tmp/h200/install.log 2>&1 || { tail -20 /tmp/h200/install.log; exit 1; }
export PYTHONPATH=/tmp/site
bash results/h200/setup.sh > /tmp/h200/setup.log 2>&1 || { tail -20 /tmp/h200/setup.log; exit 1; }
LIMIT=${LIMIT:-480} bash results/h200/run-suite.sh followup suites/h200/followup.toml --parallel
tar czf "$OUT/h200-f.tgz" -C /tmp/h200 .
cat /tmp/h200/summary.txt; sed -n '/^| configuration/,/^$/p' /tmp/h200/followup/stdout.md
