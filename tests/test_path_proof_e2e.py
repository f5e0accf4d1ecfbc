"""Proof the path ran, end to end: real reference servers, real HTTP, a real git repository.
A candidate whose CUDA graphs are configured but never replayed (`graphs-never-replay`) serves
the same tokens; its graphs-on row reads *vacuous* (an error, exit 1), never *same*, while the
graphs-off row beside it reads *same*. An A/A run shows the counters that prove both paths ran."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import ROOT, planted, refserver_suite, run_pair
from harness.fixture_repo import FixtureRepo

pytestmark = pytest.mark.slow

MODELS = ROOT / "fixtures/refmodels"
# The first configuration's table goes on with these: graphs on (its own name), graphs off, EAGLE.
MORE_CONFIGS = f"""cuda_graph = true
[[config]]
name = "eager"
deterministic = true
cuda_graph = false
probes = ["kl"]
[[config]]
name = "eagle"
deterministic = true
mamba_track_interval = 16
speculative = {{ algorithm = "EAGLE", num_steps = 3, eagle_topk = 1, num_draft_tokens = 4 }}
probes = ["kl"]
[config.draft]
refserver = "{MODELS / 'hybrid-draft'}"
"""


def suite(path: Path) -> Path:
    return refserver_suite(path, ["kl"], MORE_CONFIGS, config="graphs", output_len=6, args=("--random-seed", "1234"))


def rows(result: dict) -> dict[str, dict]:
    return {c["config"]: c for c in result["comparisons"]}


def path_of(result: dict, config: str, role: str) -> dict:
    return next(c for c in result["cells"] if c["config"] == config and c["role"] == role)["facts"]["path"]


def test_graphs_configured_but_never_replayed_read_vacuous_and_exit_non_zero(tmp_path):
    repo, base, cand = planted(tmp_path, "graphs-never-replay")
    code, result, proc = run_pair(repo, base, cand, suite(tmp_path / "s.toml"), tmp_path / "out",
                                  "--config", "graphs", "--config", "eager")
    by = rows(result)
    graphs = by["graphs"]
    assert graphs["verdict"] == "error" and graphs["note"].startswith("vacuous: candidate: CUDA graphs on, but none of"), graphs
    assert graphs["metrics"]["k3"]["verdict"] == "same", graphs  # the outputs agree: only the path differs
    replayed, eager = path_of(result, "graphs", "base"), path_of(result, "graphs", "candidate")
    assert replayed["passes"]["decode_cuda_graph"] > 0 and "vacuous" not in replayed, replayed
    assert eager["passes"].get("decode_cuda_graph", 0) == 0 and eager["passes"]["decode_none"] > 0, eager
    assert by["eager"]["verdict"] == "same", by["eager"]  # graphs off: nothing demanded
    assert path_of(result, "eager", "candidate")["demands"] == []
    meta = next(c for c in result["cells"] if c["config"] == "graphs")["metadata"]
    assert "--enable-metrics" in meta["server_argv"]
    # the runner as the launch found it: on a machine without nvidia-smi, that it is absent
    assert meta["runner"] == {"nvidia_smi": "absent"} if shutil.which("nvidia-smi") is None else "gpus" in meta["runner"]
    assert code == 1 and "vacuous" in proc.stdout


def test_an_a_a_run_shows_the_graphs_replayed_and_the_drafts_verified(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    cand = repo.note("a changelog line only")
    code, result, _ = run_pair(repo, base, cand, suite(tmp_path / "s.toml"), tmp_path / "out",
                               "--config", "graphs", "--config", "eagle")
    assert {c: r["verdict"] for c, r in rows(result).items()} == {"graphs": "same", "eagle": "same"}, rows(result)
    for role in ("base", "candidate"):
        graphs, eagle = path_of(result, "graphs", role), path_of(result, "eagle", role)
        assert graphs["demands"] == ["cuda_graph"] and graphs["passes"]["decode_cuda_graph"] > 0, graphs
        assert eagle["demands"] == ["speculative"] and eagle["verify_calls"] > 0, eagle
    assert code == 0


def pressure_suite(path: Path) -> Path:
    """Forced retraction every second batch, kl over four prompts in one batch; a second
    configuration alike asks for more retractions than any probe here makes."""
    pressure = "retract_interval = 2\n"
    short = f'[[config]]\nname = "short"\ndeterministic = true\nprobes = ["kl"]\n{pressure}min_retractions = 100000\n'
    return refserver_suite(path, ["kl"], pressure + short, config="forced", prompts=4, output_len=24,
                           args=("--random-seed", "1234"))


def test_forced_retraction_is_counted_and_too_few_retractions_read_vacuous(tmp_path):
    """Decode under forced retraction against a cold replay: the same tokens, whatever the
    batch and retraction history (deterministic mode); the row records its retractions, and
    one that saw fewer than its declared minimum is vacuous, exit 1."""
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    code, result, proc = run_pair(repo, base, repo.note("a changelog line only"),
                                  pressure_suite(tmp_path / "p.toml"), tmp_path / "out")
    by = rows(result)
    assert by["forced"]["verdict"] == "same", by["forced"]
    for role in ("base", "candidate"):
        forced = path_of(result, "forced", role)
        assert forced["demands"] == ["retraction"] and forced["retractions"] >= forced["min_retractions"] == 10, forced
    cell = next(c for c in result["cells"] if c["config"] == "forced")
    assert cell["metadata"]["server_env"]["SGLANG_TEST_RETRACT_INTERVAL"] == "2"
    short = by["short"]
    assert short["verdict"] == "error" and "retractions where at least 100000 are required" in short["note"], short
    assert code == 1
