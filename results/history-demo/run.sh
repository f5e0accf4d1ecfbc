#!/usr/bin/env bash
# The committed history dashboards and their screenshots, made again (CPU, reference server):
#   demo/   the demo's 34-commit history (harness/demo.build_demo_history, seed 5): the planted
#           cache regression, an unbuildable commit; deterministic × prefill_cache_hit, 2 prompts
#   noisy/  20 revisions with slow-decode planted at revision 10 (harness/demo.build_noisy_histories)
#   aa/     the A/A history of the same length, sharing its first 10 revisions
# Usage (from the project root): bash results/history-demo/run.sh [python] [which: "demo noisy"]
# (noisy makes both noisy/ and aa/)
set -euo pipefail
PY=${1:-python3}
WHICH=${2:-demo noisy}
HERE=results/history-demo
WORK=$(mktemp -d)
export DETCHECK_CACHE_DIR=$WORK/cache   # a fresh store: every revision is measured
"$PY" - "$WORK" > "$WORK/shas" <<'PY'
import sys
from pathlib import Path
from harness.demo import build_demo_history, build_noisy_histories
root = Path(sys.argv[1])
demo = build_demo_history(root, seed=5)
noisy = build_noisy_histories(root)
print(demo.path, f"{demo.good}..{demo.bad}")
print(noisy.path, ",".join(noisy.planted))
print(noisy.path, ",".join(noisy.aa))
PY
{ read -r demo_repo demo_revs; read -r noisy_repo planted_revs; read -r _ aa_revs; } < "$WORK/shas"
# exit 1 is "something changed" (the demo and noisy/ must); any other code is a failure
history() { local code=0; "$PY" -m harness.cli history --store "$WORK/store" "$@" > "$WORK/last.log" || code=$?
            cat "$WORK/last.log"; [ "$code" -le 1 ] || { echo "history failed: exit $code"; exit "$code"; }; }
shots=()
if [[ " $WHICH " == *" demo "* ]]; then
  history --repo "$demo_repo" --revs "$demo_revs" --suite suites/default.toml --config deterministic \
    --probe prefill_cache_hit --set prefill_cache_hit.prompts=2 --out "$HERE/demo"
  shots+=(demo)
fi
if [[ " $WHICH " == *" noisy "* ]]; then
  history --repo "$noisy_repo" --revs "$aa_revs" --suite "$HERE/throughput.toml" --out "$HERE/aa"
  history --repo "$noisy_repo" --revs "$planted_revs" --suite "$HERE/throughput.toml" --out "$HERE/noisy"
  shots+=(noisy aa)
fi
for name in "${shots[@]}"; do
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$WORK/chromium-$name" --window-size=1400,1100 \
    --screenshot="$PWD/$HERE/$name.png" "file://$PWD/$HERE/$name/index.html" 2>/dev/null
done
