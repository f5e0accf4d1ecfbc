#!/usr/bin/env bash
# On a fresh GPU machine with the three bundles carried (the last in this call): install the kit
# into /tmp/site and run setup.sh. Sourced by the call scripts, so PYTHONPATH stays exported.
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1
mkdir -p /tmp/gpu-kit /tmp/h200 && cp -r .gpu-kit/bundle-03 /tmp/gpu-kit/
bash .gpu-kit/kit/install.sh > /tmp/h200/install.log 2>&1 || { tail -20 /tmp/h200/install.log; exit 1; }
export PYTHONPATH=/tmp/site
bash results/h200/setup.sh > /tmp/h200/setup.log 2>&1 || { tail -20 /tmp/h200/setup.log; exit 1; }
