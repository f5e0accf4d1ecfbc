"""jitter's schedule: drawn from its seed alone, so a finding's round can be drawn again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.configs import Features
from harness.errors import ProbeNotApplicable
from harness.probes.jitter import run, schedule


def test_the_same_seed_draws_the_same_order_and_delays_and_another_seed_others():
    order, delays = schedule(7, 6, 0.2)
    assert (order, delays) == schedule(7, 6, 0.2)
    assert sorted(order) == list(range(6)) and all(0.0 <= d <= 0.2 for d in delays)
    assert schedule(8, 6, 0.2) != (order, delays)
    assert schedule(7, 6, 0.0)[1] == [0.0] * 6


@pytest.mark.parametrize("floor", [0, 1, 9])
def test_a_pressure_configuration_that_lowers_the_retraction_floor_gets_no_jitter_row(floor):
    # Its cells would need only `floor` retractions: a jitter row with fewer than upstream's 10
    # would pass on a run that barely retracted. Nothing is sent (no client: it would fail).
    ctx = SimpleNamespace(config=SimpleNamespace(features=Features(retract_interval=3, min_retractions=floor)),
                          deterministic=True)
    with pytest.raises(ProbeNotApplicable, match=f"at least 10 retractions .*min_retractions is {floor}"):
        run(ctx)
