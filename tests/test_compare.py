"""Judging base vs candidate: parameters come validated from the probe's declaration, and
judged facts (the kl gate) are derived when compared, never read from the stored cell."""

from __future__ import annotations

import dataclasses

import pytest

from harness.compare import compare_cells, compare_run
from harness.probes import PROBES
from harness.results import CellResult, Metric, ProbeComparison, RevisionInfo, Role, Status
from harness.verdict_stats import Kind, Verdict


def kl_cell(role: Role, k3_mean: float) -> CellResult:
    return CellResult(config="det", probe="kl", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                      metrics=(Metric("k3", Kind.EXACT, (k3_mean,)),), facts={"k3_mean": k3_mean})


def test_the_gate_is_judged_per_side_under_the_current_threshold():
    base, cand = kl_cell(Role.BASE, 0.0), kl_cell(Role.CANDIDATE, 1e-6)
    params = PROBES["kl"].validate({"threshold": 1e-9}, "[probe.kl]")
    comp = compare_cells("det", "kl", base, cand, params)
    assert comp.judged == {"base": {"threshold": 1e-9, "passes_threshold": True},
                           "candidate": {"threshold": 1e-9, "passes_threshold": False}}
    assert comp.facts(cand) == {"k3_mean": 1e-6, "threshold": 1e-9, "passes_threshold": False}
    assert ProbeComparison.from_dict(comp.to_dict()) == comp


def test_without_a_threshold_nothing_is_judged_and_defaults_apply():
    base, cand = kl_cell(Role.BASE, 0.0), kl_cell(Role.CANDIDATE, 0.0)
    (comp,) = compare_run((base, cand), {}, [("det", "kl")])
    assert comp.verdict == "same" and comp.judged == {} and "judged" not in comp.to_dict()


def test_a_probe_no_longer_registered_is_an_error_not_a_crash():
    (comp,) = compare_run((), {}, [("det", "gone")])
    assert comp.verdict == "error" and "unknown probe 'gone'" in comp.note


def accept_cell(role: Role, values: tuple[float, ...], paired: bool = True, **facts) -> CellResult:
    return CellResult(config="eagle", probe="accept_length", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                      metrics=(Metric("accept_length", Kind.NOISY, values, paired=paired),), facts=facts)


BASE_ACCEPT = (2.2, 3.9, 2.8, 4.6, 3.1, 2.5, 4.1, 3.4)
DROPPED = tuple(round(v * 0.9, 6) for v in BASE_ACCEPT)


def test_paired_metrics_take_the_paired_test_and_unpaired_ones_do_not():
    params = PROBES["accept_length"].validate({"floor_rel": 0.05}, "[probe.accept_length]")
    paired = compare_cells("eagle", "accept_length", accept_cell(Role.BASE, BASE_ACCEPT),
                           accept_cell(Role.CANDIDATE, DROPPED), params)
    assert paired.verdict == "different" and paired.metrics["accept_length"].paired
    assert paired.decided_by == "accept_length" and "Wilcoxon" in paired.note
    assert ProbeComparison.from_dict(paired.to_dict()) == paired
    unpaired = compare_cells("eagle", "accept_length", accept_cell(Role.BASE, BASE_ACCEPT, paired=False),
                             accept_cell(Role.CANDIDATE, DROPPED, paired=False), params)
    assert unpaired.verdict == "unknown" and not unpaired.metrics["accept_length"].paired
    assert unpaired.metrics["accept_length"].needed > 8 and "more samples per side" in unpaired.note


def test_identical_accept_lengths_read_same_with_no_floor():
    (comp,) = compare_run((accept_cell(Role.BASE, BASE_ACCEPT), accept_cell(Role.CANDIDATE, BASE_ACCEPT)),
                          {}, [("eagle", "accept_length")])
    assert comp.verdict == "same" and "identical samples" in comp.note


def test_below_the_vacuity_floor_a_difference_counts_and_a_match_does_not():
    vacuous = "8/8 prompts hit, 3 reached past the prompt (min_hit_fraction 0.5)"
    params = PROBES["accept_length"].defaults()
    differs = compare_cells("eagle", "accept_length", accept_cell(Role.BASE, BASE_ACCEPT, vacuous=vacuous),
                            accept_cell(Role.CANDIDATE, DROPPED, vacuous=vacuous), params)
    assert differs.verdict == "different"
    matches = compare_cells("eagle", "accept_length", accept_cell(Role.BASE, BASE_ACCEPT, vacuous=vacuous),
                            accept_cell(Role.CANDIDATE, BASE_ACCEPT), params)
    assert matches.verdict == "error" and matches.note == f"vacuous: base: {vacuous}"


def test_compare_of_two_runs_does_not_judge_a_noisy_metric_across_them():
    from harness.compare import compare_runs
    from harness.results import RunResult

    def run_of(values: tuple[float, ...], when: str) -> RunResult:
        rev = RevisionInfo("HEAD", "b" * 40)
        cell = accept_cell(Role.CANDIDATE, values)
        cell = CellResult(**{**cell.__dict__, "metadata": {"finished_at": when}})
        return RunResult("s", "refserver", rev, rev, (cell,), (), (), {"started_at": when})

    result = compare_runs(run_of(BASE_ACCEPT, "2026-11-30T01:00:00Z"), run_of(DROPPED, "2026-11-30T02:00:00Z"),
                          Role.CANDIDATE, {"accept_length": PROBES["accept_length"].validate(
                              {"floor_rel": 0.05}, "[probe.accept_length]")})
    (comp,) = result.comparisons
    assert comp.verdict == "unknown" and "measured in two runs" in comp.note and "would read different" in comp.note
    assert result.metadata["harness_version"] and result.metadata["started_at"]


def finding(cell: CellResult, reason: str) -> CellResult:
    return dataclasses.replace(cell, status=Status.FINDING, reason=reason, metrics=())


def test_a_finding_on_one_side_is_a_change_between_the_sides():
    base, cand = kl_cell(Role.BASE, 0.0), finding(kl_cell(Role.CANDIDATE, 0.0), "decode returned null …")
    (comp,) = compare_run((base, cand), {}, [("det", "kl")])
    assert comp.verdict == Verdict.DIFFERENT
    assert comp.note == "changed between the sides: base: serves; candidate: decode returned null …"


def test_a_crash_on_one_side_and_another_finding_on_the_other_is_a_change_too():
    crashed = dataclasses.replace(kl_cell(Role.BASE, 0.0), status=Status.ERROR, reason="launch failed: …")
    cand = finding(kl_cell(Role.CANDIDATE, 0.0), "server died during this probe …")
    (comp,) = compare_run((crashed, cand), {}, [("det", "kl")])
    assert comp.verdict == Verdict.DIFFERENT


def test_the_same_finding_on_both_sides_is_never_a_pass():
    base = finding(kl_cell(Role.BASE, 0.0), "server died during this probe: RuntimeError: x")
    cand = finding(kl_cell(Role.CANDIDATE, 0.0), "server died during this probe: RuntimeError: x")
    (comp,) = compare_run((base, cand), {}, [("det", "kl")])
    assert comp.verdict == Verdict.ERROR and comp.note.startswith("both: server died")


def swa_cell(role: Role, peak: float, plateau: float, retractions: float = 0.0) -> CellResult:
    return CellResult(config="dspark", probe="swa_peak", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                      metrics=(Metric("swa_peak", Kind.EXACT, (peak,)), Metric("swa_plateau", Kind.EXACT, (plateau,)),
                               Metric("retractions", Kind.EXACT, (retractions,))))


def test_every_exact_metric_decides_by_default():
    params = PROBES["swa_peak"].defaults()
    comp = compare_cells("dspark", "swa_peak", swa_cell(Role.BASE, 96.0, 64.0), swa_cell(Role.CANDIDATE, 96.0, 65.0),
                         params)
    assert comp.verdict == "different" and comp.decided_by == "swa_plateau", comp
    assert comp.changed_not_deciding == ()


def tput_cell(role: Role, top: list[float], low: list[float]) -> CellResult:
    """Throughput at two levels, 8 paired rounds each: the primary (top level) decides alone."""
    return CellResult(config="c", probe="throughput", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                      metrics=(Metric("tok_s_c8", Kind.NOISY, tuple(top), paired=True),
                               Metric("tok_s_c1", Kind.NOISY, tuple(low), paired=True)))


def test_a_noisy_metric_that_does_not_decide_and_reads_different_is_named_beside_the_verdict():
    params = PROBES["throughput"].validate({"floor_rel": 0.05}, "[probe.throughput]")
    rounds = [100.0, 101.0, 99.0, 100.5, 100.2, 99.8, 100.1, 99.9]
    base = tput_cell(Role.BASE, rounds, rounds)
    cand = tput_cell(Role.CANDIDATE, rounds, [r * 0.5 for r in rounds])  # the lower level halved
    comp = compare_cells("c", "throughput", base, cand, params)
    assert comp.decided_by == "tok_s_c8" and comp.verdict == "same", comp
    assert comp.metrics["tok_s_c1"].verdict == "different"
    assert comp.changed_not_deciding == ("tok_s_c1",) and "changed, not deciding: tok_s_c1" in comp.note
    assert ProbeComparison.from_dict(comp.to_dict()) == comp


def test_a_file_written_before_noisy_metrics_counted_reads_its_changed_exact_list():
    comp = ProbeComparison("c", "swa_peak", Verdict.SAME, changed_not_deciding=("swa_plateau",))
    old = {**comp.to_dict()}
    old["changed_exact"] = old.pop("changed_not_deciding")
    assert ProbeComparison.from_dict(old) == comp


def test_an_explicit_narrowing_still_names_the_exact_metric_that_changed():
    params = PROBES["swa_peak"].validate({"verdict_metrics": ["swa_peak"]}, "[probe.swa_peak]")
    comp = compare_cells("dspark", "swa_peak", swa_cell(Role.BASE, 96.0, 64.0), swa_cell(Role.CANDIDATE, 96.0, 65.0),
                         params)
    assert comp.verdict == "same" and comp.decided_by == "swa_peak"
    assert comp.changed_not_deciding == ("swa_plateau",)
    assert "changed, not deciding" in comp.note and "swa_plateau: differs at index 0: 64.0 vs 65.0" in comp.note
    assert ProbeComparison.from_dict(comp.to_dict()) == comp


def test_kl_decides_on_k3_and_topk_kl():
    def cell(role: Role, topk: float) -> CellResult:
        return CellResult(config="det", probe="kl", role=role, revision=RevisionInfo(role.value, "a" * 40),
                          status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                          metrics=(Metric("k3", Kind.EXACT, (0.0, 0.0)), Metric("topk_kl", Kind.EXACT, (0.0, topk))))

    comp = compare_cells("det", "kl", cell(Role.BASE, 0.0), cell(Role.CANDIDATE, 5e-8), PROBES["kl"].defaults())
    assert comp.verdict == "different" and comp.decided_by == "topk_kl"


def test_the_suite_floor_applies_to_every_deciding_noisy_metric():
    def cell(role: Role, c8: tuple[float, ...], c1: tuple[float, ...]) -> CellResult:
        return CellResult(config="t", probe="throughput", role=role, revision=RevisionInfo(role.value, "a" * 40),
                          status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                          metrics=(Metric("tok_s_c8", Kind.NOISY, c8, paired=True),
                                   Metric("tok_s_c1", Kind.NOISY, c1, paired=True)))

    flat = (100.0, 101.0, 99.0, 100.5, 100.2, 99.7)
    slower = tuple(v * 0.97 for v in flat)  # 3%: inside a 10% floor
    params = PROBES["throughput"].validate({"floor_rel": 0.1, "verdict_metrics": ["tok_s_c8", "tok_s_c1"]},
                                           "[probe.throughput]")
    comp = compare_cells("t", "throughput", cell(Role.BASE, flat, flat), cell(Role.CANDIDATE, flat, slower), params)
    assert comp.metrics["tok_s_c1"].floor == pytest.approx(10.0, rel=0.02)
    assert comp.verdict == "same", comp.note


def test_deciding_noisy_metrics_share_alpha_so_a_family_is_wrong_at_most_alpha_of_the_time():
    def cell(role: Role, scale: float) -> CellResult:
        values = tuple(v * scale for v in (100.0, 101.0, 99.0, 100.5, 100.2, 99.7))
        return CellResult(config="t", probe="throughput", role=role, revision=RevisionInfo(role.value, "a" * 40),
                          status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                          metrics=(Metric("tok_s_c8", Kind.NOISY, values, paired=True),
                                   Metric("tok_s_c1", Kind.NOISY, values, paired=True)))

    base, slower = cell(Role.BASE, 1.0), cell(Role.CANDIDATE, 0.5)
    one = PROBES["throughput"].validate({}, "[probe.throughput]")
    assert compare_cells("t", "throughput", base, slower, one).verdict == "different"  # p = 2/2^6 < 0.05
    both = PROBES["throughput"].validate({"verdict_metrics": ["tok_s_c8", "tok_s_c1"]}, "[probe.throughput]")
    comp = compare_cells("t", "throughput", base, slower, both)
    assert comp.verdict == "unknown" and "p<0.025 unreachable" in comp.note, comp.note


def test_compare_of_two_runs_keeps_a_changed_exact_metric_beside_an_unjudged_noisy_one():
    """A cache-hit probe off deterministic mode: k3 is noisy (not judged across two runs), the
    hit fraction exact. A changed hit fraction still decides *different*; before, the noisy k3
    (first to read different) made the pair *unknown*, exit 0."""
    from harness.compare import compare_runs
    from harness.results import RunResult

    def run_of(k3: tuple[float, ...], hits: float, when: str) -> RunResult:
        rev = RevisionInfo("HEAD", "b" * 40)
        cell = CellResult(config="c", probe="prefill_cache_hit", role=Role.CANDIDATE, revision=rev, status=Status.OK,
                          config_fingerprint="f", workload_fingerprint="w",
                          metrics=(Metric("k3", Kind.NOISY, k3), Metric("hit_fraction", Kind.EXACT, (hits,))),
                          metadata={"finished_at": when})
        return RunResult("s", "refserver", rev, rev, (cell,), (), (), {"started_at": when})

    params = {"prefill_cache_hit": PROBES["prefill_cache_hit"].defaults()}
    low, high = tuple(0.001 * (1 + i % 3) for i in range(8)), tuple(0.5 + 0.01 * i for i in range(8))
    changed = compare_runs(run_of(low, 1.0, "t1"), run_of(high, 0.5, "t2"), Role.CANDIDATE, params).comparisons[0]
    assert changed.metrics["k3"].verdict == Verdict.DIFFERENT  # noisy, so not judged across runs
    assert changed.verdict == Verdict.DIFFERENT and changed.decided_by == "hit_fraction", changed.note
    assert "k3 is noisy and was measured in two runs (t1 and t2): shown, not judged" in changed.note
    # the same hit fraction: the noisy k3 alone would decide, so the pair is unknown
    held = compare_runs(run_of(low, 1.0, "t1"), run_of(high, 1.0, "t2"), Role.CANDIDATE, params).comparisons[0]
    assert held.verdict == Verdict.UNKNOWN and "would read different" in held.note
    # and a *same* an exact metric decided is not vouched for by a noisy one measured apart
    quiet = compare_runs(run_of(low, 1.0, "t1"), run_of(low, 1.0, "t2"), Role.CANDIDATE, params).comparisons[0]
    assert quiet.verdict == Verdict.UNKNOWN and "would read same" in quiet.note


def test_a_deciding_metric_one_side_lacks_is_an_error_not_a_match():
    """verdict_metrics names k3 and topk_kl; the candidate reports topk_kl with no values (or
    not at all): k3 alone reads same, but the pair is not a match."""
    params = PROBES["kl"].validate({"verdict_metrics": ["k3", "topk_kl"]}, "[probe.kl]")

    def with_topk(cell: CellResult, values: tuple[float, ...] | None) -> CellResult:
        extra = () if values is None else (Metric("topk_kl", Kind.EXACT, values),)
        return dataclasses.replace(cell, metrics=(*cell.metrics, *extra))

    base = with_topk(kl_cell(Role.BASE, 0.0), (0.0,))
    for cand_values in ((), None):
        comp = compare_cells("det", "kl", base, with_topk(kl_cell(Role.CANDIDATE, 0.0), cand_values), params)
        assert comp.verdict == Verdict.ERROR and comp.note.startswith("topk_kl measured on the base only"), comp.note
    comp = compare_cells("det", "kl", with_topk(kl_cell(Role.BASE, 0.0), None),
                         with_topk(kl_cell(Role.CANDIDATE, 0.0), (0.0,)), params)
    assert comp.verdict == Verdict.ERROR and comp.note.startswith("topk_kl measured on the candidate only")
    # with the default deciding metrics (the primary and every exact one) too
    comp = compare_cells("det", "kl", kl_cell(Role.BASE, 0.0), with_topk(kl_cell(Role.CANDIDATE, 0.0), (0.0,)),
                         PROBES["kl"].defaults())
    assert comp.verdict == Verdict.ERROR and comp.note.startswith("topk_kl measured on the candidate only")
    # both sides report it: compared as usual
    both = compare_cells("det", "kl", base, with_topk(kl_cell(Role.CANDIDATE, 0.0), (0.0,)), params)
    assert both.verdict == Verdict.SAME


def test_compare_of_two_runs_reads_the_deciding_metrics_the_comparison_recorded(monkeypatch):
    """A probe whose primary (exact) was not compared (no values on either side): its deciding
    metrics are the exact `settled`; the noisy `spread` beside it does not decide. `compare` of
    two runs derived the deciding metrics again from the compared ones, took `spread` (the first
    compared) for the primary, and turned a *same* that `settled` decided into *unknown*."""
    from harness.compare import compare_runs
    from harness.probes.base import ProbeKind, metric
    from harness.probes.shared_params import JUDGING
    from harness.results import RunResult

    monkeypatch.setitem(PROBES, "toy", ProbeKind("toy", lambda ctx: None, "a toy", params=JUDGING,
                                                 figures=(metric("primary"), metric("spread"), metric("settled"))))

    def run_of(spread: tuple[float, ...], when: str) -> RunResult:
        rev = RevisionInfo("HEAD", "b" * 40)
        cell = CellResult(config="c", probe="toy", role=Role.CANDIDATE, revision=rev, status=Status.OK,
                          config_fingerprint="f", workload_fingerprint="w",
                          metrics=(Metric("primary", Kind.EXACT, ()), Metric("spread", Kind.NOISY, spread),
                                   Metric("settled", Kind.EXACT, (1.0,))), metadata={"finished_at": when})
        return RunResult("s", "refserver", rev, rev, (cell,), (), (), {"started_at": when})

    spread = tuple(1.0 + 0.01 * i for i in range(8))
    in_one_run = compare_cells("c", "toy", run_of(spread, "t1").cells[0].with_role(Role.BASE),
                               run_of(spread, "t1").cells[0], PROBES["toy"].defaults())
    assert in_one_run.verdict == Verdict.SAME and in_one_run.deciding == ("settled",)
    assert ProbeComparison.from_dict(in_one_run.to_dict()) == in_one_run
    (comp,) = compare_runs(run_of(spread, "t1"), run_of(spread, "t2"), Role.CANDIDATE, {}).comparisons
    assert comp.verdict == Verdict.SAME and comp.decided_by == "settled", comp.note
    assert "measured in two runs" not in comp.note


def test_an_unknown_that_already_leans_to_different_is_no_pass():
    """A significant change whose estimate is beyond the floor, undecided only because its
    interval reaches inside it: exit 1 and said in the headline, never exit 0 as "unknown"."""
    from harness.commands.common_args import run_exit_code
    from harness.compare import leaning
    from harness.report.rows import headline
    from harness.results import ProbeComparison, RevisionInfo, RunResult
    from harness.verdict_stats import Comparison, Kind, Summary, Verdict

    def row(effect: float, p: float, verdict: Verdict = Verdict.UNKNOWN) -> RunResult:
        side = Summary(8, 100.0, 99.0, 101.0, 100.0, 90.0, 110.0)
        metric = Comparison(Kind.NOISY, verdict, side, side, effect, (effect - 12.0, effect + 3.0), p, 10.0, None, "")
        comp = ProbeComparison("det", "throughput", verdict, {"tok_s_c1": metric}, decided_by="tok_s_c1",
                               deciding=("tok_s_c1",))
        return RunResult("s", "refserver", RevisionInfo("a", "a" * 40), RevisionInfo("b", "b" * 40), (), (comp,), (),
                         metadata={"probe_params": {"throughput": {"alpha": 0.05}}})

    leans = row(-14.0, 0.01)
    assert leaning(leans) == ["det / throughput: tok_s_c1 moved -14 (p=0.01), beyond its floor ±10"]
    # these rows stand alone (no cells, no plan): judged as if complete (`gaps=[]`), leaning alone decides
    assert run_exit_code(leans, gaps=[]) == 1
    assert "leaning to different, so no pass (exit 1): det / throughput" in headline(leans)
    for undecided in (row(-14.0, 0.2), row(-6.0, 0.01)):  # not significant; inside the floor
        assert leaning(undecided) == [] and run_exit_code(undecided, gaps=[]) == 0
        assert run_exit_code(undecided) == 1  # the record itself: no plan, never a pass
    assert leaning(row(-14.0, 0.01, Verdict.SAME)) == []


def test_n_a_on_one_side_only_is_a_capability_lost_or_gained_and_on_both_stays_n_a():
    """Issue 44: a configuration the base serves and the candidate refuses read a neutral *n/a*
    (JUnit skipped, the run passed). One side's n/a is *different*, naming what was lost or gained."""
    rev = RevisionInfo("HEAD", "a" * 40)
    ok = [CellResult("det", "kl", role, rev, Status.OK, "f", "w", metrics=(Metric("k3", Kind.EXACT, (0.0,)),),
                     facts={"k3_mean": 0.0}) for role in (Role.BASE, Role.CANDIDATE)]
    refused = [CellResult("det", "kl", role, rev, Status.NOT_APPLICABLE, "f", "w",
                          reason="n/a at this revision: rejected at launch: ValueError: X is not supported")
               for role in (Role.BASE, Role.CANDIDATE)]
    params = PROBES["kl"].defaults()
    lost = compare_cells("det", "kl", ok[0], refused[1], params)
    assert lost.verdict == Verdict.DIFFERENT and lost.note == (
        "capability lost: the base serves this, the candidate refuses it (candidate: n/a at this revision: "
        "rejected at launch: ValueError: X is not supported)")
    gained = compare_cells("det", "kl", refused[0], ok[1], params)
    assert gained.verdict == Verdict.DIFFERENT and gained.note.startswith("capability gained: the candidate serves this")
    assert compare_cells("det", "kl", *refused, params).verdict == Verdict.NOT_APPLICABLE
