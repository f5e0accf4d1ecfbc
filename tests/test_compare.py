"""Judging base vs candidate: parameters come validated from the probe's declaration, and
judged facts (the kl gate) are derived when compared, never read from the stored cell."""

from __future__ import annotations

from harness.compare import compare_cells, compare_run
from harness.probes import PROBES
from harness.results import CellResult, Metric, ProbeComparison, RevisionInfo, Role, Status
from harness.stats import Kind


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
