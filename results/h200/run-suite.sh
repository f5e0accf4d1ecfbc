#!/usr/bin/env bash
# On the GPU machine: one detcheck run of SGLang base vs candidate over a suite, into $DEST/NAME,
# with the exact command line kept beside the results.
#   bash results/h200/run-suite.sh NAME SUITE [detcheck run args...]
set -uo pipefail
NAME=$1 SUITE=$2; shift 2
REPO=${REPO:-/tmp/sglang-repo}
DEST=${DEST:-/tmp/h200}
# One cache (worktrees, help texts, result store) per suite: suites run side by side.
export DETCHECK_CACHE_DIR=/tmp/detcheck-cache-$NAME
LIMIT=${LIMIT:-540}
mkdir -p "$DEST/$NAME"
CMD=(python3 -m harness.cli run --target sglang --repo "$REPO" --base main~1 --candidate main
     --suite "$SUITE" --out "$DEST/$NAME" --no-progress --format md "$@")
printf "%q " "${CMD[@]}" >> "$DEST/$NAME/COMMAND.txt"; echo >> "$DEST/$NAME/COMMAND.txt"
echo "PYTHONPATH=/tmp/site DETCHECK_CACHE_DIR=$DETCHECK_CACHE_DIR (sglang 0.5.16 kit; base = release, candidate = release + patches/dflash-swa-eviction.patch)" >> "$DEST/$NAME/COMMAND.txt"
start=$(date +%s)
# SIGTERM at the limit: detcheck stops its servers and keeps every finished cell.
timeout "$LIMIT" "${CMD[@]}" > "$DEST/$NAME/stdout.md" 2> "$DEST/$NAME/stderr.txt"
rc=$?
echo "$NAME: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$DEST/summary.txt"
