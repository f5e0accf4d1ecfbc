#!/usr/bin/env bash
# The release-pair workers, side by side (each runs base and candidate at once): one worker per
# named system, its graphs-off and graphs-on configurations in turn. Re-running resumes from the
# shared store. LIMIT: seconds per worker.
set -uo pipefail
w() { local name=$1 suite=$2 cfg=$3; shift 3
  LIMIT=$LIMIT bash results/h200/run-release.sh "$name" "suites/h200/$suite.toml" --parallel \
    --config "$cfg-graphs-off" --config "$cfg-graphs-on" "$@" & sleep 3; }
w w-static release-pools static
w w-lazy release-pools lazy
w w-unified release-pools unified
w w-eagle release-speculative eagle
w w-eagle3 release-speculative eagle3
w w-dflash release-speculative dflash
w w-dspark release-speculative dspark
w w-mle release-inkling multi-layer-eagle
wait
