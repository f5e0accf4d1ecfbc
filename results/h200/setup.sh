#!/usr/bin/env bash
# On the GPU machine, from the project root, after the kit is installed in /tmp/site:
# a git repo whose python/sglang is the released 0.5.16 source (base) plus the DFLASH SWA-eviction
# patch (candidate), and a seeded tiny Llama checkpoint for the KL and speculative runs.
set -euo pipefail
PROJECT=$(pwd)
REPO=${REPO:-/tmp/sglang-repo}
export PYTHONPATH=/tmp/site
rm -rf "$REPO" && mkdir -p "$REPO/python"
cp -r /tmp/site/sglang "$REPO/python/"
git -C "$REPO" init -q -b main
git -C "$REPO" add -A
git -C "$REPO" -c user.name=detcheck -c user.email=detcheck@localhost commit -qm "sglang 0.5.16 (released package source)"
git -C "$REPO" apply "$PROJECT/.gpu-kit/kit/patches/dflash-swa-eviction.patch"
git -C "$REPO" -c user.name=detcheck -c user.email=detcheck@localhost commit -qam "dflash: evict out-of-window SWA KV on the decode path"
git -C "$REPO" log --oneline
python3 -m harness.cli make-model fixtures/models/tiny-llama --out .models/tiny-llama --seed 0
python3 -m harness.cli make-model fixtures/models/tiny-llama-4l --out .models/tiny-llama-4l --seed 0
