#!/usr/bin/env bash
# GPU call C of the release pair, on a fresh machine (bundle-01/02 copied by the two calls before,
# bundle-03 and sgl-deep-gemm carried now): EAGLE and EAGLE3 with graphs on failed in calls A/B at
# capture with "No module named 'deep_gemm'" (SGLang 0.5.16/0.5.17 import the DSA backend, which
# imports deep_gemm, whatever the model; the kit leaves sgl-deep-gemm out). Install it, then run
# those two configurations again beside Inkling's three state pools. Results in $OUT/h200-rc.tgz.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1
mkdir -p /tmp/gpu-kit /tmp/h200 && cp -r .gpu-kit/bundle-03 /tmp/gpu-kit/
bash .gpu-kit/kit/install.sh > /tmp/h200/install.log 2>&1 || { tail -20 /tmp/h200/install.log; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-kit/dg/*.whl >> /tmp/h200/install.log 2>&1
export PYTHONPATH=/tmp/site
python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__file__)" 2>&1 | tail -2
bash results/h200/setup-release.sh > /tmp/h200/setup.log 2>&1 || { tail -30 /tmp/h200/setup.log; exit 1; }
echo "setup done at ${SECONDS}s"
(while sleep 20; do echo "$(date +%T) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) load $(cut -d" " -f1 /proc/loadavg)"; done > /tmp/h200/gpumem.txt 2>&1) &
MONITOR=$!
export LIMIT=${LIMIT_C:-390}
w() { local name=$1 suite=$2; shift 2
  bash results/h200/run-release.sh "$name" "suites/h200/$suite.toml" --parallel "$@" & PIDS+=($!); sleep 3; }
PIDS=()
w c-eagle-on release-speculative --config eagle-graphs-on
w c-eagle3-on release-speculative --config eagle3-graphs-on
w c-ink-static release-inkling --config static-graphs-off --config static-graphs-on
w c-ink-lazy release-inkling --config lazy-graphs-off --config lazy-graphs-on
w c-ink-unified release-inkling --config unified-graphs-off --config unified-graphs-on
# Wait for the workers only (a bare `wait` also waits for the monitor loop, for ever: the first
# run of this script sat idle from ~330 s to its 600 s limit and its tar came in a separate call).
wait "${PIDS[@]}"; kill "$MONITOR"
tar czf "$OUT/h200-rc.tgz" -C /tmp h200 2>/dev/null
cat /tmp/h200/summary.txt; tail -3 /tmp/h200/gpumem.txt
for f in /tmp/h200/c-*/stdout.md; do echo "== $f"; sed -n '/^| configuration/,/^$/p' "$f" | cut -c1-330; done
