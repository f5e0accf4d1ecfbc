"""Proof the path ran (harness/path_proof.py): the counters' growth around a probe, which demands
they meet, and how the verdict reads a cell whose demanded path is not shown to have run."""

from __future__ import annotations

from harness import path_proof
from harness.compare import compare_cells
from harness.configs import Features, SpeculativeSpec
from harness.probes import PROBES
from harness.results import CellResult, Metric, RevisionInfo, Role, Status
from harness.verdict_stats import Kind

LABELS = 'model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'


def exposition(decode_graph: int, decode_none: int, generated: int, requests: int,
               verify: int = 0, cached: int = 0, ranks: int = 1) -> str:
    """A `/metrics` text as SGLang writes it, the figures split over `ranks` DP ranks."""
    lines = []
    for r in range(ranks):
        labels = f'{LABELS},dp_rank="{r}"'
        lines += [f'sglang:cuda_graph_passes_total{{{labels},mode="decode_cuda_graph"}} {decode_graph / ranks}',
                  f'sglang:cuda_graph_passes_total{{{labels},mode="decode_none"}} {decode_none / ranks}',
                  f'sglang:generation_tokens_total{{{labels}}} {generated / ranks}',
                  f'sglang:num_requests_total{{{labels}}} {requests / ranks}',
                  f'sglang:spec_verify_calls_total{{{labels}}} {verify / ranks}',
                  f'sglang:cached_tokens_total{{{labels},cache_source="device"}} {cached / ranks}',
                  f'sglang:token_usage{{{labels}}} 0.5']
    return "\n".join(lines) + "\n"


GRAPHS = (path_proof.GRAPHS,)
SPEC = (path_proof.SPECULATIVE,)


def grown(demanded, before: str, after: str, metrics_on: bool = True) -> dict:
    return path_proof.proof(demanded, metrics_on, path_proof.counters(before), path_proof.counters(after))


def test_graph_passes_that_replayed_meet_the_demand_and_their_growth_is_recorded():
    fact = grown(GRAPHS, exposition(10, 2, 40, 4, cached=16, ranks=2), exposition(41, 3, 72, 8, cached=80, ranks=2))
    assert "vacuous" not in fact
    assert fact["passes"] == {"decode_cuda_graph": 31, "decode_none": 1}
    assert fact["decoded_tokens"] == (72 - 40) - (8 - 4) and fact["cached_tokens"] == 64


def test_graphs_on_whose_decode_passes_never_replayed_are_vacuous():
    fact = grown(GRAPHS, exposition(10, 2, 40, 4), exposition(10, 30, 72, 8))
    assert fact["passes"] == {"decode_cuda_graph": 0, "decode_none": 28}
    assert "none of 28 decode passes replayed one" in fact["vacuous"] and "28 tokens decoded" in fact["vacuous"]


def test_tokens_decoded_while_no_pass_was_counted_do_not_prove_the_graphs():
    """The tokenizer's counters say the probe decoded; the pass counter did not move."""
    fact = grown(GRAPHS, exposition(10, 2, 40, 4), exposition(10, 2, 72, 8))
    assert "none of 0 decode passes replayed one (28 tokens decoded" in fact["vacuous"]


def test_a_probe_that_decoded_nothing_demands_no_decode_graph():
    fact = grown(GRAPHS + SPEC, exposition(10, 2, 40, 4), exposition(10, 2, 44, 8))
    assert fact["decoded_tokens"] == 0 and "vacuous" not in fact


def test_a_revision_without_the_counter_or_the_metrics_flag_proves_nothing():
    no_counter = exposition(0, 0, 40, 4).replace("cuda_graph_passes", "other_passes")
    fact = grown(GRAPHS, no_counter, exposition(0, 0, 72, 8).replace("cuda_graph_passes", "other_passes"))
    assert "exports no sglang:cuda_graph_passes_total" in fact["vacuous"]
    off = path_proof.proof(GRAPHS, False, None, None)
    assert off["vacuous"] == "CUDA graphs not shown to have run: no --enable-metrics at this revision"
    failed = path_proof.proof(SPEC, True, None, path_proof.counters(exposition(0, 0, 1, 1)))
    assert "no sglang: counters could be scraped" in failed["vacuous"]
    assert "vacuous" not in path_proof.proof((), False, None, None)


def test_speculative_decoding_that_never_verified_is_vacuous():
    fact = grown(SPEC, exposition(0, 5, 40, 4, verify=9), exposition(0, 20, 72, 8, verify=9))
    assert fact["verify_calls"] == 0 and "no verify call" in fact["vacuous"]
    assert "vacuous" not in grown(SPEC, exposition(0, 5, 40, 4, verify=9), exposition(0, 20, 72, 8, verify=24))


def test_demands_follow_the_configuration_and_metrics_are_asked_for_where_the_revision_has_them():
    assert path_proof.demands(Features()) == () and path_proof.demands(Features(cuda_graph=False)) == ()
    spec = Features(cuda_graph=True, speculative=SpeculativeSpec("EAGLE"))
    assert path_proof.demands(spec) == GRAPHS + SPEC
    assert path_proof.key_part(spec) == path_proof.KEY_PART and path_proof.key_part(Features()) == ()
    knows = {"--enable-metrics"}.__contains__
    assert path_proof.metrics_args(knows, ("--decode-log-interval", "1")) == ("--enable-metrics",)
    assert path_proof.metrics_args(knows, ("--enable-metrics",)) == ()
    assert path_proof.metrics_args(set().__contains__, ()) == ()


def test_rounds_merge_their_counts_and_keep_every_reason():
    ok = grown(GRAPHS, exposition(0, 0, 0, 0), exposition(5, 0, 9, 1))
    bad = grown(GRAPHS, exposition(5, 0, 9, 1), exposition(5, 4, 18, 2))
    merged = path_proof.merged([{"path": ok}, {"other": 1}, {"path": bad}])
    assert merged["passes"] == {"decode_cuda_graph": 5, "decode_none": 4} and merged["decoded_tokens"] == 8 + 8
    assert merged["vacuous"] == bad["vacuous"]
    assert path_proof.merged([{"other": 1}]) is None


def kl_cell(role: Role, k3: float, path: dict) -> CellResult:
    return CellResult(config="graphs", probe="kl", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                      metrics=(Metric("k3", Kind.EXACT, (k3,)),), facts={"k3_mean": k3, "path": path})


def test_a_cell_whose_path_did_not_run_never_reads_same_and_a_difference_still_stands():
    ran = grown(GRAPHS, exposition(0, 0, 0, 0), exposition(7, 0, 9, 1))
    eager = grown(GRAPHS, exposition(0, 0, 0, 0), exposition(0, 7, 9, 1))
    params = PROBES["kl"].defaults()
    same_values = compare_cells("graphs", "kl", kl_cell(Role.BASE, 0.0, ran), kl_cell(Role.CANDIDATE, 0.0, eager), params)
    assert same_values.verdict == "error" and same_values.note == f"vacuous: candidate: {eager['vacuous']}"
    both = compare_cells("graphs", "kl", kl_cell(Role.BASE, 0.0, ran), kl_cell(Role.CANDIDATE, 0.0, ran), params)
    assert both.verdict == "same"
    moved = compare_cells("graphs", "kl", kl_cell(Role.BASE, 0.0, ran), kl_cell(Role.CANDIDATE, 1e-3, eager), params)
    assert moved.verdict == "different"


RETRACT = (path_proof.RETRACTION,)


def retracted(n: int) -> str:
    return f'sglang:num_retracted_requests_total{{{LABELS}}} {n}\n'


def test_pressure_demands_its_minimum_of_retractions_from_the_counter_or_the_log():
    ok = path_proof.proof(RETRACT, True, path_proof.counters(retracted(5)), path_proof.counters(retracted(17)), 10, 0)
    assert ok["retractions"] == 12 and ok["min_retractions"] == 10 and "vacuous" not in ok
    few = path_proof.proof(RETRACT, True, path_proof.counters(retracted(5)), path_proof.counters(retracted(8)), 10, 2)
    assert few["vacuous"] == "under pressure, but 3 retractions where at least 10 are required"
    logged = path_proof.proof(RETRACT, False, None, None, 10, 11)
    assert logged["retractions"] == 11 and "vacuous" not in logged
    assert "2 retractions where at least 10" in path_proof.proof(RETRACT, False, None, None, 10, 2)["vacuous"]
    unpressured = path_proof.proof((), True, path_proof.counters(retracted(0)), path_proof.counters(retracted(4)))
    assert unpressured["retractions"] == 4 and "vacuous" not in unpressured  # recorded, demanded of no one


def test_pressure_features_name_their_switches_and_minimum():
    forced = Features(retract_interval=5)
    # and SGLang's debug invariants under pressure (issue 48; a revision without them ignores them)
    assert forced.env() == {"SGLANG_ENABLE_TREE_CACHE_SANITY_CHECK": "1", "SGLANG_CHECK_KV_PAGE_INVARIANTS": "1",
                            "SGLANG_DEBUG_POISON_POOL": "1", "SGLANG_TEST_RETRACT": "1",
                            "SGLANG_TEST_RETRACT_INTERVAL": "5"}
    assert path_proof.min_retractions(forced) == path_proof.MIN_RETRACTIONS == 10
    assert path_proof.min_retractions(Features(max_total_tokens=2048, min_retractions=3)) == 3
    assert path_proof.min_retractions(Features()) == 0 and Features().env() == {}
    assert path_proof.demands(Features(min_retractions=2)) == RETRACT
    assert path_proof.demands(Features(retract_interval=5, min_retractions=0)) == ()


def test_a_row_whose_path_ran_says_what_showed_it():
    ran = grown(GRAPHS + SPEC, exposition(0, 0, 0, 0, verify=0), exposition(7, 1, 9, 1, verify=6))
    comp = compare_cells("graphs", "kl", kl_cell(Role.BASE, 0.0, ran), kl_cell(Role.CANDIDATE, 0.0, ran),
                         PROBES["kl"].defaults())
    assert comp.verdict == "same"
    assert comp.note.endswith("path shown: base 7 of 8 decode passes replayed a CUDA graph, 6 verify calls; "
                              "candidate 7 of 8 decode passes replayed a CUDA graph, 6 verify calls")
    logged = path_proof.proof(RETRACT, False, None, None, 10, 11)
    assert path_proof.shown({"path": logged}) == "11 retractions (at least 10)"
    assert path_proof.shown({"path": path_proof.proof((), True, {}, {})}) is None


def test_exact_counters_decide_under_deterministic_mode_only_where_nothing_is_noisy_or_under_pressure():
    """Issue 44: the kl cell's cached-token counter growth moved 0 → 256 (a flush that left 16
    per request) and, a descriptive fact, decided nothing. Under deterministic inference with no
    pressure and nothing noisy, the path's exact counters are metrics, compared like any other."""
    exact = (Metric("unique_outputs", Kind.EXACT, (1.0,)),)
    assert path_proof.counters_decide(Features(deterministic=True), exact)
    assert not path_proof.counters_decide(Features(deterministic=False), exact)
    assert not path_proof.counters_decide(Features(deterministic=True), (Metric("k3", Kind.NOISY, (0.0,)),))
    assert not path_proof.counters_decide(Features(deterministic=True, min_retractions=3), exact)

    def cell(role: Role, cached: int) -> CellResult:
        facts = {"path": {"demands": [], "metrics": True, "passes": {}, "verify_calls": 0,
                          "cached_tokens": cached, "decoded_tokens": 6, "retractions": 0}}
        metrics = (*exact, *path_proof.exact_metrics(facts))
        return CellResult("det", "determinism", role, RevisionInfo(role.value, "a" * 40), Status.OK, "f", "w",
                          metrics=metrics, facts=facts)

    assert [m.name for m in path_proof.exact_metrics(cell(Role.BASE, 0).facts)] == [
        "path_cached_tokens", "path_decoded_tokens", "path_verify_calls"]
    params = PROBES["determinism"].defaults()
    comp = compare_cells("det", "determinism", cell(Role.BASE, 0), cell(Role.CANDIDATE, 256), params)
    assert comp.verdict == "different" and comp.decided_by == "path_cached_tokens", comp.note
    assert compare_cells("det", "determinism", cell(Role.BASE, 0), cell(Role.CANDIDATE, 0), params).verdict == "same"
