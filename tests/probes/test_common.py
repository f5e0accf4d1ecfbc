"""Pieces probes share: the SWA curve from log lines, the threshold gate and the KL line."""

from __future__ import annotations

from harness.probes.common import describe_kl, judge_gate, swa_curve
from swa_logs import LOG, PLAIN_LOG


def test_curve_from_spec_log_sums_accept_lengths():
    curve = swa_curve(LOG)
    assert curve.held == (24, 10, 14, 15, 18, 11, 13, 17)
    # the prefill's first token, then each round's accept length
    assert curve.generated == (4, 6, 10, 11, 14, 17, 19, 23)
    assert curve.usage[0] == 0.06
    assert max(curve.held) == 24


def test_curve_without_spec_counts_one_token_per_running_request():
    curve = swa_curve(PLAIN_LOG)
    assert curve.generated == (2, 4, 6, 8, 10, 12)
    assert curve.held == (60, 62, 64, 66, 68, 70)


def test_text_glued_onto_a_line_does_not_break_the_curve():
    glued = LOG.splitlines()[1] + 'INFO:     127.0.0.1:41142 - "POST /generate HTTP/1.1" 200 OK'
    assert swa_curve(glued).held == (24,)


def test_no_swa_field_is_an_empty_curve():
    log = "[t] Decode batch, #running-req: 1, #token: 40, token usage: 0.01, cuda graph: False, gen throughput (token/s): 1.0, #queue-req: 0"
    assert not swa_curve(log)
    assert not swa_curve("")


def test_gate_is_judged_from_the_facts_and_the_current_threshold():
    facts = {"k3_mean": 1e-10}
    assert judge_gate(facts, {"threshold": 1e-9}) == {"threshold": 1e-9, "passes_threshold": True}
    assert judge_gate(facts, {"threshold": 1e-10}) == {"threshold": 1e-10, "passes_threshold": False}
    assert judge_gate(facts, {"threshold": None}) == {}


def test_kl_line_shows_k3_and_top_k_side_by_side_then_the_gate():
    facts = {"k3_mean": 0.0, "k3_max": 0.0, "frac_over_tau": 0.0, "top_k": 8, "topk_kl_mean": 0.002,
             "topk_kl_max": 0.03, "top1_agree": 0.97, "first_divergent": 5,
             "threshold": 1e-9, "passes_threshold": True}
    assert describe_kl(facts, None) == ("k3 0 (max 0, 0% > τ) · top-8 KL 0.002 (max 0.03, top-1 agree 97%), "
                                        "first differs from the replay at output position 5; gate < 1.00e-09 ✓")
    located = {**facts, "first_divergent_prompt": 2}
    assert "first differs from the replay at prompt 2, output position 5;" in describe_kl(located, None)
    cache = {"k3_mean": 0.5, "k3_max": 1.0, "frac_over_tau": 0.25, "hit_fraction": 1.0}
    assert describe_kl(cache, None) == "k3 0.5 (max 1, 25% > τ), hit 100%"


def test_swa_curve_keeps_one_dp_rank():
    from harness.probes.common import swa_curve
    line = ("[2026-01-01 00:00:00 DP{rank} TP0] Decode batch, #running-req: 1, #full token: 10, "
            "full token usage: 0.01, #swa token: {swa}, swa token usage: 0.02, cuda graph: False, "
            "gen throughput (token/s): 1.0, #queue-req: 0")
    text = "\n".join(line.format(rank=r, swa=s) for r, s in ((0, 10), (1, 500), (0, 11), (1, 501)))
    assert swa_curve(text).held == (10, 11)


def test_degenerate_outputs_and_null_logprobs_are_said_precisely():
    import pytest

    from harness.errors import ServerFinding
    from harness.probes.common import degenerate_outputs, require_output_logprobs
    assert degenerate_outputs([[0] * 8, [0] * 7, [1, 2] * 4, [5] * 12]) == 2
    with pytest.raises(ServerFinding, match=r"^decode returned null output logprobs on 2 of 3 prompts "
                                            r"\(first at position 1 of prompt 0\)$") as err:
        require_output_logprobs([[-0.1, None], [-0.2, -0.3], [None, None]], "decode")
    assert [s["null_positions"] for s in err.value.samples] == [[1], [0, 1]]


def test_null_top_k_logprobs_are_a_finding_that_says_where():
    import pytest

    from harness.errors import ServerFinding
    from harness.probes.common import require_top_logprobs
    fine = [[(-0.1, 3), (-2.0, 4)], [(-0.2, 5), (-1.0, 6)]]
    require_top_logprobs([fine, fine], "decode")  # nothing to report
    with pytest.raises(ServerFinding, match=r"^decode returned null top-k logprobs on 1 of 2 prompts "
                                            r"\(first at position 1 of prompt 1\)$") as err:
        require_top_logprobs([fine, [fine[0], [(None, 5), (-1.0, 6)], None]], "decode")
    assert err.value.samples[0]["null_positions"] == [1, 2]


def _kl_cell(role, refs, tests, **where):
    from harness.probes.common import kl_metric
    from harness.results import CellResult, RevisionInfo, Status

    metrics, facts, per = kl_metric(refs, tests, deterministic=True, tau=0.0, paired=True, **where)
    return CellResult(config="det", probe="kl", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w", metrics=metrics,
                      facts=facts, samples=tuple(per))


def test_answers_that_depart_from_their_replay_elsewhere_are_not_the_same_when_k3_sums_alike():
    """Deterministic mode: the base's answer departs from its replay at position 0, the
    candidate's at position 1, by the same 0.25 (exact in binary): every per-prompt k3 is equal
    to the last bit, and the pair read *same* while its first_divergent facts differed."""
    from harness.compare import compare_cells
    from harness.probes import PROBES
    from harness.results import Role

    ref = [-1.0, -2.0, -3.0]
    base = _kl_cell(Role.BASE, [ref], [[-0.75, -2.0, -3.0]])
    cand = _kl_cell(Role.CANDIDATE, [ref], [[-1.0, -1.75, -3.0]])
    assert base.metric("k3").values == cand.metric("k3").values
    assert (base.facts["first_divergent"], cand.facts["first_divergent"]) == (0, 1)
    comp = compare_cells("det", "kl", base, cand, PROBES["kl"].defaults())
    assert comp.metrics["k3"].verdict == "same"
    assert comp.verdict == "different" and comp.decided_by == "first_divergent", comp.note
    # answers that never depart read their length, and agree
    quiet = _kl_cell(Role.CANDIDATE, [ref], [ref])
    assert quiet.metric("first_divergent").values == (3.0,)
    quiet_base = _kl_cell(Role.BASE, [ref], [ref])
    assert compare_cells("det", "kl", quiet_base, quiet, PROBES["kl"].defaults()).verdict == "same"


def test_off_deterministic_mode_where_an_answer_departs_is_a_locator_not_a_metric():
    from harness.probes.common import kl_metric

    metrics, facts, _ = kl_metric([[-1.0, -2.0]], [[-1.0, -2.5]], deterministic=False, tau=0.0, paired=True)
    assert [m.name for m in metrics] == ["k3"] and facts["first_divergent"] == 1


def test_the_first_divergent_prompt_is_the_workload_prompt_the_caller_names():
    """A cache probe's pairs are its hits: kl_metric takes the prompts they answer, so the
    fact names the workload's prompt (not the hit's index) without being patched afterwards."""
    from harness.probes.common import kl_metric

    refs, tests = [[-1.0, -2.0], [-1.0, -2.0]], [[-1.0, -2.0], [-1.0, -2.5]]
    _, facts, _ = kl_metric(refs, tests, deterministic=True, tau=0.0, paired=False, prompts=[2, 5])
    assert (facts["first_divergent_prompt"], facts["first_divergent"]) == (5, 1)
    _, facts, _ = kl_metric(refs, tests, deterministic=True, tau=0.0, paired=False)
    assert facts["first_divergent_prompt"] == 1


class _ReplayServer:
    """A client whose cold replays answer the given input logprobs (last entries: the tail)."""

    def __init__(self, rows):
        self.rows = rows

    def flush_cache(self):
        pass

    def generate(self, chunk, **_):
        from harness.client import Generation
        return [Generation((), {"input_token_logprobs": [[lp, t, None] for lp, t in zip(self.rows.pop(0), seq)]})
                for seq in chunk]


def test_a_nan_in_a_cold_replay_is_named_nan_not_null():
    """cold_replay's own loop called every unusable logprob null; it now goes through the
    finding path every other logprob takes: null, NaN and inf each named, with where."""
    import pytest

    from harness.errors import ServerFinding
    from harness.probes.common import cold_replay
    nan = float("nan")
    server = _ReplayServer([[None, -0.5, -0.25, -0.125], [None, -0.5, nan, -0.125]])
    with pytest.raises(ServerFinding, match=r"^cold replay returned NaN input logprobs on 1 of 2 prompts "
                                            r"\(first at position 1 of prompt 1\)$") as err:
        cold_replay(server, [[1, 2, 3, 4], [1, 2, 3, 4]], [3, 3], batch_size=1)
    assert err.value.samples == ({"prompt": 1, "tokens": 3, "null_positions": [], "non_finite_positions": [[1, "NaN"]]},)
    server = _ReplayServer([[None, None, -0.25]])
    with pytest.raises(ServerFinding, match=r"^cold replay returned null input logprobs on 1 of 1 prompts"):
        cold_replay(server, [[1, 2, 3]], [2], batch_size=1)
    server = _ReplayServer([[None, -0.25]])
    with pytest.raises(ServerFinding, match=r"^cold replay returned too few input logprobs on 1 of 1 prompts "
                                            r"\(prompt 0: 2 returned, the last 3 needed\)$"):
        cold_replay(server, [[1, 2]], [3], batch_size=1)
