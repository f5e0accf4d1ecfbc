"""Beyond one machine (issue 36): a matrix entry and a bisect through a real one-node Slurm cluster
(tests/slurm_cluster.py: Debian's slurm-wlm, started by this module), with the verdicts they
give when run here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import detcheck, planted
from slurm_cluster import Cluster, why_not
from test_schedule_e2e import TPUT_CONFIG, kl_suite

pytestmark = pytest.mark.slow

# An exact configuration that catches the planted regression, a TP=2 one and an interleaved one:
# jobs of one side each, and one of both.
CONFIGS = """[[config]]
name = "det"
deterministic = true
mamba_track_interval = 16
probes = ["kl", "prefill_cache_hit"]
[[config]]
name = "tp2"
deterministic = true
args = ["--tp-size", "2"]
probes = ["kl"]
[probe.prefill_cache_hit]
min_hit_fraction = 0.5
"""
WORKLOAD = "prompts = 3\nprompt_len = [40, 90]\noutput_len = 16"


def spread_suite(path: Path, extra: str = TPUT_CONFIG) -> Path:
    return kl_suite(path, (), CONFIGS + extra, WORKLOAD)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if (reason := why_not()) is not None:
        pytest.skip(reason)
    c = Cluster(tmp_path_factory.mktemp("slurm")).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def planted_cache(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("repo")
    return planted(tmp, "cache")


def entry_run(tmp: Path, repo, base: str, cand: str, name: str, *extra: str, env: dict | None = None):
    spread_suite(tmp / "spread.toml")
    (tmp / "matrix.toml").write_text('[[entry]]\nname = "pair"\ngpus = 4\ntarget = "refserver"\nsuites = ["spread.toml"]\n')
    out = tmp / name
    proc = detcheck("matrix", "run", "pair", "--matrix", str(tmp / "matrix.toml"), "--repo", str(repo.path),
                    "--base", base, "--candidate", cand, "--out", str(out), "--store", str(tmp / f"store-{name}"),
                    "--format", "json", "--no-progress", *extra, env=env, timeout=1200)
    assert proc.returncode in (0, 1), proc.stderr[-4000:]
    return proc, json.loads((out / "spread" / "results.json").read_text())


def verdicts(result: dict, exact_only: bool = True) -> dict:
    return {(c["config"], c["probe"]): c["verdict"] for c in result["comparisons"]
            if not exact_only or c["probe"] != "throughput"}


def test_a_matrix_entry_through_slurm_gives_the_local_verdicts(cluster, planted_cache, tmp_path):
    repo, base, cand = planted_cache
    _, local = entry_run(tmp_path, repo, base, cand, "local")
    proc, spread = entry_run(tmp_path, repo, base, cand, "slurm", "--slurm", env=cluster.env)
    assert "slurm: 5 jobs for pair (1 of both sides, the others one side each)" in proc.stderr
    assert verdicts(spread) == verdicts(local)
    assert verdicts(spread)[("det", "prefill_cache_hit")] == "different"  # the planted regression
    assert verdicts(spread)[("det", "kl")] == verdicts(spread)[("tp2", "kl")] == "same"
    assert {c["verdict"] for c in spread["comparisons"] if c["probe"] == "throughput"} <= {"same", "unknown"}
    jobs = {(j["config"], j["side"]) for j in spread["metadata"]["slurm"]["jobs"]}
    assert jobs == {("det", "base"), ("det", "candidate"), ("tp2", "base"), ("tp2", "candidate"), ("tput", "both")}
    # the interleaved probe's rounds alternated between two servers up together on the node
    tput = [c for c in spread["cells"] if c["probe"] == "throughput"]
    assert len(tput) == 2 and {c["facts"]["placement"] for c in tput} == {"alternating"}
    # every cell was measured by a job (none reused by the collector), each TP=2 server on its two devices
    assert len(spread["cells"]) == len(local["cells"]) == 8
    assert not any(c["metadata"].get("reused") for c in spread["cells"])
    assert {c["metadata"]["server_env"]["CUDA_VISIBLE_DEVICES"] for c in spread["cells"] if c["config"] == "tp2"} == {"0,1"}
    assert len(spread["launches"]) == 6
    report = (tmp_path / "slurm" / "spread" / "report.md").read_text()
    assert "prefill_cache_hit" in report


def test_a_bisect_through_slurm_finds_the_local_culprit(cluster, tmp_path):
    from harness.fixture_repo import FixtureRepo

    repo = FixtureRepo.create(tmp_path / "repo")
    good = repo.head()
    for i in range(3):
        repo.note(f"harmless {i}")
    repo.edit("cache")
    culprit = repo.commit("planted regression: cache")
    for i in range(2):
        repo.note(f"after {i}")
    bad = repo.head()
    suite = spread_suite(tmp_path / "bisect.toml", extra="")
    results = {}
    for name, extra, env in (("local", ("--slots", "2"), None), ("slurm", ("--slots", "2", "--slurm"), cluster.env)):
        proc = detcheck("bisect", "--repo", str(repo.path), "--good", good, "--bad", bad, "--suite", str(suite),
                        "--probe", "prefill_cache_hit", "--config", "det", "--store", str(tmp_path / f"store-{name}"),
                        *extra, env={"DETCHECK_CACHE_DIR": str(tmp_path / f"cache-{name}"), **(env or {})},
                        timeout=1500)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        results[name] = proc.stdout
    for out in results.values():
        assert f"first bad commit: {culprit[:12]}" in out
        assert "confirmed: bad with" in out
    assert results["slurm"].count("round ") >= 2
    assert list((tmp_path / "cache-slurm" / "bisect").glob("*/slurm/job-*-step.log"))
