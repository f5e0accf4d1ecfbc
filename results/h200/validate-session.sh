#!/usr/bin/env bash
# On the GPU machine, in the background (setsid: it runs on across device calls while the machine
# stays warm), after setup-release.sh:
#  - nox -s "validate(h200x1)": matrix.toml's h200x1 entry (every GPU suite, servers side by side
#    on the one H200) for base = released 0.5.16 (main~1), candidate = released 0.5.17 (main);
#  - beside it, a k-ary bisect (3 slots) over the twelve commits of bisect-history (an exact
#    probe: the load does not change its verdicts);
#  - and the seed-scale DFLASH case, 0.5.16 (main~1) vs 0.5.16 + the SWA-eviction patch
#    (dflash-fix): its two sides run each round at the same time (sides_at_once), so the load
#    of the others falls on both alike.
set -uo pipefail
REPO=${REPO:-/tmp/sglang-release}
export DETCHECK_CACHE_DIR=/tmp/detcheck-cache-release DEST=${DEST:-/tmp/h200}
LIMIT=${LIMIT_BISECT:-900} bash results/h200/record-run.sh bisect \
  python3 -m harness.cli bisect --target sglang --repo "$REPO" --good dflash-fix --bad bisect-history \
  --suite suites/h200/swa-dflash-bisect.toml --probe swa_peak --slots 3 &
BISECT=$!
LIMIT=${LIMIT_SEED:-1200} bash results/h200/record-run.sh seed \
  python3 -m harness.cli run --target sglang --repo "$REPO" --base main~1 --candidate dflash-fix \
  --suite suites/h200/swa-dflash-seed.toml --out "$DEST/seed/run" --no-progress --format md &
SEED=$!
LIMIT=${LIMIT_VALIDATE:-900} bash results/h200/record-run.sh validate \
  python3 -m nox -s "validate(h200x1)" -- --repo "$REPO" --base main~1 --candidate main \
  --out "$DEST/validate/runs" --format md
wait "$BISECT" "$SEED"
echo "session done" >> "$DEST/summary.txt"
