"""throughput: its table line and metric names, and a live run on the reference server (with
accept_length, which is n/a there: no speculative decoding)."""

from __future__ import annotations

import json

import pytest

from conftest import detcheck, refserver_suite
from harness.probes import PROBES, throughput


def test_describe_and_metric_names():
    tput = PROBES["throughput"].describe(
        {"concurrency": [1, 4], "tok_s_c1_median": 50.25, "tok_s_c4_median": 150.5,
         "swa_peak_usage_c4": 0.14, "retractions": 0}, None)
    assert tput == "c1 50.2 · c4 150 tok/s, SWA peak usage 0.14, 0 retractions"
    assert throughput.metric_name(8) == "tok_s_c8"


@pytest.mark.slow
def test_throughput_levels_and_accept_length_not_applicable_without_spec(tmp_path):
    suite = refserver_suite(tmp_path / "live.toml", ["throughput", "accept_length"],
                            "[probe.throughput]\nconcurrency = [2, 1]\nrepeats = 2\n", config="plain",
                            deterministic=False, prompts=4, prompt_len=(16, 16), output_len=16,
                            args=("--random-seed", "1"))
    out = tmp_path / "run"
    proc = detcheck("run", "--suite", str(suite), "--out", str(out), "--no-progress")
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads((out / "results.json").read_text())
    cells = {(c["probe"], c["role"]): c for c in result["cells"]}
    tput = cells["throughput", "base"]
    assert tput["status"] == "ok", tput["reason"]
    assert [m["name"] for m in tput["metrics"]] == ["tok_s_c2", "tok_s_c1"]  # highest level decides
    assert [(s["repeat"], s["concurrency"]) for s in tput["samples"]] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert all(s["completion_tokens"] == 16 * s["requests"] and s["tok_s"] > 0 for s in tput["samples"])
    assert "tok/s" in proc.stdout
    acc = cells["accept_length", "candidate"]
    assert acc["status"] == "n/a" and "spec_verify_ct" in acc["reason"]
