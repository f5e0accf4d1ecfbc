#!/usr/bin/env bash
# The CPU rehearsal of SGLang 0.5.16 -> 0.5.17: the H200's release suites, run against the
# reference server's fixture repo whose main~1 models 0.5.16 and main 0.5.17.
# Usage (from the project root): bash results/cpu-rehearsal/run.sh [python]
set -euo pipefail
PY=${1:-python3}
REPO=$(mktemp -d)/refserver-release
export DETCHECK_CACHE_DIR=$(mktemp -d)   # a fresh store: every cell is measured
"$PY" results/cpu-rehearsal/make-release-repo.py "$REPO"
# The suites also name the H200's seeded SGLang models (.models/, ignored, written there by
# `detcheck make-model`); loading a suite checks every target's model has a config.json, and the
# refserver target reads none of them: where one is missing, its config stands in.
for m in tiny-qwen3next tiny-llama tiny-llama-eagle tiny-llama-eagle3 tiny-llama-4l \
         tiny-llama-4l-dflash tiny-llama-4l-dspark; do
  [ -f ".models/$m/config.json" ] || { mkdir -p ".models/$m" && cp "fixtures/models/$m/config.json" ".models/$m/"; }
done
# The H200 suites as they are, but for the prompts' vocabulary (32,000 there, the reference
# models have 512 tokens) and the paths, one directory deeper: written to suites/ here.
mkdir -p results/cpu-rehearsal/suites
for suite in release-pools release-speculative; do
  sed -e 's/^vocab = 32000$/vocab = 500/' -e 's#"\.\./\.\./#"../../../#g' "suites/h200/$suite.toml" \
    > "results/cpu-rehearsal/suites/$suite.toml"
  "$PY" -m harness.cli run --target refserver --repo "$REPO" --base main~1 --candidate main \
    --suite "results/cpu-rehearsal/suites/$suite.toml" --out "results/cpu-rehearsal/$suite" --force \
    --no-progress --format md || echo "$suite: exit $?"
done
