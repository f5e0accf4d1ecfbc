"""Store reuse and `detcheck compare` of stored runs, end to end against the reference server."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import ROOT, detcheck
from harness.fixture_repo import FixtureRepo

pytestmark = pytest.mark.slow  # every test here starts servers

SUITE = str(ROOT / "suites" / "default.toml")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """clean vs broken, the same again, and clean vs clean: all in one store."""
    root = tmp_path_factory.mktemp("compare")
    repo = FixtureRepo.create(root / "repo")
    clean = repo.head()
    repo.edit("cache")
    broken = repo.commit("planted regression: cache")
    env = {"DETCHECK_CACHE_DIR": str(root / "cache")}
    out = {}
    for name, base, cand in (("first", clean, broken), ("again", clean, broken), ("clean", clean, clean)):
        proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", cand,
                        "--suite", SUITE, "--out", str(root / name), "--format", "json", env=env)
        out[name] = (proc, json.loads((root / name / "results.json").read_text()))
    return root, env, out


def test_a_finished_suite_rerun_launches_nothing(runs):
    _, _, out = runs
    first, again = out["first"][1], out["again"][1]
    assert len(first["launches"]) == 2
    assert again["launches"] == []
    assert [c["verdict"] for c in again["comparisons"]] == [c["verdict"] for c in first["comparisons"]]
    assert out["clean"][1]["launches"] == []  # the clean revision's cells are stored too


def test_compare_stored_candidates(runs):
    root, env, _ = runs
    proc = detcheck("compare", "--base-results", str(root / "clean"), "--candidate-results", str(root / "first"),
                    "--format", "json", env=env)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    verdicts = {c["probe"]: c["verdict"] for c in result["comparisons"]}
    assert verdicts == {"kl": "same", "prefill_cache_hit": "different", "decode_cache_hit": "different",
                        "revision_kl": "same"}
    assert result["launches"] == []
    assert result["base"]["sha"] != result["candidate"]["sha"]


def test_compare_same_cells_is_same_and_renders(runs, tmp_path):
    root, env, _ = runs
    proc = detcheck("compare", "--base-results", str(root / "first"), "--candidate-results",
                    str(root / "again" / "results.json"), "--out", str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: same (4 same)" in proc.stdout
    assert "| deterministic | `prefill_cache_hit` |" in (tmp_path / "report.md").read_text()


def test_compare_base_side(runs):
    root, env, _ = runs
    proc = detcheck("compare", "--base-results", str(root / "first"), "--candidate-results", str(root / "clean"),
                    "--side", "base", "--format", "md", env=env)
    assert proc.returncode == 0 and "**Verdict: same (4 same); cells: 8 measured" in proc.stdout


def test_different_workloads_are_not_comparable(runs, tmp_path):
    root, env, _ = runs
    shutil.copytree(root / "again", tmp_path / "edited")
    data = json.loads((tmp_path / "edited" / "results.json").read_text())
    for cell in data["cells"]:
        if cell["probe"] == "kl":
            cell["workload_fingerprint"] = "0123456789abcdef"
    (tmp_path / "edited" / "results.json").write_text(json.dumps(data))
    proc = detcheck("compare", "--base-results", str(root / "first"), "--candidate-results",
                    str(tmp_path / "edited"), "--format", "json", env=env)
    kl = next(c for c in json.loads(proc.stdout)["comparisons"] if c["probe"] == "kl")
    assert kl["verdict"] == "error" and kl["note"].startswith("not comparable: workload differs")
    assert proc.returncode == 1


def test_compare_needs_a_suite_it_can_read(runs, tmp_path):
    root, env, _ = runs
    shutil.copytree(root / "first", tmp_path / "moved")
    data = json.loads((tmp_path / "moved" / "results.json").read_text())
    data["metadata"]["suite_path"] = str(tmp_path / "gone.toml")
    (tmp_path / "moved" / "results.json").write_text(json.dumps(data))
    proc = detcheck("compare", "--base-results", str(tmp_path / "moved"), "--candidate-results", str(root / "first"), env=env)
    assert proc.returncode == 2 and "pass --suite" in proc.stderr
    ok = detcheck("compare", "--base-results", str(tmp_path / "moved"), "--candidate-results", str(root / "first"),
                  "--suite", SUITE, env=env)
    assert ok.returncode == 0, ok.stderr
    missing = detcheck("compare", "--base-results", str(tmp_path / "nowhere"), "--candidate-results",
                       str(root / "first"), env=env)
    assert missing.returncode == 2 and "no results here" in missing.stderr
