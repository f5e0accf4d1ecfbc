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
