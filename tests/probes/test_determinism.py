"""determinism without a server: its table line and parameters."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.probes import determinism


def test_describe():
    describe = determinism.PROBE.describe
    facts = {"unique_outputs": 2, "batch_sizes": [1, 2, 4], "first_differing_batch_size": 4}
    assert describe(facts, None) == "2 unique over batch sizes [1, 2, 4] (first differs at 4)"
    assert describe({**facts, "unique_outputs": 1, "first_differing_batch_size": None}, None) == \
        "1 unique over batch sizes [1, 2, 4]"


def test_batch_sizes_are_measured_and_checked():
    probe = determinism.PROBE
    params = probe.validate({"batch_sizes": [1, 16]}, "[probe.determinism]")
    assert probe.measured(params)["batch_sizes"] == [1, 16] and probe.measured(params)["logprobs"] is True
    for bad in ([], [0, 2], [1, True], 4):
        with pytest.raises(UsageError, match=r"\[probe\.determinism\]\.batch_sizes"):
            probe.validate({"batch_sizes": bad}, "[probe.determinism]")


def test_by_default_every_batch_size_up_to_the_largest_is_tested():
    from types import SimpleNamespace

    probe = determinism.PROBE
    params = probe.defaults()
    assert params["batch_sizes"] is None and params["max_batch_size"] == 8
    assert determinism.batch_sizes(SimpleNamespace(param=params.__getitem__)) == [1, 2, 3, 4, 5, 6, 7, 8]
    given = probe.validate({"batch_sizes": [1, 16]}, "[probe.determinism]")
    assert determinism.batch_sizes(SimpleNamespace(param=given.__getitem__)) == [1, 16]
    facts = {"unique_outputs": 1, "batch_sizes": list(range(1, 9)), "first_differing_batch_size": None}
    assert probe.describe(facts, None) == "1 unique over batch sizes 1–8"


def test_the_row_names_the_first_differing_token_and_whether_ids_changed():
    from harness.probes.determinism import first_difference

    one = {"batch_size": 1, "output_ids": [5, 6, 7, 8], "logprobs": [-0.1, -0.2, -0.3, -0.4]}
    ids = {"batch_size": 3, "output_ids": [5, 6, 9, 8], "logprobs": [-0.1, -0.2, -0.5, -0.4]}
    lps = {"batch_size": 5, "output_ids": [5, 6, 7, 8], "logprobs": [-0.1, -0.2, -0.3, -0.40000001]}
    assert first_difference(one, ids) == {"batch_size": 3, "prompt": 0, "position": 2, "changed": "ids"}
    assert first_difference(one, lps) == {"batch_size": 5, "prompt": 0, "position": 3, "changed": "logprobs only"}
    facts = {"unique_outputs": 2, "batch_sizes": [1, 3], "first_differing_batch_size": 3,
             "first_difference": first_difference(one, ids)}
    assert determinism.describe(facts, None) == ("2 unique over batch sizes [1, 3] (first differs at batch size 3: "
                                                 "prompt 0, token 2, ids)")


def _cell(role, samples):
    """A determinism cell measured on `samples` (one per batch size), as `run` reports it."""
    from harness.results import CellResult, Metric, RevisionInfo, Status
    from harness.verdict_stats import Kind

    unique = len({(tuple(s["output_ids"]), tuple(s["logprobs"])) for s in samples})
    metrics = (Metric("unique_outputs", Kind.EXACT, (float(unique),), headline="first"),
               *determinism.departure_metrics(samples, with_logprobs=True))
    return CellResult(config="det", probe="determinism", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w", metrics=metrics,
                      samples=tuple(samples))


def test_batches_departing_elsewhere_with_as_many_unique_outputs_are_not_the_same():
    """Both sides give two unique outputs over batch sizes 1, 2, 3; the base's batch of 3
    departs in the logprobs at token 3, the candidate's in the ids at token 1. `first_difference`
    was a fact no comparison read: the pair read *same* on unique_outputs alone."""
    from harness.compare import compare_cells
    from harness.probes import PROBES
    from harness.results import Role

    one = {"batch_size": 1, "output_ids": [5, 6, 7, 8], "logprobs": [-0.1, -0.2, -0.3, -0.4]}
    base = [one, {**one, "batch_size": 2}, {**one, "batch_size": 3, "logprobs": [-0.1, -0.2, -0.3, -0.41]}]
    cand = [one, {**one, "batch_size": 2}, {"batch_size": 3, "output_ids": [5, 9, 7, 8],
                                           "logprobs": [-0.1, -0.25, -0.3, -0.4]}]
    params = PROBES["determinism"].defaults()
    comp = compare_cells("det", "determinism", _cell(Role.BASE, base), _cell(Role.CANDIDATE, cand), params)
    assert comp.metrics["unique_outputs"].verdict == "same"
    assert comp.verdict == "different" and comp.decided_by == "ids_departure", comp.note
    assert comp.metrics["ids_departure"].first_difference == 2  # the batch of 3
    assert comp.metrics["logprob_departure"].verdict == "different"
    # a suite that narrows the verdict to unique_outputs still sees them named beside it
    narrowed = PROBES["determinism"].validate({"verdict_metrics": ["unique_outputs"]}, "[probe.determinism]")
    comp = compare_cells("det", "determinism", _cell(Role.BASE, base), _cell(Role.CANDIDATE, cand), narrowed)
    assert comp.verdict == "same" and comp.changed_not_deciding == ("ids_departure", "logprob_departure")
    # the same batches on both sides: same, on every metric
    same = compare_cells("det", "determinism", _cell(Role.BASE, base), _cell(Role.CANDIDATE, base), params)
    assert same.verdict == "same" and set(same.metrics) == {"unique_outputs", "ids_departure", "logprob_departure"}


def test_departures_are_planned_so_the_design_check_knows_them():
    from harness.suite import WorkloadSpec

    params = determinism.PROBE.defaults()
    names = [m.name for m in determinism.PROBE.planned(params, WorkloadSpec(prompts=2), True)]
    assert names == ["unique_outputs", "ids_departure", "logprob_departure"]
    no_lps = determinism.PROBE.validate({"logprobs": False}, "[probe.determinism]")
    assert [m.name for m in determinism.PROBE.planned(no_lps, WorkloadSpec(prompts=2), True)] == \
        ["unique_outputs", "ids_departure"]
