#!/usr/bin/env bash
# On the GPU machine: one detcheck worker, SGLang 0.5.16 (main~1) vs 0.5.17 (main), over some
# configurations of a suite, into $DEST/WORKER. Every worker shares one cache (worktrees made by
# setup-release.sh, help texts) and one result store, so a last pass over a whole suite finds
# every cell stored and only writes the combined report.
#   bash results/h200/run-release.sh WORKER SUITE [detcheck run args...]
set -uo pipefail
WORKER=$1 SUITE=$2; shift 2
REPO=${REPO:-/tmp/sglang-release}
DEST=${DEST:-/tmp/h200}
export DETCHECK_CACHE_DIR=/tmp/detcheck-cache-release
LIMIT=${LIMIT:-540}
mkdir -p "$DEST/$WORKER"
CMD=(python3 -m harness.cli run --target sglang --repo "$REPO" --base main~1 --candidate main
     --suite "$SUITE" --out "$DEST/$WORKER" --no-progress --format md "$@")
printf "%q " "${CMD[@]}" >> "$DEST/$WORKER/COMMAND.txt"; echo >> "$DEST/$WORKER/COMMAND.txt"
echo "PYTHONPATH=/tmp/site DETCHECK_CACHE_DIR=$DETCHECK_CACHE_DIR timeout $LIMIT (base = sglang 0.5.16 released source, candidate = sglang 0.5.17 released source)" >> "$DEST/$WORKER/COMMAND.txt"
start=$(date +%s)
# SIGTERM at the limit: detcheck stops its servers and keeps every finished cell.
timeout "$LIMIT" "${CMD[@]}" > "$DEST/$WORKER/stdout.md" 2> "$DEST/$WORKER/stderr.txt"
rc=$?
echo "$WORKER: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$DEST/summary.txt"
