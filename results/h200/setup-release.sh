#!/usr/bin/env bash
# On the GPU machine, from the project root, after the kit is installed in /tmp/site: a git repo
# whose python/sglang is the released 0.5.16 source (main~1, base) then the released 0.5.17 source
# (main, candidate; .gpu-kit/sglang-0.5.17-py.tar.xz from the kit's release-source.sh), a branch
# dflash-fix = 0.5.16 + the kit's patches/dflash-swa-eviction.patch (the seed-scale pair is
# main~1 vs dflash-fix), every revision checked out once for all runs, and the seeded
# checkpoints the suites use.
set -euo pipefail
REPO=${REPO:-/tmp/sglang-release}
export PYTHONPATH=/tmp/site DETCHECK_CACHE_DIR=/tmp/detcheck-cache-release
rm -rf "$REPO" && mkdir -p "$REPO/python"
cp -r /tmp/site/sglang "$REPO/python/"
find "$REPO" -name __pycache__ -prune -exec rm -rf {} +
G=(git -C "$REPO" -c user.name=detcheck -c user.email=detcheck@localhost)
git -C "$REPO" init -q -b main
"${G[@]}" add -A && "${G[@]}" commit -qm "sglang 0.5.16 (released package source)"
rm -rf "$REPO/python/sglang" && tar -xJf .gpu-kit/sglang-0.5.17-py.tar.xz -C "$REPO/python"
"${G[@]}" add -A && "${G[@]}" commit -qm "sglang 0.5.17 (released package source)"
git -C "$REPO" checkout -q -b dflash-fix main~1
git -C "$REPO" apply "$PWD/.gpu-kit/kit/patches/dflash-swa-eviction.patch"
"${G[@]}" commit -qam "dflash: evict out-of-window SWA KV on the decode path (kit patch on 0.5.16)"
# The GPU bisect's history: twelve commits on dflash-fix, the seventh takes the patch out again
# (the others add a line to a notes file the server never reads).
git -C "$REPO" checkout -q -b bisect-history dflash-fix
for i in $(seq 1 12); do
  if [ "$i" -eq 7 ]; then
    git -C "$REPO" apply -R "$PWD/.gpu-kit/kit/patches/dflash-swa-eviction.patch"
    "${G[@]}" commit -qam "spec: simplify the DFLASH decode path (drops its SWA eviction)"
  else
    echo "history note $i" >> "$REPO/python/NOTES-detcheck.txt"
    "${G[@]}" add -A && "${G[@]}" commit -qm "notes: entry $i"
  fi
done
git -C "$REPO" checkout -q main
git -C "$REPO" log --oneline --all
# Workers run side by side on one cache: make both worktrees now, not concurrently later.
python3 - "$REPO" <<'PY'
import sys
from harness.revisions import Revision
for ref in ("main~1", "main", "dflash-fix"):
    print(ref, Revision.resolve(sys.argv[1], ref).checkout())
PY
# MODELS: the checkpoints to seed (default: every one the GPU suites use).
for m in ${MODELS:-tiny-llama tiny-llama-4l tiny-qwen3next tiny-llama-eagle tiny-llama-eagle3 \
                   tiny-llama-4l-dflash tiny-llama-4l-dspark tiny-inkling}; do
  python3 -m harness.cli make-model fixtures/models/$m --out .models/$m --seed 0
done
