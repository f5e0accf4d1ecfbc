#!/usr/bin/env bash
# A later call of the validate session (machine still warm): wait until the session is done or
# HOLD seconds have passed in this call, then pack /tmp/h200 into $OUT/h200.tgz (logs of every
# server included) and print the progress.
set -uo pipefail
until grep -q "session done" /tmp/h200/summary.txt 2>/dev/null || [ "$SECONDS" -ge "${HOLD:-560}" ]; do sleep 5; done
tar czf "$OUT/h200.tgz" --exclude='*.safetensors' -C /tmp h200 2>/dev/null
cat /tmp/h200/summary.txt 2>/dev/null; tail -3 /tmp/h200/gpumem.txt
for f in /tmp/h200/*/stderr.txt; do echo "== $f"; tail -n 3 "$f" | cut -c1-300; done
ls /tmp/detcheck-cache-release/store/sglang/* 2>/dev/null | wc -l
