"""The sequential design's maths and its use in judging: each look's share of alpha, the shares
summing to alpha, and a stored cell judged at the look it records."""

from __future__ import annotations

import math
import sys

import pytest

from conftest import ROOT
from harness.compare import compare_cells
from harness.probes import PROBES
from harness.results import CellResult, Metric, RevisionInfo, Role, Status
from harness.sequential import LookBudget, LookState, look_alpha
from harness.verdict_stats import Kind, Verdict


@pytest.mark.parametrize("looks", range(1, 9))
def test_the_looks_spend_alpha_and_no_more(looks):
    shares = [look_alpha(0.05, j, looks) for j in range(1, looks + 1)]
    assert math.isclose(sum(shares), 0.05)
    assert shares[0] == pytest.approx(0.05 if looks == 1 else 0.035)
    with pytest.raises(ValueError):
        look_alpha(0.05, looks + 1, looks)


def test_the_budget_says_why_no_further_look():
    budget = LookBudget(max_looks=3, seconds=10.0)
    assert budget.why_not(2) == "" and budget.why_not(4) == "max_looks 3 spent"
    budget.spent_s = 12.0
    assert budget.why_not(2).startswith("look_budget_s 10 spent")


def cells(base: list[float], cand: list[float], state: LookState | None) -> list[CellResult]:
    facts = {"sequential": state.to_dict()} if state else {}
    return [CellResult("c", "throughput", role, RevisionInfo("x", "0" * 40), Status.OK, "f", "w",
                       metrics=(Metric("tok_s_c1", Kind.NOISY, tuple(v), better="higher", paired=True),),
                       facts=facts)
            for role, v in ((Role.BASE, base), (Role.CANDIDATE, cand))]


def test_a_stored_cell_is_judged_at_the_share_its_look_spent():
    """Six rounds all faster on one side: p 0.031, below the first look's share of alpha (0.035)
    but not a later look's (0.0075): the same samples read different at look 1, unknown at 2."""
    params = PROBES["throughput"].validate({"concurrency": [1]}, "t")
    base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    cand = [v * 0.5 for v in base]
    first = compare_cells("c", "throughput", *cells(base, cand, LookState(1, 3)), params)
    assert first.verdict == Verdict.DIFFERENT and first.note.startswith("look 1 of at most 3: "), first.note
    second = compare_cells("c", "throughput", *cells(base, cand, LookState(2, 3)), params)
    assert second.verdict == Verdict.UNKNOWN, second.note
    # sides measured at different looks are not one comparison
    mixed = cells(base, cand, LookState(1, 3))
    mixed[1] = cells(base, cand, LookState(2, 3))[1]
    assert compare_cells("c", "throughput", *mixed, params).verdict == Verdict.ERROR


def test_an_unknown_after_the_last_look_names_the_effects_it_rules_out():
    params = PROBES["throughput"].validate({"concurrency": [1], "floor_rel": 0.1}, "t")
    base = [100.0, 80.0, 120.0, 95.0, 105.0, 90.0, 110.0, 100.0, 85.0]
    cand = [92.0, 96.0, 104.0, 99.0, 91.0, 97.0, 103.0, 88.0, 112.0]
    comp = compare_cells("c", "throughput", *cells(base, cand, LookState(3, 3)), params)
    assert comp.verdict == Verdict.UNKNOWN
    assert "undecided after the last look: the samples rule out effects tok_s_c1 beyond [" in comp.note, comp.note


def test_the_benchmarks_sequential_run_decides_a_clean_slowdown_and_reads_identical_sides_same():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_sequential

    params = PROBES["throughput"].validate({"concurrency": [1], "floor_rel": 0.1}, "t")
    pool = [100.0 + 0.1 * i for i in range(20)]
    assert bench_sequential.sequential_run(pool, pool, 1.0, 0, 3, 3, params)[0] == Verdict.SAME
    verdict, rounds = bench_sequential.sequential_run(pool, pool, 0.6, 0, 3, 3, params)
    assert verdict == Verdict.DIFFERENT and rounds in (6, 9)


def test_a_cache_hit_unknown_says_how_many_prompts_would_decide_not_hits():
    """k3 over 3 hits a side (of 6 prompts: half hit): the count a suite sets is prompts."""
    params = PROBES["decode_cache_hit"].validate({"max_looks": 1}, "t")

    def cell(role: Role, values: list[float]) -> CellResult:
        return CellResult("c", "decode_cache_hit", role, RevisionInfo("x", "0" * 40), Status.OK, "f", "w",
                          metrics=(Metric("k3", Kind.NOISY, tuple(values), better="lower", headline="mean"),),
                          facts={"hit_fraction": 0.5, "hit_lengths": [32, 32, 32]})

    comp = compare_cells("c", "decode_cache_hit", cell(Role.BASE, [1e-12, 2e-12, 1.5e-12]),
                         cell(Role.CANDIDATE, [0.009, 0.0093, 0.0095]), params)
    k3 = comp.metrics["k3"]
    assert comp.verdict == Verdict.UNKNOWN and k3.needed is not None
    assert f"(k3 counts hits: ≈ {math.ceil(k3.needed / 0.5)} prompts at a hit fraction of 50%)" in k3.note, k3.note
