"""Real SGLang on a GPU (skipped elsewhere, with the reason): the installed SGLang as both sides.

Where SGLang and a CUDA GPU are present (the H200 runs in results/h200 are the full version),
this checks the paths the CPU tests stand in for: capability probing of the real `--help`, the
launch, deterministic-mode probes, and one launch per configuration and side.
"""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, detcheck

pytestmark = pytest.mark.gpu

SUITE = """
name = "gpu-smoke"
[models]
sglang = "{model}"
[server]
args = ["--random-seed", "1234"]
startup_timeout_s = 900
[server.target_args]
sglang = ["--load-format", "dummy", "--skip-tokenizer-init", "--attention-backend", "triton",
          "--mem-fraction-static", "0.3", "--disable-cuda-graph"]
[workload]
prompts = 4
prompt_len = [64, 128]
output_len = 32
vocab = 32000
[[config]]
name = "deterministic"
deterministic = true
probes = ["kl", "determinism", "prefill_cache_hit"]
[probe.determinism]
batch_sizes = [1, 2, 4]
"""


def test_installed_sglang_deterministic_suite(tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE.replace("{model}", str(ROOT / "fixtures/models/tiny-llama")))
    proc = detcheck("run", "--target", "sglang", "--suite", str(suite), "--out", str(tmp_path / "out"),
                    "--format", "json", timeout=3600)
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {c["verdict"] for c in result["comparisons"]} == {"same"}
    assert len(result["launches"]) == 2 and all(l["ok"] for l in result["launches"])
    det = next(c for c in result["cells"] if c["probe"] == "determinism")
    assert det["facts"]["unique_outputs"] == 1
