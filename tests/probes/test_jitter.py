"""jitter's schedule: drawn from its seed alone, so a finding's round can be drawn again."""

from __future__ import annotations

from harness.probes.jitter import schedule


def test_the_same_seed_draws_the_same_order_and_delays_and_another_seed_others():
    order, delays = schedule(7, 6, 0.2)
    assert (order, delays) == schedule(7, 6, 0.2)
    assert sorted(order) == list(range(6)) and all(0.0 <= d <= 0.2 for d in delays)
    assert schedule(8, 6, 0.2) != (order, delays)
    assert schedule(7, 6, 0.0)[1] == [0.0] * 6
