#!/usr/bin/env bash
# On the GPU machine, in the background (setsid), after setup-release.sh: the seed-scale DFLASH
# case decided by interleaved rounds, alone on the card (suites/h200/swa-dflash-seed.toml: six
# 50 s rounds per side, alternating), 0.5.16 (main~1) vs 0.5.16 + the SWA-eviction patch
# (dflash-fix). Nothing else runs beside it: the rounds' tok/s are the comparison.
set -uo pipefail
REPO=${REPO:-/tmp/sglang-release}
export DETCHECK_CACHE_DIR=/tmp/detcheck-cache-release DEST=${DEST:-/tmp/h200}
LIMIT=${LIMIT_SEED:-1100} bash results/h200/record-run.sh seed \
  python3 -m harness.cli run --target sglang --repo "$REPO" --base main~1 --candidate dflash-fix \
  --suite suites/h200/swa-dflash-seed.toml --out "$DEST/seed/run" --no-progress --format md
echo "session done" >> "$DEST/summary.txt"
