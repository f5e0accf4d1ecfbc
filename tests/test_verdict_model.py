"""The verdict model by construction: the eight classes of change that once read *same* (or an
*unknown*, *n/a* or trusted verdict) with exit 0 while the candidate changed what it serves or
how much it reuses, each planted on the reference server (fixtures/regressions.toml) and read
end to end. The figures each test reads are in its assertion messages.
"""

from __future__ import annotations

import json

import pytest

from conftest import detcheck, planted, refserver_suite
from conftest import run_pair as run


# The hybrid model's cache hits resume at its recurrent checkpoints: one every 16 tokens (a line
# of the [[config]] table, which refserver_suite's tables text continues).
TRACK = "mamba_track_interval = 16\n"


def comparison(result: dict, probe: str) -> dict:
    return next(c for c in result["comparisons"] if c["probe"] == probe)


@pytest.mark.slow
def test_class1_hits_that_reuse_fewer_tokens_read_different_by_cached_tokens(tmp_path):
    """The restored state stays exact (k3 0 on both sides, hit 100%): only the reuse moved."""
    repo, base, cand = planted(tmp_path, "cache-reuse-less")
    suite = refserver_suite(tmp_path / "s.toml", ["prefill_cache_hit", "decode_cache_hit"], TRACK, prompts=2,
                            prompt_len=(40, 90), output_len=32)
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out")
    prefill = comparison(result, "prefill_cache_hit")
    assert prefill["metrics"]["k3"]["verdict"] == "same", prefill
    assert prefill["verdict"] == "different" and prefill["decided_by"] == "cached_tokens", prefill
    # a decode hit that reuses less may stop short of the decoded tokens: fewer hits count there too
    decode = comparison(result, "decode_cache_hit")
    assert decode["verdict"] == "different" and decode["metrics"]["cached_tokens"]["verdict"] == "different", decode
    assert code == 1 and "cached_tokens" in proc.stdout


@pytest.mark.slow
def test_class1_a_decode_top_k_in_another_order_reads_different_on_kl_and_revision_kl(tmp_path):
    repo, base, cand = planted(tmp_path, "topk-order")
    suite = refserver_suite(tmp_path / "s.toml", ["kl", "revision_kl"], prompts=2, output_len=6)
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out")
    kl, across = comparison(result, "kl"), comparison(result, "revision_kl")
    # Each answer is checked against itself (issue 44): a top-k list out of logprob order is a
    # finding on the candidate, named by request and position, whatever the base served.
    for comp in (kl, across):
        assert comp["verdict"] == "different" and "is not sorted by logprob" in comp["note"], comp["note"]
    assert code == 1


@pytest.mark.slow
def test_class2_a_decode_only_bug_off_deterministic_mode_reads_different_on_revision_kl(tmp_path):
    """Prefill untouched (every teacher-forced score equal): the greedy decode decides."""
    repo, base, cand = planted(tmp_path, "decode-only")
    suite = refserver_suite(tmp_path / "s.toml", ["revision_kl"], deterministic=False, prompts=8, output_len=8)
    code, result, _ = run(repo, base, cand, suite, tmp_path / "out")
    comp = comparison(result, "revision_kl")
    assert comp["metrics"]["kl"]["verdict"] != "different", comp["metrics"]["kl"]
    assert comp["verdict"] == "different" and comp["decided_by"] == "greedy_match", comp["note"]
    match = comp["metrics"]["greedy_match"]
    assert match["candidate"]["median"] < match["base"]["median"], match
    assert code == 1


@pytest.mark.slow
def test_class3_a_slower_decode_is_measured_again_until_it_decides(tmp_path):
    """A 30 ms sleep per decode step, three rounds a look: the verdict is the look's that decided,
    every look recorded, each at its share of alpha (3 rounds alone can never reach 0.025)."""
    repo, base, cand = planted(tmp_path, "slow-decode")
    suite = refserver_suite(tmp_path / "s.toml", ["throughput"],
                            "[probe.throughput]\nconcurrency = [1]\nwarmup = 0\nfloor_rel = 0.1\nrepeats = 3\n",
                            deterministic=False, prompts=1, output_len=32)
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out")
    comp = comparison(result, "throughput")
    cells = [c for c in result["cells"] if c["probe"] == "throughput"]
    looks = [c["facts"]["sequential"] for c in cells]
    assert looks[0] == looks[1] and looks[0]["max_looks"] == 3, looks
    rounds = len(cells[0]["samples"])  # one sample a round at one level
    assert rounds == 3 * looks[0]["look"], (rounds, looks)
    assert comp["verdict"] == "different" and code == 1, (comp["note"], looks)
    assert comp["metrics"]["tok_s_c1"]["effect"] < 0


@pytest.mark.slow
def test_class4_three_hits_a_side_cannot_decide_and_twice_the_prompts_do(tmp_path):
    """Off deterministic mode, k3 over each side's own hits: 3 against 3 cannot go below p 0.1, so
    the first look reads unknown; the second, over 6 prompts, decides."""
    repo, base, cand = planted(tmp_path, "cache")
    suite = refserver_suite(tmp_path / "s.toml", ["prefill_cache_hit"], TRACK, deterministic=False, prompts=3,
                            prompt_len=(40, 90), output_len=32)
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out")
    comp = comparison(result, "prefill_cache_hit")
    state = next(c for c in result["cells"] if c["probe"] == "prefill_cache_hit")["facts"]["sequential"]
    assert state["earlier"][0]["samples"] == 3 and state["earlier"][0]["verdict"] == "unknown", state
    assert state["scale"] >= 2 and comp["metrics"]["k3"]["base"]["n"] == 3 * state["scale"], (state, comp)
    assert comp["verdict"] == "different" and code == 1, comp["note"]
    assert "measuring look 2" in proc.stderr


@pytest.mark.slow
def test_class5_nan_in_the_determinism_probe_is_a_finding_naming_where(tmp_path):
    repo, base, cand = planted(tmp_path, "nan-at-24")
    suite = refserver_suite(tmp_path / "s.toml", ["determinism"], "[probe.determinism]\nmax_batch_size = 3\n",
                            output_len=32)
    code, result, _ = run(repo, base, cand, suite, tmp_path / "out")
    cells = {c["role"]: c for c in result["cells"]}
    assert cells["base"]["status"] == "ok"
    assert cells["candidate"]["status"] == "finding"
    assert cells["candidate"]["reason"] == ("decode returned NaN output logprobs at batch size 1 from output "
                                            "position 24 of prompt 0 (3 of 3 batch sizes hold one: 1–3)")
    comp = comparison(result, "determinism")
    assert comp["verdict"] == "different" and "batch is the cause" not in json.dumps(comp) and code == 1


@pytest.mark.slow
def test_class6_a_doctored_verdict_is_exit_2_naming_the_row(tmp_path):
    repo, base, cand = planted(tmp_path, "cache")
    suite = refserver_suite(tmp_path / "s.toml", ["kl", "prefill_cache_hit"], TRACK, prompt_len=(40, 90), output_len=8)
    code, result, _ = run(repo, base, cand, suite, tmp_path / "out")
    assert code == 1 and comparison(result, "prefill_cache_hit")["verdict"] == "different"
    assert detcheck("report", str(tmp_path / "out"), "--check").returncode == 1  # untouched: re-judged alike
    for c in result["comparisons"]:
        c["verdict"] = "same"
    (tmp_path / "out" / "results.json").write_text(json.dumps(result))
    proc = detcheck("report", str(tmp_path / "out"), "--check")
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert ("results file altered, or written by another version: det / prefill_cache_hit: stored same, "
            "its samples give different") in proc.stderr, proc.stderr
    assert detcheck("report", str(tmp_path / "out")).returncode == 2
    # the judging parameters are stored and checked too: one out of range is exit 2 naming it
    result["plan"]["probe_params"]["kl"]["floor_rel"] = 1e308
    (tmp_path / "out" / "results.json").write_text(json.dumps(result))
    proc = detcheck("report", str(tmp_path / "out"), "--check")
    assert proc.returncode == 2 and "probe_params.kl.floor_rel: 1e+308 is out of range" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_class7_a_crash_at_boot_is_an_error_with_its_own_last_lines_never_na(tmp_path):
    """The crash follows a warning that something "is not supported": not a refusal."""
    repo, base, cand = planted(tmp_path, "boot-crash")
    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    code, result, _ = run(repo, base, cand, suite, tmp_path / "out")
    cell = next(c for c in result["cells"] if c["role"] == "candidate")
    assert cell["status"] == "error", cell["reason"]
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in cell["reason"], cell["reason"]
    assert comparison(result, "kl")["verdict"] == "error" and code == 1


@pytest.mark.slow
def test_class8_an_unbounded_judging_parameter_is_exit_2_naming_key_and_range(tmp_path):
    repo, base, cand = planted(tmp_path, "slow-decode")
    suite = refserver_suite(tmp_path / "s.toml", ["throughput"], deterministic=False)
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", cand, "--suite", str(suite),
                    "--out", str(tmp_path / "out"), "--no-progress", "--set", "throughput.floor_rel=1e308")
    assert proc.returncode == 2 and "floor_rel: 1e+308 is out of range [0, 0.5]" in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "results.json").exists()
