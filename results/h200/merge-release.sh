#!/usr/bin/env bash
# After the workers: one pass per suite over every configuration, every cell from the shared
# store (a cell still missing would be launched: the short limit stops that), into $DEST/<suite>.
# Seen on the H200: cells that ended in errors were launched again (not taken from the store), so
# the passes for the pools and speculative suites hit the limit; the workers' own reports are the
# record (results/h200/release/).
set -uo pipefail
for s in release-pools release-speculative release-inkling; do
  LIMIT=${MERGE_LIMIT:-100} bash results/h200/run-release.sh "$s" "suites/h200/$s.toml" &
done
wait
