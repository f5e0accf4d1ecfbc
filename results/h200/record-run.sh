#!/usr/bin/env bash
# On the GPU machine: one command (a detcheck run, a nox session) into $DEST/NAME, with its exact
# command line and environment kept beside what it writes, a time limit, and its exit status
# appended to $DEST/summary.txt.
#   LIMIT=SECONDS bash results/h200/record-run.sh NAME COMMAND [ARGS...]
# SIGTERM at the limit: detcheck stops its servers and keeps every finished cell.
set -uo pipefail
NAME=$1; shift
DEST=${DEST:-/tmp/h200}
mkdir -p "$DEST/$NAME"
{ printf "%q " "$@"; echo
  echo "# env: PYTHONPATH=$PYTHONPATH DETCHECK_CACHE_DIR=${DETCHECK_CACHE_DIR:-} timeout ${LIMIT:-540}"
} >> "$DEST/$NAME/COMMAND.txt"
start=$(date +%s)
timeout "${LIMIT:-540}" "$@" > "$DEST/$NAME/stdout.md" 2> "$DEST/$NAME/stderr.txt"
rc=$?
echo "$NAME: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$DEST/summary.txt"
