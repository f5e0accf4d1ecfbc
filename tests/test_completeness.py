"""What keeps a record from being a pass (harness/completeness.py), on records built here: the
end-to-end cases (killed runs, doctored files, Slurm merges) are tests/test_complete_record_e2e.py."""

from __future__ import annotations

import dataclasses

import pytest

from harness.commands.report import suite_of
from harness.completeness import gaps, narrower, summary
from harness.errors import UsageError
from harness.paths import PROJECT_ROOT
from harness.results import CellResult, ProbeComparison, RevisionInfo, Role, RunPlan, RunResult, Status
from harness.verdict_stats import Verdict

BASE, CAND = RevisionInfo("main", "a" * 40), RevisionInfo("head", "b" * 40)


def cell(config: str, role: Role, revision: RevisionInfo | None = None) -> CellResult:
    return CellResult(config, "kl", role, revision or (BASE if role == Role.BASE else CAND), Status.OK, "cfg", "wl")


def record(configs: tuple[str, ...] = ("a", "b"), complete: bool = True, **changes) -> RunResult:
    planned = tuple((c, "kl", role) for c in configs for role in Role)
    result = RunResult("s", "refserver", BASE, CAND, tuple(cell(c, role) for c, _, role in planned),
                       tuple(ProbeComparison(c, "kl", Verdict.SAME) for c in configs), (),
                       plan=RunPlan("id", planned, {"kl": {}}, complete))
    return dataclasses.replace(result, **changes)


def test_a_complete_record_of_its_plan_has_no_gap():
    assert gaps(record()) == []


def test_each_way_a_record_falls_short_of_its_plan_is_named():
    full = record()
    assert gaps(dataclasses.replace(full, plan=None))[0].startswith("the file records no plan")
    assert gaps(record(complete=False)) == ["the run did not finish: its last step never marked the record complete "
                                            "(killed, interrupted, or a Slurm job's results not all merged)"]
    assert gaps(dataclasses.replace(full, cells=full.cells[1:], comparisons=full.comparisons[1:])) == [
        "a / kl: no base cell, no comparison row"]
    stale = (full.cells[0], cell("a", Role.CANDIDATE, RevisionInfo("head~1", "c" * 40)), *full.cells[2:])
    assert gaps(dataclasses.replace(full, cells=stale)) == [
        f"a / kl: its candidate cell measured {'c' * 12}, not the run's candidate {'b' * 12}"]
    extra = record(configs=("a",), cells=full.cells, comparisons=full.comparisons)
    assert gaps(extra) == ["b / kl: a base cell the plan never had", "b / kl: a candidate cell the plan never had",
                           "b / kl: a comparison row the plan never had"]
    one_side = dataclasses.replace(full, plan=RunPlan("id", (("a", "kl", Role.BASE),), {}, True),
                                   cells=full.cells[:1], comparisons=())
    assert gaps(one_side) == ["the plan measures base side only: no pair is judged"]


def test_narrower_reads_which_way_a_judging_parameter_moved():
    assert narrower("verdict_metrics", ["k3"], None) and not narrower("verdict_metrics", None, ["k3"])
    assert narrower("verdict_metrics", ["k3"], ["k3", "topk_kl"]) and not narrower("verdict_metrics", ["k3", "x"], ["k3"])
    assert narrower("floor_rel", 0.5, 0.0) and not narrower("floor_rel", 0.0, 0.5)
    assert narrower("alpha", 1e-6, 0.05) and not narrower("alpha", 0.1, 0.05)
    assert narrower("floors", {"k3": {"absolute": 1.0}}, {}) and not narrower("floors", {}, {"k3": {"absolute": 1.0}})
    assert not narrower("tau", 1.0, 1e-6)  # changes what is measured, said as a difference, not a narrowing


def test_a_long_list_of_gaps_is_cut_and_counted():
    assert summary([str(i) for i in range(10)]) == "0; 1; 2; 3; 4; 5; 6; 7; and 2 more"


def test_report_check_finds_a_downloaded_runs_suite_in_this_checkout(capsys):
    """A run made on a GPU machine names its suite by that machine's path, and its models are
    not on the machine that judges the downloaded run: the suite is the file at the path's end
    in this checkout, read for its parameters alone."""
    h200 = sorted((PROJECT_ROOT / "suites" / "h200").glob("*.toml"))[0]
    named = f"/home/runner/work/detcheck/detcheck/suites/h200/{h200.name}"
    suite = suite_of(record(metadata={"suite_path": named}), None)
    assert suite.path == h200
    assert f"judging with {h200} (the run names {named})" in capsys.readouterr().err
    with pytest.raises(UsageError, match="the suite the run names .* is not here; pass --suite FILE"):
        suite_of(record(metadata={"suite_path": "/elsewhere/no-such-suite.toml"}), None)
