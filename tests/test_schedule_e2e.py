"""Concurrent jobs end to end on real server processes: the same cells and verdicts as one
after another, an interleaved configuration still alternating inside a concurrent run, and an
interrupt that leaves no server and resumes."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from conftest import ROOT, detcheck, fake_gpus, leftovers, planted
from faultlib import Bench, interrupt
from harness.fixture_repo import FixtureRepo

pytestmark = pytest.mark.slow

KL_CONFIGS = ("a", "b", "c", "d")


# One throughput configuration (interleaved: its two servers up together), small and quick.
TPUT_CONFIG = """[[config]]
name = "tput"
deterministic = false
probes = ["throughput"]
[probe.throughput]
concurrency = [2]
repeats = 4
requests_per_client = 2
warmup = 1
floor_rel = 0.5
alpha = 0.2  # four rounds (min p 0.125): a schedule test, not a judgement
max_looks = 1
"""


def concurrent_suite(path: Path) -> Path:
    """Four kl configurations (exact) and one throughput configuration (interleaved)."""
    return kl_suite(path, KL_CONFIGS, extra=TPUT_CONFIG)


def kl_suite(path: Path, configs: tuple[str, ...], extra: str = "",
             workload: str = "prompts = 2\nprompt_len = [12, 16]\noutput_len = 4") -> Path:
    """A suite of exact kl configurations, and `extra` TOML after them; `workload`: its table's lines."""
    body = "".join(f'[[config]]\nname = "{name}"\ndeterministic = true\nprobes = ["kl"]\n' for name in configs)
    path.write_text(f"""name = "{path.stem}"
[models]
refserver = "{ROOT / 'fixtures/refmodels/hybrid'}"
[server]
args = ["--random-seed", "1234"]
startup_timeout_s = 240
request_timeout_s = 120
[workload]
{workload}
{body}{extra}""")
    return path


def run_at(slots: int, repo: FixtureRepo, base: str, candidate: str, suite: Path, root: Path) -> dict:
    out = root / f"slots-{slots}"
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", candidate,
                    "--suite", str(suite), "--out", str(out), "--store", str(out / "store"),
                    "--slots", str(slots), "--format", "json", "--no-progress")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def most_at_once(launches: list[dict]) -> int:
    """The most servers up at one time, from the launches' recorded windows."""
    events = sorted([(l["started_at"], 1) for l in launches] + [(l["ended_at"], -1) for l in launches],
                    key=lambda e: (e[0], e[1]))
    up = peak = 0
    for _, change in events:
        up += change
        peak = max(peak, up)
    return peak


def test_four_slots_overlap_jobs_and_give_the_cells_and_verdicts_of_one_slot(tmp_path):
    repo, base, candidate = planted(tmp_path, "batch-noise")
    suite = concurrent_suite(tmp_path / "concurrent.toml")
    concurrent = run_at(4, repo, base, candidate, suite, tmp_path)
    sequential = run_at(1, repo, base, candidate, suite, tmp_path)

    assert concurrent["metadata"]["slots"] == 4 and sequential["metadata"]["slots"] == 1
    assert 2 <= most_at_once(concurrent["launches"]) <= 4, concurrent["launches"]
    assert most_at_once(sequential["launches"]) <= 2  # the interleaved configuration's two servers
    assert [(l["config"], l["role"]) for l in concurrent["launches"]] == \
        [(l["config"], l["role"]) for l in sequential["launches"]]

    def exact(result: dict) -> list:
        return [(c["config"], c["role"], c["probe"], c["status"], c["samples"])
                for c in result["cells"] if c["probe"] == "kl"]

    assert exact(concurrent) == exact(sequential)  # plan order, bit-identical logprobs
    assert [(c["config"], c["probe"]) for c in concurrent["comparisons"]] == \
        [(c["config"], c["probe"]) for c in sequential["comparisons"]]
    kl = {c["config"]: c["verdict"] for c in concurrent["comparisons"] if c["probe"] == "kl"}
    assert kl == {c["config"]: c["verdict"] for c in sequential["comparisons"] if c["probe"] == "kl"}
    assert set(kl.values()) == {"different"}

    # The interleaved configuration, run among the others, still alternates: A B B A …
    tput = {c["role"]: c for c in concurrent["cells"] if c["config"] == "tput"}
    assert all(c["status"] == "ok" for c in tput.values()), [c["reason"] for c in tput.values()]
    starts = sorted((s["started_at"], role, s["repeat"]) for role, c in tput.items() for s in c["samples"])
    order = [role for _, role, _ in starts]
    assert all(order[i] != order[i + 1] for i in range(0, len(order), 2)), order
    assert [rep for _, _, rep in starts] == [r for r in range(4) for _ in (0, 1)], starts


def test_a_matrix_entry_runs_its_suites_in_one_pool_with_each_suites_own_results(tmp_path):
    """Two suites (both with a configuration "a") in one entry of 8 slots: the second suite's
    jobs start while the first's still run, and each suite's folder holds what a run of that
    suite alone gives."""
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    repo.edit("batch-noise")
    candidate = repo.commit("planted regression: batch-noise")
    suites = (kl_suite(tmp_path / "alpha.toml", ("a", "b")), kl_suite(tmp_path / "beta.toml", ("a", "c")))
    (tmp_path / "matrix.toml").write_text(
        '[[entry]]\nname = "pool"\ngpu = "cpu"\ngpus = 1\nservers_per_gpu = 8\ntarget = "refserver"\n'
        f'suites = [{", ".join(repr(str(s)) for s in suites)}]\n')
    proc = detcheck("matrix", "run", "pool", "--matrix", str(tmp_path / "matrix.toml"), "--repo", str(repo.path),
                    "--base", base, "--candidate", candidate, "--out", str(tmp_path / "pool"),
                    "--store", str(tmp_path / "pool-store"), "--format", "md", "--no-progress",
                    env=fake_gpus(tmp_path / "bin", ["cpu"]))
    assert proc.returncode == 1, proc.stderr[-3000:]  # the planted regression differs
    assert "alpha.toml, beta.toml on target refserver, in one pool (8 server slots on GPU 0)" in proc.stderr
    pooled = {s.stem: json.loads((tmp_path / "pool" / s.stem / "results.json").read_text()) for s in suites}
    assert all(r["metadata"]["slots"] == 8 for r in pooled.values())
    # Suite after suite, the second would start once the first had ended.
    assert min(l["started_at"] for l in pooled["beta"]["launches"]) < \
        max(l["ended_at"] for l in pooled["alpha"]["launches"])

    for suite in suites:
        out = tmp_path / f"alone-{suite.stem}"
        alone = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", candidate,
                         "--suite", str(suite), "--out", str(out), "--store", str(out / "store"),
                         "--slots", "4", "--format", "md", "--no-progress")
        assert alone.returncode == 1, alone.stderr[-3000:]
        separate = json.loads((out / "results.json").read_text())
        together = pooled[suite.stem]
        assert [(c["config"], c["role"], c["probe"], c["status"], c["samples"]) for c in together["cells"]] == \
            [(c["config"], c["role"], c["probe"], c["status"], c["samples"]) for c in separate["cells"]]
        assert [(c["config"], c["probe"], c["verdict"]) for c in together["comparisons"]] == \
            [(c["config"], c["probe"], c["verdict"]) for c in separate["comparisons"]]
        assert [(l["config"], l["role"]) for l in together["launches"]] == \
            [(l["config"], l["role"]) for l in separate["launches"]]


def test_an_interrupt_with_several_jobs_in_flight_stops_every_server_and_resumes(tmp_path, bare_python,
                                                                                 no_leftovers):
    bench = Bench(tmp_path, bare_python)
    # "stuck" hangs in its first launch only: interrupted there, it works when resumed.
    bench.write_suite({"one": [], "two": [], "stuck": ["--fault", "hang-generate", "--fault-launches", "1"]},
                      startup_timeout_s=60, request_timeout_s=60)
    proc = bench.start("--slots", "4")
    bench.wait_launches("stuck", 1)
    while not bench.launches("stuck")[0].get("hung"):
        time.sleep(0.05)
    err = interrupt(proc, signal.SIGTERM)
    assert proc.returncode == 130, err[-2000:]
    assert not leftovers(no_leftovers), "a server outlived the interrupted run"
    partial = bench.result()
    # Only what finished: no cell cut short by the interrupt's stopping its server.
    assert all(c["status"] == "ok" for c in partial["cells"]), [c["reason"] for c in partial["cells"]]
    finished = {c["config"] for c in partial["cells"]
                if sum(d["config"] == c["config"] for d in partial["cells"]) == 2}
    assert "stuck" not in finished

    resumed = bench.run("--resume", "--slots", "4")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    result = bench.result()
    assert not {l["config"] for l in result["launches"]} & finished  # nothing relaunched that finished
    assert [(c["config"], c["role"], c["status"]) for c in result["cells"]] == [
        (config, role, "ok") for config, roles in (("one", ("base", "candidate")), ("two", ("candidate", "base")),
                                                   ("stuck", ("base", "candidate"))) for role in roles]
    assert [c["verdict"] for c in result["comparisons"]] == ["same", "same", "same"]


def test_first_per_model_starts_the_models_other_servers_once_its_first_is_up(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    candidate = repo.note("changelog only")
    suite = kl_suite(tmp_path / "one-model.toml", ("a", "b", "c"))
    out = tmp_path / "run"
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", candidate, "--suite", str(suite),
                    "--out", str(out), "--slots", "3", "--first-per-model", "--format", "json", "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "start order: one server per model first (1 model), its others once it is up" in proc.stderr
    result = json.loads((out / "results.json").read_text())
    assert result["metadata"]["start_order"] == {"order_from": [], "first_per_model": True}
    leader, *others = sorted(result["launches"], key=lambda l: l["started_at"])
    assert (leader["config"], leader["role"]) == ("a", "base")  # the plan's first job
    up = leader["started_at"] + leader["startup_s"]
    assert len(others) == 5 and all(l["started_at"] >= up - 0.01 for l in others), (up, others)


def test_order_from_an_earlier_run_starts_its_longest_jobs_first(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    candidate = repo.note("changelog only")
    suite = kl_suite(tmp_path / "three.toml", ("a", "b", "c"))
    first = run_at(1, repo, base, candidate, suite, tmp_path / "first")
    took = {(l["config"], l["role"]): l["ended_at"] - l["started_at"] for l in first["launches"]}
    out = tmp_path / "second"
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", candidate, "--suite", str(suite),
                    "--out", str(out), "--store", str(out / "store"), "--slots", "1",
                    "--order-from", str(tmp_path / "first" / "slots-1"), "--format", "json", "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "start order: longest first (6 of 6 units timed by 1 earlier run)" in proc.stderr
    second = json.loads((out / "results.json").read_text())
    started = [(l["config"], l["role"]) for l in sorted(second["launches"], key=lambda l: l["started_at"])]
    assert started == sorted(took, key=lambda job: -took[job])
    assert second["metadata"]["start_order"]["order_from"] == [str(tmp_path / "first" / "slots-1")]
    # The verdicts do not depend on the order: the same rows as the plan-ordered run.
    assert [(c["config"], c["verdict"]) for c in second["comparisons"]] == \
        [(c["config"], c["verdict"]) for c in first["comparisons"]]
