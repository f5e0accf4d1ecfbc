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
