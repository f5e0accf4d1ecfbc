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


def test_by_default_every_batch_size_up_to_the_largest_is_tested():
    from types import SimpleNamespace

    probe = determinism.PROBE
    params = probe.defaults()
    assert params["batch_sizes"] is None and params["max_batch_size"] == 8
    assert determinism.batch_sizes(SimpleNamespace(param=params.__getitem__)) == [1, 2, 3, 4, 5, 6, 7, 8]
    given = probe.validate({"batch_sizes": [1, 16]}, "[probe.determinism]")
    assert determinism.batch_sizes(SimpleNamespace(param=given.__getitem__)) == [1, 16]
    facts = {"unique_outputs": 1, "batch_sizes": list(range(1, 9)), "first_differing_batch_size": None}
    assert probe.describe(facts, None) == "1 unique over batch sizes 1–8"


def test_the_row_names_the_first_differing_token_and_whether_ids_changed():
    from harness.probes.determinism import first_difference

    one = {"batch_size": 1, "output_ids": [5, 6, 7, 8], "logprobs": [-0.1, -0.2, -0.3, -0.4]}
    ids = {"batch_size": 3, "output_ids": [5, 6, 9, 8], "logprobs": [-0.1, -0.2, -0.5, -0.4]}
    lps = {"batch_size": 5, "output_ids": [5, 6, 7, 8], "logprobs": [-0.1, -0.2, -0.3, -0.40000001]}
    assert first_difference(one, ids) == {"batch_size": 3, "prompt": 0, "position": 2, "changed": "ids"}
    assert first_difference(one, lps) == {"batch_size": 5, "prompt": 0, "position": 3, "changed": "logprobs only"}
    facts = {"unique_outputs": 2, "batch_sizes": [1, 3], "first_differing_batch_size": 3,
             "first_difference": first_difference(one, ids)}
    assert determinism.describe(facts, None) == ("2 unique over batch sizes [1, 3] (first differs at batch size 3: "
                                                 "prompt 0, token 2, ids)")
