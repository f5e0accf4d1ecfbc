#!/usr/bin/env bash
# After the workers: one pass per suite over every configuration, every cell from the shared
# store (a cell still missing would be launched: the short limit stops that), into $DEST/<suite>.
set -uo pipefail
for s in release-pools release-speculative release-inkling; do
  LIMIT=${MERGE_LIMIT:-100} bash results/h200/run-release.sh "$s" "suites/h200/$s.toml" &
done
wait
