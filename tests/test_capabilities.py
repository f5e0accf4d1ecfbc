"""Feature → flag mapping per revision, from `--help` text."""

from __future__ import annotations

import pytest

from harness.capabilities import Capabilities, NotExpressible
from harness.suite import Features, SpeculativeSpec

NEW_HELP = """
usage: launch_server [-h] --model-path MODEL_PATH
  --mamba-radix-cache-strategy {auto,no_buffer,extra_buffer,extra_buffer_lazy}
                        Strategy.
  --mamba-scheduler-strategy {auto,no_buffer,extra_buffer,extra_buffer_lazy}
  --enable-unified-memory
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM,DFLASH,
                        DSPARK}
  --speculative-draft-model-path SPECULATIVE_DRAFT_MODEL_PATH
  --speculative-num-steps N  --speculative-eagle-topk K --speculative-num-draft-tokens T
  --speculative-dflash-block-size B
  --enable-deterministic-inference  --swa-full-tokens-ratio R --mamba-track-interval I
"""
OLD_HELP = """
  --mamba-scheduler-strategy {auto,no_buffer,extra_buffer}
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN}
  --enable-deterministic-inference
"""


def test_new_spelling_preferred():
    caps = Capabilities.parse(NEW_HELP)
    args = caps.feature_args(Features(mamba_pool="lazy", deterministic=True), None)
    assert args == ("--enable-deterministic-inference", "--mamba-radix-cache-strategy", "extra_buffer_lazy")


def test_old_spelling_used_when_new_is_absent():
    caps = Capabilities.parse(OLD_HELP)
    assert caps.feature_args(Features(mamba_pool="static"), None) == ("--mamba-scheduler-strategy", "extra_buffer")


def test_choice_missing_is_not_expressible():
    caps = Capabilities.parse(OLD_HELP)
    with pytest.raises(NotExpressible, match="extra_buffer_lazy"):
        caps.feature_args(Features(mamba_pool="lazy"), None)
    with pytest.raises(NotExpressible, match="DFLASH"):
        caps.feature_args(Features(speculative=SpeculativeSpec("DFLASH")), None)
    with pytest.raises(NotExpressible, match="unified"):
        caps.feature_args(Features(mamba_pool="unified"), None)


def test_wrapped_choice_list_is_joined():
    caps = Capabilities.parse(NEW_HELP)
    assert "DSPARK" in caps.choices["--speculative-algorithm"]


def test_speculative_flags(tmp_path):
    caps = Capabilities.parse(NEW_HELP)
    spec = SpeculativeSpec("DFLASH", block_size=8)
    args = caps.feature_args(Features(speculative=spec), tmp_path)
    assert args == ("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", str(tmp_path),
                    "--speculative-dflash-block-size", "8")
    with pytest.raises(NotExpressible, match="block_size applies"):
        caps.feature_args(Features(speculative=SpeculativeSpec("EAGLE", block_size=4)), None)


def test_unknown_literal_flag():
    caps = Capabilities.parse(OLD_HELP)
    caps.check_args(("--enable-deterministic-inference", "1"))
    with pytest.raises(NotExpressible, match="--decode-log-interval unknown"):
        caps.check_args(("--decode-log-interval", "1"))


# SGLang 0.5.16 --help (abridged): per-phase backends, per-phase switches, deprecated single switch.
HELP_0516 = """
  --cuda-graph-backend-decode {full,breakable,tc_piecewise,disabled}
                        Backend for the decode phase.
  --cuda-graph-backend-prefill {full,breakable,tc_piecewise,disabled}
  --cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE
  --disable-prefill-cuda-graph
                        Disable the prefill-phase CUDA graph.
  --disable-decode-cuda-graph
  --cuda-graph-max-bs CUDA_GRAPH_MAX_BS
                        Deprecated alias for --cuda-graph-max-bs-decode.
  --disable-cuda-graph  Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead.
"""
# Per-phase switches only (no backend choice).
HELP_PHASES = """
  --disable-prefill-cuda-graph  --disable-decode-cuda-graph
  --disable-cuda-graph  Deprecated.
"""
# Before 0.5.14: one switch, and an opt-in piecewise prefill graph.
HELP_OLD_GRAPHS = """
  --cuda-graph-max-bs CUDA_GRAPH_MAX_BS
  --disable-cuda-graph  Disable cuda graph.
  --enable-piecewise-cuda-graph
"""


@pytest.mark.parametrize("help_text, off", [
    (HELP_0516, ("--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled")),
    (HELP_PHASES, ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")),
    (HELP_OLD_GRAPHS, ("--disable-cuda-graph",)),
    ("--disable-cuda-graph\n--disable-prefill-cuda-graph\n", ("--disable-cuda-graph", "--disable-prefill-cuda-graph")),
])
def test_graphs_off_spelled_per_revision(help_text, off):
    caps = Capabilities.parse(help_text)
    assert caps.feature_args(Features(cuda_graph=False), None) == off
    # On is the server's default: no flag, at any revision.
    assert caps.feature_args(Features(cuda_graph=True), None) == ()
    assert caps.feature_args(Features(), None) == ()


def test_graph_backend_without_disabled_choice_falls_back():
    caps = Capabilities.parse(HELP_PHASES + "  --cuda-graph-backend-decode {full,breakable}\n"
                              "  --cuda-graph-backend-prefill {full,breakable}\n")
    assert caps.graphs_off_args() == ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")


def test_graphs_off_not_expressible():
    caps = Capabilities.parse(OLD_HELP)
    with pytest.raises(NotExpressible, match="turn CUDA graphs off"):
        caps.feature_args(Features(cuda_graph=False), None)


def test_a_small_token_pool_is_a_flag_and_forced_retraction_an_environment():
    from harness.configs import Features
    caps = Capabilities.parse("usage: x [--model-path P] [--max-total-tokens N]")
    assert caps.feature_args(Features(max_total_tokens=4096, retract_interval=3), None) == ("--max-total-tokens", "4096")
    with pytest.raises(NotExpressible, match="token pool size"):
        Capabilities.parse("usage: x [--model-path P]").feature_args(Features(max_total_tokens=4096), None)


CANARY_HELP = """usage: x [--model-path P] [--enable-deterministic-inference]
  --kv-canary {none,log,raise}
                        KV cache canary mode. 'none' disables the canary (default).
  --kv-canary-real-data {none,partial,all}
  --kv-canary-sweep-interval KV_CANARY_SWEEP_INTERVAL
"""


def test_the_kv_canary_logs_on_deterministic_configurations_where_help_has_it():
    """Issue 48: the canary as a second oracle; nothing where --help lacks it, unless asked for."""
    det, plain = Features(deterministic=True), Features()
    caps = Capabilities.parse(CANARY_HELP)
    assert caps.canary_args(det) == ["--kv-canary", "log", "--kv-canary-real-data", "partial",
                                     "--kv-canary-sweep-interval", "1"]
    assert caps.canary_args(plain) == [] and caps.canary_args(Features(deterministic=True, kv_canary="none")) == []
    asked = Features(kv_canary="raise", kv_canary_real_data="all", kv_canary_sweep_interval=8)
    assert caps.canary_args(asked) == ["--kv-canary", "raise", "--kv-canary-real-data", "all",
                                       "--kv-canary-sweep-interval", "8"]
    only_mode = Capabilities.parse("usage: x [--enable-deterministic-inference] [--kv-canary {none,log,raise}]")
    assert only_mode.canary_args(det) == ["--kv-canary", "log"]
    older = Capabilities.parse("usage: x [--enable-deterministic-inference]")
    assert older.feature_args(det, None) == ("--enable-deterministic-inference",)
    with pytest.raises(NotExpressible, match=r"the KV canary \(--kv-canary log\) is not in this revision's --help"):
        older.feature_args(Features(deterministic=True, kv_canary="log"), None)


def test_pressure_turns_on_sglangs_debug_invariants_in_the_environment():
    from harness.configs import DEBUG_INVARIANTS

    assert Features(retract_interval=3).env() == {**dict.fromkeys(DEBUG_INVARIANTS, "1"), "SGLANG_TEST_RETRACT": "1",
                                                  "SGLANG_TEST_RETRACT_INTERVAL": "3"}
    assert Features(max_total_tokens=4096, debug_invariants=False).env() == {}
    assert Features(debug_invariants=True).env() == dict.fromkeys(DEBUG_INVARIANTS, "1") and Features().env() == {}
