#!/usr/bin/env bash
# The main device call of the validate session (bundle-01..03 copied to /tmp/gpu-kit by the calls
# before, bundle-04 carried now, from results/h200/rebundle.sh): install the kit (with
# sgl-deep-gemm and nox), build the revisions and checkpoints, start SESSION (default
# validate-session.sh) in its own session, and at HOLD seconds pack what exists into $OUT/h200.tgz.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1
mkdir -p /tmp/gpu-kit /tmp/h200 && cp -r .gpu-kit/bundle-04 /tmp/gpu-kit/
bash .gpu-kit/kit/install.sh > /tmp/h200/install.log 2>&1 || { tail -20 /tmp/h200/install.log; exit 1; }
export PYTHONPATH=/tmp/site
python3 -m nox --version && python3 -c "import deep_gemm" || exit 1
bash results/h200/setup-release.sh > /tmp/h200/setup.log 2>&1 || { tail -30 /tmp/h200/setup.log; exit 1; }
echo "setup done at ${SECONDS}s"; tail -6 /tmp/h200/setup.log
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > /tmp/h200/gpu.txt
setsid bash -c 'while sleep 15; do echo "$(date +%T) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) load $(cut -d" " -f1 /proc/loadavg)"; done' \
  > /tmp/h200/gpumem.txt 2>&1 < /dev/null &
setsid bash "${SESSION:-results/h200/validate-session.sh}" > /tmp/h200/session.log 2>&1 < /dev/null &
HOLD=$(( ${HOLD:-560} - SECONDS )) bash results/h200/call-validate-wait.sh
