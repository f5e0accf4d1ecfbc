"""prefill_cache_hit and decode_cache_hit without a server: parameters and the judged gate."""

from __future__ import annotations

from harness.probes import PROBES


def test_both_cache_probes_declare_the_same_parameters():
    prefill, decode = PROBES["prefill_cache_hit"], PROBES["decode_cache_hit"]
    assert prefill.params == decode.params
    defaults = prefill.defaults()
    assert (defaults["min_hit_fraction"], defaults["tau"], defaults["threshold"]) == (0.5, 1e-6, None)


def test_the_gate_is_judged_not_measured():
    probe = PROBES["decode_cache_hit"]
    params = probe.validate({"threshold": 1e-9, "min_hit_fraction": 0.75}, "[probe.decode_cache_hit]")
    assert "threshold" in probe.judged(params) and "threshold" not in probe.measured(params)
    # Below the hit floor the probe stops before its replay: that shapes the samples.
    assert probe.measured(params)["min_hit_fraction"] == 0.75
    assert probe.judge({"k3_mean": 0.0}, params) == {"threshold": 1e-9, "passes_threshold": True}


def test_the_hit_message_counts_hits_and_how_far_they_reached():
    from harness.probes.cache_hit import hit_text

    text = hit_text([64] * 8, [64, 64, 64, 64, 64, 60, 60, 60], 3, 0.5)
    assert text.startswith("8/8 prompts hit, 3 reached past the prompt (min_hit_fraction 0.5)")
    assert hit_text([0, 12], [0, 0], 1, 0.5).startswith("1/2 prompts hit the prefix cache (min_hit_fraction 0.5)")


def _aba_ctx(second_a_reuses: int):
    """A deterministic cache-hit context whose server answers every request alike (no A→B→A
    departure) and reuses 30 tokens of each first A, `second_a_reuses` of each second."""
    from types import SimpleNamespace

    from harness.client import Generation

    sent = []

    def generate(seqs, max_new_tokens, logprobs=None):
        sent.append(len(seqs))
        second_a = len(sent) > 2  # first A, B, then the second A (one chunk each)
        return [Generation((5, 6), {"cached_tokens": second_a_reuses if second_a else 30,
                                    "output_token_logprobs": [[-0.5, 5, None], [-0.25, 6, None]]})
                for _ in seqs]

    params = {**PROBES["prefill_cache_hit"].defaults(), "batch_size": None}
    return SimpleNamespace(workload=SimpleNamespace(output_len=2), param=params.get,
                           client=SimpleNamespace(generate=generate))


def test_an_aba_phase_whose_second_a_was_prefilled_cold_is_vacuous():
    # B evicted A: the second A is a cold prefill, which agrees with the first whatever B
    # overwrote. Its metrics match on both sides; without the reason the row read *same*.
    from harness.probes.cache_hit import _aba_phase

    turns, prompts, min_hit = [[1] * 40, [2] * 40], [0, 1], [0, 0]
    metrics, facts, unhit = _aba_phase(_aba_ctx(0), turns, prompts, min_hit)
    assert unhit == "A→B→A: the second A hit the cache on 0 of 2 prompts (at least 50% must)"
    assert [m.values for m in metrics] == [(0.0, 0.0), (2.0, 2.0)]
    assert _aba_phase(_aba_ctx(30), turns, prompts, min_hit)[2] == ""
    # A decode hit counts only past its prompt (min_hit), as the hit itself does.
    assert _aba_phase(_aba_ctx(30), turns, prompts, [30, 30])[2].startswith("A→B→A: the second A hit the cache on 0 of 2")
