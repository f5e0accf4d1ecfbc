"""Declared parameters: types, ranges and unknown keys are rejected with the table and key
named; defaults fill what a table leaves out; measured and judged split them."""

from __future__ import annotations

import math

import pytest

from harness.errors import UsageError
from harness.params import Param, ParamRole, validate_params
from harness.probes import PROBES

KL = PROBES["kl"]
WHERE = "suite.toml: [probe.kl]"


def test_defaults_fill_what_the_table_leaves_out():
    params = KL.validate({"threshold": 1e-9}, WHERE)
    assert set(params) == {p.name for p in KL.params}
    assert params["threshold"] == 1e-9 and params["tau"] == 1e-6 and params["output_len"] is None


def test_a_typo_names_the_closest_key():
    with pytest.raises(UsageError, match=r"^suite\.toml: \[probe\.kl\]: unknown key 'thresold'; "
                                         r"did you mean 'threshold'\?$"):
        KL.validate({"thresold": 1e-9}, WHERE)
    with pytest.raises(UsageError, match=r"unknown key 'zzz' \(known: alpha, batch_size"):
        KL.validate({"zzz": 1}, WHERE)


@pytest.mark.parametrize("raw, message", [
    ({"output_len": -1}, r"\.output_len: -1 is out of range \[1, 1e\+06\]"),
    ({"threshold": "abc"}, r"\.threshold: expected a number, got a string 'abc'"),
    ({"prompts": 1.5}, r"\.prompts: expected an integer, got a number 1\.5"),
    ({"prompts": "8"}, r"\.prompts: expected an integer, got a string '8'"),
    ({"prompts": 1_000_000_000}, r"\.prompts: 1000000000 is out of range \[1, 100000\]"),
    ({"prompts": True}, r"\.prompts: expected an integer, got a boolean True"),
    ({"tau": math.inf}, r"\.tau: inf is not a finite number"),
    ({"tau": math.nan}, r"\.tau: nan is not a finite number"),
    ({"prompt_len": [10, 5]}, r"\.prompt_len: must be \[min, max\] with min <= max"),
    ({"prompt_len": [10, "x"]}, r"\.prompt_len\[1\]: expected an integer"),
    ({"kind": "web"}, r"\.kind: 'web' is not one of 'synthetic', 'longbench'"),
    ({"verdict_metrics": "k3"}, r"\.verdict_metrics: expected a list, got a string"),
    ({"floors": {"k3": {"absolut": 1.0}}}, r"\.floors: k3: unknown key\(s\) absolut"),
    ({"floors": {"k3": 1.0}}, r"\.floors\.k3: expected a table, got a number"),
    ({"alpha": 2}, r"\.alpha: 2\.0 is out of range \[1e-06, 0\.5\]"),
    ({"alpha": 0.9}, r"\.alpha: 0\.9 is out of range \[1e-06, 0\.5\]"),
    ({"floor_rel": 1e308}, r"\.floor_rel: 1e\+308 is out of range \[0, 0\.5\]"),
    ({"floor_abs": 1e308}, r"\.floor_abs: 1e\+308 is out of range \[0, 1e\+06\]"),
    ({"floors": {"k3": {"relative": 2.0}}}, r"\.floors: k3\.relative: 2\.0 is out of range \[0, 0\.5\]"),
    ({"threshold": 1e9}, r"\.threshold: 1000000000\.0 is out of range \[0, 1000\]"),
    ({"max_looks": 9}, r"\.max_looks: 9 is out of range \[1, 8\]"),
])
def test_bad_values_are_rejected_with_the_key_named(raw, message):
    with pytest.raises(UsageError, match=message):
        KL.validate(raw, WHERE)


def test_an_int_is_a_float_and_tables_are_typed():
    params = KL.validate({"threshold": 0, "floors": {"k3": {"absolute": 1}}}, WHERE)
    assert params["threshold"] == 0.0 and isinstance(params["threshold"], float)
    assert params["floors"] == {"k3": {"absolute": 1.0}}


def test_measured_and_judged_split_every_parameter():
    params = KL.defaults()
    measured, judged = KL.measured(params), KL.judged(params)
    assert not set(measured) & set(judged) and set(measured) | set(judged) == set(params)
    assert {"prompts", "output_len", "top_k", "tau", "batch_size"} <= set(measured)
    assert {"threshold", "floors", "floor_abs", "floor_rel", "alpha", "bootstrap_seed",
            "verdict_metrics"} <= set(judged)


def test_a_parameter_declared_once():
    only = Param("n", int, 1, "a count", ParamRole.MEASURED, low=0)
    assert validate_params((only,), {}, "[t]") == {"n": 1}
    with pytest.raises(UsageError, match=r"^\[t\] must be a table$"):
        validate_params((only,), [1], "[t]")
