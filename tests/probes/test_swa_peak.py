"""swa_peak without a server: growth slope and plateau of the curve, the table line, its flags."""

from __future__ import annotations

import pytest

from harness.probes import PROBES, swa_peak
from harness.probes.common import swa_curve
from swa_logs import LOG, PLAIN_LOG, plain_log


def test_unbounded_curve_has_slope_one():
    assert swa_peak.growth_slope(swa_curve(PLAIN_LOG)) == pytest.approx(1.0)


def test_bounded_curve_has_flat_slope_and_plateau():
    curve = swa_curve(LOG)
    assert abs(swa_peak.growth_slope(curve)) < 0.5
    assert swa_peak.plateau(curve) == 15.0  # median of (18, 11, 13, 17)


def test_slope_ignores_the_release_after_the_last_step():
    # The line after the final step shows the finished request's slots released.
    grown = plain_log(40, running=1) + "\n[t] Decode batch, #running-req: 1, #full token: 0, full token usage: 0.00, #swa token: 0, swa token usage: 0.00, cuda graph: False, gen throughput (token/s): 10.0, #queue-req: 0"
    assert swa_peak.growth_slope(swa_curve(grown)) == pytest.approx(1.0)


def test_describe():
    swa = PROBES["swa_peak"].describe(
        {"swa_peak": 650, "swa_plateau": 420.0, "growth_slope": 1.0, "generated_tokens": 600,
         "retractions": 1}, None)
    assert swa == "peak 650 (plateau 420, slope 1.00) over 600 tok, 1 retraction"


def test_registered_with_its_server_flags_and_plot():
    assert PROBES["swa_peak"] is swa_peak.PROBE
    assert swa_peak.PROBE.server_args == ("--decode-log-interval", "1", "--enable-metrics")
    assert swa_peak.PROBE.plot is swa_peak.plot
    assert swa_peak.PROBE.defaults()["gauge_poll_s"] == 0.1
