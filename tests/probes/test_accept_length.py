"""accept_length without a server: its table line and parameters."""

from __future__ import annotations

from harness.probes import PROBES, accept_length, cache_hit
from harness.results import Metric
from harness.verdict_stats import Kind


def test_describe():
    metric = Metric("accept_length", Kind.NOISY, (2.0, 3.0, 4.0), better="higher")
    acc = PROBES["accept_length"].describe(
        {"turn1_median": 3.0, "turn2_median": 2.5, "verify_calls": 40, "completion_tokens": 120}, metric)
    assert acc == "accept 3 (turn 1 3, turn 2 2.5; 40 verifies for 120 tok)"


def test_registered_without_server_flags():
    assert accept_length.PROBE is PROBES["accept_length"]
    assert accept_length.PROBE.server_args == ()


def test_min_hit_fraction_has_one_default_shared_with_the_cache_probes():
    defaults = accept_length.PROBE.defaults()
    assert defaults["min_hit_fraction"] == cache_hit.PREFILL_PROBE.defaults()["min_hit_fraction"] == 0.5
    assert (defaults["suffix_len"], defaults["repeats"], defaults["temperature"]) == (8, 1, 0.0)
    assert defaults["batch_size"] is None  # all prompts in one request


def test_acceptance_per_draft_position_is_read_from_the_histograms_of_correct_drafts():
    from harness.probes.accept_length import draft_position_accept

    # rounds by correct drafts: 0: 2 + 1, 1: 1 + 1, 2: 1, 3: 0 + 2 (eight rounds in all)
    samples = [{"spec_verify_ct": 4, "correct_drafts_histogram": [2, 1, 1]},
               {"spec_verify_ct": 4, "correct_drafts_histogram": [1, 1, 0, 2]},
               {"spec_verify_ct": 0, "correct_drafts_histogram": None}]
    # draft 1 reached in 8 rounds, right in 5; draft 2 reached 5, right 3; draft 3 reached 3, right 2
    assert draft_position_accept(samples) == [round(5 / 8, 6), round(3 / 5, 6), round(2 / 3, 6)]
    assert draft_position_accept([{"spec_verify_ct": 3, "correct_drafts_histogram": None}]) is None


def test_accept_lengths_over_unequal_token_ranges_never_read_same():
    """A request that made fewer tokens on one side (an early stop) moves its accept length for
    that reason alone: the exact request_tokens metric reads *different* whatever the noisy one says."""
    from harness.compare import compare_cells
    from harness.probes import PROBES
    from harness.probes.accept_length import _output
    from harness.results import CellResult, RevisionInfo, Role, Status

    def cell(role: Role, tokens: list[int]) -> CellResult:
        samples = [{"repeat": 0, "turn": turn, "completion_tokens": n, "spec_verify_ct": 4, "accept_length": 3.0,
                    "past_prompt": True} for turn in (1, 2) for n in tokens]
        out = _output(samples, 0.5, None, exact=False)
        return CellResult(config="eagle", probe="accept_length", role=role, revision=RevisionInfo(role.value, "a" * 40),
                          status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                          samples=out.samples, metrics=out.metrics, facts=out.facts)

    params = PROBES["accept_length"].defaults()
    assert compare_cells("eagle", "accept_length", cell(Role.BASE, [12] * 4), cell(Role.CANDIDATE, [12] * 4),
                         params).verdict == "same"
    cut = compare_cells("eagle", "accept_length", cell(Role.BASE, [12] * 4), cell(Role.CANDIDATE, [12, 12, 9, 12]), params)
    assert cut.verdict == "different" and cut.decided_by == "request_tokens"


def test_per_draft_position_acceptance_decides_under_deterministic_mode_with_the_mean_unchanged():
    """Issue 44: the acceptance of each draft position moved (the same verify rounds, the same
    accept length per request) and only results.json said so. Under deterministic mode at
    temperature 0 it is an exact metric that decides; off it, a summary."""
    from harness.compare import compare_cells
    from harness.probes import PROBES
    from harness.probes.accept_length import _output
    from harness.results import CellResult, RevisionInfo, Role, Status

    def cell(role: Role, hist: list[int], exact: bool) -> CellResult:
        samples = [{"repeat": 0, "turn": turn, "completion_tokens": 12, "spec_verify_ct": 4, "accept_length": 3.0,
                    "past_prompt": True, "correct_drafts_histogram": hist} for turn in (1, 2)]
        out = _output(samples, 0.5, None, exact=exact)
        return CellResult(config="eagle", probe="accept_length", role=role, revision=RevisionInfo(role.value, "a" * 40),
                          status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                          samples=out.samples, metrics=out.metrics, facts=out.facts)

    params = PROBES["accept_length"].defaults()
    moved = compare_cells("eagle", "accept_length", cell(Role.BASE, [0, 2, 1, 1], True),
                          cell(Role.CANDIDATE, [0, 1, 2, 1], True), params)
    assert moved.verdict == "different" and moved.decided_by == "draft_position_accept", moved.note
    assert moved.metrics["accept_length"].verdict == "same"
    noisy = compare_cells("eagle", "accept_length", cell(Role.BASE, [0, 2, 1, 1], False),
                          cell(Role.CANDIDATE, [0, 1, 2, 1], False), params)
    assert "draft_position_accept" not in noisy.metrics
