"""Servers that span GPUs (issue 36): a TP=2 configuration on a 2-"GPU" matrix entry runs its
sides in turn, on a 4-"GPU" entry side by side, each server seeing exactly its devices (the
reference server refuses fewer than its --tp-size spans and records the ones it was given)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from conftest import detcheck
from harness.fixture_repo import FixtureRepo
from test_schedule_e2e import TPUT_CONFIG, kl_suite, most_at_once

pytestmark = pytest.mark.slow

def matrix(tmp_path: Path) -> Path:
    """One suite (an exact kl configuration and an interleaved throughput one), its servers
    TP=2 by the entries' server_args, on entries of 2, 4 and 1 "GPUs"."""
    kl_suite(tmp_path / "tp2.toml", ("det",), extra=TPUT_CONFIG)
    path = tmp_path / "matrix.toml"
    path.write_text("".join(f'[[entry]]\nname = "{name}"\ngpus = {gpus}\ntarget = "refserver"\nsuites = ["tp2.toml"]\n'
                            f'server_args = ["--tp-size", "2"]\n' for name, gpus in (("two", 2), ("four", 4), ("one", 1))))
    return path


def devices_seen(log: Path) -> list[str]:
    """The devices the reference server says it was given (its `server_args=` line)."""
    line = next(l for l in log.read_text().splitlines() if "server_args=" in l)
    return ast.literal_eval(re.search(r"server_args=(\{.*\})", line).group(1))["visible_devices"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tp2")
    repo = FixtureRepo.create(tmp / "repo")
    path, out = matrix(tmp), {}
    for name in ("two", "four"):
        proc = detcheck("matrix", "run", name, "--matrix", str(path), "--repo", str(repo.path), "--base", "HEAD",
                        "--candidate", "HEAD", "--out", str(tmp / name), "--store", str(tmp / name / "store"),
                        "--format", "json", "--no-progress", timeout=900)
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        out[name] = (proc, json.loads((tmp / name / "tp2" / "results.json").read_text()), tmp / name / "tp2")
    out["repo"], out["matrix"] = repo, path
    return out


def test_a_tp2_server_on_two_gpus_runs_its_sides_in_turn(runs):
    proc, result, out = runs["two"]
    assert "one server at a time on GPU 0,1: base and candidate in turn" in proc.stderr
    assert result["metadata"]["slots"] == 1
    assert most_at_once(result["launches"]) == 1
    for cell in result["cells"]:
        assert cell["metadata"]["server_env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    tput = [c for c in result["cells"] if c["probe"] == "throughput"]
    assert len(tput) == 2 and all(c["facts"]["placement"] == "in turn" for c in tput)
    assert "sides measured in turn, not in alternating rounds" in (out / "report.md").read_text()
    for log in (out / "logs").glob("*.log"):
        assert devices_seen(log) == ["0", "1"]


def test_a_tp2_server_on_four_gpus_runs_its_sides_side_by_side_each_on_its_own_two(runs):
    proc, result, out = runs["four"]
    assert "base on GPU 0,1, candidate on GPU 2,3, at the same time" in proc.stderr
    assert most_at_once(result["launches"]) == 2
    tput = {c["role"]: c for c in result["cells"] if c["probe"] == "throughput"}
    assert {c["facts"]["placement"] for c in tput.values()} == {"alternating"}
    # each side its own GPUs, the same for every job of that side
    by_role = {c["role"]: {c2["metadata"]["server_env"]["CUDA_VISIBLE_DEVICES"] for c2 in result["cells"]
                           if c2["role"] == c["role"]} for c in result["cells"]}
    assert by_role == {"base": {"0,1"}, "candidate": {"2,3"}}
    seen = {tuple(devices_seen(log)) for log in (out / "logs").glob("*.log")}
    assert seen == {("0", "1"), ("2", "3")}
    assert "in turn" not in (out / "report.md").read_text()


def test_the_verdicts_are_the_same_in_turn_and_side_by_side(runs):
    """The exact row alike; the noisy one (the same revision on both sides) never *different*."""
    def verdicts(result: dict) -> dict:
        return {(c["config"], c["probe"]): c["verdict"] for c in result["comparisons"]}

    two, four = verdicts(runs["two"][1]), verdicts(runs["four"][1])
    assert two[("det", "kl")] == four[("det", "kl")] == "same"
    assert {two[("tput", "throughput")], four[("tput", "throughput")]} <= {"same", "unknown"}


def test_a_server_wider_than_the_entry_is_bad_input(runs, tmp_path):
    proc = detcheck("matrix", "run", "one", "--matrix", str(runs["matrix"]), "--repo", str(runs["repo"].path),
                    "--base", "HEAD", "--candidate", "HEAD", "--out", str(tmp_path / "one"), "--no-progress")
    assert proc.returncode == 2
    assert "a server spans 2 GPUs and the entry has 1" in proc.stderr


def test_matrix_list_says_gpus_per_server(runs):
    proc = detcheck("matrix", "list", "--json", "--matrix", str(runs["matrix"]))
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert (rows["two"]["gpus_per_server"], rows["two"]["slots"], rows["two"]["parallel"]) == (2, 1, False)
    assert (rows["four"]["gpus_per_server"], rows["four"]["slots"], rows["four"]["parallel"]) == (2, 2, True)
    assert rows["two"]["runnable_here"]  # the reference server's GPUs are modelled
