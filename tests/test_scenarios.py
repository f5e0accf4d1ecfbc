"""End to end: `detcheck demo --scenario swa|mamba-unified|spec-accept` as a user runs it.

Each run builds a reference-server repo with the planted regression, launches real servers for
base and candidate, and prints the PR table; the verdicts are read back from `--json`. Every
scenario runs once per module (several tests read the same run).
"""

from __future__ import annotations

import json
import statistics
import subprocess

import pytest

from conftest import ROOT, detcheck
from harness.demo import SCENARIOS, build_repo
from harness.textfmt import fmt

pytestmark = pytest.mark.slow  # every test here starts servers

WINDOW = json.loads((ROOT / "fixtures/refmodels/hybrid/config.json").read_text())["sliding_window"]
OUTPUT_LEN = 600  # suites/demo-swa.toml


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """Run a scenario once per module: (scenario, reverse) -> (process, results JSON, out dir)."""
    runs: dict[tuple[str, bool], tuple] = {}

    def run(name: str, reverse: bool = False):
        if (name, reverse) not in runs:
            tmp = tmp_path_factory.mktemp(f"{name}{'-reverse' if reverse else ''}")
            args = ["demo", "--scenario", name, "--json", str(tmp / "result.json"),
                    "--out", str(tmp / "run"), "--no-progress", *(["--reverse"] if reverse else [])]
            proc = detcheck(*args, env={"DETCHECK_CACHE_DIR": str(tmp / "cache")})
            assert proc.returncode == 0, proc.stdout + proc.stderr
            runs[name, reverse] = (proc, json.loads((tmp / "result.json").read_text()), tmp / "run")
        return runs[name, reverse]

    return run


def verdicts(result: dict) -> dict[tuple[str, str], str]:
    return {(c["config"], c["probe"]): c["verdict"] for c in result["comparisons"]}


def cell(result: dict, config: str, probe: str, role: str) -> dict:
    return next(c for c in result["cells"]
                if (c["config"], c["probe"], c["role"]) == (config, probe, role))


def expected(name: str, result: dict) -> dict[tuple[str, str], str]:
    want = SCENARIOS[name].expected
    return {key: want.get(key, "same") for key in verdicts(result)}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_reversed_scenario_repo_ends_on_the_clean_tree(tmp_path, name):
    repo = build_repo(SCENARIOS[name], tmp_path, reverse=True)

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(repo.path), *a], capture_output=True, text=True, check=True).stdout

    assert git("diff", "--stat", repo.base, repo.candidate)  # base has the regression
    assert git("diff", f"{repo.candidate}~2", repo.candidate) == ""  # candidate undoes it exactly


@pytest.mark.parametrize("name", ["swa", "mamba-unified", "spec-accept"])
def test_scenario_prints_expected_verdicts(demo, name):
    proc, result, _ = demo(name)
    assert verdicts(result) == expected(name, result)
    assert "expected verdicts reproduced" in proc.stderr
    # A plain demo ends saying what to do next: keep its repos, or run on an SGLang checkout.
    assert proc.stderr.rstrip().endswith("its servers in SGLang's environment") and "detcheck demo --keep" in proc.stderr
    for (config, probe), verdict in verdicts(result).items():
        assert any(config in line and probe in line and verdict in line
                   for line in proc.stdout.splitlines()), (config, probe, verdict)


def _assert_grows(swa: dict) -> None:
    facts = swa["facts"]
    prompt = swa["samples"][0]["prompt_len"]
    assert facts["growth_slope"] == pytest.approx(1.0, abs=0.05)
    assert facts["swa_peak"] >= prompt + 0.95 * OUTPUT_LEN  # every generated token held
    assert facts["retractions"] == 0 and facts["aborted"] == 0


def _assert_bounded(swa: dict) -> None:
    facts = swa["facts"]
    assert abs(facts["growth_slope"]) < 0.1
    assert WINDOW < facts["swa_peak"] <= 5 * WINDOW  # the window plus what one eviction interval adds
    assert facts["swa_plateau"] <= 3 * WINDOW


@pytest.mark.parametrize("reverse", [False, True], ids=["candidate-broken", "base-broken"])
def test_swa_peak_grows_without_eviction_and_stays_near_the_window_with_it(demo, reverse):
    proc, result, out = demo("swa", reverse)
    broken, fixed = ("base", "candidate") if reverse else ("candidate", "base")
    assert verdicts(result) == expected("swa", result)
    for config in ("dflash", "dspark"):
        _assert_grows(cell(result, config, "swa_peak", broken))
        _assert_bounded(cell(result, config, "swa_peak", fixed))
        for role in (broken, fixed):  # the table shows the numbers
            assert f"peak {fmt(cell(result, config, 'swa_peak', role)['facts']['swa_peak'])}" in proc.stdout
    for role in ("base", "candidate"):  # the plain decode path evicts on both revisions
        _assert_bounded(cell(result, "no-spec", "swa_peak", role))


def test_swa_curves_gauge_and_plots(demo):
    _, result, out = demo("swa")
    for role in ("base", "candidate"):
        swa = cell(result, "dflash", "swa_peak", role)
        sample = swa["samples"][0]
        assert len(sample["generated"]) == len(sample["swa_tokens"]) == swa["facts"]["decode_lines"]
        assert sample["generated"] == sorted(sample["generated"])
        assert sample["generated"][-1] <= sample["completion_tokens"] == OUTPUT_LEN
        assert swa["facts"]["gauge_max"] is not None and swa["facts"]["gauge_within_log"]
    report = (out / "report.md").read_text()
    for config in ("dflash", "dspark", "no-spec"):
        for ext in ("png", "svg"):
            assert (out / "plots" / f"{config}-swa_peak.{ext}").stat().st_size > 1000
        assert f"](plots/{config}-swa_peak.png)" in report
    # The curves in text too, on one scale: only the candidate that keeps every token reaches █.
    lines = report.splitlines()
    at = lines.index("**dflash / `swa_peak`**")
    curves = {row.split(" | ")[0].lstrip("| "): row.split(" | ")[1] for row in lines[at + 6:at + 8]}
    assert "█" in curves["candidate"] and "█" not in curves["base"], curves


def test_mamba_unified_breaks_only_unified_cache_hits(demo):
    _, result, _ = demo("mamba-unified")
    for probe in ("prefill_cache_hit", "decode_cache_hit"):
        base, cand = (cell(result, "unified", probe, r) for r in ("base", "candidate"))
        assert base["facts"]["k3_max"] == 0 and cand["facts"]["k3_max"] > 0
        assert cand["facts"]["hit_fraction"] >= 0.5  # the hits happened: the state was wrong
    for pool in ("static", "lazy"):
        for probe in ("kl", "prefill_cache_hit", "decode_cache_hit"):
            assert verdicts(result)[pool, probe] == "same"


def test_spec_accept_drops_accept_length_not_outputs(demo):
    _, result, _ = demo("spec-accept")
    for config in ("eagle", "dflash"):
        base, cand = (cell(result, config, "accept_length", r) for r in ("base", "candidate"))
        for c in (base, cand):
            assert all(s["spec_verify_ct"] > 0 and s["accept_length"] >= 1.0 for s in c["samples"])
            assert c["facts"]["turn2_hit_fraction"] >= 0.5
        assert (statistics.median(s["accept_length"] for s in cand["samples"])
                < statistics.median(s["accept_length"] for s in base["samples"]))
        assert cand["facts"]["verify_calls"] > base["facts"]["verify_calls"]
    base, cand = (cell(result, "eagle", "kl", r) for r in ("base", "candidate"))
    assert [s["output_ids"] for s in base["samples"]] == [s["output_ids"] for s in cand["samples"]]
    # the outputs are the same; kl's decode verified more often, which decides under deterministic mode
    kl = next(c for c in result["comparisons"] if (c["config"], c["probe"]) == ("eagle", "kl"))
    assert kl["decided_by"] == "path_verify_calls" and kl["metrics"]["k3"]["verdict"] == "same", kl["note"]
