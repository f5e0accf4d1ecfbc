#!/usr/bin/env bash
# GPU call B (right after A, machine still warm): determinism and speculative suites (base and
# candidate at once), and the rest of the pools suite, resumed from its store.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1 PYTHONPATH=/tmp/site
rm -f /tmp/h200/summary.txt
LIMIT=${LIMIT_DET:-480} bash results/h200/run-suite.sh determinism suites/h200/determinism.toml --parallel &
LIMIT=${LIMIT_SPEC:-540} bash results/h200/run-suite.sh speculative suites/h200/speculative.toml --parallel &
if [ -f /tmp/h200/pools/results.json ]; then
  LIMIT=${LIMIT_POOLS:-540} bash results/h200/run-suite.sh pools suites/h200/pools.toml --resume &
fi
wait
tar czf "$OUT/h200-b.tgz" -C /tmp/h200 .
cat /tmp/h200/summary.txt; for f in /tmp/h200/*/stdout.md; do echo "== $f"; head -20 "$f"; done
tail -5 /tmp/h200/*/stderr.txt
