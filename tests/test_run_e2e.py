"""The walking skeleton end to end: `detcheck demo` and `detcheck run` on real reference-server
processes, against git repos made in a temp dir."""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT, detcheck, refserver_suite
from harness.fixture_repo import FixtureRepo
from harness.gitcmd import git


@pytest.mark.slow
def test_demo_catches_the_cache_regression_with_one_launch_per_cell(tmp_path):
    out = tmp_path / "out.json"
    proc = detcheck("demo", "--json", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    verdicts = {(c["config"], c["probe"]): c["verdict"] for c in result["comparisons"]}
    assert verdicts == {("deterministic", "kl"): "same",
                        ("deterministic", "prefill_cache_hit"): "different",
                        ("deterministic", "decode_cache_hit"): "different",
                        # cold decode and scoring: the planted cache-hit bug is not on its path
                        ("deterministic", "revision_kl"): "same"}
    launches = [(l["config"], l["role"]) for l in result["launches"]]
    assert sorted(launches) == [("deterministic", "base"), ("deterministic", "candidate")]
    # The table the user sees carries the verdicts.
    assert "different" in proc.stdout and "prefill_cache_hit" in proc.stdout
    # Every sample is there: 8 prompts per probe per side, with raw logprobs.
    kl_base = next(c for c in result["cells"] if c["probe"] == "kl" and c["role"] == "base")
    assert len(kl_base["samples"]) == 8 and len(kl_base["samples"][0]["decode_logprobs"]) == 32


@pytest.mark.slow
def test_a_kept_demo_leaves_a_history_and_the_commands_it_prints_run(tmp_path):
    kept = tmp_path / "kept"
    proc = detcheck("demo", "--keep", str(kept), "--no-progress", "--format", "md",
                    env={"DETCHECK_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (kept / "run" / "report.md").read_text()
    # pasteable: no path of this machine, but the model path a reproducer's server line starts
    # its server with (that line runs as printed, the model as the run used it)
    elsewhere = "\n".join(line for line in report.splitlines() if not line.startswith(("env ", "python3 ")))
    assert str(tmp_path) not in report and "/tmp/" not in elsewhere
    assert git(kept / "refserver-cache", "branch", "--format=%(refname:short)").split() == ["base", "candidate", "main"]
    assert git(kept / "refserver-bisect", "rev-list", "--count", "good..main") == "33"
    commands = [line.strip() for line in proc.stderr.splitlines() if line.startswith("  detcheck ")]
    assert [shlex.split(c)[1] for c in commands] == ["run", "report", "bisect"]
    run = shlex.split(commands[0])[1:]
    again = detcheck(*run, "--out", str(tmp_path / "again"), "--no-progress", "--format", "json",
                     env={"DETCHECK_CACHE_DIR": str(tmp_path / "cache")})
    assert again.returncode == 1, again.stderr[-3000:]  # the planted regression, found again
    assert "detcheck: target refserver (python/refserver in --repo)" in again.stderr
    assert json.loads(again.stdout)["verdict"] == "different"


@pytest.mark.slow
def test_run_then_rerun_reuses_every_cell(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    repo.edit("cache")
    candidate = repo.commit("break the cache")
    args = ["run", "--repo", str(repo.path), "--base", base, "--candidate", candidate,
            "--suite", str(ROOT / "suites/default.toml"), "--format", "md", "--no-progress"]
    cache = tmp_path / "cache"
    first = detcheck(*args, "--out", str(tmp_path / "a"), env={"DETCHECK_CACHE_DIR": str(cache)})
    assert first.returncode == 1, first.stderr[-3000:]  # a probe differs: exit 1, as asv continuous
    assert "| deterministic | `prefill_cache_hit` |" in first.stdout
    helps = list((cache / "help").iterdir())
    assert len(helps) == 2  # one `--help` per revision
    for path in helps:
        path.unlink()
    again = detcheck(*args, "--out", str(tmp_path / "b"), env={"DETCHECK_CACHE_DIR": str(cache)})
    assert again.returncode == 1
    one = json.loads((tmp_path / "a" / "results.json").read_text())
    two = json.loads((tmp_path / "b" / "results.json").read_text())
    # No cell measured again: each is the first run's, as it was collected. Only the *different*
    # rows' reproducers are posted again, to relaunched servers (a stored verdict is re-verified,
    # never trusted), which reads the revisions' `--help` once more.
    assert [c["metadata"]["collected_at"] for c in two["cells"]] == [c["metadata"]["collected_at"] for c in one["cells"]]
    assert len(one["launches"]) == 2 and two["launches"] == []
    assert all(c["reproducer"]["verification"] for c in two["comparisons"] if c["verdict"] == "different")
    assert [c["verdict"] for c in one["comparisons"]] == [c["verdict"] for c in two["comparisons"]]
    assert (tmp_path / "b" / "report.md").read_text().count("❌ different") == 2


def test_harness_imports_neither_sglang_nor_the_reference_server():
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] not in ("sglang", "refserver"), (path, name)
                # torch only inside the checkpoint writer, and only when it runs, and in the dump
                # comparator that `localize` runs as a process of the servers' interpreter.
                assert name.split(".")[0] != "torch" or path.name in ("weights.py", "dumpdiff.py"), (path, name)
    # And at run time: loading the whole CLI pulls in none of them.
    code = ("import sys, harness.cli, harness.run, harness.report.plot; "
            "print(sorted(m for m in ('sglang', 'refserver', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.slow
def test_a_judged_param_rejudges_stored_cells_and_a_measured_one_relaunches(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    candidate = repo.note("a harmless commit")

    def run(table: str, name: str) -> dict:
        suite = refserver_suite(tmp_path / "rejudge.toml", ["kl"], f"[probe.kl]\n{table}")
        proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", candidate,
                        "--suite", str(suite), "--out", str(tmp_path / name), "--no-progress")
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        return json.loads((tmp_path / name / "results.json").read_text())

    first = run("threshold = 1e-9\n", "first")
    assert len(first["launches"]) == 2
    assert first["comparisons"][0]["judged"]["base"]["passes_threshold"] is True
    # threshold and floors are judged: the stored samples are judged again, nothing launches
    stricter = run("threshold = 0.0\nfloor_abs = 0.5\n", "stricter")
    assert stricter["launches"] == []
    assert stricter["comparisons"][0]["judged"]["base"] == {"threshold": 0.0, "passes_threshold": False}
    # top_k changes what is asked of the server: measured again
    measured = run("threshold = 0.0\ntop_k = 2\n", "measured")
    assert len(measured["launches"]) == 2
    assert {c["facts"]["top_k"] for c in measured["cells"]} == {2}
