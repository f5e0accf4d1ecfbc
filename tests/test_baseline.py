"""Baselines: populate from measured runs, load with errors naming the field, gate candidates."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, detcheck
from harness import baseline
from harness.errors import UsageError
from harness.fixture_repo import FixtureRepo
from harness.results import CellResult, Metric, RevisionInfo, Role, RunResult, Status
from harness.verdict_stats import Kind

META = {"server_argv": ["-m", "x", "--model-path", "/models/tiny-llama", "--port", "1"],
        "gpu_name": "NVIDIA H200"}


def cell(role: Role, accept: float, k3: float = 0.0, when: str = "t0", **kw) -> CellResult:
    metrics = (Metric("accept_length", Kind.NOISY, (accept - 0.1, accept, accept + 0.1), better="higher"),
               Metric("k3", Kind.EXACT, (k3, k3), better="lower", headline="mean"))
    return CellResult(**{"config": "eagle", "probe": "accept_length", "role": role,
                         "revision": RevisionInfo("r", "a" * 40), "status": Status.OK,
                         "config_fingerprint": "cfg", "workload_fingerprint": "wl", "metrics": metrics,
                         "metadata": {**META, "finished_at": when}, **kw})


def run(*cells: CellResult) -> RunResult:
    rev = RevisionInfo("r", "a" * 40)
    return RunResult("s", "sglang", rev, rev, cells, (), ())


def test_populate_noisy_and_exact():
    runs = [(f"run{i}", run(cell(Role.CANDIDATE, a, when=f"t{i}"))) for i, a in enumerate((3.0, 3.2, 3.1))]
    entries = {e.metric: e for e in baseline.populate(runs, Role.CANDIDATE, margin=0.05).entries}
    accept, k3 = entries["accept_length"], entries["k3"]
    assert (accept.model, accept.config, accept.gpu) == ("tiny-llama", "eagle", "NVIDIA H200")
    assert accept.reference == pytest.approx(3.1) and accept.runs == 3
    assert accept.min == pytest.approx(0.95 * 3.1)  # below every run: nothing to widen
    assert accept.max is None  # higher is better: only a floor
    assert (k3.reference, k3.min, k3.max) == (0.0, 0.0, 0.0)  # exact: floor 0


def test_the_floor_widens_to_take_in_every_run():
    runs = [(f"run{i}", run(cell(Role.CANDIDATE, a, when=f"t{i}"))) for i, a in enumerate((3.0, 2.0))]
    accept = next(e for e in baseline.populate(runs, Role.CANDIDATE, 0.05).entries if e.metric == "accept_length")
    assert accept.reference == pytest.approx(2.5) and accept.min == pytest.approx(2.0)
    assert accept.observed == (2.0, 3.0)


def test_a_stored_cell_seen_in_two_runs_counts_once():
    c = cell(Role.CANDIDATE, 3.0)
    entries = baseline.populate([("a", run(c)), ("b", run(c))], Role.CANDIDATE, 0.05).entries
    assert {e.runs for e in entries} == {1}


def test_an_exact_metric_that_varies_is_refused():
    runs = [("a", run(cell(Role.CANDIDATE, 3.0, k3=0.0, when="t0"))),
            ("b", run(cell(Role.CANDIDATE, 3.0, k3=0.5, when="t1")))]
    with pytest.raises(UsageError, match="k3 is exact but varies"):
        baseline.populate(runs, Role.CANDIDATE, 0.05)


def test_gate_pass_fail_stale_and_unmatched(tmp_path):
    populated = baseline.populate([("a", run(cell(Role.CANDIDATE, 3.0)))], Role.CANDIDATE, 0.05)
    populated.save(tmp_path / "b.json")
    loaded = baseline.load(tmp_path / "b.json")
    checks, unmatched = baseline.gate(run(cell(Role.CANDIDATE, 2.9)), loaded)
    assert {c.metric: c.status for c in checks} == {"accept_length": "pass", "k3": "pass"}
    checks, _ = baseline.gate(run(cell(Role.CANDIDATE, 2.5, k3=1e-12)), loaded)
    assert {c.metric: c.status for c in checks} == {"accept_length": "fail", "k3": "fail"}
    assert baseline.failed(checks)
    checks, _ = baseline.gate(run(cell(Role.CANDIDATE, 2.5, workload_fingerprint="other")), loaded)
    assert {c.status for c in checks} == {"stale"} and not baseline.failed(checks)
    checks, unmatched = baseline.gate(run(cell(Role.CANDIDATE, 3.0, config="other")), loaded)
    assert checks == [] and unmatched == ["other/accept_length"]
    assert baseline.gate(run(cell(Role.BASE, 1.0)), loaded) == ([], [])  # only candidates are gated


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(version=2), "version must be 1"),
    (lambda d: d.update(entries={}), "entries must be a list"),
    (lambda d: d["entries"][0].update(min="low"), "entries[0].min must be a number or null"),
    (lambda d: d["entries"][0].update(reference=None), "entries[0].reference must be a number"),
    (lambda d: d["entries"][0].update(kind="fuzzy"), "entries[0].kind must be exact or noisy"),
    (lambda d: d["entries"][0].pop("model"), "entries[0].model must be a string"),
])
def test_load_errors_name_the_field(tmp_path, edit, field):
    baseline.populate([("a", run(cell(Role.CANDIDATE, 3.0)))], Role.CANDIDATE, 0.05).save(tmp_path / "b.json")
    data = json.loads((tmp_path / "b.json").read_text())
    edit(data)
    (tmp_path / "b.json").write_text(json.dumps(data))
    with pytest.raises(UsageError) as err:
        baseline.load(tmp_path / "b.json")
    assert str(tmp_path / "b.json") in str(err.value) and field in str(err.value)


def test_the_example_baselines_file_loads():
    files = sorted((ROOT / "baselines").glob("*.json"))
    assert files
    for f in files:
        assert baseline.load(f).entries


@pytest.mark.slow
def test_populate_then_gate_a_real_run(tmp_path):
    """populate from a clean run; `run --baseline` then fails the regressed candidate."""
    repo = FixtureRepo.create(tmp_path / "repo")
    clean = repo.head()
    repo.edit("cache")
    broken = repo.commit("planted regression: cache")
    env = {"DETCHECK_CACHE_DIR": str(tmp_path / "cache")}
    suite = str(ROOT / "suites" / "default.toml")
    common = ["--repo", str(repo.path), "--suite", suite, "--probe", "prefill_cache_hit", "--no-progress"]
    first = detcheck("run", *common, "--base", clean, "--candidate", clean, "--out", str(tmp_path / "clean"), env=env)
    assert first.returncode == 0, first.stderr
    pop = detcheck("baseline", "populate", "--results", str(tmp_path / "clean"), "--out", str(tmp_path / "b.json"), env=env)
    # k3, the hit fraction, the tokens each hit reused and (deterministic mode) each hit's first
    # divergent position and its A→B→A phase's reuse and first divergent position
    assert pop.returncode == 0 and "6 entries" in pop.stdout, pop.stderr
    ok = detcheck("baseline", "check", "--results", str(tmp_path / "clean"), "--baseline", str(tmp_path / "b.json"), env=env)
    assert ok.returncode == 0 and "6 checks, 6 pass, 0 fail" in ok.stdout
    gated = detcheck("run", *common, "--base", clean, "--candidate", broken, "--out", str(tmp_path / "broken"),
                     "--baseline", str(tmp_path / "b.json"), env=env)
    assert gated.returncode == 1
    assert "fail  deterministic/prefill_cache_hit k3" in gated.stdout
    assert "pass  deterministic/prefill_cache_hit hit_fraction" in gated.stdout
