"""accept_length without a server: its table line and parameters."""

from __future__ import annotations

from harness.probes import PROBES, accept_length, cache_hit
from harness.results import Metric
from harness.stats import Kind


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
