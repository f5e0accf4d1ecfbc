#!/usr/bin/env bash
# On the GPU machine, in the background (setsid: it runs on across device calls while the machine
# stays warm), after setup-release.sh:
#  1. nox -s "validate(h200x1)": matrix.toml's h200x1 entry (every GPU suite, servers side by side
#     on the one H200) for base = released 0.5.16 (main~1), candidate = released 0.5.17 (main);
#  2. then, alone on the card (its throughput is the point), the seed-scale DFLASH case:
#     0.5.16 (main~1) vs 0.5.16 + the SWA-eviction patch (dflash-fix).
set -uo pipefail
REPO=${REPO:-/tmp/sglang-release}
export DETCHECK_CACHE_DIR=/tmp/detcheck-cache-release DEST=${DEST:-/tmp/h200}
LIMIT=${LIMIT_VALIDATE:-900} bash results/h200/record-run.sh validate \
  python3 -m nox -s "validate(h200x1)" -- --repo "$REPO" --base main~1 --candidate main \
  --out "$DEST/validate/runs" --format md
LIMIT=${LIMIT_SEED:-1200} bash results/h200/record-run.sh seed \
  python3 -m harness.cli run --target sglang --repo "$REPO" --base main~1 --candidate dflash-fix \
  --suite suites/h200/swa-dflash-seed.toml --out "$DEST/seed/run" --no-progress --format md
echo "session done" >> "$DEST/summary.txt"
