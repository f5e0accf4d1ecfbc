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
