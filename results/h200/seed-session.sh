#!/usr/bin/env bash
# On the GPU machine, in the background (setsid), after setup-release.sh (MODELS=tiny-inkling):
#  - the seed-scale DFLASH case, 0.5.16 (main~1) vs 0.5.16 + the SWA-eviction patch
#    (dflash-fix), with its 240 s measurement window and both sides' rounds at once;
#  - beside it, Inkling's decode_cache_hit again at output_len 320 (its committed run was
#    vacuous at 128): static and lazy pools, graphs off and on, multi-layer EAGLE graphs off,
#    0.5.16 (main~1) vs 0.5.17 (main).
set -uo pipefail
REPO=${REPO:-/tmp/sglang-release}
export DETCHECK_CACHE_DIR=/tmp/detcheck-cache-release DEST=${DEST:-/tmp/h200}
LIMIT=${LIMIT_SEED:-900} bash results/h200/record-run.sh seed \
  python3 -m harness.cli run --target sglang --repo "$REPO" --base main~1 --candidate dflash-fix \
  --suite suites/h200/swa-dflash-seed.toml --out "$DEST/seed/run" --no-progress --format md &
SEED=$!
LIMIT=${LIMIT_INKLING:-600} bash results/h200/record-run.sh inkling \
  python3 -m harness.cli run --target sglang --repo "$REPO" --base main~1 --candidate main \
  --suite suites/h200/release-inkling.toml --probe decode_cache_hit --slots 10 \
  --config static-graphs-off --config static-graphs-on --config lazy-graphs-off \
  --config lazy-graphs-on --config multi-layer-eagle-graphs-off \
  --out "$DEST/inkling/run" --no-progress --format md
wait "$SEED"
echo "session done" >> "$DEST/summary.txt"
