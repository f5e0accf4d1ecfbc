#!/usr/bin/env bash
# GPU follow-up call (machine warm, bundle-03 carried): install, set up, then the follow-up suite
# (DSPARK / DFLASH on a 4-layer Llama, STANDALONE with more requests). Results in $OUT/h200-f.tgz.
set -uo pipefail
source results/h200/prepare.sh
LIMIT=${LIMIT:-480} bash results/h200/run-suite.sh followup suites/h200/followup.toml --parallel
tar czf "$OUT/h200-f.tgz" -C /tmp/h200 .
cat /tmp/h200/summary.txt; sed -n '/^| configuration/,/^$/p' /tmp/h200/followup/stdout.md
