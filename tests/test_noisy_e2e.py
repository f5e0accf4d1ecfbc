"""Noisy verdicts end to end on the reference server: interleaved, paired, and deciding.

Each test runs the real pipeline (`detcheck run`) on a fixture repository of the reference
server; the numbers they see are in the assertion messages when they fail.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, detcheck, refserver_suite
from harness.fixture_repo import FixtureRepo


def spec_suite(path: Path, extra: str = "", floor: float = 0.05, deterministic: bool = True) -> Path:
    """suites/demo-spec.toml's EAGLE configuration, accept length only, paths made absolute,
    with a 5% floor (the ~10% drop of `spec-accept-mild` is beyond it) and `extra` keys; off
    deterministic mode, where the accept length is a noisy metric."""
    text = (ROOT / "suites/demo-spec.toml").read_text().replace('"../fixtures', f'"{ROOT}/fixtures')
    text = text.replace('probes = ["accept_length", "kl"]', 'probes = ["accept_length"]')
    text = text.replace("floor_rel = 0.1\n", f"floor_rel = {floor}\n{extra}")
    if not deterministic:
        text = text.replace("deterministic = true", "deterministic = false")
    path.write_text(text)
    return path


def run(repo: FixtureRepo, base: str, candidate: str, suite: Path, out: Path, *extra: str) -> dict:
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", candidate,
                    "--suite", str(suite), "--out", str(out), "--no-progress", "--format", "md", *extra)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    result["report"] = proc.stdout
    return result


def accept(result: dict) -> tuple[dict, dict]:
    comp = next(c for c in result["comparisons"] if c["probe"] == "accept_length")
    return comp, comp["metrics"].get("accept_length", {})


@pytest.mark.slow
def test_eagle_accept_drop_of_ten_percent_reads_different_and_identical_reads_same(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    harmless = repo.note("a harmless commit")
    repo.edit("spec-accept-mild")
    degraded = repo.commit("degrade the draft mildly")
    suite = spec_suite(tmp_path / "spec.toml", deterministic=False)
    args = ("--config", "eagle", "--probe", "accept_length")

    same = run(repo, base, harmless, suite, tmp_path / "same", *args)
    comp, metric = accept(same)
    assert comp["verdict"] == "same" and "identical samples" in comp["note"], comp
    assert metric["paired"] is True and metric["base"]["n"] == 16  # 8 prompts × 2 turns

    drop = run(repo, base, degraded, suite, tmp_path / "drop", *args)
    comp, metric = accept(drop)
    assert comp["verdict"] == "different", comp
    assert comp["decided_by"] == "accept_length" and metric["paired"] is True
    assert metric["p"] < 0.01 and metric["ci"][1] < 0, metric
    relative = metric["effect"] / metric["base"]["median"]
    assert -0.2 < relative < -0.05, metric  # about a 10% drop
    assert "Wilcoxon" in comp["note"] and "paired Δ median" in drop["report"]


@pytest.mark.slow
def test_an_unknown_row_states_a_prompt_count_that_decides_it(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    repo.edit("spec-accept-mild")
    degraded = repo.commit("degrade the draft mildly")
    args = ("--config", "eagle", "--probe", "accept_length")

    # 3 prompts: 6 paired values, the fewest whose signed-rank test can reach p < 0.05 (2 prompts
    # are refused by the design check); against an 8% floor the ~10% drop's CI straddles it
    small = run(repo, base, degraded, spec_suite(tmp_path / "small.toml", "prompts = 3\n", floor=0.08, deterministic=False),
                tmp_path / "small", *args)
    comp, metric = accept(small)
    assert comp["verdict"] == "unknown" and "straddles the floor" in comp["note"], comp
    needed = metric["needed"]
    assert needed > metric["base"]["n"] + 1 and f"n={needed}" in comp["note"], comp
    assert f"needs n≈{needed} per side" in small["report"]

    # measured again with that many values per side (prompts scaled as bisect does), the CI is
    # narrow enough that a 10% drop can no longer read as inside an 8% floor
    prompts = 3 * math.ceil(needed / metric["base"]["n"])
    big = run(repo, base, degraded, spec_suite(tmp_path / "big.toml", f"prompts = {prompts}\n", floor=0.08, deterministic=False),
              tmp_path / "big", *args)
    comp, metric = accept(big)
    assert comp["verdict"] != "same" and metric["ci"][0] < -metric["floor"], (needed, prompts, comp)


@pytest.mark.slow
def test_a_rename_only_candidate_after_a_run_under_load_is_never_different(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    first = repo.note("an earlier candidate")
    renamed = repo.note("rename a local variable")
    suite = refserver_suite(tmp_path / "tput.toml", ["throughput"],
                            "[probe.throughput]\nconcurrency = [2]\nrepeats = 6\nrequests_per_client = 2\n"
                            "warmup = 1\nfloor_rel = 0.1\n", deterministic=False, output_len=16)

    # The first run measures (and stores) the base while other work loads the machine.
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = run(repo, base, first, suite, tmp_path / "loaded")
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
    assert loaded["comparisons"][0]["verdict"] != "error", loaded["comparisons"]

    # Unloaded now: the stored base is not judged against a fresh candidate; both are measured.
    quiet = run(repo, base, renamed, suite, tmp_path / "quiet")
    comp = quiet["comparisons"][0]
    assert comp["verdict"] in ("same", "unknown"), comp
    assert len(quiet["launches"]) == 2
    cells = {c["role"]: c for c in quiet["cells"]}
    assert "earlier" in cells["base"]["metadata"] and "not judged" in quiet["report"]
    # round i of the two sides are neighbours in time: A B B A A B …
    starts = sorted((s["started_at"], role, s["repeat"]) for role, c in cells.items() for s in c["samples"])
    order = [role for _, role, _ in starts]
    assert all(order[i] != order[i + 1] for i in range(0, len(order), 2)), order
    # (six rounds a look: a look that read unknown was followed by six more on both sides)
    assert len(starts) % 12 == 0 and [rep for _, _, rep in starts] == [r for r in range(len(starts) // 2) for _ in (0, 1)], starts


@pytest.mark.slow
def test_sides_at_once_runs_each_round_on_both_servers_at_the_same_time(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    suite = refserver_suite(tmp_path / "together.toml", ["throughput"],
                            "[probe.throughput]\nconcurrency = [2]\nrepeats = 3\nwarmup = 0\n"
                            "max_looks = 1\nalpha = 0.5\n"  # three rounds placed, not judged: the design check allows it
                            "sides_at_once = true\n", deterministic=False, output_len=32)
    result = run(repo, base, repo.note("changelog only"), suite, tmp_path / "out")
    cells = {c["role"]: c for c in result["cells"]}
    assert all(c["status"] == "ok" for c in cells.values()), cells
    # Both servers were started at once (and outlived the threads' launch, which a lifeline
    # tied to a short-lived thread would not: both cells would read "killed by SIGKILL").
    first, second = sorted(result["launches"], key=lambda launch: launch["started_at"])
    assert second["started_at"] < first["started_at"] + first["startup_s"], (first, second)
    for rep in (0, 1):
        base_round, cand_round = (next(s for s in cells[role]["samples"] if s["repeat"] == rep)
                                  for role in ("base", "candidate"))
        # Both sides' round `rep` started together and each ran while the other did.
        first, second = sorted((base_round, cand_round), key=lambda s: s["started_at"])
        assert second["started_at"] < first["started_at"] + first["wall_s"], (first, second)
