#!/usr/bin/env bash
# GPU call A of the release pair (machine warm, bundle-01/02 copied to /tmp/gpu-kit by the two
# calls before, bundle-03 carried now): install the kit, build the 0.5.16/0.5.17 repo and the
# seeded checkpoints, then start every worker in its own session, so that it runs on through the
# end of this call into call B (a call may last 10 minutes; the machine stays while calls follow
# each other). At HOLD_A seconds: a snapshot in $OUT/h200-ra.tgz and the progress so far.
# Run from a snapshot of the project whose .gpu-kit links to the carried kit folder.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1
mkdir -p /tmp/gpu-kit /tmp/h200 && cp -r .gpu-kit/bundle-03 /tmp/gpu-kit/
bash .gpu-kit/kit/install.sh > /tmp/h200/install.log 2>&1 || { tail -20 /tmp/h200/install.log; exit 1; }
export PYTHONPATH=/tmp/site
bash results/h200/setup-release.sh > /tmp/h200/setup.log 2>&1 || { tail -30 /tmp/h200/setup.log; exit 1; }
echo "setup done at ${SECONDS}s"; tail -4 /tmp/h200/setup.log
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > /tmp/h200/gpu.txt
setsid bash -c 'while sleep 20; do echo "$(date +%T) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) load $(cut -d" " -f1 /proc/loadavg)"; done' \
  > /tmp/h200/gpumem.txt 2>&1 < /dev/null &
LIMIT=${LIMIT_WORKERS:-840} setsid bash results/h200/workers-release.sh > /tmp/h200/workers.log 2>&1 < /dev/null &
while [ "$SECONDS" -lt "${HOLD_A:-565}" ]; do sleep 5; done
tar czf "$OUT/h200-ra.tgz" -C /tmp h200 2>/dev/null
cat /tmp/h200/summary.txt 2>/dev/null; tail -4 /tmp/h200/gpumem.txt
for f in /tmp/h200/w-*/stderr.txt; do echo "== $f"; tail -n 2 "$f" | cut -c1-300; done
ls /tmp/detcheck-cache-release/store/sglang/* 2>/dev/null | wc -l
