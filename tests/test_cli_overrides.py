"""Probe parameters and server flags from the command line: `--set probe.param=value`, checked
like a suite's [probe.<name>] table and recorded; flags after `--` on every configuration."""

from __future__ import annotations

import json

import pytest

from conftest import detcheck, refserver_suite
from harness.commands.common_args import parse_overrides
from harness.errors import UsageError


def test_set_values_are_read_as_toml_else_as_text():
    assert parse_overrides(["kl.tau=1e-6", "throughput.concurrency=[1, 4]", "kl.top_k = 4",
                            "x.algorithm=DFLASH"]) == {
        "kl": {"tau": 1e-6, "top_k": 4}, "throughput": {"concurrency": [1, 4]}, "x": {"algorithm": "DFLASH"}}
    for bad in ("kl.tau", "tau=1", ".tau=1", "kl.=1"):
        with pytest.raises(UsageError, match="expected PROBE.PARAM=VALUE"):
            parse_overrides([bad])


@pytest.mark.parametrize("option, message", [
    ("kl.tauu=1e-6", "--set kl: unknown key 'tauu'"),
    ("kll.tau=1e-6", "--set kll.tau: unknown probe"),
    ("kl.tau=fast", "--set kl.tau: expected a number, got a string 'fast'"),
    # a probe the suite never runs: the value would change nothing
    ("throughput.repeats=9", "--set throughput.repeats: the suite runs no throughput probe (it runs: kl)"),
])
def test_a_bad_set_is_bad_input_before_any_launch(tmp_path, option, message):
    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    proc = detcheck("run", "--suite", str(suite), "--out", str(tmp_path / "out"), "--set", option)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize("overrides, message", [
    # the suite's 8 prompts pass the design check; the --set's 1 (4 by the last of 3 looks) cannot reach alpha
    ({"kl": {"prompts": 1}}, "--set kl.prompts: [probe.kl].prompts: 1 gives k3 4 pairs by look 3"),
    # the key that fails is not the one set: the option is still named first
    ({"kl": {"alpha": 1e-6, "max_looks": 1}}, "--set kl.alpha/max_looks: [probe.kl].prompts: 8 gives k3 8 pairs"),
    ({"kl": {"low_token": 99999}}, "--set kl.low_token: [workload] with [probe.kl]: vocab must exceed low_token"),
])
def test_a_design_error_a_set_causes_blames_the_set_not_the_suite(tmp_path, overrides, message):
    from harness.suite import load_suite
    from harness.probes import known_probes

    suite = refserver_suite(tmp_path / "s.toml", ["kl"], deterministic=False, prompts=8)
    load_suite(suite, known_probes())  # the suite alone is sound
    with pytest.raises(UsageError) as raised:
        load_suite(suite, known_probes(), overrides)
    assert str(raised.value).startswith(message), raised.value


def test_a_design_error_of_the_suite_itself_still_names_the_suite(tmp_path):
    from harness.suite import load_suite
    from harness.probes import known_probes

    suite = refserver_suite(tmp_path / "s.toml", ["kl"], deterministic=False, prompts=1)
    with pytest.raises(UsageError, match=rf"^{tmp_path / 's.toml'}: \[probe.kl\].prompts: 1 gives"):
        load_suite(suite, known_probes(), {"kl": {"tau": 1e-6}})


def test_flags_after_a_lone_dash_dash_need_a_command_that_launches(tmp_path):
    proc = detcheck("report", str(tmp_path), "--", "--page-size", "16")
    assert proc.returncode == 2 and "need a command that launches servers" in proc.stderr


@pytest.mark.slow
def test_set_and_launch_flags_reach_the_run_and_its_record(tmp_path):
    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    out = tmp_path / "out"
    proc = detcheck("run", "--suite", str(suite), "--out", str(out), "--format", "json", "--no-progress",
                    "--set", "kl.tau=1e-5", "--set", "kl.top_k=4", "--", "--random-seed", "77",
                    env={"DETCHECK_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = json.loads(proc.stdout)
    assert printed["verdict"] == "same" and printed["exit_code"] == 0
    result = json.loads((out / "results.json").read_text())
    assert result["metadata"]["overrides"] == {"kl": {"tau": 1e-5, "top_k": 4}}
    for cell in result["cells"]:
        assert cell["facts"]["tau"] == 1e-5 and cell["facts"]["top_k"] == 4
        assert cell["metadata"]["server_argv"][-2:] == ["--random-seed", "77"]
