"""The SGLang target end to end, without a GPU: a git repo whose python/sglang/launch_server.py
hands over to the reference server. This exercises what the H200 runs rely on — worktrees per
revision, PYTHONPATH=<worktree>/python in front, `--help` capability probing, the launch argv —
with real processes and real HTTP."""

from __future__ import annotations

import pytest

import json
import os

from conftest import ROOT, detcheck, make_sglang_repo

pytestmark = pytest.mark.slow  # every test here starts servers

SUITE = """
name = "shim"
[models]
sglang = "{model}"
[server]
args = ["--random-seed", "7"]
[server.target_args]
sglang = ["--load-format", "dummy", "--skip-tokenizer-init", "--attention-backend", "triton",
          "--mem-fraction-static", "0.1"]
[server.env]
HF_TOKEN = "hunter2"
[workload]
prompts = 6  # the fewest whose noisy k3 pairs (the non-deterministic configuration) can reach alpha
prompt_len = [20, 30]
output_len = 8
[[config]]
name = "det"
deterministic = true
probes = ["kl"]
[[config]]
name = "only-in-a-future-revision"
probes = ["kl"]
args = ["--flag-from-the-future"]
"""


def test_sglang_target_runs_each_worktree(tmp_path):
    """No --target: a checkout with python/sglang runs as sglang, and says so at the start."""
    repo = make_sglang_repo(tmp_path)
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE.replace("{model}", str(ROOT / "fixtures/refmodels/hybrid")))
    out = tmp_path / "out"
    env = {"PYTHONPATH": str(ROOT / "fixtures")}  # where the shim finds the reference server
    proc = detcheck("run", "--repo", str(repo), "--base", "main~1",
                    "--candidate", "main", "--suite", str(suite), "--out", str(out), "--format", "json",
                    env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "detcheck: target sglang (python/sglang in --repo)" in proc.stderr
    result = json.loads((out / "results.json").read_text())
    assert result["target"] == "sglang"
    verdicts = {(c["config"], c["probe"]): c["verdict"] for c in result["comparisons"]}
    assert verdicts == {("det", "kl"): "same", ("only-in-a-future-revision", "kl"): "n/a"}
    na = [c for c in result["cells"] if c["config"] == "only-in-a-future-revision"]
    assert all("--flag-from-the-future unknown at this revision" in c["reason"] for c in na)
    # One launch per (configuration, revision) that can run; none for the n/a configuration.
    assert [(l["config"], l["role"]) for l in result["launches"]] == [("det", "base"), ("det", "candidate")]
    cells = [c for c in result["cells"] if c["config"] == "det"]
    for cell in cells:
        meta = cell["metadata"]
        # The server imported sglang from the revision's worktree, not from anywhere else.
        assert meta["sglang_path"].startswith(os.environ["DETCHECK_CACHE_DIR"])
        assert cell["revision"]["sha"][:12] in meta["sglang_path"]
        assert "--enable-deterministic-inference" in meta["server_argv"]
        assert "hunter2" not in json.dumps(cell)
    assert cells[0]["revision"]["sha"] != cells[1]["revision"]["sha"]
