"""kl: the top-k KL metric from top-logprob lists, its parameters, and a live run on the
reference server (top-k asked for on decode and on the cold replay)."""

from __future__ import annotations

import json

import pytest

from conftest import detcheck, refserver_suite
from harness.probes import kl
from harness.verdict_stats import Kind

SAME = [[(-0.1, 5), (-2.5, 7)], [(-0.2, 9), (-1.8, 5)]]
SHIFTED = [[(-0.1, 5), (-2.5, 7)], [(-1.9, 9), (-0.2, 5)]]  # position 1: top token flips


def test_identical_top_lists_are_exactly_zero_and_exact_in_deterministic_mode():
    metric, facts, per = kl.topk_metric([SAME], [SAME], 2, deterministic=True, tau=1e-6)
    assert metric.name == "topk_kl" and metric.kind == Kind.EXACT and metric.values == (0.0,)
    assert facts["topk_kl_mean"] == facts["topk_kl_max"] == 0.0 and facts["top1_agree"] == 1.0
    assert facts["top_k"] == 2 and per == [{"topk_kl": 0.0, "top1_agree": 1.0}]


def test_a_flipped_top_token_shows_in_kl_agreement_and_tails():
    metric, facts, per = kl.topk_metric([SAME, SAME], [SAME, SHIFTED], 2, deterministic=False, tau=1e-6)
    assert metric.kind == Kind.NOISY and metric.values[0] == 0.0 and metric.values[1] > 0.1
    assert facts["top1_agree"] == 0.75  # 3 of 4 positions, token-weighted
    assert facts["topk_frac_over_tau"] == 0.25 and facts["topk_kl_max"] > 0.1
    assert per[1]["top1_agree"] == 0.5


def test_top_k_is_measured_and_threshold_judged():
    params = kl.PROBE.validate({"top_k": 0, "threshold": 1e-9}, "[probe.kl]")
    assert kl.PROBE.measured(params)["top_k"] == 0
    assert kl.PROBE.judged(params)["threshold"] == 1e-9 and "threshold" not in kl.PROBE.measured(params)
    assert kl.PROBE.defaults()["top_k"] == 8


@pytest.mark.slow
def test_live_top_k_kl_is_zero_under_deterministic_mode(tmp_path):
    suite = refserver_suite(tmp_path / "live-kl.toml", ["kl"], "[probe.kl]\ntop_k = 4\nthreshold = 1e-9\n",
                            prompts=3, prompt_len=(12, 20), output_len=6)
    out = tmp_path / "run"
    proc = detcheck("run", "--suite", str(suite), "--out", str(out), "--no-progress", "--format", "md")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    cell = next(c for c in result["cells"] if c["role"] == "base")
    # and, under deterministic mode, the path's exact counters (they decide too)
    assert [m["name"] for m in cell["metrics"]] == ["k3", "topk_kl", "first_divergent", "topk_first_divergent",
                                                    "path_cached_tokens", "path_decoded_tokens", "path_verify_calls"]
    assert cell["facts"]["topk_kl_mean"] == 0.0 and cell["facts"]["top1_agree"] == 1.0
    sample = cell["samples"][0]
    assert len(sample["decode_top_logprobs"]) == len(sample["replay_top_logprobs"]) == 6
    assert all(len(top) == 4 for top in sample["decode_top_logprobs"])
    assert "threshold" not in cell["facts"]  # judged when compared, not stored with the cell
    assert result["comparisons"][0]["judged"]["base"] == {"threshold": 1e-9, "passes_threshold": True}
    assert "top-4 KL 0 (max 0, top-1 agree 100%)" in proc.stdout
    # A gate both sides pass is left out of the row (it would say nothing about the change) and
    # shown in the details.
    assert "gate <" not in proc.stdout and "| passes_threshold | yes | yes |" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "default"])
def test_live_kl_under_the_triton_profile_is_nonzero_and_judged_against_its_floor(tmp_path, deterministic):
    """SGLang on Triton attention: decode and prefill reduce in different orders, so k3 and the
    top-k KL are non-zero even in deterministic mode (~1e-4); both sides alike read same."""
    suite = refserver_suite(tmp_path / "triton-kl.toml", ["kl"],
                            "[probe.kl]\ntop_k = 4\nfloor_abs = 0.01\n", deterministic=deterministic,
                            prompts=6, prompt_len=(12, 20), output_len=8,
                            args=("--attention-backend", "triton"))
    out = tmp_path / "run"
    proc = detcheck("run", "--suite", str(suite), "--out", str(out), "--no-progress", "--format", "md")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    for cell in result["cells"]:
        assert cell["facts"]["k3_mean"] > 0 and cell["facts"]["topk_kl_mean"] > 0, cell["facts"]
    assert [c["verdict"] for c in result["comparisons"]] == ["same"]
    assert "top-4 KL" in proc.stdout
